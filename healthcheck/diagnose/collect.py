"""Live collection on one node: every rank process of a job, its state and its Python stack.

Runs ON the node (locally; `hc diagnose job` reaches each node over SSH or `srun
--overlap --jobid`), bounded in time (`timeout_s` for the whole node, `per_rank_timeout_s`
per py-spy) and in output (environ, command lines, py-spy output and the RAS reply are
read to fixed limits). Nothing here raises on a node's state: a process that vanishes,
an environ we may not read, a py-spy that is missing or refused ptrace, a RAS port with
nothing behind it are facts in the result (`NodeCollection.errors`, `RankProcess`,
`NodeCollection.ras`), each error naming its fix.

Finding the ranks:
- `pids`: those processes; a pid that carries no rank but has rank processes below it
  (a torchrun agent, `srun`'s bash wrapper) stands for them.
- `job_id`: processes whose /proc/PID/cgroup path names `job_<id>` (Slurm's cgroup
  plugins, v1 and v2) or whose environ has SLURM_JOB_ID=<id> (proctrack/linuxproc, any
  plugin). This collector itself, its ancestors and its own Slurm step are left out (it
  may run as a step of the very job: `srun --overlap --jobid`).
- Only processes in this collector's network namespace count (`same_netns`): a node's
  ranks share it, and on the test rig the namespace is the host (all hosts share one pid
  namespace there). Processes whose namespace cannot be read are kept.
- A rank is a Python process with a rank variable: RANK, OMPI_COMM_WORLD_RANK, PMI_RANK,
  PMIX_RANK, SLURM_PROCID (in that order of trust). A candidate whose child carries the
  same rank is that rank's helper (DataLoader worker, compile worker) and is not listed;
  one whose child carries a different rank (or that has no rank itself) is a launcher
  agent (torchrun's elastic agent under srun) and is recorded as the children's
  `agent_pid`, not as a rank.

Per rank: host, pid, ppid, rank, local_rank, world_size, state from /proc/PID/stat (R
running, S sleeping, D disk sleep, T stopped: a SIGSTOPped rank, t traced, Z zombie),
CUDA_VISIBLE_DEVICES, the debug files it was told to write (NCCL_DEBUG_FILE with NCCL's
%h/%p expanded, the Flight Recorder dump prefix TORCH_FR_DUMP_TEMP_FILE /
TORCH_NCCL_DEBUG_INFO_TEMP_FILE + rank, TORCHELASTIC_ERROR_FILE), the launch-relevant
variables (never the whole environment: it may hold secrets) and `py-spy dump --json
--pid PID` parsed by parsers.py_spy (`--native` optional). py-spy pauses a process with
ptrace; a stopped (T) or uninterruptible (D) process would make it fail or wait, so
those are read with `--nonblocking` (memory only, no ptrace stop), which works on a
SIGSTOPped rank. Zombies are not dumped.

Where no rank runs (`--local`): torchrun agents with no Python child are launchers whose
ranks never started (`find_launchers`): their py-spy stack (waiting in the rendezvous or
the store's creation) and who listens on their rendezvous port here (/proc/net/tcp{,6},
the socket's inode found among /proc/PID/fd, bounded in time). A foreign process on that
port keeps the store from starting while every agent waits on it: the port-taken hang.

Optional: NCCL's RAS service on 127.0.0.1:28028 (`ras_client.query_ras`), parsed by
parsers.nccl_ras; connection refused is absent evidence, not an error.

The node's kernel log in the job's window (`NodeCollection.kernel`): read through hc's
kernel-log reader (probes.gpu.read_kernel_log: /dev/kmsg, then `dmesg --time-format iso`,
then the journal since the window's start), bounded in time and size, from the job's
start: `since` when given, else the earliest start (/proc/PID/stat) of the job's
processes on this node, else SLURM_JOB_START_TIME where this collector runs in the job.
Kept: OOM kills (`Out of memory: Killed process PID (...)`, `Memory cgroup out of
memory: ...`, with the Slurm job the kernel's `oom-kill:` line names from the killed
task's memory cgroup), NVIDIA Xid and SXid lines (parsers.xid), and mlx5 link events
(`mlx5_core ... Link down|up`, port state changes, port module events). Lines stamped
before the window, and lines with no time at all, are dropped (counted): stale events
must not make a diagnosis. A kernel log no source could read, or a window no process
says, is a note in the result (`KernelLog.note`), not an error.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import math
import os
import re
import shutil
import socket
import stat
import sys
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

from healthcheck.core import typed
from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext, ProbeError
from healthcheck.core.inputs import clip
from healthcheck.diagnose.motion import StackSample
from healthcheck.diagnose.ras_client import DEFAULT_HOST, DEFAULT_PORT, RasOutcome, query_ras
from healthcheck.diagnose.sampling import MARGIN_S, Sampled, SamplingSpec, sample_ranks
from healthcheck.parsers.kernlog import split_prefix
from healthcheck.parsers.nccl_ras import NcclRasStatus, parse_nccl_ras
from healthcheck.parsers.py_spy import PySpyDump, PySpyFrame, PySpyThread, parse_py_spy
from healthcheck.parsers.xid import parse_kernel_log
from healthcheck.probes.gpu import MAX_SINCE, Source, command_source, read_kernel_log
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import LocalRunner, run_command

MAX_ENVIRON = 1 << 20  # bytes of /proc/PID/environ read (the kernel allows far more; ranks never need it)
MAX_CMDLINE = 4096
MAX_VALUE = 1024  # characters of one kept variable's value
MAX_KEPT_VARS = 200
MAX_PY_SPY_OUTPUT = 4 << 20  # bytes of one py-spy dump kept and parsed
MAX_SKIPPED = 100  # skipped processes listed per node
DEFAULT_PARALLEL = 8
DEFAULT_TIMEOUT_S = 20.0
DEFAULT_PER_RANK_TIMEOUT_S = 10.0
DEFAULT_RAS_TIMEOUT_S = 5.0
KERNEL_TIMEOUT_S = 5.0  # for one kernel-log source (dmesg, journalctl)
MAX_KERNEL_TEXT = 32 << 20  # characters of a kernel log looked at (the ring buffer is far smaller)
MAX_KERNEL_EVENTS = 200  # kept per node (the first in the window; the rest counted)
KERNEL_SLACK_S = 1.0  # a line stamped this much before the window still counts (clock rounding)

ErrorKind = Literal[
    "py-spy-missing",  # no py-spy binary: nothing was dumped on this node
    "ptrace-denied",  # py-spy was refused ptrace (not root, no CAP_SYS_PTRACE, Yama)
    "py-spy-timeout",  # py-spy did not finish within its time
    "py-spy-failed",  # py-spy said something else (no-python, an unknown Python, ...)
    "process-gone",  # the pid vanished while we looked at it
    "environ-unreadable",  # /proc/PID/environ refused (another user's process, no ptrace-read right)
    "proc-unreadable",  # /proc itself or a process's stat could not be read
    "ras-error",  # a RAS service answered but the exchange failed
    "no-ranks",  # nothing of the job on this node
    "deadline",  # the node's time ran out before this rank was dumped
]
FoundBy = Literal["pid", "cgroup", "environ"]
DumpMode = Literal["blocking", "nonblocking"]

PTRACE_FIX = ("run hc as root, or give it CAP_SYS_PTRACE (containers: --cap-add SYS_PTRACE; Kubernetes: "
              "securityContext.capabilities.add [SYS_PTRACE]), or allow ptrace of non-children with "
              "sysctl kernel.yama.ptrace_scope=0")
PY_SPY_FIX = "install py-spy on every node (pip install py-spy, >= 0.4 for Python 3.12+) or pass its path"

# rank variables, most trusted first; (rank, local rank, world size)
_RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
_LOCAL_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
_WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")
_JOB_VARS = ("SLURM_JOB_ID", "SLURM_JOBID")
# variables kept per rank (names, and prefixes); names that look like secrets never are
_KEEP_NAMES = frozenset({
    *_RANK_VARS, *_LOCAL_VARS, *_WORLD_VARS, *_JOB_VARS, "GROUP_RANK", "ROLE_RANK", "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_NODEID",
    "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURMD_NODENAME", "SLURM_CPUS_ON_NODE",
    "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "PYTHONFAULTHANDLER",
})
_KEEP_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCH_DISTRIBUTED_", "TORCHELASTIC_", "GLOO_",
                  "TORCH_CPP_LOG", "UCX_", "HC_")
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|(?:^|_)KEY(?:$|_)|AUTH", re.I)
_CGROUP_JOB = re.compile(r"/job_(\d{1,20})(?:/|$)")
_PYTHON = re.compile(r"^(?:python|pypy)(?:\d+(?:\.\d+)*)?[a-z]?(?:-dbg)?$")
_AGENT_CMD = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
_STATE_NAMES = {
    "R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop", "Z": "zombie",
    "X": "dead", "I": "idle", "P": "parked", "W": "waking", "K": "wakekill",
}


class CollectError(msgspec.Struct, frozen=True, omit_defaults=True):
    """Something this node could not give, with what to do about it."""

    kind: ErrorKind
    message: str
    fix: str | None = None
    pid: int | None = None
    rank: int | None = None


class DebugFiles(msgspec.Struct, frozen=True, omit_defaults=True):
    """Where this rank was told to write its evidence (paths as seen on its node)."""

    nccl_debug: str | None = None  # NCCL_DEBUG_FILE, %h and %p expanded as NCCL does
    flight_recorder: str | None = None  # TORCH_FR_DUMP_TEMP_FILE (or TORCH_NCCL_DEBUG_INFO_TEMP_FILE) + rank
    flight_recorder_prefix: str | None = None  # the variable as given
    elastic_error: str | None = None  # TORCHELASTIC_ERROR_FILE (@record)


class RankProcess(msgspec.Struct, frozen=True, omit_defaults=True):
    """One rank's process as this node saw it."""

    pid: int
    host: str
    state: str  # /proc/PID/stat: R S D T t Z ...
    state_name: str  # running, sleeping, disk-sleep, stopped, ...
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    rank_source: str | None = None  # the variable the rank came from (RANK, SLURM_PROCID, ...)
    ppid: int | None = None
    agent_pid: int | None = None  # the launcher agent above it (torchrun), where there is one
    helpers: tuple[int, ...] = ()  # its own Python children with the same rank (DataLoader workers)
    command: str = ""
    found_by: FoundBy = "pid"
    slurm_job_id: str | None = None
    slurm_step_id: str | None = None
    cuda_visible_devices: str | None = None
    master_addr: str | None = None
    master_port: int | None = None
    debug_files: DebugFiles = DebugFiles()
    env: dict[str, str] = {}  # the launch and NCCL/torch variables it runs with (not the whole environ)
    environ_truncated: bool = False
    # py-spy
    stack: PySpyDump | None = None
    py_spy_mode: DumpMode | None = None
    py_spy_s: float | None = None
    py_spy_raw: str | None = None  # py-spy's own JSON, when asked for (`raw=True`)
    samples: tuple[StackSample, ...] = ()  # the stack sampled over the window (sampling.py), the last is `stack`
    outputs: tuple[str, ...] = ()  # its stdout/stderr where they are regular files (a batch job's, `> rank1.log`)
    collective: str | None = None  # the c10d call its main thread is in (all_reduce, wait, ...)
    user_frame: str | None = None  # its main thread's innermost program frame: "fn (file.py:12)"


class SkippedProcess(msgspec.Struct, frozen=True, omit_defaults=True):
    """A process of the job that is not a rank, and why."""

    pid: int
    reason: Literal["not-python", "no-rank", "agent", "helper", "other-netns", "collector", "zombie"]
    command: str = ""


class RasEvidence(msgspec.Struct, frozen=True, omit_defaults=True):
    """NCCL RAS on this node: ok with the parsed status, absent (nothing listens) or error."""

    outcome: RasOutcome
    address: str
    reason: str | None = None
    status: NcclRasStatus | None = None
    transcript: str | None = None  # the exchange as read (client lines prefixed `>>> `)
    duration_s: float = 0.0


KernelKind = Literal["oom-kill", "xid", "link"]


class KernelLine(msgspec.Struct, frozen=True, omit_defaults=True):
    """One kernel log event in the job's window: an OOM kill, an Xid/SXid, an mlx5 link event."""

    kind: KernelKind
    text: str  # the line as read (clipped)
    line: int  # its number in the log as read (1-based)
    time: float | None = None  # epoch seconds
    pid: int | None = None  # the process it names (the OOM victim, the Xid's process)
    process: str = ""  # that process's name, where the line says
    job: str | None = None  # OOM kills: the Slurm job its memory cgroup names (the kernel's oom-kill: line)
    xid: int | None = None
    pci_bus_id: str = ""
    device: str = ""  # link events: the mlx5 device / interface the line names


class KernelLog(msgspec.Struct, frozen=True, omit_defaults=True):
    """The node's kernel log in the job's window, or why it was not read (`note`)."""

    since: float | None = None  # the window's start, epoch seconds (None: not known, not read)
    since_from: str = ""  # "argument", "process 1234", "SLURM_JOB_START_TIME"
    source: str | None = None  # "/dev/kmsg", "dmesg --time-format iso", ...; None: not read
    lines: int = 0  # kernel lines read
    events: tuple[KernelLine, ...] = ()
    dropped_before: int = 0  # events stamped before the window
    dropped_untimed: int = 0  # events with no time (cannot be placed in the window)
    dropped_over: int = 0  # events past MAX_KERNEL_EVENTS
    note: str | None = None  # why the log was not read, or what limits what it says
    duration_s: float = 0.0


class PortHolder(msgspec.Struct, frozen=True, omit_defaults=True):
    """The process listening on a launcher's rendezvous port on this node."""

    port: int
    pid: int | None = None  # None: a listener whose process could not be found (another user's, gone)
    command: str = ""
    is_launcher: bool = False  # a torchrun agent hosting its store: as it should be


class LauncherProcess(msgspec.Struct, frozen=True, omit_defaults=True):
    """A launcher agent (torchrun) on this node with no rank below it: ranks that never
    started. Where it waits (its stack) and who holds its rendezvous port say why."""

    pid: int
    host: str
    state: str
    command: str = ""
    endpoint: str = ""  # --rdzv-endpoint (or --master-addr:--master-port) as given
    port: int | None = None
    stack: PySpyDump | None = None
    waiting_in: str | None = None  # "fn (file.py:12)": its main thread's innermost rendezvous/store frame
    port_holder: PortHolder | None = None  # who listens on `port` here (None: nothing does)


class NodeCollection(msgspec.Struct, frozen=True, omit_defaults=True):
    """What one node holds of a job, right now."""

    host: str
    collected_at: str  # ISO 8601, UTC, when collection started
    duration_s: float = 0.0
    job_id: str | None = None
    pids: tuple[int, ...] = ()  # as asked
    ranks: tuple[RankProcess, ...] = ()
    ras: RasEvidence | None = None  # None: not asked
    errors: tuple[CollectError, ...] = ()
    skipped: tuple[SkippedProcess, ...] = ()
    py_spy: str | None = None  # the py-spy binary used (None: none found, or not asked)
    ptrace_scope: int | None = None  # kernel.yama.ptrace_scope where the file exists
    kernel: KernelLog | None = None  # None: not asked
    launchers: tuple[LauncherProcess, ...] = ()  # agents with no ranks (read only where no rank was found)

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    @property
    def by_rank(self) -> dict[int, RankProcess]:
        return {r.rank: r for r in self.ranks if r.rank is not None}


def decode_collection(data: bytes | str) -> NodeCollection:
    """A NodeCollection back from its JSON (msgspec.ValidationError / DecodeError on bad input)."""
    return typed.decode_json(data, NodeCollection)


# ------------------------------------------------------------------------------ /proc


class _Proc:
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


def _read_small(path: str, limit: int = 65536) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def read_stat(pid: int, proc: str = "/proc") -> tuple[str, int | None] | None:
    """(state letter, ppid) from /proc/PID/stat, None when unreadable."""
    data = _read_small(f"{proc}/{pid}/stat", 4096)
    if not data:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # the command name may hold spaces and ')'
    if not fields:
        return None
    state = fields[0].decode("ascii", errors="replace")[:1]
    ppid = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return state, ppid


def cgroup_job(text: str) -> str | None:
    """The Slurm job id a /proc/PID/cgroup names (`.../job_123/step_0/...`), else None."""
    for line in text.splitlines():
        m = _CGROUP_JOB.search(line.rpartition(":")[2])
        if m:
            return m.group(1)
    return None


def _inspect(pid: int, proc: str, with_environ: bool = True) -> _Proc | None:
    stat = read_stat(pid, proc)
    if stat is None:
        return None
    p = _Proc(pid)
    p.state, p.ppid = stat
    raw = _read_small(f"{proc}/{pid}/cmdline", MAX_CMDLINE) or b""
    p.command = " ".join(w.decode("utf-8", errors="replace") for w in raw.split(b"\0") if w)[:MAX_CMDLINE]
    try:
        p.exe = os.readlink(f"{proc}/{pid}/exe")
    except OSError:
        p.exe = ""
    cg = _read_small(f"{proc}/{pid}/cgroup", 16384)
    if cg:
        p.cgroup_job = cgroup_job(cg.decode("utf-8", errors="replace"))
    try:
        p.netns = os.readlink(f"{proc}/{pid}/ns/net")
    except OSError:
        p.netns = None
    if with_environ:
        p.environ, p.environ_error, p.environ_truncated = read_environ(pid, proc)
    return p


def is_python(p: _Proc) -> bool:
    """Its executable (or, where /proc/PID/exe is unreadable, argv[0]) is a python."""
    exe = p.exe.removesuffix(" (deleted)")
    name = os.path.basename(exe) if exe else os.path.basename(p.command.split(" ", 1)[0])
    return bool(_PYTHON.match(name))


def rank_of(env: Mapping[str, str]) -> tuple[int | None, str | None]:
    """(rank, the variable it came from): the first of RANK, OMPI_COMM_WORLD_RANK, PMI_RANK,
    PMIX_RANK, SLURM_PROCID that holds a whole number."""
    for name in _RANK_VARS:
        value = _int(env.get(name))
        if value is not None:
            return value, name
    return None, None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 12 else None


def _first_int(env: Mapping[str, str], names: Iterable[str]) -> int | None:
    for name in names:
        value = _int(env.get(name))
        if value is not None:
            return value
    return None


def kept_env(env: Mapping[str, str]) -> dict[str, str]:
    """The launch, NCCL and torch variables of a rank, never anything that looks like a secret."""
    out: dict[str, str] = {}
    for name in sorted(env):
        if len(out) >= MAX_KEPT_VARS:
            break
        if (name in _KEEP_NAMES or name.startswith(_KEEP_PREFIXES)) and not _SECRET.search(name):
            out[name] = env[name][:MAX_VALUE]
    return out


def debug_files(env: Mapping[str, str], pid: int, host: str, rank: int | None) -> DebugFiles:
    nccl = env.get("NCCL_DEBUG_FILE")
    if nccl:  # NCCL expands %h (its hostname up to the first dot) and %p (the pid)
        nccl = nccl.replace("%h", host.split(".", 1)[0]).replace("%p", str(pid))
    prefix = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    fr = f"{prefix}{rank}" if prefix and rank is not None else None
    return DebugFiles(nccl_debug=nccl or None, flight_recorder=fr, flight_recorder_prefix=prefix or None,
                      elastic_error=env.get("TORCHELASTIC_ERROR_FILE") or None)


def _ancestors(pid: int, proc: str) -> set[int]:
    out: set[int] = set()
    while pid > 1 and pid not in out:
        out.add(pid)
        stat = read_stat(pid, proc)
        if stat is None or stat[1] is None:
            break
        pid = stat[1]
    return out


def _all_pids(proc: str) -> list[int]:
    try:
        return sorted(int(e) for e in os.listdir(proc) if e.isdigit())
    except OSError:
        return []


# ------------------------------------------------------------------------------ discovery


class _Found:
    def __init__(self) -> None:
        self.skipped: list[SkippedProcess] = []
        self.errors: list[CollectError] = []

    def skip(self, p: _Proc, reason: str) -> None:
        if len(self.skipped) < MAX_SKIPPED:
            self.skipped.append(SkippedProcess(p.pid, reason, clip(p.command, 200)))  # type: ignore[arg-type]


def _descendants(root: int, children: Mapping[int, list[int]]) -> list[int]:
    out: list[int] = []
    seen: set[int] = set()  # a list's `in` would make a big tree quadratic
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in seen:
                seen.add(c)
                out.append(c)
                todo.append(c)
    return out


def _children_map(procs: Iterable[_Proc]) -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for p in procs:
        if p.ppid is not None:
            children.setdefault(p.ppid, []).append(p.pid)
    return children


def _own_netns(proc: str) -> str | None:
    try:
        return os.readlink(f"{proc}/self/ns/net")
    except OSError:
        return None


def _own_lineage(proc: str) -> set[int]:
    """This process and its ancestors, where `proc` is this machine's /proc (else none)."""
    return _ancestors(os.getpid(), proc) if proc == "/proc" else set()


def _in_other_netns(p: _Proc, own: str | None) -> bool:
    """Known to live in another network namespace than `own` (an unreadable one is not)."""
    return bool(own and p.netns and p.netns != own)


def _has_rank(env: Mapping[str, str] | None) -> bool:
    return env is not None and rank_of(env)[0] is not None


def _runs_agent(pid: int, proc: str = "/proc") -> bool:
    """The process `pid` runs a torchrun (its command line names one)."""
    parent_cmd = (_read_small(f"{proc}/{pid}/cmdline", MAX_CMDLINE) or b"").replace(b"\0", b" ")
    return any(a.encode() in parent_cmd for a in _AGENT_CMD)


Candidates = dict[int, tuple[_Proc, FoundBy]]
# (ranks with how each was found, skipped processes, errors, {rank pid: agent pid}, {rank pid: helper pids})
FoundRanks = tuple[list[tuple[_Proc, FoundBy]], list[SkippedProcess], list[CollectError], dict[int, int],
                   dict[int, list[int]]]


@dataclass(frozen=True)
class _Collector:
    """This collector as the search sees it: its own processes, Slurm step and network
    namespace are left out of what it finds."""

    pid: int
    lineage: set[int]
    step: str | None
    netns: str | None


class _ProcessTree:
    """The node's process tree, read once when first needed."""

    def __init__(self, proc: str) -> None:
        self.proc = proc
        self._children: dict[int, list[int]] | None = None

    def children(self) -> dict[int, list[int]]:
        if self._children is None:
            self._children = _children_map(
                q for q in (_inspect(x, self.proc, with_environ=False) for x in _all_pids(self.proc)) if q)
        return self._children


def find_ranks(*, job_id: str | int | None = None, pids: Sequence[int] | None = None, proc: str = "/proc",
               same_netns: bool = True) -> FoundRanks:
    """The rank processes of a job on this node (see the module's docstring).

    Returns (ranks with how each was found, skipped processes, errors, {rank pid: agent pid},
    {rank pid: helper pids}).
    """
    found = _Found()
    job = str(job_id) if job_id is not None else None
    me = _this_collector(job, proc)
    if pids:
        candidates = _candidates_by_pid(pids, proc, found)
    elif job is not None:
        candidates = _candidates_of_job(job, proc, found)
    else:
        raise ValueError("give job_id or pids")
    kept = _kept_ranks(candidates, found, me, by_pid=bool(pids), same_netns=same_netns)
    agents, helpers, dropped = _agents_and_helpers(kept, found)
    _add_agents_outside_steps(kept, dropped, agents, proc)
    ranks = [(p, how) for pid, (p, how) in kept.items() if pid not in dropped]
    return ranks, found.skipped, found.errors, agents, helpers


def _this_collector(job: str | None, proc: str) -> _Collector:
    """This collector, with its own step when it runs inside the job (srun --overlap --jobid)."""
    own_env = os.environ
    step = own_env.get("SLURM_STEP_ID") if job is not None and own_env.get("SLURM_JOB_ID") == job else None
    return _Collector(pid=os.getpid(), lineage=_own_lineage(proc), step=step, netns=_own_netns(proc))


def _candidates_by_pid(pids: Sequence[int], proc: str, found: _Found) -> Candidates:
    """The given processes; one without a rank (a torchrun agent, a shell) stands for the
    rank processes below it where there are any."""
    candidates: Candidates = {}
    tree = _ProcessTree(proc)
    for pid, p in _given_processes(pids, proc, found).items():
        if p.environ is None or _has_rank(p.environ):
            candidates[pid] = (p, "pid")
            continue
        ranked = _ranks_below(pid, proc, tree)
        if ranked:
            found.skip(p, "agent")
            for q in ranked:
                candidates.setdefault(q.pid, (q, "pid"))
        else:
            candidates[pid] = (p, "pid")
    return candidates


def _given_processes(pids: Sequence[int], proc: str, found: _Found) -> dict[int, _Proc]:
    """The given pids that exist (each once, in the order given); the others are errors."""
    procs: dict[int, _Proc] = {}
    for pid in dict.fromkeys(int(p) for p in pids):
        p = _inspect(pid, proc)
        if p is None:
            found.errors.append(CollectError("process-gone", f"no process {pid} on this node", pid=pid))
            continue
        procs[pid] = p
    return procs


def _ranks_below(pid: int, proc: str, tree: _ProcessTree) -> list[_Proc]:
    """The Python processes with a rank below `pid`."""
    below = [q for q in (_inspect(d, proc) for d in _descendants(pid, tree.children())) if q]
    return [q for q in below if q.environ and _has_rank(q.environ) and is_python(q)]


def _candidates_of_job(job: str, proc: str, found: _Found) -> Candidates:
    """Every process of job `job` here by its cgroup or its environ (not this collector's
    lineage, not init, kthreadd or kernel threads); Python processes whose environ is
    refused are an error (a rank may hide there)."""
    every_pid = _all_pids(proc)
    if not every_pid:
        found.errors.append(CollectError("proc-unreadable", f"cannot list {proc}"))
    mine = _own_lineage(proc)
    candidates: Candidates = {}
    hidden: list[int] = []  # Python processes whose environ we may not read (a rank may hide there)
    for pid in every_pid:
        if pid in mine or pid <= 2:  # init and kthreadd are never a job's
            continue
        p = _inspect(pid, proc, with_environ=False)
        if p is None or p.ppid == 2:  # kernel threads
            continue
        how = _job_member(p, job, proc)
        if how is not None:
            candidates[pid] = (p, how)
        elif _environ_refused(p):
            hidden.append(pid)
    if hidden:
        found.errors.append(_hidden_error(hidden, job))
    return candidates


def _job_member(p: _Proc, job: str, proc: str) -> FoundBy | None:
    """How `p` is known to be job `job`'s (its cgroup, else its environ, read here), None when it is not."""
    if p.cgroup_job is not None:  # Slurm's cgroup says whose it is
        if p.cgroup_job != job:
            return None
        p.environ, p.environ_error, p.environ_truncated = read_environ(p.pid, proc)
        return "cgroup"
    p.environ, p.environ_error, p.environ_truncated = read_environ(p.pid, proc)
    if p.environ is not None and any(p.environ.get(v) == job for v in _JOB_VARS):
        return "environ"
    return None


def _environ_refused(p: _Proc) -> bool:
    """A Python process whose environ we were refused (permission)."""
    return p.environ is None and p.environ_error is not None and "permission" in p.environ_error and is_python(p)


def _hidden_error(hidden: list[int], job: str) -> CollectError:
    shown = f"{', '.join(map(str, hidden[:10]))}{', ...' if len(hidden) > 10 else ''}"
    return CollectError(
        "environ-unreadable", f"cannot read the environ of {len(hidden)} Python process(es) ({shown}): ranks of "
        f"job {job} may hide there", fix=PTRACE_FIX)


def _kept_ranks(candidates: Candidates, found: _Found, me: _Collector, *, by_pid: bool,
                same_netns: bool) -> Candidates:
    """The candidates that may be ranks; the others skipped with their reason."""
    kept: Candidates = {}
    for pid, (p, how) in candidates.items():
        reason = _skip_reason(p, me, by_pid=by_pid, same_netns=same_netns)
        if reason is not None:
            found.skip(p, reason)
        else:
            kept[pid] = (p, how)
    return kept


def _skip_reason(p: _Proc, me: _Collector, *, by_pid: bool, same_netns: bool) -> str | None:
    """Why a candidate is not a rank, None when it may be one. A pid named by hand is kept
    outside this collector's step and netns, and without a rank (a one-process job has none)."""
    env = p.environ or {}
    if p.pid == me.pid or p.pid in me.lineage or (me.step is not None and env.get("SLURM_STEP_ID") == me.step
                                                  and not by_pid):
        return "collector"
    if p.state in ("Z", "X"):
        return "zombie"
    if same_netns and _in_other_netns(p, me.netns) and not by_pid:
        return "other-netns"
    if not is_python(p):
        return "not-python"
    if p.environ is not None and rank_of(env)[0] is None and not by_pid:
        return "no-rank"
    return None


def _agents_and_helpers(kept: Candidates, found: _Found) -> tuple[dict[int, int], dict[int, list[int]], set[int]]:
    """A kept process whose parent is kept too: with the parent's rank, a worker of that rank
    (DataLoader, compile pool: a helper of the topmost process of that rank); with another
    rank, the parent launched ranks (torchrun's agent under srun). Returns ({rank pid: agent
    pid}, {rank pid: helper pids}, the pids that are not ranks)."""
    agents: dict[int, int] = {}
    helpers: dict[int, list[int]] = {}
    dropped: set[int] = set()
    for pid, (p, _) in kept.items():
        parent = kept[p.ppid][0] if p.ppid is not None and p.ppid in kept else None
        if parent is None:
            continue
        mine_rank = rank_of(p.environ or {})
        if mine_rank == rank_of(parent.environ or {}):
            helpers.setdefault(_top_of_rank(parent, kept, mine_rank).pid, []).append(pid)
            dropped.add(pid)
            found.skip(p, "helper")
        else:
            agents[pid] = parent.pid
            if parent.pid not in dropped:
                dropped.add(parent.pid)
                found.skip(parent, "agent")
    return agents, helpers, dropped


def _top_of_rank(p: _Proc, kept: Candidates,
                 rank: tuple[int | None, str | None]) -> _Proc:
    """The topmost kept ancestor-or-self of `p` that carries the same rank."""
    top = p
    while top.ppid in kept and rank_of(kept[top.ppid][0].environ or {}) == rank:
        top = kept[top.ppid][0]
    return top


def _add_agents_outside_steps(kept: Candidates, dropped: set[int], agents: dict[int, int], proc: str) -> None:
    """The agent of a torchrun outside any job step: a rank's parent whose command is torchrun."""
    for pid, (p, _) in kept.items():
        if pid not in dropped and pid not in agents and p.ppid is not None and _runs_agent(p.ppid, proc):
            agents[pid] = p.ppid



# ------------------------------------------------------------------------------ py-spy


def resolve_py_spy(py_spy: str | None) -> str | None:
    """The py-spy to run: a path, or a name looked up next to this Python (hc's venv), then on PATH."""
    if not py_spy:
        return None
    if os.sep in py_spy:
        return py_spy if os.access(py_spy, os.X_OK) else None
    beside = Path(sys.executable).parent / py_spy  # the one installed with hc (its venv) first
    if os.access(beside, os.X_OK) and beside.is_file():
        return str(beside)
    return shutil.which(py_spy)


def _main_thread(dump: PySpyDump, pid: int) -> PySpyThread | None:
    threads = dump.threads
    return next((t for t in threads if t.os_thread_id == pid), None) \
        or next((t for t in threads if t.name == "MainThread"), None) \
        or (threads[0] if threads else None)


class _Dump(msgspec.Struct):
    stack: PySpyDump | None = None
    mode: DumpMode | None = None
    seconds: float | None = None
    raw: str | None = None
    error: CollectError | None = None


def dump_mode(state: str) -> DumpMode:
    """How to dump a process in this state: stopped, traced or D-state ones without ptrace."""
    return "nonblocking" if state in ("T", "t", "D") else "blocking"


def py_spy_argv(py_spy: str, pid: int, mode: DumpMode, *, native: bool, with_locals: bool) -> list[str]:
    """The py-spy dump command line."""
    argv = [py_spy, "dump", "--json", "--pid", str(pid)]
    if native:
        argv.append("--native")
    if with_locals:
        argv.append("--locals")
    if mode == "nonblocking":
        argv.append("--nonblocking")
    return argv


def dump_stack(py_spy: str, pid: int, state: str, *, timeout_s: float, native: bool = False,
               keep_raw: bool = False, rank: int | None = None, with_locals: bool = False) -> _Dump:
    """`py-spy dump --json --pid PID` (`--nonblocking` for a stopped or D-state process;
    `--locals` with_locals: sampling.py reduces them at once)."""
    mode = dump_mode(state)
    argv = py_spy_argv(py_spy, pid, mode, native=native, with_locals=with_locals)
    r = run_command(argv, timeout_s=timeout_s, env={**os.environ, "RUST_BACKTRACE": "0"})
    seconds = round(r.duration_s, 3)
    error = _run_error(r, py_spy, pid, state, timeout_s, rank)
    if error is not None:
        return _Dump(mode=mode, seconds=seconds, error=error)
    out = r.stdout[:MAX_PY_SPY_OUTPUT]
    if not (r.returncode == 0 and out.strip()):
        return _Dump(mode=mode, seconds=seconds, error=py_spy_error(r.stderr or r.stdout, pid, rank,
                                                                         r.returncode))
    raw = out if keep_raw else None
    try:
        dump = parse_py_spy(out)
    except ParseError as exc:
        return _Dump(mode=mode, seconds=seconds, raw=raw, error=CollectError(
            "py-spy-failed", f"py-spy output for pid {pid} unreadable: {exc}", pid=pid, rank=rank))
    return _Dump(stack=dump, mode=mode, seconds=seconds, raw=raw)


def _run_error(r: CommandResult, py_spy: str, pid: int, state: str, timeout_s: float,
               rank: int | None) -> CollectError | None:
    """Why py-spy did not run to its end (missing, could not start, timed out), None when it did."""
    if r.not_found:
        return CollectError("py-spy-missing", f"{py_spy}: not found", fix=PY_SPY_FIX, pid=pid, rank=rank)
    if r.error:
        return CollectError("py-spy-failed", f"cannot run {py_spy}: {r.error}", fix=PY_SPY_FIX, pid=pid, rank=rank)
    if r.timed_out:
        return CollectError(
            "py-spy-timeout", f"py-spy dump of pid {pid} (state {state}) took more than {timeout_s:g} s",
            fix="retry with a longer --timeout, or dump it by hand with py-spy dump --nonblocking",
            pid=pid, rank=rank)
    return None


def py_spy_error(text: str, pid: int, rank: int | None = None, returncode: int | None = None) -> CollectError:
    """py-spy's complaint (stderr) as an error fact naming the fix."""
    try:
        err = parse_py_spy(text[:MAX_PY_SPY_OUTPUT]).error
    except ParseError:
        err = None
    if err is None:
        return CollectError("py-spy-failed", f"py-spy failed on pid {pid} (exit {returncode}): "
                            f"{clip(text.strip(), 400) or 'no message'}", pid=pid, rank=rank)
    said = "; ".join([err.message, *err.reasons])
    if err.kind == "permission":
        scope = ptrace_scope()
        where = f" (kernel.yama.ptrace_scope is {scope})" if scope is not None else ""
        return CollectError("ptrace-denied", f"py-spy was refused ptrace on pid {pid}{where}: {clip(said, 300)}",
                            fix=PTRACE_FIX, pid=pid, rank=rank)
    if err.kind == "no-process":
        return CollectError("process-gone", f"pid {pid} ended before py-spy read it: {clip(said, 300)}",
                            pid=pid, rank=rank)
    if err.kind == "no-python":
        return CollectError("py-spy-failed", f"py-spy found no Python in pid {pid}: {clip(said, 300)}",
                            fix="a Python newer than this py-spy knows? upgrade py-spy", pid=pid, rank=rank)
    return CollectError("py-spy-failed", f"py-spy failed on pid {pid}: {clip(said, 400)}", pid=pid, rank=rank)


def ptrace_scope(path: str = "/proc/sys/kernel/yama/ptrace_scope") -> int | None:
    data = _read_small(path, 16)
    return _int(data.decode("ascii", errors="replace")) if data else None


# ------------------------------------------------------------------------------ RAS


def ask_ras(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, timeout_s: float = DEFAULT_RAS_TIMEOUT_S,
            keep_transcript: bool = True) -> RasEvidence:
    """NCCL RAS's verbose status, parsed; refused = absent, not an error."""
    x = query_ras(host, port, timeout_s=timeout_s)
    status = None
    reason = x.reason
    outcome = x.outcome
    if x.transcript and outcome != "absent":
        try:
            status = parse_nccl_ras(x.transcript)
        except ParseError as exc:
            outcome, reason = "error", f"unreadable RAS reply: {exc}"
    return RasEvidence(outcome, x.address, reason, status, x.transcript if keep_transcript and x.transcript else None,
                       x.duration_s)


# ------------------------------------------------------------------------------ kernel log

KERNEL_FIX = ("run the collector as root or with CAP_SYSLOG (kernel.dmesg_restrict=1 refuses others /dev/kmsg "
              "and dmesg), or add its user to the systemd-journal group")
# mm/oom_kill.c: "%s: Killed process %d (%s) total-vm:..." with %s "Out of memory" (and
# " (oom_kill_allocating_task)") or "Memory cgroup out of memory"; kernels before 4.19 also
# print the bare "Killed process N (comm)" after "Kill process N (comm) score S or sacrifice child"
_OOM_KILLED = re.compile(r"Killed process (?P<pid>\d{1,10}) \((?P<name>[^)]{0,64})\)")
# 4.19+: "oom-kill:constraint=...,oom_memcg=...,task_memcg=/slurm/uid_0/job_5/step_0/task_0,task=python3,pid=1234,"
_OOM_INFO = re.compile(r"oom-kill:\S{0,2048}?task_memcg=(?P<memcg>[^,\s]{0,1024})\S{0,512}?,pid=(?P<pid>\d{1,10})")
_LINK_WORDS = re.compile(r"\blink (?:is )?(?:down|up)\b|\bport module event\b|\bport (?:\d{1,3} )?state\b"
                         r"|\bphysical port state\b|\bstate change\b|\bport \d{1,3} change\b", re.I)
_LINK_DEVICE = re.compile(r"mlx5_core (?P<pci>[0-9a-fA-F:.]{7,16})(?: (?P<ifname>[^\s:]{1,32}))?:"
                          r"|\b(?P<ib>mlx5_\d{1,3})\b")
_KERNEL_WORDS = ("Killed process", "oom-kill:", "NVRM", "SXid", "mlx5")


def machine_boot_time(proc: str = "/proc") -> float | None:
    """This boot's start (epoch seconds) from {proc}/stat's btime, None when unreadable."""
    from healthcheck.parsers.procfs import parse_boot_time

    data = _read_small(f"{proc}/stat", 1 << 20)
    return parse_boot_time(data.decode("ascii", errors="replace")) if data else None


def process_start(pid: int, proc: str = "/proc", boot: float | None = None) -> float | None:
    """When a process started (epoch seconds): /proc/PID/stat's starttime (clock ticks after
    boot) + the boot time; None when either is unreadable."""
    boot = machine_boot_time(proc) if boot is None else boot
    data = _read_small(f"{proc}/{pid}/stat", 4096)
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


def kernel_sources(timeout_s: float = KERNEL_TIMEOUT_S, since: float | None = None, root: str = "/") -> list[Source]:
    """hc's kernel-log sources, in order: /dev/kmsg, `dmesg --time-format iso`, plain dmesg,
    the journal (from `since` only, so a long boot's journal is not read whole)."""
    from healthcheck.probes.gpu import _kmsg_source  # the gpu.xid probe's own /dev/kmsg reader

    ctx = ProbeContext(runner=LocalRunner(), root=Path(root), timeout_s=timeout_s)
    journal: tuple[str, ...] = ("journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q")
    if since is not None:
        journal += ("--since", f"@{int(since)}")
    return [_kmsg_source(ctx), command_source(ctx, ("dmesg", "--time-format", "iso")),
            command_source(ctx, ("dmesg",)), command_source(ctx, journal)]


def kernel_events(text: str, since: float, *, boot: float | None = None, year: int | None = None,
                  max_events: int = MAX_KERNEL_EVENTS) -> tuple[list[KernelLine], int, int, int]:
    """The OOM kills, Xid/SXid and mlx5 link events of a kernel log stamped at or after
    `since` (less KERNEL_SLACK_S): (events in log order, dropped before the window, dropped
    without a time, dropped past max_events)."""
    lines = text[:MAX_KERNEL_TEXT].split("\n")
    found: list[tuple[int, KernelLine]] = []
    nvidia: list[tuple[int, str]] = []
    oom_job: dict[int, str] = {}
    for number, raw in enumerate(lines, 1):
        if not any(w in raw for w in _KERNEL_WORDS):
            continue
        line = raw[:4096]
        if "NVRM" in line or "SXid" in line:
            nvidia.append((number, raw))
            continue
        stamp, body = split_prefix(line, boot, year)
        m = _OOM_INFO.search(body)
        if m:
            job = cgroup_job(m.group("memcg"))
            if job is not None:
                oom_job[int(m.group("pid"))] = job
            continue
        m = _OOM_KILLED.search(body)
        if m:
            pid = int(m.group("pid"))
            found.append((number, KernelLine("oom-kill", clip(body.strip(), 300), number, stamp.time, pid=pid,
                                             process=m.group("name"), job=oom_job.get(pid))))
            continue
        if "mlx5" in body and _LINK_WORDS.search(body):
            d = _LINK_DEVICE.search(body)
            device = (d.group("ib") or " ".join(x for x in (d.group("pci"), d.group("ifname")) if x)) if d else ""
            found.append((number, KernelLine("link", clip(body.strip(), 300), number, stamp.time, device=device)))
    if nvidia:
        found.extend(_nvidia_events(nvidia, boot, year))
    found.sort(key=lambda x: x[0])
    kept: list[KernelLine] = []
    before = untimed = over = 0
    for _, e in found:
        if e.time is None:
            untimed += 1
        elif e.time < since - KERNEL_SLACK_S:
            before += 1
        elif len(kept) >= max_events:
            over += 1
        else:
            kept.append(e)
    return kept, before, untimed, over


def _nvidia_events(nvidia: list[tuple[int, str]], boot: float | None, year: int | None) \
        -> list[tuple[int, KernelLine]]:
    try:
        log = parse_kernel_log("\n".join(raw for _, raw in nvidia), boot_time=boot, year=year)
    except ParseError:
        return []
    numbers: dict[str, list[int]] = {}
    for number, raw in nvidia:
        numbers.setdefault(raw, []).append(number)

    def number_of(raw: str) -> int:
        left = numbers.get(raw)
        return left.pop(0) if left else 0

    out: list[tuple[int, KernelLine]] = []
    for x in log.xids:
        n = number_of(x.line)
        out.append((n, KernelLine("xid", clip(split_prefix(x.line, None, None)[1].strip(), 300), n, x.time,
                                  pid=x.pid, process=x.process or "", xid=x.code, pci_bus_id=x.pci_bus_id or "")))
    seen: set[tuple[int, str | None]] = set()
    for sx in log.sxids:
        n = number_of(sx.line)
        if sx.severity is None and (sx.code, sx.pci_bus_id) in seen:
            continue  # its "Severity ..." / "Data {...}" lines repeat the event
        seen.add((sx.code, sx.pci_bus_id))
        out.append((n, KernelLine("xid", clip(split_prefix(sx.line, None, None)[1].strip(), 300), n, sx.time,
                                  xid=sx.code, pci_bus_id=sx.pci_bus_id or "", device=sx.switch or "")))
    for f in log.faults:
        n = number_of(f.line)
        out.append((n, KernelLine("xid", clip(split_prefix(f.line, None, None)[1].strip(), 300), n, f.time,
                                  pci_bus_id=f.pci_bus_id or "")))
    return out


def read_kernel(since: float | None, *, since_from: str = "", sources: Sequence[Source] | None = None,
                timeout_s: float = KERNEL_TIMEOUT_S, boot: float | None = None, year: int | None = None) -> KernelLog:
    """The node's kernel events in the window from `since` (see the module's docstring). A
    log no source could read, or no window, is a KernelLog with `note`, never an exception."""
    start = time.monotonic()
    if since is not None and not (math.isfinite(since) and 0 <= since <= MAX_SINCE):
        return KernelLog(note=f"kernel log not read: since={since!r} is not a usable time")
    if since is None:
        return KernelLog(note="kernel log not read: the job's start is not known on this node (no process of it "
                              "here); give --since")
    srcs = list(sources) if sources is not None else kernel_sources(timeout_s, since)
    try:
        text, name, count = read_kernel_log(srcs)
    except (ProbeError, OSError) as exc:
        why = exc.message if isinstance(exc, ProbeError) else str(exc)
        return KernelLog(since=since, since_from=since_from, note=f"kernel log unreadable ({clip(why, 600)}); "
                         f"fix: {KERNEL_FIX}", duration_s=round(time.monotonic() - start, 3))
    if boot is None:  # raw "[uptime]" stamps (/dev/kmsg, plain dmesg) need it
        boot = machine_boot_time()
    events, before, untimed, over = kernel_events(text, since, boot=boot, year=year)
    notes = []
    if untimed:
        notes.append(f"{untimed} event(s) without a time could not be placed in the job's window: left out")
    if over:
        notes.append(f"{over} more event(s) past the first {MAX_KERNEL_EVENTS}: left out")
    if len(text) > MAX_KERNEL_TEXT:
        notes.append(f"only the first {MAX_KERNEL_TEXT} characters of the kernel log were read")
    return KernelLog(since=since, since_from=since_from, source=name, lines=count, events=tuple(events),
                     dropped_before=before, dropped_untimed=untimed, dropped_over=over,
                     note="; ".join(notes) or None, duration_s=round(time.monotonic() - start, 3))


def job_window(pids: Iterable[int], *, job_id: str | None, proc: str = "/proc",
               env: Mapping[str, str] | None = None) -> tuple[float | None, str]:
    """The job's start on this node: the earliest start of its processes here, else
    SLURM_JOB_START_TIME where this collector runs inside the job; (None, "") when neither says."""
    boot = machine_boot_time(proc)
    best: tuple[float, int] | None = None
    for pid in dict.fromkeys(pids):
        t = process_start(pid, proc, boot) if boot is not None else None
        if t is not None and (best is None or t < best[0]):
            best = (t, pid)
    if best is not None:
        return best[0], f"process {best[1]}"
    env = os.environ if env is None else env
    start = _int(env.get("SLURM_JOB_START_TIME"))
    if start and job_id is not None and env.get("SLURM_JOB_ID") == str(job_id):
        return float(start), "SLURM_JOB_START_TIME"
    return None, ""


# ------------------------------------------------------------------------------ the node


def collect_node(*, job_id: str | int | None = None, pids: Sequence[int] | None = None,
                 py_spy: str | None = "py-spy", native: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S,
                 per_rank_timeout_s: float = DEFAULT_PER_RANK_TIMEOUT_S, parallel: int = DEFAULT_PARALLEL,
                 ras: bool = False, ras_host: str = DEFAULT_HOST, ras_port: int = DEFAULT_PORT,
                 raw: bool = False, same_netns: bool = True, host: str | None = None,
                 proc: str = "/proc", kernel: bool = True, since: float | None = None,
                 kernel_sources: Sequence[Source] | None = None,
                 sampling: SamplingSpec | None = None) -> NodeCollection:
    """Every rank of job `job_id` (or the processes `pids`) on this node, with its stack.

    py_spy: the py-spy binary (name or path; None: no stacks). timeout_s bounds the whole
    collection; each py-spy gets per_rank_timeout_s (less when the node's time runs out),
    `parallel` of them at once. ras: also ask NCCL RAS at ras_host:ras_port. raw: keep
    py-spy's JSON text per rank (fixtures, bug reports). kernel: also read the node's
    kernel log from the job's start (`since`, epoch seconds, else the earliest start of
    the job's processes here) through `kernel_sources` (default: kernel_sources()).
    sampling: how many times, over how long, every rank's stack is dumped (sampling.py).
    """
    if (job_id is None) == (not pids):
        raise ValueError("give exactly one of job_id and pids")
    start = time.monotonic()
    deadline = start + max(1.0, timeout_s)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
    host = host or socket.gethostname()
    job = str(job_id) if job_id is not None else None
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=max(1, parallel) + (1 if ras else 0)
                                                 + (1 if kernel else 0), thread_name_prefix="hc-collect")
    ras_future = pool.submit(ask_ras, ras_host, ras_port, min(DEFAULT_RAS_TIMEOUT_S, timeout_s)) if ras else None
    try:
        found, skipped, find_errors, agents, helpers = find_ranks(job_id=job_id, pids=pids, proc=proc,
                                                                  same_netns=same_netns)
        errors = list(find_errors)
        kernel_future = None
        if kernel:
            since, since_from = _window_start(since, found, skipped, agents, job, proc)
            kernel_future = pool.submit(read_kernel, since, since_from=since_from, sources=kernel_sources,
                                        timeout_s=max(0.5, min(KERNEL_TIMEOUT_S, deadline - time.monotonic())))
        binary = resolve_py_spy(py_spy)
        if py_spy and binary is None and found:
            errors.append(CollectError("py-spy-missing", f"py-spy not found (looked for {py_spy!r} on PATH and next "
                                       f"to {sys.executable}): no stacks from {host}", fix=PY_SPY_FIX))
        sampled = _sample(binary, found, sampling or SamplingSpec(), pool, deadline, per_rank_timeout_s, native,
                          raw, proc) if binary else Sampled()
        ranks = []
        for p, how in found:
            dump = sampled.last.get(p.pid)
            errors.extend(_rank_errors(p, dump, stacks_wanted=bool(binary), timeout_s=timeout_s))
            ranks.append(_rank_process(p, how, host, agents.get(p.pid), helpers.get(p.pid, []), dump,
                                       tuple(sampled.samples.get(p.pid, ())), output_files(p.pid, proc)))
        if not ranks and not any(e.kind == "process-gone" for e in errors):
            what = f"job {job_id}" if job_id is not None else f"pids {', '.join(map(str, pids or ()))}"
            errors.append(CollectError("no-ranks", f"no Python rank process of {what} on {host}"))
        ras_evidence = _ras_answer(ras_future, deadline, f"{ras_host}:{ras_port}") if ras_future is not None else None
        if ras_evidence is not None and ras_evidence.outcome == "error":
            errors.append(CollectError("ras-error", f"NCCL RAS at {ras_evidence.address}: {ras_evidence.reason}"))
        kernel_log = _kernel_answer(kernel_future, deadline, since) if kernel_future is not None else None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    ranks.sort(key=lambda r: (r.rank is None, r.rank if r.rank is not None else 0, r.pid))
    return NodeCollection(
        host=host, collected_at=started, duration_s=round(time.monotonic() - start, 3),
        job_id=job, pids=tuple(int(p) for p in pids or ()),
        ranks=tuple(ranks), ras=ras_evidence, errors=tuple(errors), skipped=tuple(skipped),
        py_spy=binary, ptrace_scope=ptrace_scope(), kernel=kernel_log)


def _window_start(since: float | None, found: list[tuple[_Proc, FoundBy]], skipped: list[SkippedProcess],
                  agents: dict[int, int], job: str | None, proc: str) -> tuple[float | None, str]:
    """Where the kernel log's window starts: `since` as given, else the earliest start of the
    job's processes here (its ranks, their agents, the job's other processes)."""
    if since is not None:
        return since, "argument"
    job_pids = [p.pid for p, _ in found] + list(agents.values()) + \
        [s.pid for s in skipped if s.reason not in ("collector", "other-netns")]
    return job_window(job_pids, job_id=job, proc=proc)


def _rank_errors(p: _Proc, dump: _Dump | None, *, stacks_wanted: bool, timeout_s: float) \
        -> list[CollectError]:
    """What is missing of one rank: its stack (the node's time ran out, or py-spy's error), its environ."""
    errors = []
    if stacks_wanted and dump is None and p.state not in ("Z", "X"):
        errors.append(CollectError("deadline", f"no stack of pid {p.pid}: the node's {timeout_s:g} s "
                                   "ran out first", fix="raise --timeout", pid=p.pid))
    if dump is not None and dump.error is not None:
        errors.append(dump.error)
    if p.environ is None and p.environ_error:
        errors.append(CollectError("environ-unreadable", f"cannot read /proc/{p.pid}/environ "
                                   f"({p.environ_error}): no rank or debug files for it",
                                   fix=PTRACE_FIX, pid=p.pid))
    return errors


def _ras_answer(future: concurrent.futures.Future[RasEvidence], deadline: float, address: str) -> RasEvidence:
    """The RAS query's answer, waited for until the node's deadline (and a second)."""
    try:
        return future.result(timeout=max(0.1, deadline - time.monotonic()) + 1.0)
    except concurrent.futures.TimeoutError:
        return RasEvidence("error", address, "RAS query outlived the node's time")


def _kernel_answer(future: concurrent.futures.Future[KernelLog], deadline: float, since: float | None) -> KernelLog:
    """The kernel log's reading, waited for until the node's deadline (and a second)."""
    try:
        return future.result(timeout=max(0.1, deadline - time.monotonic()) + 1.0)
    except concurrent.futures.TimeoutError:
        return KernelLog(since=since, note="kernel log not read: the node's time ran out first")


def _sample(binary: str, found: list[tuple[_Proc, FoundBy]], spec: SamplingSpec,
            pool: concurrent.futures.Executor, deadline: float, per_rank_s: float, native: bool, raw: bool,
            proc: str) -> Sampled:
    """Every found rank's stack, sampled (sampling.py); with --locals, and without where
    py-spy cannot read a process's locals."""
    ranks = {p.pid: rank_of(p.environ or {})[0] for p, _ in found}

    def dump(pid: int, state: str, timeout_s: float) -> _Dump:
        d = dump_stack(binary, pid, state, timeout_s=timeout_s, native=native, keep_raw=raw, rank=ranks.get(pid),
                       with_locals=True)
        if d.error is not None and d.error.kind == "py-spy-failed":
            d = dump_stack(binary, pid, state, timeout_s=timeout_s, native=native, keep_raw=raw,
                           rank=ranks.get(pid))
        return d

    return sample_ranks([(p.pid, p.state) for p, _ in found], dump, spec, pool=pool,
                        deadline=deadline - MARGIN_S, per_dump_s=per_rank_s, proc=proc)


def _frame_text(frame: PySpyFrame | None) -> str | None:
    """A frame as "fn (file.py:12)" (no line: "fn (file.py)")."""
    if frame is None:
        return None
    return f"{frame.name} ({frame.file}:{frame.line})" if frame.line is not None else f"{frame.name} ({frame.file})"


def _rank_process(p: _Proc, how: FoundBy, host: str, agent: int | None, helpers: list[int],
                  dump: _Dump | None, samples: tuple[StackSample, ...] = (),
                  outputs: tuple[str, ...] = ()) -> RankProcess:
    env = p.environ or {}
    rank, source = rank_of(env)
    stack = dump.stack if dump else None
    main = _main_thread(stack, p.pid) if stack else None
    return RankProcess(
        pid=p.pid, host=host, state=p.state, state_name=_STATE_NAMES.get(p.state, "unknown"),
        rank=rank, local_rank=_first_int(env, _LOCAL_VARS), world_size=_first_int(env, _WORLD_VARS),
        rank_source=source, ppid=p.ppid, agent_pid=agent, helpers=tuple(sorted(helpers)),
        command=clip(p.command, 1000), found_by=how,
        slurm_job_id=next((env[v] for v in _JOB_VARS if v in env), None),
        slurm_step_id=env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID"),
        cuda_visible_devices=env.get("CUDA_VISIBLE_DEVICES"), master_addr=env.get("MASTER_ADDR"),
        master_port=_int(env.get("MASTER_PORT")), debug_files=debug_files(env, p.pid, host, rank),
        env=kept_env(env), environ_truncated=p.environ_truncated,
        stack=stack, py_spy_mode=dump.mode if dump else None, py_spy_s=dump.seconds if dump else None,
        py_spy_raw=dump.raw if dump else None, samples=samples, outputs=outputs,
        collective=main.collective if main else None,
        user_frame=_frame_text(main.user_frame if main else None),
    )


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


def local_rank_pids(proc: str = "/proc", same_netns: bool = True) -> list[int]:
    """Every rank process on this machine (`hc diagnose pids --local`): Python processes with
    a rank variable (RANK, SLURM_PROCID, ...), in this collector's network namespace, not
    this collector or its ancestors. A rank's own workers (same rank, below it) are among
    them; collect_node lists them as its helpers."""
    mine = _ancestors(os.getpid(), proc) if proc == "/proc" else set()
    try:
        own_netns: str | None = os.readlink(f"{proc}/self/ns/net")
    except OSError:
        own_netns = None
    out = []
    for pid in _all_pids(proc):
        if pid in mine or pid <= 2:
            continue
        p = _inspect(pid, proc, with_environ=False)
        if p is None or p.ppid == 2 or p.state in ("Z", "X") or not is_python(p):
            continue
        if same_netns and own_netns and p.netns and p.netns != own_netns:
            continue
        env, _, _ = read_environ(pid, proc)
        if env is not None and rank_of(env)[0] is not None:
            out.append(pid)
    return out


# ------------------------------------------------------------------------------ launchers without ranks

_ENDPOINT_FLAGS = ("--rdzv-endpoint", "--rdzv_endpoint")
_ADDR_FLAGS = ("--master-addr", "--master_addr")
_PORT_FLAGS = ("--master-port", "--master_port")
_RDZV_WORDS = ("rendezvous", "tcpstore", "_create_tcp_store", "_create_c10d_store", "store")
MAX_LAUNCHERS = 16
MAX_FD_SCAN_S = 2.0  # the socket -> process search, over every process's fds


def _flag_value(argv: Sequence[str], flags: tuple[str, ...]) -> str | None:
    """The value of the first of `flags` on a command line (`--flag value` or `--flag=value`)."""
    for i, a in enumerate(argv):
        for f in flags:
            if a == f and i + 1 < len(argv):
                return argv[i + 1]
            if a.startswith(f + "="):
                return a[len(f) + 1:]
    return None


def launcher_endpoint(argv: Sequence[str]) -> tuple[str, int | None]:
    """(endpoint as given, its port) from a torchrun command line; ("", None) when it names none."""
    endpoint = _flag_value(argv, _ENDPOINT_FLAGS)
    if endpoint:
        host, sep, port = endpoint.rpartition(":")
        return endpoint, (int(port) if sep and port.isdigit() and host else None)
    addr, port_s = _flag_value(argv, _ADDR_FLAGS), _flag_value(argv, _PORT_FLAGS)
    if port_s and port_s.isdigit():
        return f"{addr or '127.0.0.1'}:{port_s}", int(port_s)
    return "", None


def listening_inodes(port: int, proc: str = "/proc") -> set[str]:
    """Socket inodes listening on TCP `port` in this process's network namespace."""
    out: set[str] = set()
    for name in ("tcp", "tcp6"):
        data = _read_small(f"{proc}/net/{name}", 4 << 20) or b""
        for line in data.decode("ascii", errors="replace").splitlines()[1:]:
            inode = _listener_inode(line, port)
            if inode is not None:
                out.add(inode)
    return out


def _listener_inode(line: str, port: int) -> str | None:
    """The socket inode of one /proc/net/tcp line where it listens on `port`, else None."""
    f = line.split()
    if len(f) < 10 or f[3] != "0A":  # 0A: LISTEN
        return None
    _, _, hexport = f[1].rpartition(":")
    try:
        return f[9] if int(hexport, 16) == port else None
    except ValueError:
        return None


def socket_owner(inodes: set[str], proc: str = "/proc", budget_s: float = MAX_FD_SCAN_S) -> int | None:
    """The pid holding one of these socket inodes (the first found; None within the budget)."""
    if not inodes:
        return None
    wanted = {f"socket:[{i}]" for i in inodes}
    until = time.monotonic() + budget_s
    for pid in _all_pids(proc):
        if time.monotonic() > until:
            return None
        if _holds_any(pid, wanted, proc):
            return pid
    return None


def _holds_any(pid: int, targets: set[str], proc: str) -> bool:
    """One of the process's file descriptors points at one of `targets`."""
    try:
        fds = os.listdir(f"{proc}/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"{proc}/{pid}/fd/{fd}") in targets:
                return True
        except OSError:
            continue
    return False


def _waiting_in(stack: PySpyDump | None, pid: int) -> str | None:
    """Its main thread's innermost rendezvous/store frame: "fn (file.py:12)"."""
    main = _main_thread(stack, pid) if stack else None
    if main is None:
        return None
    for fr in main.frames:  # innermost first
        where = f"{fr.name} {fr.file}".lower()
        if any(w in where for w in _RDZV_WORDS):
            return f"{fr.name} ({os.path.basename(fr.file)}:{fr.line})" if fr.line is not None else fr.name
    return None


def is_agent_command(command: str) -> bool:
    """A command line that runs torchrun (its program or module among its first words)."""
    argv = command.split(" ")
    return any(a in argv[:3] or any(w.endswith("/" + a) for w in argv[:2]) for a in _AGENT_CMD)


def _rankless_agents(procs: list[_Proc], *, own: str | None, same_netns: bool,
                     only: Collection[int] | None) -> list[_Proc]:
    """The torchrun agents among `procs` (among `only` where given; in this netns) with no Python child."""
    children = _children_map(procs)
    by_pid = {q.pid: q for q in procs}
    agents = []
    for q in procs:
        if only is not None and q.pid not in only:
            continue
        if q.state in ("Z", "X") or not is_python(q) or not is_agent_command(q.command):
            continue
        if same_netns and _in_other_netns(q, own):
            continue
        if any(c in by_pid and is_python(by_pid[c]) for c in children.get(q.pid, [])):
            continue  # it started its workers: they are the ranks
        agents.append(q)
    return agents


def _port_holder(port: int, agents: list[_Proc], by_pid: Mapping[int, _Proc], proc: str,
                 until: float) -> PortHolder | None:
    """Who listens on `port` here: a process (a fellow agent hosting its store, or a foreign
    one), a listener whose process was not found, or None where nothing listens."""
    owner = socket_owner(listening_inodes(port, proc), proc,
                         budget_s=max(0.2, min(MAX_FD_SCAN_S, until - time.monotonic())))
    if owner is None and not listening_inodes(port, proc):
        return None
    o = by_pid.get(owner) if owner is not None else None
    is_agent = o is not None and o.pid in {a.pid for a in agents} or (
        o is not None and any(a in o.command for a in _AGENT_CMD))
    return PortHolder(port=port, pid=owner, command=clip(o.command, 200) if o else "", is_launcher=is_agent)


def find_launchers(host: str, *, py_spy: str | None, timeout_s: float, proc: str = "/proc",
                   same_netns: bool = True, only: Collection[int] | None = None) -> list[LauncherProcess]:
    """The torchrun agents on this node (this netns; among `only` where given) that have no
    Python child: launchers whose ranks never started, with their stack and who holds their
    rendezvous port."""
    until = time.monotonic() + timeout_s
    own = _own_netns(proc)
    mine = _own_lineage(proc)
    procs = [q for q in (_inspect(x, proc, with_environ=False) for x in _all_pids(proc) if x not in mine)
             if q]
    by_pid = {q.pid: q for q in procs}
    agents = _rankless_agents(procs, own=own, same_netns=same_netns, only=only)
    binary = resolve_py_spy(py_spy) if py_spy else None
    out: list[LauncherProcess] = []
    for q in agents[:MAX_LAUNCHERS]:
        endpoint, port = launcher_endpoint(q.command.split(" "))
        dump = None
        if binary and time.monotonic() < until:
            dump = dump_stack(binary, q.pid, q.state, timeout_s=max(0.5, min(5.0, until - time.monotonic())))
        holder = _port_holder(port, agents, by_pid, proc, until) if port is not None else None
        stack = dump.stack if dump else None
        out.append(LauncherProcess(pid=q.pid, host=host, state=q.state, command=clip(q.command, 1000),
                                   endpoint=endpoint, port=port, stack=stack, waiting_in=_waiting_in(stack, q.pid),
                                   port_holder=holder))
    return out


# ------------------------------------------------------------------------------ the helper's run


def collect_here(*, job_id: str | None, pids: Sequence[int] | None, local: bool, py_spy: str | None,
                 timeout_s: float, same_netns: bool = True, **kw: Any) -> NodeCollection:
    """What `hc diagnose collect` reports for this node (its options are cli/diagnose.py's):
    the job's ranks (--job), those pids (--pids) or every rank process here (--local); where
    --local finds no rank, the torchrun agents whose ranks never started (their stack, who
    holds their rendezvous port) with a no-ranks error."""
    if local:
        pids = local_rank_pids(same_netns=same_netns)
        if not pids:
            host = socket.gethostname()
            when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
            launchers = find_launchers(host, py_spy=py_spy, timeout_s=timeout_s, same_netns=same_netns)
            return NodeCollection(host=host, collected_at=when, launchers=tuple(launchers),
                                  errors=(CollectError("no-ranks", f"no Python rank process on {host}"),))
    return collect_node(job_id=job_id, pids=pids, py_spy=py_spy, timeout_s=timeout_s, same_netns=same_netns, **kw)
