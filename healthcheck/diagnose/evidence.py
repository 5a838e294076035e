"""The evidence a diagnosis reads: what each rank was doing, and the job's logs.

This is the interface every collector fills: `sources.py` from saved files (`hc diagnose
logs`), the live collectors (`hc diagnose job|pids`: py-spy, /proc, RAS, the kernel log)
from a running job. Everything is plain data (msgspec Structs), parsed already by the
committed parsers; nothing here reads a file or runs a command.

Conventions:
* ranks are global ranks (torch's RANK); None where nothing said which rank a thing is;
* `source` is where a fact came from, as the user would open it (`logs/rank3.log`);
  evidence lines inside it are `source:line`;
* a thing that could not be read is an `Unreadable` with why, never an exception.
"""

from __future__ import annotations

import msgspec

from healthcheck.diagnose.motion import StackSample
from healthcheck.parsers.flight_recorder import FlightRecorderDump, FrAnalysis
from healthcheck.parsers.nccl_log import NcclLog
from healthcheck.parsers.nccl_ras import NcclRasStatus
from healthcheck.parsers.py_spy import PySpyProcess
from healthcheck.parsers.torch_log import TorchLog


class ErrorFile(msgspec.Struct, frozen=True, omit_defaults=True):
    """A torchrun `@record` error file (error.json): the exception's message, its
    traceback and its timestamp (epoch seconds), with the rank where known."""

    source: str
    message: str
    rank: int | None = None
    traceback: str = ""
    timestamp: float | None = None
    error_code: int | None = None


class KernelEvent(msgspec.Struct, frozen=True, omit_defaults=True):
    """A kernel log line in the job's window: an OOM kill (`Killed process PID`), an Xid,
    an HCA link event. `pid` is the process it names (match it to a rank's pid)."""

    source: str
    line: int
    kind: str  # "oom-kill", "xid", "link"
    text: str
    host: str = ""
    pid: int | None = None
    time: float | None = None  # epoch seconds, where the line is stamped
    xid: int | None = None
    pci_bus_id: str = ""


class HealthEvent(msgspec.Struct, frozen=True, omit_defaults=True):
    """What a host's health said in the job's window: a kernel event of it (kind "xid",
    "oom-kill", "link"), or what hc's history holds for it: a check that FAILed the host
    (kind "hc", id its finding ID), an IB error counter that rose between the runs before
    and in the window (kind "counters"). `diagnose/health.py` joins them to the culprits."""

    host: str
    kind: str  # "xid", "oom-kill", "link", "hc" (a FAIL), "counters" (an IB error counter rose)
    text: str
    source: str  # "gpu017: /dev/kmsg:412", "hc history run 20261122T024500Z-3f2a9c"
    time: float | None = None  # epoch seconds
    id: str = ""  # the finding ID of an "hc" event
    xid: int | None = None
    said: str = ""  # how the verdict's summary says it, where the producer knows better than its kind


class RankEvidence(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What is known of one rank. Every field but `rank` is optional: a collector fills
    what it can see. `alive` None: unknown (an offline log does not say)."""

    rank: int
    host: str = ""
    pid: int | None = None
    local_rank: int | None = None
    world_size: int | None = None  # as this rank saw it (RANK/WORLD_SIZE, NCCL nranks, a log)
    master_addr: str = ""  # MASTER_ADDR / MASTER_PORT as the rank was launched with (its environment)
    master_port: int | None = None
    gpu: str = ""  # CUDA device / bus id as known
    alive: bool | None = None
    # live: the process state ("running", "sleeping", "stopped" (SIGSTOP), "zombie"), or
    # "missing": no process of this rank on any node that answered, while its world size says it exists
    state: str = ""
    exit_code: int | None = None  # the process's exit status; negative: killed by that signal
    signal: str = ""  # "SIGKILL"
    stack: PySpyProcess | None = None  # py-spy's dump of the process
    stack_error: str = ""  # why there is no stack: "py-spy not found: pip install py-spy", "ptrace refused: ..."
    samples: list[StackSample] = []  # live: the stack sampled over a window (motion.py); the last is `stack`
    flight_recorder: FlightRecorderDump | None = None
    sources: list[str] = []  # the files (or commands) this rank's facts came from


class LogFile(msgspec.Struct, frozen=True, omit_defaults=True):
    """One parsed text log. `rank`: the rank the whole file belongs to (a per-rank file
    named `rank3.log`), None for a file of many ranks (a job's stdout)."""

    source: str
    rank: int | None = None
    host: str = ""


class NcclLogFile(LogFile, frozen=True, omit_defaults=True):
    log: NcclLog | None = None


class TorchLogFile(LogFile, frozen=True, omit_defaults=True):
    log: TorchLog | None = None


class RasReply(msgspec.Struct, frozen=True, omit_defaults=True):
    source: str
    status: NcclRasStatus
    host: str = ""


class FrAnalysisText(msgspec.Struct, frozen=True, omit_defaults=True):
    """The flight recorder analyser's report (torchfrtrace's `Not all ranks joining
    collective`, NVRx's attribution table) as a user saved or pasted it."""

    source: str
    analysis: FrAnalysis


class Unreadable(msgspec.Struct, frozen=True):
    """An input that gave nothing: binary, unreadable, too large, of no known kind, cut."""

    source: str
    why: str


class Launcher(msgspec.Struct, frozen=True, omit_defaults=True):
    """A launcher agent (torchrun) seen live with no rank below it, where it waits, and who
    holds its rendezvous port on its host."""

    source: str
    host: str
    pid: int
    endpoint: str = ""
    port: int | None = None
    waiting_in: str | None = None
    holder_pid: int | None = None  # the process listening on `port` on this host
    holder_command: str = ""
    holder_is_launcher: bool = False
    listening: bool = False  # something listens on `port` on this host


class JobEvidence(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Everything collected about one job. `ranks` is keyed by global rank."""

    job: str = ""  # "slurm job 12345", "logs: /path", "pids 1 2 3"
    ranks: dict[int, RankEvidence] = {}
    nccl_logs: list[NcclLogFile] = []
    torch_logs: list[TorchLogFile] = []
    error_files: list[ErrorFile] = []
    ras: list[RasReply] = []
    fr_analyses: list[FrAnalysisText] = []  # the flight recorder analyser's reports
    kernel: list[KernelEvent] = []  # in the job's window only
    window_start: float | None = None  # the job's start (epoch seconds) where known: the kernel logs' window
    launchers: list[Launcher] = []  # live: agents whose ranks never started
    unreadable: list[Unreadable] = []
    inputs: int = 0  # files (or sources) looked at
    collected_at: str = ""  # ISO 8601 UTC

    def rank(self, rank: int) -> RankEvidence:
        """The rank's record, made when first named."""
        found = self.ranks.get(rank)
        if found is None:
            found = self.ranks[rank] = RankEvidence(rank=rank)
        return found
