"""`hc diagnose logs` over hostile trees (issue 18, D.11): never into /proc, /sys or /dev
(by path, and by st_dev for a pseudo file system mounted anywhere), never a FIFO or
device opened, names that are not UTF-8 or not printable shown escaped, the walk
bounded and saying what it skipped, and progress on stderr for long reads."""

from __future__ import annotations

import io
import json
import os
import pty
import shutil
import stat
import subprocess
import sys

import pytest
from support import Tty, run_hc, run_hc_inproc

from healthcheck.cli.progress import TextProgress
from healthcheck.diagnose import walk as walk_mod
from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build

NCCL_LINE = "gpu1:123:456 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mknod and mount need root")


def one_error_line(stderr: bytes) -> str:
    text = stderr.decode()
    assert "Traceback" not in text and "internal error" not in text, text
    (line,) = text.splitlines()
    return line


# ------------------------------------------------------------------ the kernel's side


@pytest.mark.parametrize("path", ["/proc", "/proc/kmsg", "/sys", "/dev", "/proc/self/"])
def test_a_kernel_pseudo_file_system_named_is_refused_at_once(path):
    # the old walk read /proc/kmsg: blocked until the kernel logged, then took the line
    # from the system logger; the timeout ends the test instead of waiting on the kernel
    r = run_hc_inproc("diagnose", "logs", path, timeout=30)
    assert r.returncode == 4
    assert "pseudo file system" in one_error_line(r.stderr)
    assert r.stdout == b""


def test_the_walk_of_root_never_enters_proc_sys_or_dev(monkeypatch):
    monkeypatch.setattr(walk_mod, "MAX_FILES", 40)  # the listing of / is what matters here
    found = walk_mod.walk(["/"])
    skipped = {u.source: u.why for u in found.unreadable()}
    for name in ("/proc", "/sys", "/dev"):
        assert "pseudo file system" in skipped[name], skipped
    assert not [f.path for f in found.files if f.path.startswith(("/proc/", "/sys/", "/dev/"))]


def test_pseudo_devices_come_from_mountinfo(tmp_path):
    info = tmp_path / "mountinfo"
    info.write_text("22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
                    "23 1 0:22 / /sys rw - sysfs sysfs rw\n"
                    "24 1 8:1 / / rw - ext4 /dev/sda1 rw\n"
                    "garbage line\n")
    assert walk_mod.pseudo_devices(str(info)) == {os.makedev(0, 21): "proc", os.makedev(0, 22): "sysfs"}
    assert walk_mod.pseudo_devices(str(tmp_path / "missing")) == {}
    # the running system's own: /proc is one of them
    assert os.stat("/proc").st_dev in walk_mod.pseudo_devices()


def _can_mount() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    r = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    return r.returncode == 0


@pytest.mark.skipif(not _can_mount(), reason="needs root and unshare -m (a private mount namespace)")
def test_a_pseudo_file_system_mounted_inside_a_log_dir_is_not_entered(tmp_path):
    logs = tmp_path / "logs"
    (logs / "mm").mkdir(parents=True)
    (logs / "rank0.log").write_text(NCCL_LINE)
    # sysfs (not proc: the old code would read a mounted kmsg) bound inside the log dir,
    # in a mount namespace of the test's own: found by st_dev, not by its path
    script = (f"mount --bind /sys/kernel/mm {logs / 'mm'} && exec {sys.executable} -m healthcheck diagnose logs "
              f"{logs} --format json")
    r = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, timeout=60,
                       env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert r.returncode in (0, 3), r.stderr
    verdict = json.loads(r.stdout)
    whys = {u["source"]: u["why"] for u in verdict["unreadable"]}
    assert "pseudo file system (sysfs)" in whys[str(logs / "mm")], whys
    assert verdict["inputs"] == 1  # rank0.log only: nothing of sysfs read


# ------------------------------------------------------------------ FIFOs and devices


def _spy_opens(monkeypatch) -> list[tuple[str, int]]:
    opened: list[tuple[str, int]] = []
    real_open = os.open

    def spy(path, flags, *args, **kwargs):
        opened.append((os.fsdecode(path), flags))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", spy)
    return opened


def test_fifos_and_devices_in_a_log_dir_are_never_opened(tmp_path, monkeypatch):
    (tmp_path / "rank0.log").write_text(NCCL_LINE)
    os.mkfifo(tmp_path / "rank1.log")  # no writer: a blocking open would hang here
    specials = [str(tmp_path / "rank1.log")]
    if os.geteuid() == 0:
        os.mknod(tmp_path / "rank2.log", stat.S_IFCHR | 0o666, os.makedev(1, 3))  # /dev/null's numbers
        specials.append(str(tmp_path / "rank2.log"))
    opened = _spy_opens(monkeypatch)
    col = collect([tmp_path])
    monkeypatch.undo()
    assert not [p for p, _ in opened if p in specials], opened
    whys = {u.source: u.why for u in col.evidence.unreadable}
    for path in specials:
        assert "not a regular file: not opened" in whys[path]
    assert col.evidence.inputs == 1


def test_a_file_swapped_for_a_fifo_or_device_after_the_walk_is_not_read(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text(NCCL_LINE)
    found = walk_mod.walk([tmp_path])
    log.unlink()
    os.mkfifo(log)
    ((_, got),) = walk_mod.read_all(found.files, pseudo=found.pseudo, is_binary=lambda _: False)
    assert isinstance(got, walk_mod.Skip) and "a FIFO now" in str(got)
    if os.geteuid() == 0:
        log.unlink()
        os.mknod(log, stat.S_IFCHR | 0o666, os.makedev(1, 5))  # /dev/zero's numbers: endless if read
        ((_, got),) = walk_mod.read_all(found.files, pseudo=found.pseudo, is_binary=lambda _: False)
        assert isinstance(got, walk_mod.Skip) and "character device now" in str(got)


def test_a_fifo_in_a_log_dir_never_hangs_the_command(tmp_path):
    (tmp_path / "rank0.log").write_text(NCCL_LINE)
    os.mkfifo(tmp_path / "stdout.log")
    r = run_hc("diagnose", "logs", str(tmp_path), timeout=60)
    assert r.returncode in (0, 3) and b"Traceback" not in r.stderr
    assert b"a FIFO, not a regular file" in r.stdout


# ------------------------------------------------------------------ names


HOSTILE_NAMES = {
    b"rank0-\xff\xfe.log": "rank0-\\xff\\xfe.log",  # not UTF-8
    "rank1-\x1b[31m\u202e.log".encode(): "rank1-\\x1b[31m\\u202e.log",  # an escape sequence, a bidi override
    b"rank2-\nnewline.log": "rank2-\\nnewline.log",
}


def test_names_that_are_not_utf8_or_not_printable_are_shown_escaped(tmp_path):
    for raw in HOSTILE_NAMES:  # text of no known kind: each is listed by name, with why
        with open(os.path.join(os.fsencode(tmp_path), raw), "w") as f:
            f.write("shopping list\n")
    for fmt in ("json", "table"):
        r = run_hc_inproc("diagnose", "logs", str(tmp_path), "--format", fmt)
        assert r.returncode in (0, 3), r.stderr
        assert b"internal error" not in r.stderr and b"Traceback" not in r.stderr
        text = r.stdout.decode("utf-8")  # valid UTF-8
        assert "\x1b" not in text and "\u202e" not in text
        for shown in HOSTILE_NAMES.values():
            assert (json.dumps(shown)[1:-1] if fmt == "json" else shown) in text, (shown, text)
    verdict = build(collect([tmp_path]))
    assert sorted(u.source.rsplit("/", 1)[-1] for u in verdict.unreadable) == sorted(HOSTILE_NAMES.values())


def test_shown_escapes_only_what_it_must():
    assert walk_mod.shown("/var/log/job/rank3.log") == "/var/log/job/rank3.log"
    assert walk_mod.shown("/logs/ünïcode-ok.log") == "/logs/ünïcode-ok.log"
    assert walk_mod.shown(os.fsdecode(b"/logs/\xff")) == "/logs/\\xff"
    assert walk_mod.shown(b"/logs/\xc3") == "/logs/\\xc3"


def test_a_named_path_that_is_not_utf8_and_missing_is_one_line(tmp_path):
    missing = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"gone-\xff"))
    r = subprocess.run([sys.executable, "-m", "healthcheck", "diagnose", "logs", missing], capture_output=True,
                       timeout=60)
    assert r.returncode == 4 and "gone-\\xff" in one_error_line(r.stderr)


# ------------------------------------------------------------------ bounds


def test_the_walk_is_bounded_and_says_what_it_skipped(tmp_path, monkeypatch):
    for i in range(8):
        os.mkfifo(tmp_path / f"a-fifo-{i}")
    for i in range(10):
        (tmp_path / f"rank{i}.log").write_text(NCCL_LINE)
    monkeypatch.setattr(walk_mod, "MAX_FILES", 6)
    monkeypatch.setattr(walk_mod, "MAX_LISTED", 3)
    found = walk_mod.walk([tmp_path])
    assert len(found.files) == 6
    lines = [(u.source, u.why) for u in found.unreadable()]
    assert len([s for s, _ in lines if "a-fifo-" in s]) == 3  # listed one by one up to MAX_LISTED
    assert ("(5 more)", "a FIFO, not a regular file: not opened") in lines  # the rest counted
    assert any("more than 6 files: the rest were not read" in why for _, why in lines)


def test_the_walk_counts_the_entries_it_looks_at(tmp_path, monkeypatch):
    for i in range(20):
        (tmp_path / f"d{i:02d}").mkdir()
    monkeypatch.setattr(walk_mod, "MAX_ENTRIES", 10)
    found = walk_mod.walk([tmp_path])
    assert found.full and any("more than 10 entries" in u.why for u in found.unreadable())


def test_the_walk_resolves_links_only_where_there_are_links(tmp_path, monkeypatch):
    """os.path.realpath lstats every component of a path: run on every entry it was three
    quarters of a walk of /usr. An entry's real path is its directory's plus its name."""
    for d in range(5):
        sub = tmp_path / f"d{d}" / "deeper"
        sub.mkdir(parents=True)
        for i in range(40):
            (sub / f"rank{i}.log").write_text(NCCL_LINE)
    (tmp_path / "d0" / "link.log").symlink_to(tmp_path / "d1" / "deeper" / "rank0.log")
    calls: list[str] = []
    real = os.path.realpath

    def counted(path, *args, **kwargs):
        calls.append(os.fspath(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(walk_mod.os.path, "realpath", counted)
    found = walk_mod.walk([tmp_path])
    assert len(found.files) == 201
    assert len(calls) <= 3, calls  # the top (and where it is), and the one link


def test_a_path_through_a_link_to_root_still_never_enters_proc_sys_or_dev(tmp_path, monkeypatch):
    """Where mountinfo cannot be read, the walk knows /proc, /sys and /dev by their real paths,
    whatever path led there."""
    monkeypatch.setattr(walk_mod, "MAX_FILES", 40)
    (tmp_path / "root").symlink_to("/")
    found = walk_mod.walk([tmp_path / "root"], pseudo={})
    skipped = {u.source: u.why for u in found.unreadable()}
    for name in ("proc", "sys", "dev"):
        assert "pseudo file system" in skipped[f"{tmp_path}/root/{name}"], skipped


def test_a_binary_file_is_not_read_past_its_first_bytes(tmp_path, monkeypatch):
    (tmp_path / "core").write_bytes(b"\x7fELF\x00" + b"\x00" * (4 * 1024 * 1024))
    reads: list[int] = []
    real_read = os.read

    def spy(fd, n):
        data = real_read(fd, n)
        reads.append(len(data))
        return data

    monkeypatch.setattr(os, "read", spy)
    col = collect([tmp_path])
    monkeypatch.undo()
    assert sum(reads) <= walk_mod.SNIFF_BYTES
    assert "binary" in col.evidence.unreadable[0].why


# ------------------------------------------------------------------ progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_off_a_terminal_speaks_only_once_the_work_is_slow():
    clock, out = FakeClock(), io.StringIO()
    p = TextProgress("hc diagnose logs", stream=out, clock=clock)
    p("read 1 of 9 files")
    clock.now += 1.0
    p("read 2 of 9 files")
    assert out.getvalue() == ""  # a quick run leaves nothing in a captured stderr
    clock.now += 1.5
    p("read 3 of 9 files")
    p("read 4 of 9 files")  # at most one line every few seconds
    clock.now += 6
    p("read 9 of 9 files")
    p.done()
    assert out.getvalue() == "hc diagnose logs: read 3 of 9 files\nhc diagnose logs: read 9 of 9 files\n"


def test_progress_on_a_terminal_shows_at_once_and_is_erased():
    clock, out = FakeClock(), Tty()
    p = TextProgress("hc diagnose logs", stream=out, clock=clock)
    p("looked at 1024 entries")
    assert out.getvalue() == "\rhc diagnose logs: looked at 1024 entries"
    p.done()
    assert out.getvalue().endswith("\r")


def test_diagnose_logs_shows_progress_on_a_terminal(tmp_path):
    for i in range(3):
        (tmp_path / f"rank{i}.log").write_text(NCCL_LINE)
    primary, secondary = pty.openpty()
    try:
        r = subprocess.run([sys.executable, "-m", "healthcheck", "diagnose", "logs", str(tmp_path)],
                           stdout=subprocess.PIPE, stderr=secondary, timeout=60)
        os.close(secondary)
        secondary = -1
        shown = b""
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO: the other end closed
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(primary)
        if secondary >= 0:
            os.close(secondary)
    assert r.returncode in (0, 3)
    assert b"hc diagnose logs: read 1 of 3 files" in shown, shown
