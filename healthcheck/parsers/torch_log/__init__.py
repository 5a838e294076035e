"""PyTorch distributed and torchrun (elastic) output -> TorchLog: typed facts, each with
the line that printed it.

What is read (the wording of torch 1.9 to 2.13, from the released wheels' strings and
the real logs in tests/fixtures/corpus/torch-*, torchrun, with their sources in SOURCES.md):

* ProcessGroupNCCL's watchdog: `WorkNCCL(SeqNum=, OpType=, NumelIn=, NumelOut=,
  Timeout(ms)=) ran for N milliseconds` in every wording (1.x has no Numel fields, before
  1.11 no SeqNum, 1.8-1.10 a `TensorShape=[...]` and a rank's blocking wait's `Work:
  WorkNCCL(...) timed out in call to wait()`, `in_wait`; from 2.3 the same text comes again
  inside `Process group watchdog thread terminated with exception:` and a `terminate called
  ... what():`); the process group status lines
  (`Timeout at NCCL work: N, last enqueued NCCL work: E, last completed NCCL work: C`
  2.3-2.5, `Exception (either an error or timeout) detected by watchdog at work: N, ...`
  2.4-2.5, `failure detected by watchdog at work sequence id: N PG status: last enqueued
  work: E, last completed work: C` 2.6+, `Received a dump signal due to a collective
  timeout from rank R ... Last enqueued NCCL work: E, last completed NCCL work: C`);
  the heartbeat monitor (`Heartbeat monitor timed out!` 2.3-2.4, `watchdog got stuck for
  N seconds`); `taking the entire process down`; a `Watchdog caught collective operation
  timeout` cut before its WorkNCCL record (`cut_timeouts`: the rank timed out, the
  collective unknown).
* The log prefixes that name a process group: `[PG 3 Rank 4]` (2.3-2.4), `[PG 0
  (default_pg) Rank 2]` (2.4), `[PG ID 0 PG GUID 0(default_pg) Rank 3]` (2.5+), `[Rank N]`.
  Their rank is the rank *in that group* (`pg_rank`); a fact's `rank` is the global one.
  Where no label names it, a message naming the rank that printed it gives `rank`
  (state.SELF_NAMED: `[N] is setting up NCCL communicator`, `... on ranks. Rank N is running`,
  `store based barrier on rank N`, gloo's `rank N (this process)`, `Rank N successfully
  reached monitoredBarrier`, `[Rank 0]: Ranks ...`), also inside a `what():`.
* TORCH_NCCL_DESYNC_DEBUG's report, TORCH_DISTRIBUTED_DEBUG=DETAIL's `Detected mismatch
  between collectives on ranks` (both fingerprints; the old one-sided `inconsistent
  collective` wording) and `failed to pass monitoredBarrier`.
* NCCL errors as torch raises them: `NCCL error in: FILE:LINE, <reason>, NCCL version V`
  (DistBackendError, RuntimeError before 2.1, or inside a watchdog exception), then
  `ncclXxx: <detail>`, `Last error:` and the line after it (NCCL's own last error,
  e.g. `Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 60`; the peer it
  names, `Got completion from peer 172.21.17.89<38536>`, as `peer` and `port`); `CUDA error:`.
  The `ncclXxx: <detail>` line of one of NCCL's results with no `NCCL error in:` before it
  (a paste cut the head off) opens an NCCL error of its own, its last error read after it.
  Those lines collapsed by a terminal onto the `NCCL error` line, each break become a run
  of blanks, are split back before each (reader.COLLAPSED_LINES, lines.uncollapsed).
* gloo: `Connection closed by peer [ip]:port`, `connect [ip]:port: ERROR`, `Connect timeout
  [ip]:port`, `Timed out waiting Nms for recv|send operation to complete`,
  `op.preamble.length <= op.nbytes. X vs Y` / `Received data size doesn't match`, `Read
  error [ip]:port: ...`, `writev [ip]:port: ...`, `Gloo connectFullMesh failed with [SRC]
  CAUSE`, any other `[enforce fail at .../gloo/...]` (gloo::EnforceNotMet); the peer by
  parsers/peers.endpoint (IPv4, IPv6, a host name).
* Flight Recorder: `Stack trace of the failed collective not found ... FlightRecorder is
  disabled`, the stack that is printed instead (`#0 all_reduce from FILE:LINE`), where a
  dump was written, dump signals between ranks.
* Ports in use (`failed to bind to [::]:29500 (errno: 98 - Address already in use)`,
  `port: 29620, useIpv6: false, code: -98, name: EADDRINUSE`), rendezvous and store
  errors (RendezvousClosedError, ...ConnectionError, ...TimeoutError, the client socket's
  `timed out after 60s while trying to connect to HOST:PORT`, `Timed out after N seconds
  waiting for clients. J/W clients joined.`, `wait timeout after Nms`, `Socket Timeout`,
  the store client's `TCP client failed to connect/validate to host H:P - retrying
  (try=N, ...): CAUSE` with its retry).
* The store lost after a rank connected to it (store.py, `store_lost`): c10d's `recvValue
  failed on SocketImpl(..., remote=[localhost]:29500): Connection reset by peer` (also
  recvValueWithTimeout, recvVector, sendBytes), ProcessGroupNCCL's `Failed to check the
  "should dump" flag on TCPStore, ... with error: ...`: the store's end and the error.
* The store-based barrier (store.py, `store_barrier`): `Waiting in store based barrier to
  initialize process group for rank: N, key: K (world_size=W, worker_count=C, ...)`, its
  timeout and `Completed store-based barrier`: which members waited, how many had joined.
* Horovod's stall inspector (stall.py, `stalled`): `One or more tensors were submitted ... by
  subset of ranks`, then per op `NAME [missing ranks: 1]` (or, oldest, `[ready ranks: ...]`),
  or a `Missing ranks:` block of `R: [NAMES]` lines: the ranks that did not submit each op;
  the rank a label names is the coordinator that reports.
* torchrun's agent: the ChildFailedError block field by field, `failed (exitcode: N)
  local_rank: L (pid: P) of binary: B`, `Received N death signal, shutting down workers`,
  `Process P got signal: S` (SignalException), `Sending process P closing signal SIG` /
  `Closing process P via signal SIG` (and mp.spawn's `Terminating process P via signal
  SIG`), worker group restarts.
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
joined with the unprefixed line that finishes its sentence, so the group names the rank;
so is a c10 line broken mid-sentence at a blank (after `... operation timeout:` the
`WorkNCCL(...)` record, after a lowercase word the lowercase rest; never a loop's step).

Every fact carries `line` (1-based, lines split on "\\n": the evidence is `file:line`),
`rank` (global: `[rankN]:`, else the launcher's label) and `task` (the label) where the
line has them, and `time` as the log prefix printed it. Each list keeps MAX_LISTED facts
(`dropped` counts the rest) and only the first MAX_LINE characters of a line are read, so
a hostile input costs its length. A text with no fact and no line of PyTorch, torchrun or
Python traceback output is a ParseError; nothing else is ever raised. Lines no handler read
are counted and sampled in `unrecognized` (evidence to show, never a reason to refuse).

The package, one job a module: facts.py (the facts, TorchLog), reader.py (each line made
torch's, the handler table, `parse_torch_log`), state.py (what the handlers share),
watchdog.py, errors.py, store.py, agent.py, tracebacks.py (the message handlers of each family),
steps.py (a training loop's own `step N` lines: each rank's last, `last_steps`; and its
last logged warning, `last_warnings`),
continued.py (lines that finish a fact opened before them), box.py (the ChildFailedError
box), text.py (small readers of numbers, rank lists and exception heads).
"""

from healthcheck.parsers.torch_log.facts import (
    FACT_KINDS,
    MAX_LISTED,
    SIGNALS,
    AddressInUse,
    AgentSignal,
    BackendError,
    BackendKind,
    ChildFailedBlock,
    ChildFailure,
    ClosingSignal,
    CollectiveFingerprint,
    CollectiveMismatch,
    CoordinationTimeout,
    DdpStart,
    DesyncKind,
    DesyncLine,
    ExceptionRaised,
    FingerprintRan,
    FlightRecorderNote,
    FrKind,
    GlooError,
    GlooKind,
    GroupEventKind,
    HarnessCaught,
    MemberEnd,
    MonitoredBarrierFailure,
    MpiAbortCall,
    NotInGroup,
    ProgressKind,
    RankWarned,
    RendezvousError,
    RendezvousKind,
    SetupFailed,
    SetupKind,
    SizeMismatch,
    StalledTensors,
    StepLogged,
    StoreBarrier,
    StoreBarrierState,
    StoreLost,
    StoreOp,
    TaskExit,
    TaskLost,
    TaskState,
    TorchLog,
    TracebackCut,
    WatchdogAbort,
    WatchdogCaught,
    WatchdogProgress,
    WatchdogStuck,
    WatchdogTimeout,
    WorkerFailed,
    WorkerGroupEvent,
)
from healthcheck.parsers.torch_log.reader import parse_torch_log, read_torch_lines
from healthcheck.parsers.torch_log.text import MAX_LINE

__all__ = [
    "FACT_KINDS", "MAX_LINE", "MAX_LISTED", "SIGNALS", "AddressInUse", "AgentSignal", "BackendError", "BackendKind",
    "ChildFailedBlock", "ChildFailure", "ClosingSignal", "CollectiveFingerprint", "CollectiveMismatch",
    "CoordinationTimeout", "DdpStart",
    "DesyncKind", "DesyncLine", "ExceptionRaised", "FlightRecorderNote", "FrKind", "GlooError", "GlooKind",
    "GroupEventKind", "HarnessCaught",
    "MemberEnd", "MonitoredBarrierFailure", "SizeMismatch", "MpiAbortCall", "NotInGroup", "ProgressKind", "RankWarned",
    "RendezvousError",
    "RendezvousKind", "SetupFailed", "SetupKind",
    "FingerprintRan", "StalledTensors", "StepLogged", "StoreBarrier", "StoreBarrierState", "StoreLost", "StoreOp",
    "TracebackCut", "TaskExit", "TaskLost", "TaskState",
    "TorchLog", "WatchdogAbort", "WatchdogCaught", "WatchdogProgress", "WatchdogStuck", "WatchdogTimeout",
    "WorkerFailed", "WorkerGroupEvent", "parse_torch_log", "read_torch_lines",
]
