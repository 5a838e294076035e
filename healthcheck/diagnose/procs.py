"""Reading /proc: one process's state, parent, command, executable, cgroup, network
namespace and environment, each read once and bounded, never raising on a process that
vanishes or refuses (the collector's facts, diagnose/collect.py).

What a rank's environment says (its rank, the variables kept) is diagnose/rankenv.py's;
which processes are a job's ranks is diagnose/discovery.py's.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable

from healthcheck.parsers.procfs import parse_boot_time
from healthcheck.runners.proctree import read_small, read_stat

MAX_ENVIRON = 1 << 20  # bytes of /proc/PID/environ read (the kernel allows far more; ranks never need it)
MAX_CMDLINE = 4096

PYTHON_NAME = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)*)?[a-z]?(?:-dbg)?$")
_CGROUP_JOB = re.compile(r"/job_(\d{1,20})(?:/|$)")
STATE_NAMES = {
    "R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie",
    "X": "dead", "I": "idle", "P": "parked", "W": "waking", "K": "wakekill",
}
GONE_STATES = ("Z", "X")  # a zombie or a dead process: nothing to dump, nothing running


class ProcInfo:
    """What /proc says about one process (read once, bounded)."""

    __slots__ = ("pid", "state", "ppid", "command", "exe", "environ", "environ_error", "environ_truncated",
                 "cgroup_job", "netns")

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.state = "?"
        self.ppid: int | None = None
        self.command = ""
        self.exe = ""
        self.environ: dict[str, str] | None = None
        self.environ_error: str | None = None
        self.environ_truncated = False
        self.cgroup_job: str | None = None
        self.netns: str | None = None

    def read_environ(self, proc: str = "/proc") -> None:
        """Read its environ now (a process looked at without it)."""
        self.environ, self.environ_error, self.environ_truncated = read_environ(self.pid, proc)


def parse_environ(data: bytes) -> dict[str, str]:
    """NUL-separated NAME=VALUE -> dict; the first of duplicate names wins (as getenv finds it);
    items without `=` or with an empty name are dropped; bytes that are not UTF-8 are replaced."""
    out: dict[str, str] = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if not sep or not name:
            continue
        key = name.decode("utf-8", errors="replace")
        if key not in out:
            out[key] = value.decode("utf-8", errors="replace")
    return out


def read_environ(pid: int, proc: str = "/proc", max_bytes: int = MAX_ENVIRON) \
        -> tuple[dict[str, str] | None, str | None, bool]:
    """(environ, error, truncated): at most max_bytes are read; a last item cut by the bound is dropped.
    An unreadable environ is (None, why, False), never an exception."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            data = f.read(max_bytes + 1)
    except FileNotFoundError:
        return None, "process gone", False
    except PermissionError as exc:
        return None, f"permission denied ({exc.strerror}): another user's process, needs root or CAP_SYS_PTRACE", \
            False
    except OSError as exc:
        return None, exc.strerror or str(exc), False
    truncated = len(data) > max_bytes
    if truncated:
        data = data[:max_bytes]
        cut = data.rfind(b"\0")
        data = data[:cut] if cut >= 0 else b""
    return parse_environ(data), None, truncated


def parse_int(text: str | None) -> int | None:
    """A whole number of at most 11 digits (surrounding blanks allowed), else None."""
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 12 else None


def cgroup_job(text: str) -> str | None:
    """The Slurm job id a /proc/PID/cgroup names (`.../job_123/step_0/...`), else None."""
    for line in text.splitlines():
        m = _CGROUP_JOB.search(line.rpartition(":")[2])
        if m:
            return m.group(1)
    return None


def read_command(pid: int, proc: str = "/proc") -> str:
    """Its command line, words joined by spaces (bounded; "" when unreadable)."""
    raw = read_small(f"{proc}/{pid}/cmdline", MAX_CMDLINE) or b""
    return " ".join(w.decode("utf-8", errors="replace") for w in raw.split(b"\0") if w)[:MAX_CMDLINE]


def read_link(path: str) -> str | None:
    """Where a /proc symlink points (exe, ns/net, fd/N), None when it cannot be read."""
    try:
        return os.readlink(path)
    except OSError:
        return None


def inspect_process(pid: int, proc: str, with_environ: bool = True) -> ProcInfo | None:
    """What /proc says about `pid`, None when its stat cannot be read (it is gone)."""
    stat_fields = read_stat(pid, proc)
    if stat_fields is None:
        return None
    p = ProcInfo(pid)
    p.state, p.ppid = stat_fields
    p.command = read_command(pid, proc)
    p.exe = read_link(f"{proc}/{pid}/exe") or ""
    cg = read_small(f"{proc}/{pid}/cgroup", 16384)
    if cg:
        p.cgroup_job = cgroup_job(cg.decode("utf-8", errors="replace"))
    p.netns = read_link(f"{proc}/{pid}/ns/net")
    if with_environ:
        p.read_environ(proc)
    return p


def is_python(p: ProcInfo) -> bool:
    """Its executable (or, where /proc/PID/exe is unreadable, argv[0]) is a python."""
    exe = p.exe.removesuffix(" (deleted)")
    name = os.path.basename(exe) if exe else os.path.basename(p.command.split(" ", 1)[0])
    return bool(PYTHON_NAME.match(name))


def own_netns(proc: str = "/proc") -> str | None:
    """This process's network namespace (`net:[inode]`), None when unreadable."""
    return read_link(f"{proc}/self/ns/net")


def in_other_netns(p: ProcInfo, own: str | None) -> bool:
    """Known to live in another network namespace than `own` (an unreadable one is not)."""
    return bool(own and p.netns and p.netns != own)


def ancestors(pid: int, proc: str) -> set[int]:
    """`pid` and its ancestors below init."""
    out: set[int] = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        stat_fields = read_stat(pid, proc)
        if stat_fields is None or stat_fields[1] is None:
            break
        pid = stat_fields[1]
    return out


def own_lineage(proc: str) -> set[int]:
    """This process and its ancestors, where `proc` is this machine's /proc (else none)."""
    return ancestors(os.getpid(), proc) if proc == "/proc" else set()


def children_map(procs: Iterable[ProcInfo]) -> dict[int, list[int]]:
    """{parent pid: its children's pids}."""
    children: dict[int, list[int]] = {}
    for p in procs:
        if p.ppid is not None:
            children.setdefault(p.ppid, []).append(p.pid)
    return children


def output_files(pid: int, proc: str = "/proc") -> tuple[str, ...]:
    """The regular files a process's stdout and stderr go to (what it printed as it
    failed: torch's warnings, a traceback); pipes, terminals and deleted files are not."""
    out: list[str] = []
    for fd in (1, 2):
        link = f"{proc}/{pid}/fd/{fd}"
        try:
            target = os.readlink(link)
            regular = stat.S_ISREG(os.stat(link).st_mode)
        except OSError:
            continue
        if regular and target.startswith("/") and not target.endswith(" (deleted)") and target not in out:
            out.append(target)
    return tuple(out)


def machine_boot_time(proc: str = "/proc") -> float | None:
    """This boot's start (epoch seconds) from {proc}/stat's btime, None when unreadable."""

    data = read_small(f"{proc}/stat", 1 << 20)
    return parse_boot_time(data.decode("ascii", errors="replace")) if data else None


def process_start(pid: int, proc: str = "/proc", boot: float | None = None) -> float | None:
    """When a process started (epoch seconds): /proc/PID/stat's starttime (clock ticks after
    boot) + the boot time; None when either is unreadable."""
    boot = machine_boot_time(proc) if boot is None else boot
    data = read_small(f"{proc}/{pid}/stat", 4096)
    if boot is None or not data:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # field 3 (state) is fields[0]; starttime is field 22
    if len(fields) < 20 or not fields[19].isdigit():
        return None
    try:
        ticks = os.sysconf("SC_CLK_TCK")
    except (ValueError, OSError):
        ticks = 100
    return boot + int(fields[19]) / max(1, ticks)
