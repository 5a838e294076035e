"""PyTorch distributed and torchrun (elastic) output -> TorchLog: typed facts, each with
the line that printed it.

What is read (the wording of torch 1.9 to 2.13, from the released wheels' strings and
the real logs in tests/fixtures/corpus/torch-*, torchrun; see
shared/notes/diagnose.md sections 2 and 4):

* ProcessGroupNCCL's watchdog: `WorkNCCL(SeqNum=, OpType=, NumelIn=, NumelOut=,
  Timeout(ms)=) ran for N milliseconds` in every wording (1.x has no Numel fields; from
  2.3 the same text comes again inside `Process group watchdog thread terminated with
  exception:` and a `terminate called ... what():`); the process group status lines
  (`Timeout at NCCL work: N, last enqueued NCCL work: E, last completed NCCL work: C`
  2.3-2.5, `Exception (either an error or timeout) detected by watchdog at work: N, ...`
  2.4-2.5, `failure detected by watchdog at work sequence id: N PG status: last enqueued
  work: E, last completed work: C` 2.6+, `Received a dump signal due to a collective
  timeout from rank R ... Last enqueued NCCL work: E, last completed NCCL work: C`);
  the heartbeat monitor (`Heartbeat monitor timed out!` 2.3-2.4, `watchdog got stuck for
  N seconds`); `taking the entire process down`.
* The log prefixes that name a process group: `[PG 3 Rank 4]` (2.3-2.4), `[PG 0
  (default_pg) Rank 2]` (2.4), `[PG ID 0 PG GUID 0(default_pg) Rank 3]` (2.5+), `[Rank N]`.
  Their rank is the rank *in that group* (`pg_rank`); a fact's `rank` is the global one.
* TORCH_NCCL_DESYNC_DEBUG's report, TORCH_DISTRIBUTED_DEBUG=DETAIL's `Detected mismatch
  between collectives on ranks` (both fingerprints; the old one-sided `inconsistent
  collective` wording) and `failed to pass monitoredBarrier`.
* NCCL errors as torch raises them: `NCCL error in: FILE:LINE, <reason>, NCCL version V`
  (DistBackendError, RuntimeError before 2.1, or inside a watchdog exception), then
  `ncclXxx: <detail>`, `Last error:` and the line after it (NCCL's own last error,
  e.g. `Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60`); `CUDA error:`.
* gloo: `Connection closed by peer [ip]:port`, `Timed out waiting Nms for recv|send
  operation to complete`, `op.preamble.length <= op.nbytes. X vs Y` / `Received data size
  doesn't match`, `Read error [ip]:port: ...`.
* Flight Recorder: `Stack trace of the failed collective not found ... FlightRecorder is
  disabled`, the stack that is printed instead (`#0 all_reduce from FILE:LINE`), where a
  dump was written, dump signals between ranks.
* Ports in use (`failed to bind to [::]:29500 (errno: 98 - Address already in use)`,
  `port: 29620, useIpv6: false, code: -98, name: EADDRINUSE`), rendezvous and store
  errors (RendezvousClosedError, ...ConnectionError, ...TimeoutError, the client socket's
  `timed out after 60s while trying to connect to HOST:PORT`, `Timed out after N seconds
  waiting for clients. J/W clients joined.`, `wait timeout after Nms`, `Socket Timeout`).
* torchrun's agent: the ChildFailedError block field by field, `failed (exitcode: N)
  local_rank: L (pid: P) of binary: B`, `Received N death signal, shutting down workers`,
  `Process P got signal: S` (SignalException), `Sending process P closing signal SIG` /
  `Closing process P via signal SIG`, worker group restarts.
* srun's own word on its tasks: `srun: error: node3: task 2: Aborted`, `tasks 0-1: Exited
  with exit code 1`, `task 1: Killed` / `Out Of Memory`, and whether it had aborted the
  step before (`Job step aborted`, `CANCELLED`, `Force Terminated`).
* Python tracebacks: the exception each one ends with (type and first message line), per
  rank prefix, interleaved tracebacks of several ranks counted apart; C++ `terminate
  called after throwing an instance of 'T'` with its `what():`.

Prefixes taken off each line before it is read: Ray's `(WorkerDict pid=N) ` and its
`[repeated Nx across cluster]` suffix, a Determined `[ISO time] id || `, a syslog time
`Jul 13 21:22:34 `, `srun -l`'s `3: `, `mpirun --tag-output`'s `[1,3]<stderr>:`, torchrun `--tee`'s
`[default3]:` (each the launcher's label: `task`, and the rank where no `[rankN]:` says
otherwise; torchrun's is the local rank, the global one on a single node), torch's
`[rank3]:` (also where a progress bar glued it mid-line; of a line a `\\r` redrew, the
part after it), the c10 log prefix `[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] ` (or
`[E ProcessGroupNCCL.cpp:474] ` before 2.3), the agent's `E0325 20:57:27.620000 2606
.../api.py:869] ` and Python logging's `WARNING:torch.distributed...:`. A WorkNCCL line a
terminal hard-wrapped is joined with the line after it (`wrapped`); a c10 line word-wrapped
right after its `[PG ... Rank N]` group (`[Rank 0] Watchdog` / `caught collective ...`) is
joined with the unprefixed line that finishes its sentence, so the group names the rank.

Every fact carries `line` (1-based, lines split on "\\n": the evidence is `file:line`),
`rank` (global: `[rankN]:`, else the launcher's label) and `task` (the label) where the
line has them, and `time` as the log prefix printed it. Each list keeps MAX_LISTED facts
(`dropped` counts the rest) and only the first MAX_LINE characters of a line are read, so
a hostile input costs its length. A text with no fact and no line of PyTorch, torchrun or
Python traceback output is a ParseError; nothing else is ever raised.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Literal

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Line, read_line, read_lines

MAX_LISTED = 1000  # facts kept per kind
MAX_LINE = 16_384  # characters of a line that are read
_MESSAGE_MAX = 300
_TRACEBACK_LINES = 80  # of a ChildFailedError entry's traceback
_TRACEBACK_MAX = 4000
_FRAMES_MAX = 32
_RANKS_MAX = 4096
_MAX_INT_DIGITS = 20

# Linux signal numbers (torch prints the negative number as a worker's exit code).
SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
           8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
           14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}


# ---------------------------------------------------------------- facts


class _Fact(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    line: int  # 1-based line number in the text parsed
    rank: int | None = None  # global rank: `[rankN]:`, else the launcher's label
    task: int | None = None  # srun -l / mpirun --tag-output label, where printed
    time: str = ""  # the log prefix's time as printed: "1218 20:27:21.426415540"


class _GroupFact(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    pg_rank: int | None = None  # the rank in the message's `[... Rank N]`: the group's rank
    pg_id: str = ""  # `[PG 3 ...]`, `[PG ID 0 ...]`
    pg_name: str = ""  # the group's GUID (2.5+)
    pg_desc: str = ""  # "default_pg"


class WatchdogTimeout(_GroupFact, frozen=True, omit_defaults=True, kw_only=True):
    """`Watchdog caught collective operation timeout: WorkNCCL(...) ran for N
    milliseconds before timing out.` `terminated`: the same text quoted by `Process
    group watchdog thread terminated with exception:` (the exception that ended the
    watchdog: a rank prints both). `wrapped`: reassembled from two hard-wrapped lines."""

    seq: int
    op_type: str  # ALLREDUCE, _ALLGATHER_BASE, BROADCAST, ...
    numel_in: int | None = None  # absent before torch 2.0
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_for_ms: int | None = None
    terminated: bool = False
    wrapped: bool = False


ProgressKind = Literal["timeout-at", "exception-at", "failure-at", "dump-signal"]


class WatchdogProgress(_GroupFact, frozen=True, omit_defaults=True, kw_only=True):
    """The group's last enqueued and completed work as a rank reported it.

    timeout-at: `Timeout at NCCL work: N, ...` (2.3-2.5); exception-at: `Exception (either
    an error or timeout) detected by watchdog at work: N, ...` (2.4-2.5); failure-at:
    `failure detected by watchdog at work sequence id: N PG status: ...` (2.6+);
    dump-signal: `Received a dump signal due to a collective timeout from rank R|this
    local rank ...` (`from_rank` None: this rank's own timeout; `seq` None).
    """

    kind: ProgressKind
    seq: int | None = None
    last_enqueued: int | None = None
    last_completed: int | None = None
    from_rank: int | None = None


class WatchdogStuck(_GroupFact, frozen=True, omit_defaults=True, kw_only=True):
    """The heartbeat monitor: the watchdog itself made no progress (host side wedged)."""

    kind: Literal["heartbeat-timeout", "stuck"]
    seconds: int | None = None  # "got stuck for N seconds"
    pending_works: int | None = None  # workMetaList_.size()


class WatchdogAbort(_GroupFact, frozen=True, omit_defaults=True, kw_only=True):
    """`To avoid data inconsistency, we are taking the entire process down.` (SIGABRT next)."""


DesyncKind = Literal["timeout-at", "never-joined", "not-finished", "not-joined", "started", "finished"]


class DesyncLine(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A line of TORCH_NCCL_DESYNC_DEBUG's report.

    timeout-at: `- [R] Timeout at collective: OP, #SEQ` (ranks = (R,)); never-joined:
    `ranks [..] are the lagging ranks ... never joined any collectives`; not-finished:
    `[..] joined but didn't finish collective #SEQ`; not-joined: `[..] finished collective
    #N, but didn't join collective #SEQ` (seq = N + 1, the one not joined); started /
    finished: the snapshot's `[..] started OP` under `#SEQ started ranks:`. Report lines are
    continuation lines with no prefix: `rank` is the reporting rank's.
    """

    kind: DesyncKind
    ranks: tuple[int, ...] = ()
    seq: int | None = None
    op: str = ""


class CollectiveFingerprint(msgspec.Struct, frozen=True, omit_defaults=True):
    """`Rank R is running collective: CollectiveFingerPrint(SequenceNumber=, OpType=,
    TensorShape=[..], TensorDtypes=, TensorDeviceTypes=...)`, as printed (the shape of the
    first tensor only; a side with no tensors prints only its sequence number and op)."""

    rank: int
    op_type: str = ""
    seq: int | None = None  # absent from the old `inconsistent collective` wording
    shape: str = ""  # "3, 4"
    dtypes: str = ""  # "Float"
    device: str = ""  # "cuda", "cpu"


class CollectiveMismatch(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """`Detected mismatch between collectives on ranks.` (TORCH_DISTRIBUTED_DEBUG=DETAIL)."""

    local: CollectiveFingerprint
    remote: CollectiveFingerprint | None = None  # the old wording shows one side only
    differences: str = ""  # "Tensor Tensor shapes: 3 4vs 4 5"
    old_wording: bool = False


class MonitoredBarrierFailure(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """`[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 5000 ms` (DETAIL, gloo)."""

    reporter: int | None = None  # the `[Rank N]:` that printed it
    ranks: tuple[int, ...] = ()
    timeout_ms: int | None = None


BackendKind = Literal["nccl", "nccl-timeout", "cuda"]


class BackendError(_GroupFact, frozen=True, omit_defaults=True, kw_only=True):
    """`NCCL error in: FILE:LINE, <reason>, NCCL version V` and the lines after it.

    exception: the type printed before it (torch.distributed.DistBackendError, RuntimeError),
    "" inside a watchdog or `what():` message; watchdog: it ended the watchdog thread.
    """

    kind: BackendKind
    reason: str = ""  # "unhandled cuda error", "invalid usage", "remote process exited ..."
    exception: str = ""
    where: str = ""  # "NCCLUtils.cpp:93" (the path's last part)
    nccl_version: str = ""
    nccl_error: str = ""  # "ncclInvalidUsage"
    detail: str = ""  # "This usually reflects invalid usage of NCCL library."
    last_error: str = ""  # NCCL's last error: "Duplicate GPU detected : rank 0 and ..."
    watchdog: bool = False


GlooKind = Literal["peer-closed", "timeout", "size-mismatch", "read-error", "connect"]


class GlooError(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A gloo transport error; `source` is gloo's `pair.cc:598` (the line varies by release).
    connect: pair.cc's `connect [ADDR]:PORT: ERROR` (the peer it could not reach, and why)."""

    kind: GlooKind
    source: str = ""
    peer: str = ""  # the peer's address, without brackets
    port: int | None = None
    operation: str = ""  # recv, send (timeouts)
    timeout_ms: int | None = None
    received_bytes: int | None = None  # size mismatch: op.preamble.length
    expected_bytes: int | None = None  # size mismatch: op.nbytes
    message: str = ""


class NotInGroup(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """torch's `Running OP on global rank N which does not belong to the given group.`
    (distributed_c10d._warn_not_in_group, a UserWarning): rank N called OP with a process
    group it is not a member of, and torch skipped the call. Harmless where that is the
    program's intent; the culprit where the rank should have been in the group its
    partner waits in."""

    operation: str
    global_rank: int


FrKind = Literal["disabled", "stack", "dump-written", "dump-failed", "dump-preparing", "dump-signal-sent",
                 "dump-signal-observed"]


class FlightRecorderNote(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """What a rank said of the Flight Recorder: off (`... not found, potentially because
    FlightRecorder is disabled`), the failed collective's stack (`frames`, as printed:
    "#0 all_reduce from .../distributed_c10d.py:3174"), a dump written or not (`path`),
    or a dump signal sent to / observed from other ranks."""

    kind: FrKind
    path: str = ""
    frames: tuple[str, ...] = ()


class AddressInUse(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A port already bound: `failed to bind to [::]:29500 (errno: 98 - Address already in
    use)`, `port: 29620, ... name: EADDRINUSE`, or any `address already in use`."""

    port: int | None = None
    address: str = ""  # "[::]", "0.0.0.0"
    errno: int | None = None


RendezvousKind = Literal["closed", "connection", "timeout", "state", "graceful-exit", "error", "client-timeout",
                         "connect-failed", "clients-timeout", "wait-timeout", "socket-timeout", "listen-failed",
                         "store-wait"]


class RendezvousError(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A rendezvous or TCPStore failure.

    closed / connection / timeout / state / graceful-exit / error: the elastic Rendezvous*
    exception named; client-timeout: `The client socket has timed out after 60s while
    trying to connect to HOST:PORT`; connect-failed: `The client socket has failed to
    connect to ...`; clients-timeout: `Timed out after N seconds waiting for clients. J/W
    clients joined.`; wait-timeout: `wait timeout after Nms, keys: ...`; socket-timeout:
    `Socket Timeout`; listen-failed: `The server socket has failed to listen on any local
    network address` (see AddressInUse for why); store-wait: a client connected to the
    store (`address`, its remote end) that timed out waiting for an answer (`waitForInput:
    socket SocketImpl(fd=3, addr=..., remote=[::ffff:127.0.0.1]:30520) timed out after 4000ms`).
    `address` is `host:port` in every kind (an IPv4-mapped IPv6 address as IPv4).
    """

    kind: RendezvousKind
    seconds: float | None = None
    address: str = ""  # "192.0.0.1:1234"
    joined: int | None = None
    expected: int | None = None
    message: str = ""


class ChildFailure(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """One `[N]:` entry of a ChildFailedError block."""

    line: int  # the `[N]:` line
    index: int
    root_cause: bool = False  # under `Root Cause (first observed failure):`
    time: str = ""  # "2026-11-23_07:20:56" (one-second resolution)
    host: str = ""
    rank: int | None = None
    local_rank: int | None = None
    exitcode: int | None = None
    pid: int | None = None
    signal: str = ""  # SIGKILL: from `(SIGKILL)`, `Signal 9 (SIGKILL) received by PID`, or a negative exit code
    error_file: str = ""  # "" for <N/A>
    traceback: str = ""  # as printed, continuation lines dedented, bounded
    exception: str = ""  # the traceback's last exception line, "RuntimeError: ..."


class ChildFailedBlock(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """torchrun's `ChildFailedError` summary: `PROGRAM FAILED`, Failures, Root Cause
    (`line`: the `PROGRAM FAILED` title).

    The root cause is only the failure with the earliest one-second timestamp: ranks
    torchrun SIGTERMed in the same second can win it.
    """

    program: str = ""  # "hang.py"
    failures: tuple[ChildFailure, ...] = ()  # every entry, root cause included, as printed
    no_other_failures: bool = False
    complete: bool = False  # the closing border was read

    @property
    def root_cause(self) -> ChildFailure | None:
        return next((f for f in self.failures if f.root_cause), None)


class WorkerFailed(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """The agent's `failed (exitcode: N) local_rank: L (pid: P) of binary: B` (or `of fn:`)."""

    exitcode: int
    local_rank: int | None = None
    pid: int | None = None
    binary: str = ""
    signal: str = ""  # from a negative exit code


class TaskExit(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """srun's own word on how tasks ended: `srun: error: node3: task 2: Aborted`, `tasks
    0-1: Exited with exit code 1`, `task 1: Killed`, `task 1: Out Of Memory`. `tasks`: the
    task ids (Slurm's, the global rank under srun); `after_abort`: printed after srun
    aborted or cancelled the step (`Job step aborted`, `CANCELLED`, `Force Terminated`):
    srun's own kill, collateral. Open MPI's box is read the same way (`launcher` "mpirun"):
    `mpirun noticed that process rank R with PID P on node H exited on signal N (Name).`
    names the first rank it saw killed; mpirun then stops the others itself."""

    host: str = ""
    tasks: tuple[int, ...] = ()
    state: str = ""  # "Killed", "Aborted", "Exited with exit code 1", "Out Of Memory"
    exitcode: int | None = None
    signal: str = ""
    oom: bool = False
    after_abort: bool = False
    launcher: str = "srun"  # "mpirun": Open MPI's `exited on signal` box


class AgentSignal(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """The agent itself was signalled (scancel, the Slurm time limit, a closed terminal):
    `Received 15 death signal, shutting down workers` or SignalException's `Process P got
    signal: S`. Externally terminated, not a training failure."""

    kind: Literal["death-signal", "signal-exception"]
    signal: str = ""  # SIGTERM
    number: int | None = None
    pid: int | None = None


class ClosingSignal(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """The agent stopping a worker: `Sending process P closing signal SIGTERM` or `Closing
    process P via signal SIGTERM`. The worker is collateral, not a cause."""

    pid: int
    signal: str


GroupEventKind = Literal["restart", "stopping", "starting", "rendezvous", "finished", "membership-change"]


class WorkerGroupEvent(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """`[default] Worker group FAILED. 3/3 attempts left; will restart worker group` and
    the agent's other worker group steps."""

    kind: GroupEventKind
    role: str = ""
    state: str = ""  # FAILED, UNHEALTHY (restart)
    attempts_left: int | None = None
    max_restarts: int | None = None
    new_nodes: int | None = None


class ExceptionRaised(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """The exception a traceback ends with: `torch.distributed.DistBackendError: NCCL
    error ...`. `framed`: a traceback (its header or frames) was read for this rank before
    it; unframed ones are only `...Error:` / `...Exception:` lines at the start of a line.
    `native`: C++ `terminate called after throwing an instance of 'T'` (message: `what()`)."""

    type: str
    message: str = ""  # the first line of the message
    framed: bool = False
    native: bool = False
    frame: str = ""  # the innermost frame of the program's own code: "train.py:37 in load_batch"
    collective: str = ""  # the torch.distributed function it was raised in: "all_reduce", "broadcast"
    # the thread it ended, where Python's threading.excepthook said so (`Exception in thread
    # NAME:` before the traceback): that thread ended, the process went on
    thread: str = ""
    # the program's own frames of its traceback, outermost first ("train.py:88 in train_step"):
    # where in the program the rank was, to compare with its peers'
    chain: tuple[str, ...] = ()


class TorchLog(msgspec.Struct, frozen=True):
    """What one log (a rank's stderr, a job's output, torchrun's console) says."""

    lines: int  # lines read
    timeouts: tuple[WatchdogTimeout, ...] = ()
    progress: tuple[WatchdogProgress, ...] = ()
    stuck: tuple[WatchdogStuck, ...] = ()
    aborts: tuple[WatchdogAbort, ...] = ()
    desync: tuple[DesyncLine, ...] = ()
    mismatches: tuple[CollectiveMismatch, ...] = ()
    barrier_failures: tuple[MonitoredBarrierFailure, ...] = ()
    backend_errors: tuple[BackendError, ...] = ()
    gloo: tuple[GlooError, ...] = ()
    flight_recorder: tuple[FlightRecorderNote, ...] = ()
    address_in_use: tuple[AddressInUse, ...] = ()
    rendezvous: tuple[RendezvousError, ...] = ()
    child_failed: tuple[ChildFailedBlock, ...] = ()
    worker_failures: tuple[WorkerFailed, ...] = ()
    task_exits: tuple[TaskExit, ...] = ()
    agent_signals: tuple[AgentSignal, ...] = ()
    closing_signals: tuple[ClosingSignal, ...] = ()
    worker_group: tuple[WorkerGroupEvent, ...] = ()
    exceptions: tuple[ExceptionRaised, ...] = ()
    not_in_group: tuple[NotInGroup, ...] = ()
    nccl_versions: tuple[str, ...] = ()  # distinct, in order: "2.21.5"
    prefixed_ranks: tuple[int, ...] = ()  # every rank a line prefix names (`[rankN]:`, a label), sorted
    dropped: int = 0  # facts past MAX_LISTED of their kind, not kept

    def counts(self) -> dict[str, int]:
        """Facts of each kind, kinds with none left out."""
        return {name: len(getattr(self, name)) for name in FACT_KINDS if getattr(self, name)}

    @property
    def ranks(self) -> tuple[int, ...]:
        """Every global rank a fact names, sorted. Where a line has no `[rankN]:` or
        launcher label, a message's `[... Rank N]` stands for it on the default group
        (PG 0) or where no group is printed (torch <= 2.2 prints none); the desync
        report's and the ChildFailedError's ranks are global."""
        seen: set[int] = set()
        for name in FACT_KINDS:
            for fact in getattr(self, name):
                if fact.rank is not None:
                    seen.add(fact.rank)
                elif isinstance(fact, _GroupFact) and fact.pg_rank is not None and fact.pg_id in ("", "0"):
                    seen.add(fact.pg_rank)
                if isinstance(fact, DesyncLine):
                    seen.update(fact.ranks)
                elif isinstance(fact, ChildFailedBlock):
                    seen.update(f.rank for f in fact.failures if f.rank is not None)
                elif isinstance(fact, CollectiveMismatch):
                    seen.add(fact.local.rank)
                    if fact.remote is not None:
                        seen.add(fact.remote.rank)
        return tuple(sorted(seen))

    def final_exceptions(self) -> dict[int | None, ExceptionRaised]:
        """The last exception of each rank (None: lines with no rank)."""
        return {e.rank: e for e in self.exceptions}


FACT_KINDS = ("timeouts", "progress", "stuck", "aborts", "desync", "mismatches", "barrier_failures",
              "backend_errors", "gloo", "flight_recorder", "address_in_use", "rendezvous", "child_failed",
              "worker_failures", "agent_signals", "closing_signals", "worker_group", "exceptions", "not_in_group",
              "task_exits")


# ---------------------------------------------------------------- line prefixes
# Anchored (match) and bounded: each costs at most its bound at the start of a line.

_RAY_REPEATED = re.compile(r"\s*\[repeated \d{1,9}x across cluster\]$")
_PYLOG = re.compile(r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL): ?(?:torch|torchelastic)[\w.]{0,128}:")
_PYLOG_OLD = re.compile(
    r"\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\] (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) [\w.]{1,64}: "
)


class _Line:
    """One line as the line layer (parsers/lines.py) read it, in the terms torch's facts use:
    the launcher's label is the rank where no `[rankN]:` says otherwise (torchrun's local
    rank only on a single node: under srun, a node's label and then torchrun's, no label
    says the rank)."""

    __slots__ = ("body", "number", "rank", "task", "time", "torch")

    def __init__(self, line: Line) -> None:
        self.number = line.number
        self.rank, self.task = _rank_and_task(line)
        self.torch = line.rank is not None  # a prefix only torch prints
        self.time = ""
        body = line.text
        if line.level:  # glog: c10's `[E1218 ... ProcessGroupNCCL.cpp:629]` or the agent's `E0325 ... api.py:869]`
            self.time = line.stamp if line.stamp_kind == "glog" else ""
            self.torch = self.torch or line.logger == "c10" or "torch" in line.source
        else:
            body = self._python_logging(body)
        if body.endswith("]") and "across cluster" in body[-40:]:
            m = _RAY_REPEATED.search(body, max(0, len(body) - 60))
            if m:
                body = body[:m.start()]
        self.body = body

    def _python_logging(self, body: str) -> str:
        """Python logging's `WARNING:torch.distributed...:` and the old `[INFO] time name: `."""
        if body[:1] == "[":
            m = _PYLOG_OLD.match(body)
            if m:
                self.time = m.group(1)
                return body[m.end():]
        elif body[:1] in "DIWEC":
            m = _PYLOG.match(body)
            if m:
                self.torch = True
                return body[m.end():]
        return body


def _rank_and_task(line: Line) -> tuple[int | None, int | None]:
    """(rank, task): the rank the line's labels name (lines.rank_named); the task is the
    launcher's label, else torchrun's local rank."""
    return line.global_rank, line.task if line.task is not None else line.local_rank


def _task_ids(text: str) -> tuple[int, ...]:
    """srun's task list: "2", "0-1", "0,2-3" -> the ids, at most _RANKS_MAX."""
    out: list[int] = []
    for part in text.split(",", _RANKS_MAX)[:_RANKS_MAX]:
        lo, _, hi = part.partition("-")
        first, last = _int(lo), _int(hi) if hi else _int(lo)
        if first is None or last is None or last < first:
            continue
        out.extend(range(first, min(last, first + _RANKS_MAX - len(out)) + 1))
        if len(out) >= _RANKS_MAX:
            break
    return tuple(out[:_RANKS_MAX])


def _int(text: str | None) -> int | None:
    """A decimal integer (ASCII digits, optional minus, at most 20 digits), else None."""
    if not text:
        return None
    body = text[1:] if text[0] == "-" else text
    if not body or len(body) > _MAX_INT_DIGITS or not (body.isascii() and body.isdigit()):
        return None
    return int(text)


def _ranks(text: str) -> tuple[int, ...]:
    """"1, 2, 3" -> (1, 2, 3), at most _RANKS_MAX."""
    out = []
    for part in text.split(",", _RANKS_MAX)[:_RANKS_MAX]:
        value = _int(part.strip())
        if value is not None:
            out.append(value)
    return tuple(out)


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


# ---------------------------------------------------------------- message patterns

_PG = re.compile(
    r"\[(?:PG (?:ID )?(\d{1,9})(?: PG GUID ([^\s()\[\]]{1,128}))? ?(?:\(([^()\[\]]{0,128})\) )?)?Rank (\d{1,9})\]"
)
_WORK_FIELD = re.compile(r"(SeqNum|OpType|NumelIn|NumelOut|Timeout\(ms\))=([\w\-]{1,64})")
_RAN_FOR = re.compile(r"\) ran for (\d{1,20}) milliseconds")
_PROGRESS = re.compile(
    r"(?:at (?:NCCL )?work(?: sequence id)?: (-?\d{1,20})[,.]?\s{0,4}(?:PG status: )?)?"
    r"last enqueued (?:NCCL )?work: (-?\d{1,20}), last completed (?:NCCL )?work: (-?\d{1,20})",
    re.IGNORECASE,
)
_DUMP_FROM = re.compile(r"collective timeout from\s{1,4}(?:rank (\d{1,9})|this local rank)")
_STUCK = re.compile(r"got stuck for (\d{1,20}) seconds")
_WORK_LIST = re.compile(r"workMetaList_\.size\(\) ?= ?(\d{1,20})")
_DESYNC_TIMEOUT = re.compile(r"\[(\d{1,9})\] Timeout at collective: ([^,]{1,64}), #(\d{1,20})")
_DESYNC_MISSING = re.compile(r"ranks \[([\d, ]{0,65536})\] are the lagging ranks")
_DESYNC_UNFINISHED = re.compile(r"\[([\d, ]{0,65536})\] joined but didn't finish collective #(\d{1,20})")
_DESYNC_UNJOINED = re.compile(
    r"\[([\d, ]{0,65536})\] finished collective #(\d{1,20}), but didn't join collective #(\d{1,20})"
)
_DESYNC_SNAPSHOT = re.compile(r"#(\d{1,20}) (started|finished) ranks:")
_DESYNC_STATE = re.compile(r"\[([\d, ]{0,65536})\] (started|finished) (\S{1,64})$")
_FP_SIDE = re.compile(r"Rank (\d{1,9}) is running (inconsistent )?collective: ")
_FP_SEQ = re.compile(r"SequenceNumber=(\d{1,20})")
_FP_OP = re.compile(r"OpType=(\w{1,64})")
_FP_SHAPE = re.compile(r"TensorShape=\[([^\]]{0,1024})\]")
_FP_DTYPES = re.compile(r"TensorDtypes=([^=]{0,512}?), TensorDeviceTypes=")
_FP_DEVICE = re.compile(r"device=(\w{1,32})")
_BARRIER = re.compile(
    r"(?:\[Rank (\d{1,9})\]: )?Ranks? ((?:\d{1,9}, ){0,4096}+\d{1,9}) failed to pass monitoredBarrier in (\d{1,20}) ms"
)
_BARRIER_TIMEOUT = re.compile(r"Rank (\d{1,9}) timed out in monitoredBarrier after (\d{1,20}) ms")
_NCCL_ERROR = re.compile(
    r"NCCL error(?: in: ([^\s,]{1,512}),|:) ([^,]{1,256}?)(?: \(run with NCCL_DEBUG=\w{1,16} for details\))?,"
    r" NCCL version ([\w.+\-]{1,64})"
)
_NCCL_TIMEOUT = re.compile(r"NCCL timeout in: ([^\s,]{1,512})")
_CUDA_ERROR = re.compile(r"CUDA error: ([^\n]{1,300})")
_NCCL_DETAIL = re.compile(r"(nccl[A-Z]\w{0,63}): ?(.*)")
_VERSION_NUMBERS = re.compile(r"\d{1,4}\.\d{1,4}\.\d{1,4}")
_NCCL_VERSION = re.compile(r"NCCL version (\d{1,4}\.\d{1,4}\.\d{1,4})")
_GLOO_PEER = re.compile(r"Connection closed by peer \[([^\]\s]{1,128})\]:(\d{1,5})")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d{1,20})ms for (\w{1,32}) operation")
_GLOO_SIZE = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d{1,20}) vs (\d{1,20})")
_NOT_IN_GROUP = re.compile(r"Running (\w{1,64}) on global rank (-?\d{1,9}) which does not belong to the given group")
_GLOO_CONNECT = re.compile(r"\bconnect \[([^\]\s]{1,128})\]:(\d{1,5}): ([^\n]{1,200})")
# ProcessGroupNCCL's unique-id exchange names the rank that failed: `[4] is setting up NCCL communicator ...`
_SELF_RANK = re.compile(r"\[(\d{1,9})\] is setting up NCCL communicator")
_GLOO_READ = re.compile(r"Read error \[([^\]\s]{1,128})\]:(\d{1,5}): ([^.\n]{0,200})")
_FR_FRAME = re.compile(r"#\d{1,6} \S")
_FR_PATH = re.compile(r"debug info to (?:file: )?(\S{1,1024})")
_FR_PATH_ERROR = re.compile(r"(?:writing NCCLPG debug info|Flight Recorder debug info(?: to file)?): (\S{1,1024})")
_BIND = re.compile(r"failed to bind to (\S{1,256}?):(\d{1,5}) \(errno: (\d{1,5}) - ([^)]{0,128})\)")
_LISTEN_PORT = re.compile(r"port: (\d{1,5}), useIpv6: \w{1,8}, code: (-?\d{1,5}), name: (\w{1,32})")
_ERRNO_98 = re.compile(r"\[Errno (\d{1,5})\] [Aa]ddress already in use")
_PORT_NEAR = re.compile(r"\bport[ :=]{1,3}(\d{1,5})\b", re.IGNORECASE)
_CLIENT_TIMEOUT = re.compile(
    r"client socket has timed out after (\d{1,20}(?:\.\d{1,9})?)(ms|s)? while trying to connect to "
    r"\(?([^\s(),]{1,256})(?::|, )(\d{1,5})\)?"
)
_CLIENT_FAILED = re.compile(r"client socket has failed to connect to (?:any network address of )?(\S{1,256})")
_CLIENTS_JOINED = re.compile(
    r"Timed out after (\d{1,20}) seconds waiting for clients\. (\d{1,9})/(\d{1,9}) clients joined"
)
_WAIT_TIMEOUT = re.compile(r"wait timeout after (\d{1,20})ms")
_STORE_WAIT = re.compile(r"waitForInput: socket SocketImpl\(fd=\d{1,9}, addr=\S{1,128}, remote=(\S{1,128}?)\)")
_RDZV_CLASS = re.compile(r"Rendezvous(Closed|Connection|Timeout|State|GracefulExit|)Error(?=:|$)")
_RDZV_KINDS: dict[str, RendezvousKind] = {"Closed": "closed", "Connection": "connection", "Timeout": "timeout",
                                          "State": "state", "GracefulExit": "graceful-exit", "": "error"}
_WORKER_FAILED = re.compile(
    r"failed \(exitcode: (-?\d{1,20})\) local_rank: (\d{1,9}) \(pid: (\d{1,10})\) of (?:binary|fn): (.{0,512})"
)
_DEATH = re.compile(r"Received (\d{1,3}) death signal, shutting down workers")
_GOT_SIGNAL = re.compile(r"Process (\d{1,10}) got signal: (?:Signals\.)?(\w{1,16})")
_CLOSING = re.compile(r"(?:Sending process (\d{1,10}) closing signal|Closing process (\d{1,10}) via signal) (\w{1,16})")
_GROUP_RESTART = re.compile(
    r"\[([^\]]{1,64})\] Worker group (\w{1,32})\. (\d{1,9})/(\d{1,9}) attempts left; will restart worker group"
)
_GROUP_STEP = re.compile(r"\[([^\]]{1,64})\] (Stopping|Starting|Rendezvous'ing) worker group")
_GROUP_DONE = re.compile(r"\[([^\]]{1,64})\] worker group successfully finished")
_GROUP_NODES = re.compile(r"\[([^\]]{1,64})\] Detected (\d{1,9}) new nodes from group_rank=\d{1,9}; will restart")
_GROUP_STEPS: dict[str, GroupEventKind] = {"Stopping": "stopping", "Starting": "starting",
                                           "Rendezvous'ing": "rendezvous"}
_TASK_EXIT = re.compile(r"srun: error: ([^\s:]{1,256}): tasks? ([\d,\-]{1,4096}): (.{1,200})$")
_EXIT_CODE = re.compile(r"Exited with exit code (\d{1,3})")
_MPIRUN_PROCESS = re.compile(r"\s{0,8}Process name: \[\[\d{1,10},\d{1,10}\],(\d{1,9})\]")
_MPIRUN_EXIT = re.compile(r"\s{0,8}Exit code: {0,16}(\d{1,3})\s*$")
_MPIRUN_SIGNAL = re.compile(  # Open MPI 4.1.4 as captured here (held-out-2 saved outputs)
    r"mpirun noticed that process rank (\d{1,9}) with PID (\d{1,10}) on node (\S{1,256}) exited on signal (\d{1,3})")
_TASK_SIGNALS = {"Killed": "SIGKILL", "Aborted": "SIGABRT", "Segmentation fault": "SIGSEGV",
                 "Terminated": "SIGTERM", "Bus error": "SIGBUS", "Out Of Memory": "SIGKILL"}
_STEP_ABORTED = ("Job step aborted", "CANCELLED", "Force Terminated", "Terminating StepId", "TIME LIMIT")
_BLOCK_FIELD = re.compile(r"  (time|host|rank|exitcode|error_file|traceback) {0,8}: ?(.*)")
_BLOCK_ENTRY = re.compile(r"\[(\d{1,9})\]:")
_BLOCK_RANK = re.compile(r"(-?\d{1,9}) \(local_rank: (-?\d{1,9})\)")
_BLOCK_EXIT = re.compile(r"(-?\d{1,20}) \(pid: (\d{1,10})\)(?:\s{0,4}\((\w{1,16})\))?")
_BLOCK_SIGNAL = re.compile(r"Signal (\d{1,3}) \((\w{1,16})\) received by PID")
_TERMINATE = re.compile(r"terminate called after throwing an instance of '([^']{1,256})'")
_TERMINATE_BARE = ("terminate called without an active exception", "terminate called recursively")
_FRAME = re.compile(r"\s{1,16}File \"")
_FRAME_AT = re.compile(r"\s{1,16}File \"([^\"]{1,1024})\", line (\d{1,9}), in ([^\s]{1,256})")
_LIBRARY_PATH = re.compile(r"/(?:site|dist)-packages/|/lib/python\d|^<")
_C10D_FILES = ("distributed_c10d.py", "c10d_logger.py")
_EXC_SUFFIXES = ("Error", "Exception", "Interrupt", "Exit", "Warning", "Failure", "Iteration", "Group", "Timeout")


# ---------------------------------------------------------------- the parser


class _Open:
    """A fact still read from the lines after it."""

    __slots__ = ("expect_last", "index", "kind", "key")

    def __init__(self, kind: str, index: int, key: tuple[int | None, int | None]) -> None:
        self.kind = kind  # "backend", "terminate", "fr-stack"
        self.index = index
        self.key = key
        self.expect_last = False


class _Block:
    """A ChildFailedError block being read."""

    def __init__(self, line: _Line, program: str, loose: bool = False) -> None:
        self.line = line
        self.program = program
        self.section = ""
        self.no_other = False
        self.entries: list[dict] = []
        self.field = ""
        self.loose = loose  # no border: a box collapsed onto few lines (its fields run together)
        self.misses = 0  # lines in a row a loose box did not read


# the box's fields that open a box cut to its tail: only torchrun's box prints them so
_BOX_TAIL_FIELDS: dict[str, re.Pattern[str]] = {
    "time": re.compile(r"\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d$"), "rank": _BLOCK_RANK, "exitcode": _BLOCK_EXIT}
_LOOSE_MISSES = 8  # lines in a row a loose box may not read before it is taken to have ended
# a collapsed box's fields, wherever they sit on a line: `rank2 (local rank: 2)exitcode: -9 (pid: 36071)`
_LOOSE_RANK = re.compile(r"rank:? ?(-?\d{1,9}) \(local[_ ]rank: ?(-?\d{1,9})\)")
_LOOSE_EXIT = re.compile(r"exitcode ?: ?(-?\d{1,20}) \(pid: ?(\d{1,10})\)")
_LOOSE_ERROR_FILE = re.compile(r"error[_ ]file ?: ?(\S{1,1024})")
_LOOSE_FIELD = re.compile(r"(time|host|traceback) {0,8}: ?(.*)")


class _Parser:
    def __init__(self) -> None:
        self.facts: dict[str, list] = {name: [] for name in FACT_KINDS}
        self.dropped = 0
        self.torch = False  # a line only PyTorch / torchrun / a traceback prints
        self.versions: list[str] = []
        self.prefixed: set[int] = set()
        self.open: dict[tuple[str, tuple[int | None, int | None]], _Open] = {}  # (kind, rank key) -> fact
        self.last_open: dict[str, tuple[int | None, int | None]] = {}  # kind -> the rank key opened last
        self.tracebacks: dict[tuple[int | None, int | None], int] = {}
        self.frames: dict[tuple[int | None, int | None], tuple[str, str]] = {}  # (own frame, collective)
        self.chains: dict[tuple[int | None, int | None], list[str]] = {}  # own frames so far, outermost first
        self.threads: dict[tuple[int | None, int | None], str] = {}  # `Exception in thread NAME:` before a traceback
        self.block: _Block | None = None
        self.after_child_error = False  # the line before ended `ChildFailedError:` (a box with no border may follow)
        self.border = False  # the line before was a `====` border
        self.pending_work: _Line | None = None  # a WorkNCCL line cut by a hard wrap
        self.step_aborted = False  # srun said it aborted or cancelled the step
        self.mpirun_process: int | None = None  # mpirun's non-zero-exit box: the rank of its `Process name:`
        self.desync_reporter: int | None = None
        self.desync_seq: int | None = None

    # ------------------------------------------------------------ plumbing

    def add(self, kind: str, fact: object) -> int:
        """Keep `fact` (index in its list), or count it dropped (-1)."""
        facts = self.facts[kind]
        if len(facts) >= MAX_LISTED:
            self.dropped += 1
            return -1
        facts.append(fact)
        return len(facts) - 1

    @staticmethod
    def where(line: _Line) -> dict:
        return {"line": line.number, "rank": line.rank, "task": line.task, "time": line.time}

    @staticmethod
    def group(line: _Line, body: str) -> dict:
        """Where, and the first `[PG ... Rank N]` prefix of the message."""
        fields = _Parser.where(line)
        m = _PG.search(body, 0, 600)
        if m:
            pg_id, guid, desc, rank = m.groups()
            fields.update(pg_rank=_int(rank), pg_id=pg_id or "", pg_name=guid or "", pg_desc=desc or "")
        return fields

    def find_open(self, kind: str, key: tuple[int | None, int | None]) -> _Open | None:
        """The open fact of `kind` for this rank; for a line with no prefix, the one opened
        last (c10 prefixes only the first line of a message that holds newlines)."""
        found = self.open.get((kind, key))
        if found is None and key == (None, None):
            last = self.last_open.get(kind)
            found = self.open.get((kind, last)) if last is not None else None
        return found

    def close(self, kind: str, key: tuple[int | None, int | None]) -> None:
        self.open.pop((kind, key), None)

    def start(self, kind: str, index: int, key: tuple[int | None, int | None]) -> None:
        """Read the lines after this one of the same rank into fact `index` of `kind`."""
        if len(self.open) >= 256:  # ranks that never finish theirs: forget the oldest
            del self.open[next(iter(self.open))]
        self.open[(kind, key)] = _Open(kind, index, key)
        self.last_open[kind] = key

    def amend(self, kind: str, index: int, **changes: object) -> None:
        facts = self.facts[kind]
        if 0 <= index < len(facts):
            facts[index] = msgspec.structs.replace(facts[index], **changes)

    # ------------------------------------------------------------ lines

    def feed(self, read: Line) -> None:
        line = _Line(read)
        if line.torch:
            self.torch = True
        if line.rank is not None and len(self.prefixed) < _RANKS_MAX * 16:
            self.prefixed.add(line.rank)
        if self.pending_work is not None:
            first, self.pending_work = self.pending_work, None
            body = line.body
            if "WorkNCCL(" not in body and "Watchdog caught" not in body and len(body) < 4096:
                first.body = first.body + body
                self.watchdog_timeout(first, wrapped=True)
                return
            self.watchdog_timeout(first, wrapped=False)
        if self.block is not None:
            if self.block_line(line):
                return
        elif self.box_tail(line):
            return
        body = line.body
        if not body.strip():
            return
        after_error, self.after_child_error = self.after_child_error, body.rstrip().endswith("ChildFailedError:")
        if (self.border or after_error) and body.endswith(" FAILED") and len(body) < 1024:
            self.block = _Block(line, body[:-7].strip(), loose=not self.border)
            self.border = False
            self.torch = True
            return
        self.border = body.startswith("========") and not body.strip("=")
        if self.border:
            return
        if self.open and self.continuation(line):
            return
        self.messages(line)
        self.python(line)

    def messages(self, line: _Line) -> None:
        """Every message handler whose words the line holds reads it (one line can hold a
        timeout, its abort and an NCCL error: each is its own fact)."""
        b = line.body
        for when, read in _MESSAGE_HANDLERS:
            if when(b):
                read(self, line)
        if self.desync_seq is not None and not _desync_words(b):
            if " started " in b or " finished " in b:
                self.desync(line)  # the snapshot's `[0, 1] started ALLREDUCE`
            else:
                self.desync_seq = None
        if "NCCL version " in b:
            for m in _NCCL_VERSION.finditer(b, 0, 4096):
                self.version(m.group(1))
        if ("torch.distributed" in b or "torchrun" in b or "ProcessGroupNCCL" in b or "torch/distributed" in b
                or "torchelastic" in b or "c10d" in b):
            self.torch = True

    def version(self, version: str) -> None:
        if version not in self.versions and len(self.versions) < 16:
            self.versions.append(version)

    # ------------------------------------------------------------ the watchdog

    def watchdog_timeout(self, line: _Line, wrapped: bool) -> None:
        b = line.body
        start = b.find("WorkNCCL(")
        at = b.find("Timeout(ms)=", start, start + 600)
        end = b.find(")", at + 12, at + 40) if at >= 0 else -1
        if end < 0:
            if not wrapped and self.pending_work is None and len(b) - start < 600:
                self.pending_work = line  # hard-wrapped: the rest is on the next line
            return
        fields: dict[str, str] = {}
        for m in _WORK_FIELD.finditer(b, start, end + 1):
            fields.setdefault(m.group(1), m.group(2))
        seq = _int(fields.get("SeqNum"))
        if seq is None or "OpType" not in fields:
            return
        ran = _RAN_FOR.match(b, end)
        self.add("timeouts", WatchdogTimeout(
            **self.group(line, b), seq=seq, op_type=fields["OpType"], numel_in=_int(fields.get("NumelIn")),
            numel_out=_int(fields.get("NumelOut")), timeout_ms=_int(fields.get("Timeout(ms)")),
            ran_for_ms=_int(ran.group(1)) if ran else None,
            terminated="watchdog thread terminated with exception" in b[:start], wrapped=wrapped,
        ))

    def abort(self, line: _Line) -> None:
        self.add("aborts", WatchdogAbort(**self.group(line, line.body)))

    def watchdog_progress(self, line: _Line) -> None:
        b = line.body
        m = _PROGRESS.search(b, 0, 4096)
        if not m:
            return
        kind: ProgressKind
        from_rank = None
        if "Received a dump signal" in b:
            kind = "dump-signal"
            d = _DUMP_FROM.search(b, 0, 1024)
            from_rank = _int(d.group(1)) if d else None
        elif "Timeout at NCCL work" in b:
            kind = "timeout-at"
        elif "sequence id" in b:
            kind = "failure-at"
        else:
            kind = "exception-at"
        self.add("progress", WatchdogProgress(
            **self.group(line, b), kind=kind, seq=_int(m.group(1)), last_enqueued=_int(m.group(2)),
            last_completed=_int(m.group(3)), from_rank=from_rank,
        ))

    def watchdog_stuck(self, line: _Line) -> None:
        b = line.body
        m = _STUCK.search(b, 0, 2048)
        works = _WORK_LIST.search(b)
        self.add("stuck", WatchdogStuck(
            **self.group(line, b), kind="stuck" if m else "heartbeat-timeout",
            seconds=_int(m.group(1)) if m else None, pending_works=_int(works.group(1)) if works else None,
        ))

    def desync(self, line: _Line) -> None:
        b = line.body
        where = self.where(line)
        m = _DESYNC_TIMEOUT.search(b)
        if m:
            reporter = _int(m.group(1))
            self.desync_reporter, self.desync_seq = reporter, None
            if where["rank"] is None:
                where["rank"] = reporter
            self.add("desync", DesyncLine(**where, kind="timeout-at", ranks=(reporter,) if reporter is not None else (),
                                          seq=_int(m.group(3)), op=m.group(2).strip()))
            return
        if where["rank"] is None:
            where["rank"] = self.desync_reporter
        m = _DESYNC_MISSING.search(b)
        if m:
            self.add("desync", DesyncLine(**where, kind="never-joined", ranks=_ranks(m.group(1))))
            return
        m = _DESYNC_UNFINISHED.search(b)
        if m:
            self.add("desync", DesyncLine(**where, kind="not-finished", ranks=_ranks(m.group(1)), seq=_int(m.group(2))))
            return
        m = _DESYNC_UNJOINED.search(b)
        if m:
            self.add("desync", DesyncLine(**where, kind="not-joined", ranks=_ranks(m.group(1)), seq=_int(m.group(3))))
            return
        m = _DESYNC_SNAPSHOT.search(b)
        if m:
            self.desync_seq = _int(m.group(1))
            return
        if self.desync_seq is not None:
            m = _DESYNC_STATE.search(b.rstrip())
            if m:
                self.add("desync", DesyncLine(**where, kind="started" if m.group(2) == "started" else "finished",
                                              ranks=_ranks(m.group(1)), seq=self.desync_seq, op=m.group(3)))
            else:
                self.desync_seq = None

    def mismatch(self, line: _Line) -> None:
        b = line.body
        sides = list(_FP_SIDE.finditer(b, 0, MAX_LINE))[:2]
        if not sides:
            return
        diff_at = b.find("Collectives differ in the following aspects:")
        prints = []
        for i, side in enumerate(sides):
            stop = sides[i + 1].start() if i + 1 < len(sides) else (diff_at if diff_at >= 0 else len(b))
            prints.append(self.fingerprint(int(side.group(1)), b[side.end():stop]))
        differences = ""
        if diff_at >= 0:
            differences = " ".join(b[diff_at + len("Collectives differ in the following aspects:"):].split())
        self.add("mismatches", CollectiveMismatch(
            **self.where(line), local=prints[0], remote=prints[1] if len(prints) > 1 else None,
            differences=clip(differences, _MESSAGE_MAX), old_wording=sides[0].group(2) is not None,
        ))

    @staticmethod
    def fingerprint(rank: int, text: str) -> CollectiveFingerprint:
        seq = _FP_SEQ.search(text, 0, 4096)
        op = _FP_OP.search(text, 0, 4096)
        shape = _FP_SHAPE.search(text, 0, 4096)
        dtypes = _FP_DTYPES.search(text, 0, 4096)
        device = _FP_DEVICE.search(text, 0, 4096)
        return CollectiveFingerprint(
            rank=rank, op_type=op.group(1) if op else "", seq=_int(seq.group(1)) if seq else None,
            shape=clip(shape.group(1), _MESSAGE_MAX) if shape else "",
            dtypes=clip(dtypes.group(1).strip(), _MESSAGE_MAX) if dtypes else "",
            device=device.group(1) if device else "",
        )

    def barrier(self, line: _Line) -> None:
        b = line.body
        m = _BARRIER.search(b)
        if m:
            self.add("barrier_failures", MonitoredBarrierFailure(
                **self.where(line), reporter=_int(m.group(1)), ranks=_ranks(m.group(2)), timeout_ms=_int(m.group(3))))
            return
        m = _BARRIER_TIMEOUT.search(b)
        if m:
            self.add("barrier_failures", MonitoredBarrierFailure(
                **self.where(line), ranks=_ranks(m.group(1)), timeout_ms=_int(m.group(2))))

    # ------------------------------------------------------------ errors

    def backend_error(self, line: _Line) -> None:
        b = line.body
        fields = self.group(line, b)
        watchdog = "watchdog thread terminated with exception" in b
        m = _NCCL_ERROR.search(b)
        if m:
            where, reason, version = m.groups()
            numbers = _VERSION_NUMBERS.match(version)
            version = numbers.group(0) if numbers else version
            self.version(version)
            kind: BackendKind = "nccl"
            start = m.start()
        else:
            t = _NCCL_TIMEOUT.search(b)
            c = None if t else _CUDA_ERROR.search(b)
            if t:
                kind, where, reason, version, start = "nccl-timeout", t.group(1), "timeout", "", t.start()
            elif c:
                kind, where, reason, version, start = "cuda", "", c.group(1).strip(), "", c.start()
            else:
                return
        exception = _type_before(b, start)
        index = self.add("backend_errors", BackendError(
            **fields, kind=kind, reason=clip(reason.strip(), _MESSAGE_MAX), exception=exception,
            where=_basename(where or ""), nccl_version=version, watchdog=watchdog,
        ))
        if index >= 0 and kind == "nccl":
            key = (line.rank, line.task)
            self.start("backend", index, key)

    def continuation(self, line: _Line) -> bool:
        """A line that belongs to an open fact (NCCL's detail and last error, a
        `what():`, FR stack frames); True when it was consumed."""
        key = (line.rank, line.task)
        b = line.body
        o = self.find_open("backend", key)
        if o is not None:
            if o.expect_last:
                self.amend("backend_errors", o.index, last_error=clip(b.strip(), _MESSAGE_MAX))
                self.close("backend", o.key)
                return True
            m = _NCCL_DETAIL.match(b)
            if m:
                self.amend("backend_errors", o.index, nccl_error=m.group(1),
                           detail=clip(m.group(2).strip(), _MESSAGE_MAX))
                return True
            if b.startswith("Last error:"):
                rest = b[len("Last error:"):].strip()
                if rest:
                    self.amend("backend_errors", o.index, last_error=clip(rest, _MESSAGE_MAX))
                    self.close("backend", o.key)
                else:
                    o.expect_last = True
                return True
            if o.key == key:  # a line with no prefix leaves a prefixed rank's error open
                self.close("backend", o.key)
        o = self.find_open("terminate", key)
        if o is not None:
            stripped = b.lstrip()
            if o.key == key or stripped.startswith("what():"):
                self.close("terminate", o.key)
            if stripped.startswith("what():"):
                self.amend("exceptions", o.index, message=clip(stripped[len("what():"):].strip(), _MESSAGE_MAX))
                self.messages(line)  # the message is also the watchdog's own text
                return True
        o = self.find_open("fr-stack", key)
        if o is not None:
            if _is_frame(b):
                frames = self.facts["flight_recorder"][o.index].frames
                if len(frames) < _FRAMES_MAX:
                    self.amend("flight_recorder", o.index, frames=(*frames, clip(b.strip(), _MESSAGE_MAX)))
                return True
            if o.key == key:
                self.close("fr-stack", o.key)
        return False

    def not_in_group(self, line: _Line) -> None:
        m = _NOT_IN_GROUP.search(line.body)
        if m is not None:
            rank = int(m.group(2))
            where = self.where(line)
            if rank >= 0:  # the message names the global rank itself (-1: no default group yet)
                where["rank"] = rank
            self.add("not_in_group", NotInGroup(**where, operation=m.group(1), global_rank=rank))

    def gloo(self, line: _Line) -> None:
        b = line.body

        def source_before(at: int) -> str:
            """gloo's `[.../gloo/transport/tcp/pair.cc:598]` just before `at`: "pair.cc:598"."""
            close = b.rfind("]", max(0, at - 40), at)
            opening = b.rfind("[", max(0, close - 600), close) if close > 0 else -1
            inside = b[opening + 1:close].rsplit(None, 1)[-1] if opening >= 0 and close > opening + 1 else ""
            return _basename(inside) if "/gloo/" in inside else ""

        for m in _GLOO_PEER.finditer(b):
            self.add("gloo", GlooError(**self.where(line), kind="peer-closed", source=source_before(m.start()),
                                       peer=m.group(1), port=_int(m.group(2)),
                                       message=clip(b[m.start():].strip(), _MESSAGE_MAX)))
        for m in _GLOO_TIMEOUT.finditer(b):
            self.add("gloo", GlooError(**self.where(line), kind="timeout", source=source_before(m.start()),
                                       operation=m.group(2), timeout_ms=_int(m.group(1)),
                                       message=clip(m.group(0), _MESSAGE_MAX)))
        size = _GLOO_SIZE.search(b)
        if size or "Received data size doesn't match" in b:
            at = size.start() if size else b.find("Received data size")
            self.add("gloo", GlooError(
                **self.where(line), kind="size-mismatch", source=source_before(at),
                received_bytes=_int(size.group(1)) if size else None,
                expected_bytes=_int(size.group(2)) if size else None,
                message=clip(b[at:].strip(), _MESSAGE_MAX)))
        for m in _GLOO_CONNECT.finditer(b):
            self.add("gloo", GlooError(**self.where(line), kind="connect", source=source_before(m.start()),
                                       peer=m.group(1), port=_int(m.group(2)),
                                       message=clip(m.group(3).strip(), _MESSAGE_MAX)))
        for m in _GLOO_READ.finditer(b):
            self.add("gloo", GlooError(**self.where(line), kind="read-error", source=source_before(m.start()),
                                       peer=m.group(1), port=_int(m.group(2)),
                                       message=clip(m.group(3).strip(), _MESSAGE_MAX)))

    def flight_recorder(self, line: _Line) -> None:
        b = line.body
        where = self.where(line)
        kind: FrKind
        path = ""
        if "Stack trace of the failed collective" in b:
            if "not found" in b:
                kind = "disabled"
            else:
                index = self.add("flight_recorder", FlightRecorderNote(**where, kind="stack"))
                if index >= 0:
                    key = (line.rank, line.task)
                    self.start("fr-stack", index, key)
                return
        elif "Finished writing" in b and "debug info to" in b:
            kind = "dump-written"
            m = _FR_PATH.search(b)
            path = m.group(1) if m else ""
        elif "Error" in b and "debug info" in b:
            kind = "dump-failed"
            m = _FR_PATH_ERROR.search(b)
            path = m.group(1) if m else ""
        elif "preparing to dump debug info" in b:
            kind = "dump-preparing"
        elif "signal dumping" in b:
            kind = "dump-signal-sent"
        elif "dump signal from another rank" in b:
            kind = "dump-signal-observed"
        else:
            return
        self.add("flight_recorder", FlightRecorderNote(**where, kind=kind, path=clip(path, 1024)))

    def address_in_use(self, line: _Line) -> None:
        b = line.body
        found = False
        for m in _BIND.finditer(b):
            errno = _int(m.group(3))
            if errno == 98 or "in use" in m.group(4):
                found = True
                self.add("address_in_use", AddressInUse(**self.where(line), port=_int(m.group(2)),
                                                        address=m.group(1), errno=errno))
        if found:
            return
        listen = _LISTEN_PORT.search(b)
        if listen and (listen.group(3) == "EADDRINUSE" or listen.group(2) in ("-98", "98")):
            self.add("address_in_use", AddressInUse(**self.where(line), port=_int(listen.group(1)), errno=98))
            return
        if "ddress already in use" in b or "EADDRINUSE" in b:
            e = _ERRNO_98.search(b)
            p = _PORT_NEAR.search(b)
            self.add("address_in_use", AddressInUse(**self.where(line), port=_int(p.group(1)) if p else None,
                                                    errno=_int(e.group(1)) if e else None))

    def rendezvous(self, line: _Line) -> None:
        b = line.body
        where = self.where(line)
        m = _CLIENT_TIMEOUT.search(b)
        if m:
            value = float(m.group(1))
            seconds = value / 1000 if m.group(2) == "ms" else value
            self.add("rendezvous", RendezvousError(**where, kind="client-timeout", seconds=seconds,
                                                   address=f"{m.group(3)}:{m.group(4)}",
                                                   message=_from(b, "The client socket", m.start())))
            return
        m = _CLIENTS_JOINED.search(b)
        if m:
            self.add("rendezvous", RendezvousError(**where, kind="clients-timeout", seconds=float(m.group(1)),
                                                   joined=_int(m.group(2)), expected=_int(m.group(3)),
                                                   message=clip(b[m.start():].strip(), _MESSAGE_MAX)))
            return
        m = _WAIT_TIMEOUT.search(b)
        if m:
            self.add("rendezvous", RendezvousError(**where, kind="wait-timeout", seconds=int(m.group(1)) / 1000,
                                                   message=clip(b[m.start():].strip(), _MESSAGE_MAX)))
            return
        m = _CLIENT_FAILED.search(b)
        if m:
            self.add("rendezvous", RendezvousError(**where, kind="connect-failed", address=m.group(1).rstrip(".,"),
                                                   message=_from(b, "The client socket", m.start())))
            return
        at = b.find("failed to listen on any local network address")
        if at >= 0:
            p = _LISTEN_PORT.search(b)
            self.add("rendezvous", RendezvousError(**where, kind="listen-failed",
                                                   address=f":{p.group(1)}" if p else "",
                                                   message=_from(b, "The server socket", at)))
            return
        m = _STORE_WAIT.search(b)
        if m and "timed out after" in b:
            self.add("rendezvous", RendezvousError(**where, kind="store-wait", address=_address(m.group(1)),
                                                   message=clip(b[m.start():].strip(), _MESSAGE_MAX)))
            return
        if "Socket Timeout" in b:
            self.add("rendezvous", RendezvousError(**where, kind="socket-timeout",
                                                   message=clip(b.strip(), _MESSAGE_MAX)))
            return
        if b[:1] in " \t" and self.tracebacks.get((line.rank, line.task)):
            return  # a traceback's source line: `raise RendezvousClosedError`
        for m in _RDZV_CLASS.finditer(b, 0, 4096):
            if b[max(0, m.start() - 6):m.start()] == "raise ":
                continue
            rest = b[m.end() + 1:].strip() if m.end() < len(b) else ""
            self.add("rendezvous", RendezvousError(**where, kind=_RDZV_KINDS[m.group(1)],
                                                   message=clip(rest.strip('",'), _MESSAGE_MAX)))
            return

    # ------------------------------------------------------------ torchrun's agent

    def worker_failed(self, line: _Line) -> None:
        m = _WORKER_FAILED.search(line.body)
        if m:
            exitcode = int(m.group(1)) if _int(m.group(1)) is not None else 0
            binary = m.group(4).strip()
            self.add("worker_failures", WorkerFailed(
                **self.agent(line), exitcode=exitcode, local_rank=_int(m.group(2)), pid=_int(m.group(3)),
                binary=clip(binary, 512), signal=SIGNALS.get(-exitcode, "") if exitcode < 0 else ""))

    @staticmethod
    def agent(line: _Line) -> dict:
        """Where, for the agent's own lines: its label is a node's, never a rank."""
        return {"line": line.number, "task": line.task, "time": line.time}

    def launcher_line(self, line: _Line) -> None:
        """torchrun's agent on a worker that failed, or srun on its tasks."""
        if "failed (exitcode: " in line.body:
            self.worker_failed(line)
        elif line.body.startswith("mpirun noticed"):
            self.mpirun_signal(line)
        else:
            self.srun(line)

    def mpirun_signal(self, line: _Line) -> None:
        """Open MPI's `process rank R ... exited on signal N`: the first rank it saw killed."""
        m = _MPIRUN_SIGNAL.match(line.body)
        if m is None:
            return
        number = int(m.group(4))
        self.add("task_exits", TaskExit(**self.agent(line), host=clip(m.group(3), 256), tasks=(int(m.group(1)),),
                                        state=f"exited on signal {number}", signal=SIGNALS.get(number, ""),
                                        launcher="mpirun"))

    def mpirun_exit(self, line: _Line) -> None:
        """Open MPI's `mpirun detected that one or more processes exited with non-zero status`
        box: `Process name: [[J,1],R]` then `Exit code: N`, the first rank to exit non-zero."""
        m = _MPIRUN_PROCESS.match(line.body)
        if m is not None:
            self.mpirun_process = int(m.group(1))
            return
        m = _MPIRUN_EXIT.match(line.body)
        if m is not None and self.mpirun_process is not None:
            self.add("task_exits", TaskExit(**self.agent(line), tasks=(self.mpirun_process,), exitcode=int(m.group(1)),
                                            state=f"exited with exit code {m.group(1)}", launcher="mpirun"))
        self.mpirun_process = None

    def srun(self, line: _Line) -> None:
        """srun's own lines: how each task ended, and whether srun had aborted the step."""
        b = line.body
        if any(w in b for w in _STEP_ABORTED):
            self.step_aborted = True
            return
        m = _TASK_EXIT.match(b)
        if m is None:
            return
        host, tasks, state = m.group(1), _task_ids(m.group(2)), m.group(3).strip()
        code = _EXIT_CODE.match(state)
        signal = _TASK_SIGNALS.get(state, "")
        self.add("task_exits", TaskExit(**self.agent(line), host=clip(host, 256), tasks=tasks,
                                        state=clip(state, 64), exitcode=_int(code.group(1)) if code else None,
                                        signal=signal, oom=state.lower() == "out of memory",
                                        after_abort=self.step_aborted))

    def agent_signal(self, line: _Line) -> None:
        b = line.body
        m = _DEATH.search(b)
        if m:
            number = _int(m.group(1))
            self.add("agent_signals", AgentSignal(**self.agent(line), kind="death-signal",
                                                  signal=SIGNALS.get(number or 0, ""), number=number))
            return
        m = _GOT_SIGNAL.search(b)
        if m:
            value = m.group(2)
            number = _int(value)
            name = value if number is None else SIGNALS.get(number, "")
            if number is None:
                number = next((n for n, s in SIGNALS.items() if s == name), None)
            self.add("agent_signals", AgentSignal(**self.agent(line), kind="signal-exception", signal=name,
                                                  number=number, pid=_int(m.group(1))))

    def closing_signal(self, line: _Line) -> None:
        m = _CLOSING.search(line.body)
        if m:
            pid = _int(m.group(1) or m.group(2))
            if pid is not None:
                self.add("closing_signals", ClosingSignal(**self.agent(line), pid=pid, signal=m.group(3)))

    def worker_group(self, line: _Line) -> None:
        b = line.body
        m = _GROUP_RESTART.search(b)
        if m:
            self.add("worker_group", WorkerGroupEvent(**self.agent(line), kind="restart", role=m.group(1),
                                                      state=m.group(2), attempts_left=_int(m.group(3)),
                                                      max_restarts=_int(m.group(4))))
            return
        m = _GROUP_STEP.search(b)
        if m:
            self.add("worker_group", WorkerGroupEvent(**self.agent(line), kind=_GROUP_STEPS[m.group(2)],
                                                      role=m.group(1)))
            return
        m = _GROUP_DONE.search(b)
        if m:
            self.add("worker_group", WorkerGroupEvent(**self.agent(line), kind="finished", role=m.group(1)))
            return
        m = _GROUP_NODES.search(b)
        if m:
            self.add("worker_group", WorkerGroupEvent(**self.agent(line), kind="membership-change",
                                                      role=m.group(1), new_nodes=_int(m.group(2))))

    def block_line(self, line: _Line) -> bool:
        """A line of the open ChildFailedError block; False when the block ended before it."""
        block = self.block
        assert block is not None
        b = line.body
        stripped = b.strip()
        if not stripped:
            return True
        if stripped.startswith("=====") and not stripped.strip("="):
            self.end_block(complete=True)
            return True
        if self.block_marker(block, stripped):
            return True
        m = _BLOCK_ENTRY.fullmatch(stripped)
        if m:
            if len(block.entries) < MAX_LISTED:
                block.entries.append({"line": line.number, "index": int(m.group(1)),
                                      "root_cause": block.section == "root", "traceback": []})
            block.field = ""
            return True
        if block.entries:
            entry = block.entries[-1]
            m = _BLOCK_FIELD.fullmatch(b)
            if m:
                name, value = m.group(1), m.group(2).strip()
                block.field = name
                if name == "traceback":
                    entry["traceback"].append(value)
                else:
                    entry[name] = value
                return True
            if block.field == "traceback" and b[:1] in " \t":
                if len(entry["traceback"]) < _TRACEBACK_LINES:
                    entry["traceback"].append(b[2:] if b.startswith("  ") else b)
                return True
            if block.loose and self.loose_fields(entry, stripped):
                block.misses = 0
                return True
        if block.loose and block.misses < _LOOSE_MISSES:
            block.misses += 1  # a collapsed box's stray words (`time`, `host`, their values): read on
            return False
        self.end_block(complete=False)
        return False

    def box_tail(self, line: _Line) -> bool:
        """A failure box cut to its tail (the paste begins inside it): its `Root Cause`
        title, or a field only torchrun's box prints (`  time      : 2025-05-21_15:43:03`,
        `  rank      : 0 (local_rank: 0)`, `  exitcode  : -9 (pid: 14750)`) opens it with
        no program; True when the line was read."""
        b = line.body
        if b.startswith("Root Cause (first observed failure)"):
            self.block = _Block(line, "", loose=True)
            self.block.section, self.torch = "root", True
            return True
        m = _BLOCK_FIELD.fullmatch(b) if b.startswith("  ") else None
        if m is None:
            return False
        shape = _BOX_TAIL_FIELDS.get(m.group(1))
        if shape is None or not shape.match(m.group(2).strip()):
            return False
        self.block = _Block(line, "", loose=True)
        self.block.entries.append({"line": line.number, "index": 0, "root_cause": False, "traceback": []})
        self.torch = True
        return self.block_line(line)

    @staticmethod
    def block_marker(block: _Block, stripped: str) -> bool:
        """A box's rule, section title or `<NO_OTHER_FAILURES>`; True when it was one."""
        if stripped.startswith("-----") and not stripped.strip("-"):
            block.field = ""
        elif stripped == "Failures:":
            block.section, block.field = "failures", ""
        elif stripped.startswith("Root Cause"):
            block.section, block.field = "root", ""
        elif stripped in ("<NO_OTHER_FAILURES>", "<NO OTHER FAILURES>"):
            block.no_other = True
        else:
            return False
        return True

    @staticmethod
    def loose_fields(entry: dict, text: str) -> bool:
        """A collapsed box's fields run together on one line (`rank2 (local rank: 2)exitcode:
        -9 (pid: 36071)error file: <N/A>`), or a field whose indent was lost; True when read."""
        m = _LOOSE_FIELD.match(text)
        if m:
            name, value = m.group(1), m.group(2).strip()
            if name == "traceback":
                entry["traceback"].append(value)
            else:
                entry[name] = value
            return True
        found = False
        for pattern, name, shape in ((_LOOSE_RANK, "rank", "{} (local_rank: {})"),
                                     (_LOOSE_EXIT, "exitcode", "{} (pid: {})"),
                                     (_LOOSE_ERROR_FILE, "error_file", "{}")):
            m = pattern.search(text, 0, 4096)
            if m:
                entry[name] = shape.format(*m.groups())
                found = True
        return found

    def end_block(self, complete: bool) -> None:
        block = self.block
        assert block is not None
        self.block = None
        failures = tuple(self.child_failure(e) for e in block.entries[:MAX_LISTED])
        self.add("child_failed", ChildFailedBlock(
            **self.agent(block.line), program=clip(block.program, 256), failures=failures,
            no_other_failures=block.no_other, complete=complete))

    @staticmethod
    def child_failure(entry: dict) -> ChildFailure:
        rank = local_rank = exitcode = pid = None
        signal = ""
        m = _BLOCK_RANK.match(entry.get("rank", ""))
        if m:
            rank, local_rank = _int(m.group(1)), _int(m.group(2))
        m = _BLOCK_EXIT.match(entry.get("exitcode", ""))
        if m:
            exitcode, pid = _int(m.group(1)), _int(m.group(2))
            signal = m.group(3) or ""
        lines = entry["traceback"]
        text = "\n".join(lines)
        s = _BLOCK_SIGNAL.search(lines[0]) if lines else None
        if s:
            signal = s.group(2)
        if not signal and exitcode is not None and exitcode < 0:
            signal = SIGNALS.get(-exitcode, "")
        exception = ""
        for candidate in reversed(lines):
            candidate = candidate.strip()
            if candidate:
                if _exception_head(candidate) is not None:
                    exception = clip(candidate, _MESSAGE_MAX)
                break
        error_file = entry.get("error_file", "")
        return ChildFailure(
            line=entry["line"], index=entry["index"], root_cause=entry["root_cause"],
            time=clip(entry.get("time", ""), 64), host=clip(entry.get("host", ""), 256), rank=rank,
            local_rank=local_rank, exitcode=exitcode, pid=pid, signal=signal,
            error_file="" if error_file == "<N/A>" else clip(error_file, 1024),
            traceback=text if len(text) <= _TRACEBACK_MAX else text[:_TRACEBACK_MAX] + "...", exception=exception,
        )

    # ------------------------------------------------------------ Python tracebacks

    def python(self, line: _Line) -> None:
        b = line.body
        key = (line.rank, line.task)
        if self.traceback_head(key, b):
            return
        first = b[:1]
        if first in " \t":
            if _FRAME.match(b):
                if not self.tracebacks.get(key):
                    self.tracebacks[key] = 1  # a fragment that starts inside a traceback
                self.frame(key, b)
            return
        if first == "t" and b.startswith("terminate called"):
            m = _TERMINATE.match(b)
            if m is None and b.rstrip() not in _TERMINATE_BARE:
                return
            native = m.group(1) if m else ""
            index = self.add("exceptions", ExceptionRaised(
                **self.where(line), type=native, native=True,
                message="" if m else clip(b.strip(), _MESSAGE_MAX)))
            if m and index >= 0:
                self.start("terminate", index, key)
            return
        framed = self.tracebacks.get(key, 0) > 0
        head = _exception_head(b, in_traceback=framed)
        if head is None:
            return
        name, message = head
        last = name.rsplit(".", 1)[-1]
        if not framed and not last.endswith(("Error", "Exception")):
            return
        if not framed and message is None and "." not in name:
            return  # a bare word alone, with no traceback around it
        own, collective = self.frames.pop(key, ("", "")) if framed else ("", "")
        thread = self.threads.pop(key, "") if framed else ""
        chain = tuple(self.chains.pop(key, ())) if framed else ()
        if framed:
            self.tracebacks[key] -= 1
        where = self.where(line)
        if where["rank"] is None and message:
            said = _SELF_RANK.match(message.lstrip())
            if said:
                where["rank"] = _int(said.group(1))  # no label: the message names its own rank
        self.add("exceptions", ExceptionRaised(**where, type=name,
                                               message=clip((message or "").strip(), _MESSAGE_MAX), framed=framed,
                                               frame=own, collective=collective, thread=thread,
                                               chain=chain))

    def traceback_head(self, key: tuple[int | None, int | None], b: str) -> bool:
        """`Traceback (most recent call last):` opens a traceback; threading.excepthook's
        `Exception in thread NAME:` before it names the thread it ends. True: read."""
        if b.startswith("Traceback (most recent call last):"):
            self.tracebacks[key] = min(self.tracebacks.get(key, 0) + 1, 64)
            self.frames.pop(key, None)
            self.chains.pop(key, None)
            self.torch = True
            return True
        if b.startswith("Exception in thread ") and b.rstrip().endswith(":"):
            if len(self.threads) < 4096 or key in self.threads:
                self.threads[key] = clip(b.rstrip()[len("Exception in thread "):-1], 128)
            return True
        return False

    def frame(self, key: tuple[int | None, int | None], body: str) -> None:
        """A traceback's `File "PATH", line N, in FUNC`: the innermost frame of the program's
        own code (not a library's) and the torch.distributed function it is in, so far."""
        m = _FRAME_AT.match(body)
        if m is None:
            return
        path, number, func = m.groups()
        own, collective = self.frames.get(key, ("", ""))
        if path.endswith(_C10D_FILES) and "/distributed/" in path:
            if func != "wrapper":
                collective = clip(func, 64)
        elif not _LIBRARY_PATH.search(path):
            own, collective = f"{clip(_basename(path), 128)}:{number} in {clip(func, 128)}", ""
            chain = self.chains.setdefault(key, []) if len(self.chains) < 4096 or key in self.chains else []
            if len(chain) < _CHAIN_MAX:
                chain.append(own)
        if len(self.frames) < 4096 or key in self.frames:
            self.frames[key] = (own, collective)

    def result(self, lines: int) -> TorchLog:
        if self.pending_work is not None:
            first, self.pending_work = self.pending_work, None
            self.watchdog_timeout(first, wrapped=True)
        if self.block is not None:
            self.end_block(complete=False)
        facts = {name: tuple(values) for name, values in self.facts.items()}
        return TorchLog(lines=lines, nccl_versions=tuple(self.versions), prefixed_ranks=tuple(sorted(self.prefixed)),
                        dropped=self.dropped, **facts)


def _exception_head(body: str, in_traceback: bool = False) -> tuple[str, str | None] | None:
    """`pkg.Type: message` -> (pkg.Type, message), `pkg.Type` -> (pkg.Type, None): the last
    line of a Python traceback, None for any other line. The type's last part must look
    like an exception class (CamelCase, or one of _EXC_SUFFIXES; inside a traceback a
    program's own class of any CamelCase name, which Python prints without `__main__.`);
    NCCL's `ncclXxx:` detail lines are not exceptions."""
    colon = body.find(":", 0, 300)
    if colon >= 0:
        after = body[colon + 1:colon + 2]
        if after not in ("", " "):
            return None
        name, message = body[:colon], body[colon + 1:]
    else:
        if len(body) > 300:
            return None
        name, message = body.rstrip(), None
    if not name or not name.isascii() or name.startswith("nccl"):
        return None
    parts = name.split(".")
    if len(parts) > 17 or not all(p.isidentifier() for p in parts):
        return None
    last = parts[-1]
    camel = last[:1].isupper() and any(c.islower() for c in last)
    if not last.endswith(_EXC_SUFFIXES) and not (camel and (len(parts) > 1 or in_traceback and message is not None)):
        return None
    return name, message


def _address(text: str) -> str:
    """`[::ffff:127.0.0.1]:30520` -> `127.0.0.1:30520`; `[::1]:80` -> `::1:80`."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    return f"{host.removeprefix('::ffff:')}:{port}"


def _from(body: str, opening: str, at: int) -> str:
    """The message from `opening` (looked for just before `at`) to the end of the line."""
    start = body.rfind(opening, max(0, at - 40), at + len(opening))
    return clip(body[start if start >= 0 else at:].strip(), _MESSAGE_MAX)


def _type_before(body: str, start: int) -> str:
    """The exception type printed just before `start` (`pkg.DistBackendError: ` + text)."""
    head = body[max(0, start - 300):start]
    if not head.endswith(": "):
        return ""
    token = head[:-2].rsplit(None, 1)[-1] if head[:-2].strip() else ""
    parsed = _exception_head(token)
    return parsed[0] if parsed else ""


def _is_frame(body: str) -> bool:
    """A Flight Recorder stack frame: `#0 all_reduce from .../distributed_c10d.py:3174`."""
    if not _FR_FRAME.match(body) or " from " not in body:
        return False
    tail = body.rstrip().rsplit(":", 1)
    return len(tail) == 2 and tail[1].isascii() and tail[1].isdigit()


def _desync_words(b: str) -> bool:
    return ("collective" in b and ("#" in b or "lagging" in b)) or "started ranks:" in b or "finished ranks:" in b


# (the words a message holds, the _Parser method that reads it): every one that matches reads the line
_MESSAGE_HANDLERS: tuple[tuple[Callable[[str], bool], Callable[[_Parser, _Line], None]], ...] = (
    (lambda b: "WorkNCCL(" in b, lambda p, line: p.watchdog_timeout(line, wrapped=False)),
    (lambda b: "last enqueued" in b or "Last enqueued" in b, _Parser.watchdog_progress),
    (lambda b: "Heartbeat monitor timed out" in b or "watchdog got stuck for" in b, _Parser.watchdog_stuck),
    (lambda b: "taking the entire process down" in b, _Parser.abort),
    (_desync_words, _Parser.desync),
    (lambda b: "Detected mismatch between collectives" in b, _Parser.mismatch),
    (lambda b: "monitoredBarrier" in b, _Parser.barrier),
    (lambda b: "NCCL error" in b or "NCCL timeout in: " in b or "CUDA error: " in b, _Parser.backend_error),
    (lambda b: ("Connection closed by peer" in b or "Timed out waiting" in b or "op.preamble.length" in b
                or "Received data size doesn't match" in b or "Read error [" in b or "connect [" in b), _Parser.gloo),
    (lambda b: ("Stack trace of the failed collective" in b or "debug info" in b or "signal dumping" in b
                or "dump signal from another rank" in b), _Parser.flight_recorder),
    (lambda b: "ddress already in use" in b or "EADDRINUSE" in b or "errno: 98" in b, _Parser.address_in_use),
    (lambda b: ("Rendezvous" in b or "socket" in b or "clients joined" in b or "wait timeout after" in b
                or "Socket Timeout" in b), _Parser.rendezvous),
    (lambda b: "failed (exitcode: " in b or b.startswith(("srun: ", "slurmstepd", "mpirun noticed")),
     _Parser.launcher_line),
    (lambda b: "death signal" in b or "got signal: " in b, _Parser.agent_signal),
    (lambda b: "closing signal" in b or "via signal" in b, _Parser.closing_signal),
    (lambda b: "orker group" in b, _Parser.worker_group),
    (lambda b: "Process name: [[" in b or "Exit code: " in b, _Parser.mpirun_exit),
    (lambda b: "does not belong to the given group" in b, _Parser.not_in_group),
)


# torchx's `ROLE/REPLICA [LOCAL_RANK]:` before each line of a replica's output (torchrun's `--tee`
# label with an empty role after torchx's own); the line layer does not know it yet
_TORCHX = re.compile(r"([A-Za-z_][\w\-]{0,63})/(\d{1,7}) \[(\d{1,7})\]: ?", re.ASCII)


_CHAIN_MAX = 32  # own frames kept per traceback (outermost first): deeper recursion is not read
_INDENT_MAX = 16  # blanks before a label of a paste indented as a whole (a markdown list's code block)


def _relabelled(line: Line) -> Line:
    """A line's labels the line layer left on: torchx's `trainer/0 [0]:` (the rest read again
    by the layer: a c10 or glog prefix after it), and any label behind a whole paste's indent
    (`    [rank3]:[E1206 ...]`: the layer reads labels at the line's start only). The torchx
    local rank is the rank on replica 0 only (as torchrun's alone is on one node); on another
    replica the rank is not known."""
    if line.labels:
        return line
    text = line.text
    stripped = text.lstrip(" \t")
    if len(text) - len(stripped) > _INDENT_MAX:
        return line
    m = _TORCHX.match(stripped) if "/" in stripped[:72] else None
    if m is not None:
        again = read_line(line.number, stripped[m.end():], max_line=MAX_LINE)[0]
        replica, local = int(m.group(2)), int(m.group(3))
        return msgspec.structs.replace(
            again, raw=line.raw, labels=m.group(0) + again.labels, role=f"{m.group(1)}/{replica}",
            local_rank=local if replica == 0 else again.local_rank, repairs=line.repairs + again.repairs)
    if len(stripped) != len(text) and stripped[:1] in "[(EWIF":
        again = read_line(line.number, stripped, max_line=MAX_LINE)[0]
        if again.labels:
            return msgspec.structs.replace(again, raw=line.raw, repairs=line.repairs + again.repairs)
    return line


_HEAD_TAIL = 40  # characters after a `[PG ... Rank N]` group of a c10 line cut by a word wrap


def _cut_after_group(line: Line) -> bool:
    """A c10 line that ends a few words after its `[PG ... Rank N]` group, at a terminal's
    width: a message a word wrap cut (`[Rank 0] Watchdog`, `[PG 0 Rank 0]`)."""
    text = line.text.rstrip()
    if line.logger != "c10" or len(line.raw) < 40 or not text.endswith(("]", *"abcdefghijklmnopqrstuvwxyz")):
        return False
    m = _PG.search(text, max(0, len(text) - 200))
    return m is not None and len(text) - m.end() <= _HEAD_TAIL and text[m.end():].count(" ") <= 3


def _finishes(head: Line, line: Line) -> bool:
    """`line` finishes `head`'s cut sentence: no prefix of its own, not a new record, and
    lowercase where the head had words after its group (the group alone: any word)."""
    text = line.text
    if line.labels or line.number == head.number or not text.strip() or text[:1] in " \t[" or line.noise:
        return False
    return head.text.rstrip().endswith("]") or text[:1].islower()


def _word_unwrapped(lines: Iterator[Line]) -> Iterator[Line]:
    """The lines, each c10 line a word wrap cut after its group joined with the next."""
    held: Line | None = None
    for line in lines:
        if held is not None:
            head, held = held, None
            if _finishes(head, line):
                yield msgspec.structs.replace(head, text=head.text.rstrip() + " " + line.text.strip())
                continue
            yield head
        if _cut_after_group(line):
            held = line
        else:
            yield line
    if held is not None:
        yield held


def parse_torch_log(text: str) -> TorchLog:
    """A PyTorch distributed / torchrun log -> TorchLog (see the module's docstring)."""
    parser = _Parser()
    lines = (_relabelled(line) for line in read_lines(text, max_line=MAX_LINE) if not line.noise)
    for line in _word_unwrapped(lines):
        parser.feed(line)
    number = text.count("\n") + 1  # lines as "\n" splits them, an empty last one counted
    log = parser.result(number)
    if not parser.torch and not any(getattr(log, name) for name in FACT_KINDS):
        raise ParseError("torch-log: no PyTorch distributed, torchrun or Python traceback line "
                         f"(starts with {clip(text.strip(), 60)!r})")
    return log
