"""The mechanisms behind held-out-6's misses (issue 20's eighth round), each on the real
file and on a transformation of another real fixture (each says which): a container
runtime's RFC 3339 stamp before every line and NCCL's `host [dev]` prefix without its
pid:tid; a torch message hard-wrapped by a terminal keeping the facts of every piece;
a driver that bound no GPU (`The NVIDIA probe routine was not called for N device(s)`).
"""

from __future__ import annotations

import re

import pytest
from support import CORPUS, FIXTURES

from healthcheck.parsers.lines import read_line, read_lines
from healthcheck.parsers.nccl_log import parse_nccl_log, split_nccl_line

FIELD6 = FIXTURES / "field" / "issues-6"
K8S_NCCL = FIELD6 / "nccl-log" / "k8s-rfc3339-then-nccl-stamp-host-device-no-pid-reset-by-peer.txt"
SHORT_ISO_PRECISE = FIXTURES / "kernel-log" / "journal-short-iso-precise-cet-xid94.txt"
SOCKET_CHAIN = CORPUS / "nccl-debug" / "ib-completion-error4-vendor81-service-thread-connection-closed.txt"
RUNTIME_STAMP = "2025-11-24T03:20:21.001125857Z "  # the real file's first stamp


def _runtime_stamped(text: str) -> str:
    """Each line behind a container runtime's stamp the shape the real Kubernetes log shows
    (a transformation: its nanoseconds counted up line by line)."""
    return "\n".join(f"2025-11-24T03:20:21.{1125857 + i:09d}Z {line}" if line else line
                     for i, line in enumerate(text.split("\n")))


# ---------------------------------------------------------------- a container runtime's stamp


def test_a_container_runtimes_stamp_comes_off_even_where_the_tool_reads_its_own():
    first = next(line for line in K8S_NCCL.read_text().splitlines() if line.startswith("2025"))
    (read,) = read_line(1, first, stamps=False)
    assert read.text.startswith("[2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN")
    assert (read.stamp, read.stamp_kind, read.labels) == (RUNTIME_STAMP.strip(), "runtime", RUNTIME_STAMP)
    # kubectl logs --prefix --timestamps: the pod's name, then the stamp (a transformation)
    (both,) = read_line(1, "[pod/nccl-worker-0/nccl] " + first, stamps=False)
    assert both.text == read.text and both.runner == "[pod/nccl-worker-0/nccl]"
    # under a torch rank label too, read in whatever order they were stacked
    (ranked,) = read_line(1, RUNTIME_STAMP + "[rank5]:" + first[len(RUNTIME_STAMP):], stamps=False)
    assert ranked.text == read.text and ranked.rank == 5


def test_a_journals_precise_iso_stamp_stays_the_journals():
    # the same shape with `host kernel:` after it is journalctl -o short-iso-precise's: the
    # kernel-log parser reads that stamp and its host itself
    line = next(x for x in SHORT_ISO_PRECISE.read_text().splitlines() if "+01:00 " in x)
    (kept,) = read_line(1, line, stamps=False)
    assert kept.text == line and not kept.stamp
    (read,) = read_line(1, line, stamps=True)
    assert (read.host, read.stamp_kind) == ("gpu017", "iso") and read.text.startswith("NVRM: Xid")
    # dmesg --time-format iso's `,` fraction is the kernel's too
    comma = "2024-11-15T12:02:03,470068+00:00 NVRM: Xid (PCI:0000:19:00): 48, pid='<unknown>'"
    assert read_line(1, comma, stamps=False)[0].text == comma


# ---------------------------------------------------------------- NCCL's host without pid:tid


def test_nccl_reads_a_host_named_before_its_device_without_pid_and_tid():
    log = parse_nccl_log(K8S_NCCL.read_text())
    (proc,) = log.processes
    assert (proc.host, proc.devices, proc.warns, proc.error_returns, proc.first_error_code) == (
        "gpu-server320", (5,), 1, 6, 6)
    warn = log.first_warn
    assert warn is not None and (warn.kind, warn.host, warn.peer, warn.error, warn.stamp) == (
        "socket", "gpu-server320", "10.44.137.149<52905>", "Connection reset by peer", "2025-11-24 11:20:21")
    assert log.unrecognized.count == 0  # the `-> 6 socketWait(...)` return with its long call read too


def test_a_real_log_without_pids_behind_runtime_stamps_keeps_its_hosts_and_warns():
    # corpus/nccl-debug/ib-completion-error4-vendor81-service-thread-connection-closed.txt with every
    # `:pid:tid` taken off and a runtime stamp before each line (a transformation: the shape
    # field/issues-6's Kubernetes log shows)
    text = SOCKET_CHAIN.read_text()
    clean = parse_nccl_log(text)
    pidless = re.sub(r"(?m)^(\S+?):\d+:\d+ \[", r"\1 [", text)
    assert pidless != text
    log = parse_nccl_log(_runtime_stamped(pidless))
    assert log.hosts == clean.hosts and log.nccl_lines == clean.nccl_lines
    assert log.warns and [(w.kind, w.host, w.peer, w.status, w.vendor_err, w.line) for w in log.warns] == [
        (w.kind, w.host, w.peer, w.status, w.vendor_err, w.line) for w in clean.warns]


def test_a_word_before_a_device_is_no_host():
    # only NCCL's own stamp may come before the host: another program's words are no prefix
    assert split_nccl_line("connect failed gpu-server320 [5] NCCL INFO misc/socket.cc:64 -> 6") is None
    assert split_nccl_line("12345 [5] NCCL INFO misc/socket.cc:64 -> 6") is None
    assert split_nccl_line("gpu-server320 NCCL INFO misc/socket.cc:64 -> 6") is None  # no [dev]: a sentence
    assert split_nccl_line("see [0] NCCL INFO misc/socket.cc:80 -> 6") is None  # a word, no digit, no stamp
    lines = list(read_lines(K8S_NCCL.read_text(), stamps=False))
    assert all(line.stamp_kind == "runtime" for line in lines if line.text.strip() not in ("", "..."))


# ---------------------------------------------------------------- a torch message hard-wrapped by a terminal

HARD_WRAPPED_120 = FIELD6 / "torch-log" / "hard-wrapped-at-120-watchdog-stuck-480-then-terminating.txt"
WATCHDOG = CORPUS / "torch-watchdog"
TORCH_ERROR = CORPUS / "torch-nccl-error"
REWRAPPED = (  # real logs whose watchdog timeouts, stuck/heartbeat messages and exceptions can wrap
    WATCHDOG / "heartbeat-monitor-timed-out-watchdog-stuck-600s-multi-rank.txt",
    WATCHDOG / "srun-label-prefixed-allreduce-seq52-watchdog-terminated-frames.txt",
    WATCHDOG / "terminate-distbackenderror-what-pg3-allgather-base-frames.txt",
    WATCHDOG / "torch-2.5.1-allgather-seq14217-8x2080ti-last-enqueued-completed.txt",
)
LONE_WRAP = TORCH_ERROR / "distbackenderror-rank-prefixed-nccl-2.20.5-cuda-failure-1-invalid-argument.txt"


def _hard_wrapped(text: str, width: int) -> str:
    """Every line longer than `width` cut into pieces `width` wide, as a terminal wraps
    it (a transformation of a real log: the shape field/issues-6's 120-column file shows)."""
    out = []
    for line in text.split("\n"):
        out.extend([line[at:at + width] for at in range(0, len(line), width)] or [""])
    return "\n".join(out)


def _torch_read(log) -> dict:
    return {
        "counts": log.counts(), "prefixed": log.prefixed_ranks,
        "timeouts": [(t.rank, t.pg_rank, t.seq, t.op_type, t.timeout_ms) for t in log.timeouts],
        "stuck": [(s.rank, s.pg_rank, s.seconds) for s in log.stuck],
        "progress": [(p.rank, p.pg_rank, p.kind, p.last_enqueued, p.last_completed) for p in log.progress],
        "exceptions": [(e.rank, e.type) for e in log.exceptions],
    }


def test_a_watchdog_message_hard_wrapped_at_120_columns_keeps_the_rank_of_its_first_piece():
    from healthcheck.parsers.torch_log import parse_torch_log

    log = parse_torch_log(HARD_WRAPPED_120.read_text())
    (stuck,) = log.stuck
    assert (stuck.rank, stuck.pg_rank, stuck.seconds, stuck.line) == (6, 6, 480, 1)
    assert [(f.kind, f.line) for f in log.flight_recorder] == [("dump-preparing", 9)]
    assert log.unrecognized.count == 0  # every piece read as a piece of its message


@pytest.mark.parametrize("width", (80, 100, 120))
@pytest.mark.parametrize("path", REWRAPPED, ids=lambda p: p.stem[:32])
def test_torch_messages_rewrapped_by_a_terminal_keep_every_pieces_facts(path, width):
    from healthcheck.parsers.torch_log import parse_torch_log

    # at 120 columns only one message of terminate-distbackenderror-what-pg3 wraps onto three
    # lines, too little for lines.terminal_width: torch_log knows the width by the phrase its
    # cut splits (test_one_message_wrapped_alone_is_joined_where_its_cut_splits_a_torch_phrase)
    clean = parse_torch_log(path.read_text())
    wrapped = _hard_wrapped(path.read_text(), width)
    assert wrapped != path.read_text()
    read = parse_torch_log(wrapped)
    assert _torch_read(read) == _torch_read(clean)
    assert all(t.wrapped for t in read.timeouts)  # each was wrapped and joined back


def test_lines_as_wide_as_each_other_by_chance_are_not_a_terminals_wrap():
    from healthcheck.parsers.lines import terminal_width
    from healthcheck.parsers.torch_log import parse_torch_log

    # field/repos' 86-column quote of torch's abort message: two lines as wide, once, an
    # editor's reflow (its breaks lose the blank); the message's words still read where they are
    quoted = FIXTURES / "field" / "repos" / "torch-log" / "processgroupnccl-414-some-ops-failed-hard-wrapped-3-lines.txt"
    assert terminal_width(list(read_lines(quoted.read_text()))) == 0
    assert [a.line for a in parse_torch_log(quoted.read_text()).aborts] == [3]
    # padded lines (a paste padded to its width) are no pieces: nothing joins them
    padded = "\n".join(line.ljust(120) for line in HARD_WRAPPED_120.read_text().split("\n")[:1] * 3)
    assert terminal_width(list(read_lines(padded))) == 0


def test_one_message_wrapped_alone_is_too_little_to_know_a_terminals_width():
    # corpus/torch-nccl-error's rank-prefixed DistBackendError wrapped at 80 (a transformation):
    # one line cut into three makes one middle piece, as an editor's reflow can by chance;
    # the text is read as it is (not joined), as before
    from healthcheck.parsers.lines import terminal_width
    from healthcheck.parsers.torch_log.wraps import wrap_width

    wrapped = _hard_wrapped(LONE_WRAP.read_text(), 80)
    assert terminal_width(list(read_lines(wrapped))) == 0
    assert terminal_width(list(read_lines(wrapped + "\n" + wrapped))) == 80  # two such messages: a terminal's
    # its cuts split none of torch's fixed phrases: torch_log reads it as it is too
    assert wrap_width(list(read_lines(wrapped))) == 0


def test_one_message_wrapped_alone_is_joined_where_its_cut_splits_a_torch_phrase():
    # corpus/torch-watchdog's terminate-distbackenderror-what-pg3 wrapped at 120 (a
    # transformation): only its what() wraps, onto three lines, cut inside torch's own
    # `Watchdog caught collective op|eration timeout: WorkNCCL(`: the widest line of the text
    # ending in a phrase the next line finishes is a terminal's cut, so the width is 120
    from healthcheck.parsers.lines import terminal_width
    from healthcheck.parsers.torch_log import parse_torch_log
    from healthcheck.parsers.torch_log.wraps import wrap_width

    path = WATCHDOG / "terminate-distbackenderror-what-pg3-allgather-base-frames.txt"
    wrapped = _hard_wrapped(path.read_text(), 120)
    lines = list(read_lines(wrapped))
    assert terminal_width(lines) == 0 and wrap_width(lines) == 120
    (timeout,) = parse_torch_log(wrapped).timeouts
    assert (timeout.pg_rank, timeout.seq, timeout.wrapped) == (5, 9141, True)  # the rank of its first piece


def test_a_cut_that_splits_no_phrase_or_drops_the_space_is_no_terminals():
    from healthcheck.parsers.torch_log.wraps import splits_a_phrase

    assert splits_a_phrase("[Rank 5] Watchdog caught collective op", "eration timeout: WorkNCCL(SeqNum=9141")
    # a terminal's cut at the blank keeps it on one side; an editor's reflow drops it
    assert splits_a_phrase("[Rank 5] Watchdog caught", " collective operation timeout: WorkNCCL(")
    assert not splits_a_phrase("[Rank 5] Watchdog caught", "collective operation timeout: WorkNCCL(")
    # a whole phrase ending the line, or a next line that goes on otherwise, is no cut inside one
    assert not splits_a_phrase("ran for 600020 milliseconds before timing out.", "Exception raised from")
    assert not splits_a_phrase("[Rank 5] Watchdog caught collective op", "erating normally")


# ---------------------------------------------------------------- a driver that bound no GPU

NOT_CALLED = FIELD6 / "xid" / "no-adapter-probed-probe-routine-not-called-3-devices-multiline.txt"
KERNEL_LOG = FIXTURES / "kernel-log"


def test_a_driver_whose_probe_routine_was_not_called_bound_no_gpu():
    from healthcheck.parsers.xid import INIT_FAILED, NONE_PROBED, PROBE, parse_kernel_log

    log = parse_kernel_log(NOT_CALLED.read_text())
    assert [(f.kind, f.pci_bus_id, f.stage, f.devices) for f in log.faults] == [
        (NONE_PROBED, None, None, None), (INIT_FAILED, None, PROBE, 3)]
    assert log.faults[1].message == "The NVIDIA probe routine was not called for 3 device(s)."
    assert log.xids == []


def test_a_multi_line_nvrm_message_whose_indent_a_paste_lost_is_one_message():
    # field/issues-6: `[188549.977053] NVRM: This can occur when a driver such as: ` then `NVRM: nouveau,
    # rivafb, nvidiafb or rivatv ` with no stamp and no indent: its continuation, as dmesg's indented
    # ones are (`hc parse --explain` names them); a sentence ended is no head for the next line
    from healthcheck.parsers.explain import explain
    from healthcheck.parsers.xid import parse_kernel_log

    _, explained = explain("xid", parse_kernel_log, NOT_CALLED.read_text())
    read_by = {line.line: line.by for line in explained.lines}
    assert [read_by.get(n) for n in (6, 7, 9, 10, 11)] == ["continuation"] * 5
    assert read_by.get(4) == "init-failed"  # its sentence ended: the explanation after it is a message of its own
    # the real probe-time "fallen off the bus" message with its 15-space indent taken off still reads as one
    text = (FIXTURES / "field" / "issues-4" / "xid" / "fallen-off-bus-no-xid-multiline-570-probe-failed.txt").read_text()
    unindented = "\n".join(line.lstrip() for line in text.splitlines())
    (lost,) = parse_kernel_log(unindented).xids
    assert (lost.code, lost.pci_bus_id, lost.legacy) == (79, "0000:b3:00.0", True)


def test_a_node_whose_driver_bound_no_gpu_fails_and_no_adapter_probed_alone_does_not():
    from test_evidence_unreadable import GENERIC, found, read_log

    from healthcheck.checks import gpu as g
    from healthcheck.core.model import Finding

    out = list(g.xid(kernel_gpu_log=read_log(NOT_CALLED.read_text()), gpus=None, limits=GENERIC))
    assert found(out) == [("gpu.E022", "FAIL", "GPU?:init-failed")]
    (fail,) = [f for f in out if isinstance(f, Finding)]
    assert "not called for 3 device(s)" in fail.message and "probe routine was not called" in fail.evidence
    # the same real log without the not-called message: `No NVIDIA graphics adapter probed!`, which a
    # node with no NVIDIA GPU prints too, is a fact no check fails on
    alone = NOT_CALLED.read_text().splitlines()[0] + "\n"
    assert found(list(g.xid(kernel_gpu_log=read_log(alone), gpus=None, limits=GENERIC))) == []
    # the probe routine that *failed* for 1 device follows the per-GPU line that names it: one incident
    fallen = (KERNEL_LOG / "dmesg-probe-fallen-off-bus-continuation.txt").read_text()
    assert [c for _, _, c in found(list(g.xid(kernel_gpu_log=read_log(fallen), gpus=None, limits=GENERIC)))] == [
        "0000:5d:00.0:xid79"]
