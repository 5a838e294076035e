"""The local process list read from /proc through bare descriptors (issue 22): the same
names as before, argv[0] still cut at 4096 bytes, comm read whole however long."""

from __future__ import annotations

from pathlib import Path

from healthcheck.core.facts import ProbeContext
from healthcheck.probes.sysinfo import _read_proc, processes


def _proc(root: Path, pid: str, cmdline: bytes, comm: bytes) -> None:
    d = root / "proc" / pid
    d.mkdir(parents=True)
    (d / "cmdline").write_bytes(cmdline)
    (d / "comm").write_bytes(comm)


def test_names_come_from_argv0_and_comm(tmp_path):
    _proc(tmp_path, "1", b"/sbin/init\0splash\0", b"systemd\n")
    _proc(tmp_path, "77", b"/usr/bin/python3 -m worker\0", b"python3\n")
    _proc(tmp_path, "78", b"", b"kworker/u8:2-events_unbound\n")  # a kernel thread: comm only
    _proc(tmp_path, "79", b"x" * 5000, b"x\n")  # no NUL within 4096 bytes: argv[0] is cut there
    procs = processes(ProbeContext(runner=None, transport="local", root=tmp_path))
    assert procs.incomplete is None
    assert procs.names == {"init", "systemd", "python3", "kworker/u8:2-events_unbound", "x" * 4096, "x"}


def test_a_proc_file_is_read_whole_or_up_to_its_limit(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"a" * 10000)
    assert _read_proc(str(f)) == b"a" * 10000
    assert _read_proc(str(f), 4096) == b"a" * 4096
    assert _read_proc(str(f), 5) == b"aaaaa"
