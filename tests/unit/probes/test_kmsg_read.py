"""gpu.xid's /dev/kmsg read (issue 22): the records read in a bare loop, only the NVIDIA
driver's made text, and every fact the same as reading all of them as text said.

The old reading is spelt out here (`old_text`): each record decoded and made a
"[uptime] message" line, the lines joined, kernel_lines() counting them, gpu_events
narrowing them. The new one (`kmsg_lines`) must say the same of the same records: the
captures in tests/fixtures (kernel-log/, corpus/xid-dmesg/), records the kernel never
writes, and rings of 10^4 and 10^5 records made from the captures.
"""

from __future__ import annotations

import errno
from pathlib import Path

import msgspec
import pytest
from kmsg_ring import KERNEL_LOG_FILES, fixture_records, kmsg_records, ring

from healthcheck.checks import gpu as g
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.facts import ProbeContext, ProbeError, provider_for
from healthcheck.core.model import Finding, Metric
from healthcheck.parsers import kernlog
from healthcheck.parsers.kernlog import kernel_lines, kmsg_line, kmsg_lines
from healthcheck.probes import gpu as gpu_probe

H100 = Config(EMBEDDED_DEFAULT).fabric("h100-ndr400")
BOOT = 1_700_000_000.0
XID79 = "NVRM: Xid (PCI:0000:5d:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."

# records no kernel writes (it escapes every byte below a space, above ~ and the backslash):
# each reader must still say the same of them
ODD = [
    b"",
    b"garbage without a head\n",
    "\u0663,1,2,-;NVRM: a head in Arabic-Indic digits (str's \\d reads them)\n".encode(),
    b"4,1,2,-;NVRM: Xid (PCI:0000:5d:00): 13, bad UTF-8 \xff\xfe in it\n",
    b"4,1,2,-;a message that ends in an escaped newline\\x0a\n",
    b"4,1,2,-;NVRM: first line\\x0a-- a continuation that looks like a journal note\n",
    b"4,1,2,-;NVRM: x\\x0a\\x0aHint: two more lines, one blank\n",
    b"4,1,2,a\x00b;a NUL in the flags\n",
    b"4,1,2,-;NV\x00RM split by a NUL\n",
    b"4,1,2,-;a dict line with the word\n NVRM=here\n",
    b"4,1,2,-;\\x0aNVRM: after an escaped newline\n",
    b"4,1,2,-;NVRM: a\rcarriage return and a \x0bvertical tab\n",
    b"4,1,2,-;NVRM: ends in a carriage return\r",
    b"4,3,4,-;no newline at the end, " + XID79.encode(),
    b"4,1,2,-;" + XID79.encode() + b"\n",
    b"4,1,2;no flags field\n",
    b"x4,1,2,-;" + XID79.encode() + b"\n",
]


# records a kernel could write (its heads, no NUL) with backslashes that start no escaped newline
BACKSLASHES = [
    b"4,1,2,-;a backslash \\x5c before an escaped newline\\x0aNVRM: on the next line\n",
    b"4,1,2,-;ends in a backslash \\\n",
    b"4,1,2,-;\\x0 cut \\x0\n",
    b"4,1,2,-;\\\\x0a two backslashes, then x0a\n",
    b"4,1,2,-;Xid \\x0a\\x0a\n",
]


def old_text(records: list[bytes]) -> str:
    """/dev/kmsg's text as _read_kmsg made it before issue 22's read: every record a line."""
    lines = (kmsg_line(r.decode(errors="replace")) for r in records)
    return "\n".join(line for line in lines if line is not None)


def ctx_for(**params) -> ProbeContext:
    return ProbeContext(runner=None, root=Path("/"), limits=H100, params=params, timeout_s=5)


def old_and_new(records: list[bytes], **params):
    """(the KernelGpuLog the old reading gives, the new one's) for the same records."""
    ctx = ctx_for(**params)
    text = old_text(records)
    old = gpu_probe.gpu_events(ctx, text, gpu_probe.KMSG, kernel_lines(text), BOOT)
    text, count = kmsg_lines(records, gpu_probe.NVIDIA_BYTES)
    return old, gpu_probe.gpu_events(ctx, text, gpu_probe.KMSG, count, BOOT)


def facts(log) -> list:
    """What gpu.xid reports of a log: its findings and metrics."""
    out = list(g.xid(kernel_gpu_log=log, gpus=None, limits=H100))
    return sorted((type(o).__name__, o.id if isinstance(o, Finding) else o.name, str(o.status)
                   if isinstance(o, Finding) else "", o.message if isinstance(o, Finding) else repr(o.value))
                  for o in out if isinstance(o, Finding | Metric))


# name -> the records (built when the case runs, not when the tests are collected)
CASES = {
    **{path.name: lambda path=path: kmsg_records(path.read_text(errors="surrogateescape"))
       for path in KERNEL_LOG_FILES},
    "every capture": fixture_records,
    "odd records": lambda: ODD,
    "captures and odd records": lambda: fixture_records() + ODD,
    "a ring of 300 with odd records": lambda: ring(300, extra=ODD, nvidia_every=7),
    "a ring of 10^4": lambda: ring(10**4),
    "a ring of 10^4 with odd records": lambda: ring(10**4, extra=ODD),  # read the slow way: each made text
    "a ring of 10^5": lambda: ring(10**5),
    "a ring of 10^4 with backslashes": lambda: ring(10**4, extra=BACKSLASHES),  # the fast path's escapes
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_new_reading_says_what_reading_every_record_said(name):
    records = CASES[name]()
    text = old_text(records)
    new_text, count = kmsg_lines(records, gpu_probe.NVIDIA_BYTES)
    assert count == kernel_lines(text)
    old, new = old_and_new(records)
    assert new == old
    assert facts(new) == facts(old)


def test_the_rings_hold_what_the_check_judges():
    # the differential cases are worth something only where there is something to find
    old, new = old_and_new(ring(10**4))
    assert {79, 48, 94, 119, 13}.issubset({x.code for x in old.xids}) and old.sxids
    assert new.source_lines == old.source_lines >= 10_000


@pytest.mark.parametrize("since", [None, BOOT + 1.0, BOOT + 10**9])
def test_the_window_is_cut_the_same(since):
    records = kmsg_records("\n".join(f"[{t}.000000] {XID79}" for t in (0, 5, 9)))
    old, new = old_and_new(records, since=since)
    assert new == old and facts(new) == facts(old)


def test_a_short_log_with_a_note_like_continuation_counts_as_before():
    # kernel_lines does not count a blank or note-like line in a text of 64 KiB or less:
    # only the text's length says which, so that case reads it all, and agrees
    records = ring(50) + [b"4,1,2,-;message\\x0a\\x0a\n"]
    text = old_text(records)
    assert len(text) < 65536 and kernel_lines(text) < text.count("\n") + 1
    assert kmsg_lines(records, gpu_probe.NVIDIA_BYTES)[1] == kernel_lines(text)
    big = ring(7000) + [b"4,1,2,-;message\\x0a\\x0a\n"]
    text = old_text(big)
    assert kmsg_lines(big, gpu_probe.NVIDIA_BYTES)[1] == kernel_lines(text) == text.count("\n") + 1


def test_only_the_nvidia_drivers_records_are_made_text(monkeypatch):
    records = ring(10**4, nvidia_every=1000)
    wanted = sum(1 for r in records if any(w in r for w in gpu_probe.NVIDIA_BYTES) or b"\\x0a" in r)
    made: list[str] = []

    def counted(record: str) -> str | None:
        made.append(record)
        return kmsg_line(record)

    monkeypatch.setattr(kernlog, "kmsg_line", counted)
    monkeypatch.setattr(gpu_probe, "kmsg_line", counted)
    monkeypatch.setattr(gpu_probe, "read_kmsg_records", lambda ctx: records)
    log = provider_for("kernel_gpu_log", "local")(ctx_for())
    assert log.source == gpu_probe.KMSG and log.source_lines == kernel_lines(old_text(records))
    assert 0 < len(made) <= wanted < 100  # the old reading made text of all 10^4


def test_the_probe_reads_kmsg_through_the_narrowed_source(monkeypatch):
    records = fixture_records()
    monkeypatch.setattr(gpu_probe, "read_kmsg_records", lambda ctx: records)
    log = provider_for("kernel_gpu_log", "local")(ctx_for())
    text = old_text(records)
    old = gpu_probe.gpu_events(ctx_for(), text, gpu_probe.KMSG, kernel_lines(text), gpu_probe.boot_time("/"))
    # the provider adds this boot's id (escalation counts recurrences by it); the rest is the old reading's
    assert msgspec.structs.replace(log, boot_id=None) == old and log.xids


class FakeKmsg:
    """os.open/read/close over a script: records, OSErrors raised, then EAGAIN."""

    def __init__(self, script: list) -> None:
        self.script, self.closed = list(script), False

    def read(self, fd, n):
        assert fd == 99 and n == 8192
        if not self.script:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    def install(self, monkeypatch) -> None:
        monkeypatch.setattr(gpu_probe.os, "open", lambda path, flags: 99)
        monkeypatch.setattr(gpu_probe.os, "read", self.read)
        monkeypatch.setattr(gpu_probe.os, "close", lambda fd: setattr(self, "closed", True))


def test_overwritten_records_are_read_past_and_eagain_ends_the_read(monkeypatch):
    fake = FakeKmsg([b"4,1,1,-;a\n", OSError(errno.EPIPE, "Broken pipe"), b"4,9,9,-;b\n"])
    fake.install(monkeypatch)
    assert gpu_probe.read_kmsg_records(ctx_for()) == [b"4,1,1,-;a\n", b"4,9,9,-;b\n"]
    assert fake.closed


def test_an_empty_read_ends_it_too(monkeypatch):
    FakeKmsg([b"4,1,1,-;a\n", b"", b"4,2,2,-;never read\n"]).install(monkeypatch)
    assert gpu_probe.read_kmsg_records(ctx_for()) == [b"4,1,1,-;a\n"]


def test_a_refused_read_is_an_unreadable_source_not_a_clean_log(monkeypatch):
    fake = FakeKmsg([b"4,1,1,-;a\n", OSError(errno.EPERM, "Operation not permitted")])
    fake.install(monkeypatch)
    name, read = gpu_probe.kmsg_gpu_source(ctx_for())
    with pytest.raises(ProbeError) as info:
        read()
    assert info.value.kind == "unreadable" and info.value.message == "/dev/kmsg: Operation not permitted"
    assert fake.closed


def test_a_kmsg_with_no_kernel_line_is_noted_and_the_next_source_read(monkeypatch):
    monkeypatch.setattr(gpu_probe, "read_kmsg_records", lambda ctx: [b"not a record\n"])
    text, how, count = gpu_probe.read_kernel_log([gpu_probe.kmsg_gpu_source(ctx_for()),
                                                  ("next", lambda: ("[1.0] a line\n", ""))])
    assert (how, count) == ("next", 1)
    monkeypatch.setattr(gpu_probe, "read_kmsg_records", lambda ctx: [])
    with pytest.raises(ProbeError) as info:
        gpu_probe.read_kernel_log([gpu_probe.kmsg_gpu_source(ctx_for())])
    assert "/dev/kmsg: printed no kernel log line" in info.value.message


def test_the_probe_reads_the_boot_id_under_its_root(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_probe, "read_kmsg_records", lambda ctx: fixture_records())
    ctx = ProbeContext(runner=None, root=tmp_path, limits=H100, params={}, timeout_s=5)
    assert provider_for("kernel_gpu_log", "local")(ctx).boot_id is None  # none there: unknown, never invented
    where = tmp_path / "proc/sys/kernel/random"
    where.mkdir(parents=True)
    (where / "boot_id").write_text("24418349-706B-4a39-af73-980b0a22eb84\n")
    assert provider_for("kernel_gpu_log", "local")(ctx).boot_id == "24418349-706b-4a39-af73-980b0a22eb84"
    (where / "boot_id").write_text("x" * 40)
    assert provider_for("kernel_gpu_log", "local")(ctx).boot_id is None
