"""What one node's collector reports (`hc diagnose collect`'s JSON, read back by
diagnose/live.py): the ranks with their state and stacks, the processes skipped and why,
the launchers whose ranks never started, NCCL RAS, the kernel log in the job's window,
and what could not be given with the fix (`CollectError`). Nothing here reads a node."""

from __future__ import annotations

from typing import Literal

import msgspec

from healthcheck.core import typed
from healthcheck.diagnose.motion import StackSample
from healthcheck.diagnose.ras_client import RasEvidence
from healthcheck.parsers.py_spy import PySpyDump

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
SkipReason = Literal["not-python", "no-rank", "agent", "helper", "other-netns", "collector", "zombie"]

PTRACE_FIX = ("run hc as root, or give it CAP_SYS_PTRACE (containers: --cap-add SYS_PTRACE; Kubernetes: "
              "securityContext.capabilities.add [SYS_PTRACE]), or allow ptrace of non-children with "
              "sysctl kernel.yama.ptrace_scope=0")
PY_SPY_FIX = "install py-spy on every node (pip install py-spy, >= 0.4 for Python 3.12+) or pass its path"


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
    reason: SkipReason
    command: str = ""


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
