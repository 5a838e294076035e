"""The facts a PyTorch distributed / torchrun log gives (see the package's docstring):
each names the line that printed it, the rank and the launcher's task where the line had
them."""

from __future__ import annotations

from typing import Literal

import msgspec

from healthcheck.parsers.lines import NOTHING_UNREAD, Unrecognized

MAX_LISTED = 1000  # facts kept per kind

# Linux signal numbers (torch prints the negative number as a worker's exit code).
SIGNALS = {1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS",
           8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2", 13: "SIGPIPE",
           14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ"}
SIGNAL_NAMES = frozenset(SIGNALS.values())  # an exception type that is a signal's name



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
    watchdog: a rank prints both). `wrapped`: reassembled from two hard-wrapped lines.
    `in_wait`: torch 1.x's `Work: WorkNCCL(...) timed out in call to wait()` (the rank's
    blocking wait, not the watchdog, saw the timeout: the same collective timed out)."""

    seq: int | None = None  # the record's SeqNum: not printed before torch 1.11
    op_type: str  # ALLREDUCE, _ALLGATHER_BASE, BROADCAST, ...
    numel_in: int | None = None  # absent before torch 2.0
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_for_ms: int | None = None
    terminated: bool = False
    wrapped: bool = False
    in_wait: bool = False


class WatchdogCaught(_GroupFact, frozen=True, omit_defaults=True, kw_only=True):
    """`Watchdog caught collective operation timeout` with no WorkNCCL record after it: the
    message cut (a paste's end, a log cut mid-line: `[Rank 5] Watchdog caught collective
    operati`) or its record lost. The rank's watchdog caught a timeout; which collective
    is not known. `text`: the message as far as it goes."""

    text: str


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
    """`[Rank 0]: Ranks 1, 3 failed to pass monitoredBarrier in 5000 ms` (DETAIL, gloo); also
    a rank that did arrive and then waited on rank 0 in vain, `Rank 1 successfully reached
    monitoredBarrier, but received errors while waiting for send/recv from rank 0`
    (ProcessGroupGloo.cpp): `reporter` 1, `waited_on` 0, no `ranks` (it names none absent)."""

    reporter: int | None = None  # the `[Rank N]:` that printed it
    ranks: tuple[int, ...] = ()
    timeout_ms: int | None = None
    waited_on: int | None = None  # a rank that reached the barrier: the rank its wait failed on


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
    # the peer NCCL's last error names (`NET/IB : Got completion from peer 172.21.17.89<38536>`,
    # `Connection closed by remote peer user<50260>`): peers.endpoint's address and port
    peer: str = ""
    port: int | None = None
    watchdog: bool = False


GlooKind = Literal["peer-closed", "timeout", "size-mismatch", "read-error", "write-error", "connect", "enforce"]


class GlooError(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A gloo transport error; `source` is gloo's `pair.cc:598` (the line varies by release).
    connect: pair.cc's `connect [ADDR]:PORT: ERROR` (the peer it could not reach, and why) or
    `Connect timeout [ADDR]:PORT` (message "Connect timeout"), or ProcessGroupGloo's `Gloo
    connectFullMesh failed with [SOURCE] CAUSE` (operation "connectFullMesh": the group's
    setup; the source and peer are its cause's). read-error, write-error: pair.cc's `Read
    error [ADDR]:PORT: ERRNO TEXT`, `writev [ADDR]:PORT: ...`. enforce: any other
    `[enforce fail at .../gloo/...]` (gloo::EnforceNotMet). peer, port: peers.endpoint's
    (IPv4, IPv6 without brackets, a host name)."""

    kind: GlooKind
    source: str = ""
    peer: str = ""  # the peer's address, without brackets
    port: int | None = None
    operation: str = ""  # recv, send (timeouts); connectFullMesh (connect)
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


class StalledTensors(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """Horovod's stall inspector (its coordinator's report, stall.py): tensors that some ranks
    submitted to a collective and the others did not, for longer than the warning time.
    `missing`: the ranks that did not submit `op` (`NAME [missing ranks: 1]`, or a `R: [NAMES]`
    line of the `Missing ranks:` block, Horovod 0.16+); `ready`: those that did (`NAME [ready
    ranks: 0, 2]`, Horovod before 0.13, where the missing are the world's others);
    `shutdown`: `R!:`, stalled past the shutdown time. `report`: which warning of the text it
    belongs to (1 for the first warning's; 0 for lines before any warning read). `rank` is the
    reporting rank's (the coordinator's), never the culprit's."""

    op: str = ""
    missing: tuple[int, ...] = ()
    ready: tuple[int, ...] = ()
    shutdown: bool = False
    report: int = 0


class StepLogged(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """The last step a rank's own training loop logged (`step 3 loss ...`; steps.py)."""

    step: int


class FingerprintRan(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """The last collective a rank's ProcessGroupWrapper logged it entering
    (TORCH_DISTRIBUTED_DEBUG=DETAIL, `[I ProcessGroupWrapper.cpp:562] [Rank 2] Running
    collective: CollectiveFingerPrint(SequenceNumber=1276, OpType=ALLREDUCE, ...)`)."""

    seq: int | None = None
    op_type: str = ""
    entered: int = 1  # how many `Running collective` lines the rank logged in the text, this one counted


class TracebackCut(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A traceback a rank's lines open (`Traceback (most recent call last):`) that the text
    ends before its exception line (a paste cut it, or the rank died while printing it): the
    rank was raising something, what is unknown. `line` is its header's, or its first frame's
    where the text starts inside it (`headed` False: the text holds no start of it)."""

    headed: bool = False


class HarnessCaught(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """torch's distributed test harness (torch/testing/_internal/common_distributed.py,
    `MultiProcessTestCase.run_test`) logging the exception its rank's test raised, `Caught
    exception:` under glog's prefix from that file; the harness then ends the rank's process
    (`sys.exit(TEST_ERROR_EXIT_CODE)`). The traceback follows under the same prefix."""


class MpiAbortCall(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """MPICH's `application called MPI_Abort(COMM, CODE) - process N` (mpireports.py): process
    N of COMM called MPI_Abort with CODE (its world rank where COMM is MPI_COMM_WORLD);
    `world` the caller's world rank where the line's MPICH prefix states it (any COMM)."""

    comm: str = ""
    code: int = 0
    process: int = 0
    world: int | None = None


class MemberEnd(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A tool's statement that numbered members of the job ended (memberends.py): `noun` as
    printed, lower-cased (rank, process, task, trainer, worker, ...), `members` their indices,
    `verb` the ending word, the cause where the line gives one (`signal` by name, `exitcode`),
    `world` where the same line states the job's size (`Out of all 4 trainers`)."""

    noun: str = ""
    members: tuple[int, ...] = ()
    verb: str = ""
    signal: str = ""
    exitcode: int | None = None
    world: int | None = None


class SizeMismatch(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A transport's or an MPI library's report that a message arrived with another size than
    its receiver posted (sizereports.py): `library` the wording's owner (mpich, nccl,
    open-mpi, ucx), the sizes where printed; the reporter's rank where its labels place it."""

    library: str = ""
    received_bytes: int | None = None
    expected_bytes: int | None = None
    message: str = ""


class CoordinationTimeout(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """JAX's coordination service whose start-up barrier timed out (coordination.py): the
    barrier's id (`PjRT_Client_Connect`, `[Init]Wait_for_all_tasks_to_register`) and the
    tasks it names as never arriving (`/job:jax_worker/replica:0/task:N` lines after it;
    none where it names none)."""

    barrier: str = ""
    tasks: tuple[int, ...] = ()


class TaskState(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """srun's report of its tasks' states (taskstates.py: `srun: StepId=J.S tasks 0-3:
    running`, `... task 1: exited abnormally`), printed when a task exited first under `-W`
    or on an interrupt: `launcher` the program's name as printed (`srun`, Tianhe's `yhrun`)."""

    step: str = ""
    tasks: tuple[int, ...] = ()
    state: str = ""  # running, exited abnormally, exited, failed to start, unknown
    launcher: str = "srun"


class DdpStart(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """Lightning's `initializing ddp: GLOBAL_RANK: R, MEMBER: R+1/N` (or `Initializing
    distributed: ...`): a process claiming global rank R of N as it starts (ddpstart.py).
    `rank` stays the line's label: the claim is the process's word, kept apart."""

    global_rank: int
    world: int


SetupKind = Literal["launch", "mpi-init", "nccl-bootstrap", "nccl-config"]


class SetupFailed(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A launcher's or a library's own report that the job could not be set up
    (setupfail.py): a step whose tasks could not be launched or laid out (srun, Hydra's
    proxy, mpirun), MPI_Init failing, NCCL's bootstrap without a socket interface, NCCL
    refusing every algorithm/protocol for a collective (its configuration, at the first
    call). `text`: the report, as printed."""

    kind: SetupKind
    text: str


class TaskLost(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """JAX's coordination service stopped hearing from task N after the start (coordlost.py):
    `Task /job:jax_worker/replica:0/task:N heartbeat timeout`. N (`lost`) is JAX's process
    index; `task` stays the line's launcher label."""

    lost: int
    how: str


class RankWarned(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """The last warning or error a rank's own code logged at a logging level (`WARNING`,
    `ERROR`, `CRITICAL`; steps.py): what a rank that left without a traceback said of why."""

    text: str


FrKind = Literal["disabled", "stack", "dump-written", "dump-failed", "dump-preparing", "dump-signal-sent",
                 "dump-signal-observed"]


class FlightRecorderNote(_GroupFact, frozen=True, omit_defaults=True, kw_only=True):
    """What a rank said of the Flight Recorder: off (`... not found, potentially because
    FlightRecorder is disabled`), the failed collective's stack (`frames`, as printed:
    "#0 all_reduce from .../distributed_c10d.py:3174"), a dump written or not (`path`),
    or a dump signal sent to / observed from other ranks. ProcessGroupNCCL prints some with
    its `[PG ... Rank N]` prefix (`Observed flight recorder dump signal from another rank via
    TCPStore.`): its group and rank, as the watchdog's facts."""

    kind: FrKind
    path: str = ""
    frames: tuple[str, ...] = ()


class AddressInUse(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """A port already bound: `failed to bind to [::]:29500 (errno: 98 - Address already in
    use)`, `port: 29620, ... name: EADDRINUSE`, or any `address already in use`."""

    port: int | None = None
    address: str = ""  # "[::]", "0.0.0.0"
    errno: int | None = None
    # whose store it was, as the traceback that raised it says (bindsetup.py): "process-group"
    # (a rank's init_process_group: the store's host, rank 0 under env://), "launcher" (torchrun's
    # agent), "" (no traceback says)
    setup: str = ""


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

    The TCPStore client's own account of a connect it could not make or validate (`TCP
    client failed to connect/validate to host H:P - retrying (try=6, timeout=...ms,
    delay=...ms): CAUSE`, `- timed out (try=1, ...)`; torch 2.3+) is client-timeout where
    its cause is the socket's timeout, connect-failed otherwise (`Connection reset by
    peer`: the store's host answered and dropped it); `retry` is its `try=N`.
    """

    kind: RendezvousKind
    seconds: float | None = None
    address: str = ""  # "192.0.0.1:1234"
    joined: int | None = None
    expected: int | None = None
    retry: int | None = None  # the store client's `try=N` (0: the first try failed)
    message: str = ""


StoreBarrierState = Literal["waiting", "timed-out", "completed"]


class StoreBarrier(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """distributed_c10d.py's store-based barrier, where init_process_group/new_group waits
    for every member to add itself to the store key: `Waiting in store based barrier to
    initialize process group for rank: N, key: store_based_barrier_key:1 (world_size=W,
    worker_count=C, timeout=...)` (torch 1.x; 2.x: `... for S secondsrank: N, ...
    num_workers_joined=C ...`), the `Timed out initializing process group in store based
    barrier on rank[:] N, for key: ...` error, and `Rank N: Completed store-based barrier
    for key:K with W nodes.` `member` is the rank the message names (it added itself)."""

    state: StoreBarrierState
    member: int
    key: str
    world_size: int
    joined: int | None = None  # worker_count / num_workers_joined: members the store counted


StoreOp = Literal["recvValue", "recvValueWithTimeout", "recvVector", "sendBytes", "should-dump-check"]


class StoreLost(_GroupFact, frozen=True, omit_defaults=True, kw_only=True):
    """A rank's connection to the TCPStore failing after it was made: the store's socket
    closed or reset under a request (`[c10d] recvValue failed on SocketImpl(fd=76,
    addr=[localhost]:60950, remote=[localhost]:29500): Connection reset by peer`; also
    recvValueWithTimeout, recvVector and sendBytes, torch 2.3+), or ProcessGroupNCCL's
    watchdog unable to read the store's `should dump` flag (`Failed to check the "should
    dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error:
    ...`, 2.3+).

    The store lives in its host's process (rank 0's, or its torchrun agent's): a rank
    that lost it is evidence that host died or shut down first, never against the rank
    that printed it. `address`: the store's end (`remote=`) as `host:port` (an IPv4-mapped
    address as IPv4; as printed where the poster hid it); `message`: the socket's error.
    """

    operation: StoreOp
    address: str = ""
    message: str = ""


class ChildFailure(msgspec.Struct, frozen=True, omit_defaults=True, kw_only=True):
    """One `[N]:` entry of a ChildFailedError block."""

    line: int  # the `[N]:` line
    index: int
    root_cause: bool = False  # under `Root Cause (first observed failure):`
    # under `Failures:`, which lists the failures OTHER than the root cause (never the first)
    other_failure: bool = False
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

    @property
    def root_cause_cut(self) -> bool:
        """Entries of its `Failures:` section read and no root cause: the text ends (or the
        box is cut) before the first failure, which these are not."""
        return self.root_cause is None and any(f.other_failure for f in self.failures)


class WorkerFailed(_Fact, frozen=True, omit_defaults=True, kw_only=True):
    """The agent's `failed (exitcode: N) local_rank: L (pid: P) of binary: B` (or `of fn:`):
    its first failed worker, by local rank. torch 1.9's `Child process P (local_rank R)
    FAILED (exitcode N)` gives the global rank (`rank`; no local_rank): see agent.py."""

    exitcode: int | None = None  # None: the report gives none (Ray Train's `Worker N has failed.`)
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
    job_lines_before: int = 0  # srun's: lines of the job's own output (not Slurm's) the text holds before it
    # "mpirun": Open MPI's `exited on signal` box; "supervisor": launchreports.py; "pals", "hydra",
    # "mpd": rankends.py
    launcher: str = "srun"
    pid: int | None = None  # the process, where the report names it


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
    process P via signal SIGTERM`; mp.spawn's parent stopping the processes left after one
    failed: `Terminating process P via signal SIGTERM`. The worker is collateral, not a cause.
    `forced`: the agent's SIGKILL of a worker its closing signal did not end (`Unable to
    shutdown process P via 15, forcefully exiting via 9`): the worker hung."""

    pid: int
    signal: str
    forced: bool = False


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


class ExceptionRaised(_GroupFact, frozen=True, omit_defaults=True, kw_only=True):
    """The exception a traceback ends with: `torch.distributed.DistBackendError: NCCL
    error ...`. `framed`: a traceback (its header or frames) was read for this rank before
    it; unframed ones are only `...Error:` / `...Exception:` lines at the start of a line.
    `native`: C++ `terminate called after throwing an instance of 'T'` (message: `what()`).
    Where no label names the rank, its message may: the rank it says raised it (`[4] is
    setting up NCCL communicator ...`: `rank`), its `[PG ... Rank N]` (`pg_rank`)."""

    type: str
    message: str = ""  # the first line of the message
    framed: bool = False
    native: bool = False
    pid: int | None = None  # a glog FATAL line's thread id: the pid where the main thread logged it
    frame: str = ""  # the innermost frame of the program's own code: "train.py:37 in load_batch"
    collective: str = ""  # the torch.distributed function it was raised in: "all_reduce", "broadcast"
    # the innermost library frame after the program's own (not torch.distributed's): autograd's
    # `run_backward` where DDP's bucket all_reduce timed out in `loss.backward()`; empty where the
    # program's own frame is innermost (a native call it made: `work.wait()`)
    library: str = ""
    # the thread it ended, where Python's threading.excepthook said so (`Exception in thread
    # NAME:` before the traceback): that thread ended, the process went on
    thread: str = ""
    # a multiprocessing child process's traceback (its outermost frame is multiprocessing's
    # Process._bootstrap, which prints `Process NAME:` and the traceback of the child's
    # target): the child ended, not necessarily the rank that started it
    child_process: bool = False
    # the program's own frames of its traceback, outermost first ("train.py:88 in train_step"):
    # where in the program the rank was, to compare with its peers'
    chain: tuple[str, ...] = ()
    # printed by torch's own sys.excepthook (distributed_c10d.py's _distributed_excepthook puts
    # `[rankN]: ` before every line of an exception nothing caught, after init_process_group):
    # the exception ended its rank, even where a paste kept its last line only; so does C++'s
    # `terminate called after throwing an instance of 'T'` (std::terminate aborts the process)
    uncaught: bool = False
    # the set-up step its traceback ran through, its outermost set-up frame's (setupframes.py:
    # "init_process_group", "rendezvous", "agent-rendezvous", "launcher", "ncclCommInitRank", ...),
    # else the set-up call its message says failed; "" for any other exception
    setup: str = ""


class TorchLog(msgspec.Struct, frozen=True):
    """What one log (a rank's stderr, a job's output, torchrun's console) says."""

    lines: int  # lines read
    timeouts: tuple[WatchdogTimeout, ...] = ()
    progress: tuple[WatchdogProgress, ...] = ()
    stuck: tuple[WatchdogStuck, ...] = ()
    aborts: tuple[WatchdogAbort, ...] = ()
    cut_timeouts: tuple[WatchdogCaught, ...] = ()
    desync: tuple[DesyncLine, ...] = ()
    mismatches: tuple[CollectiveMismatch, ...] = ()
    barrier_failures: tuple[MonitoredBarrierFailure, ...] = ()
    backend_errors: tuple[BackendError, ...] = ()
    gloo: tuple[GlooError, ...] = ()
    flight_recorder: tuple[FlightRecorderNote, ...] = ()
    address_in_use: tuple[AddressInUse, ...] = ()
    rendezvous: tuple[RendezvousError, ...] = ()
    store_lost: tuple[StoreLost, ...] = ()
    store_barrier: tuple[StoreBarrier, ...] = ()
    child_failed: tuple[ChildFailedBlock, ...] = ()
    worker_failures: tuple[WorkerFailed, ...] = ()
    task_exits: tuple[TaskExit, ...] = ()
    agent_signals: tuple[AgentSignal, ...] = ()
    closing_signals: tuple[ClosingSignal, ...] = ()
    worker_group: tuple[WorkerGroupEvent, ...] = ()
    exceptions: tuple[ExceptionRaised, ...] = ()
    not_in_group: tuple[NotInGroup, ...] = ()
    stalled: tuple[StalledTensors, ...] = ()
    harness_caught: tuple[HarnessCaught, ...] = ()
    ddp_starts: tuple[DdpStart, ...] = ()
    mpi_abort_calls: tuple[MpiAbortCall, ...] = ()
    member_ends: tuple[MemberEnd, ...] = ()
    size_mismatches: tuple[SizeMismatch, ...] = ()
    coordination_timeouts: tuple[CoordinationTimeout, ...] = ()
    task_states: tuple[TaskState, ...] = ()
    setup_failures: tuple[SetupFailed, ...] = ()
    tasks_lost: tuple[TaskLost, ...] = ()
    # slurmstepd/srun said the step or job was ended from outside (CANCELLED, TIME LIMIT, `Job step
    # aborted`, `Terminating StepId`: agent.read_srun)
    step_aborted: bool = False
    nccl_versions: tuple[str, ...] = ()  # distinct, in order: "2.21.5"
    prefixed_ranks: tuple[int, ...] = ()  # every rank a line prefix names (`[rankN]:`, a label), sorted
    last_steps: tuple[StepLogged, ...] = ()  # per rank (line labels), the last step its loop logged
    loop_rounds: int = 0  # the most values one loop counter (epoch, step, iter, batch) was logged with, any rank
    launched_world: int | None = None  # the world a torchrun command in the text starts (agent.read_launch_command)
    launched_np: int | None = None  # the processes an mpirun/horovodrun/srun command starts (agent.launched_np)
    last_warnings: tuple[RankWarned, ...] = ()  # per rank, the last warning/error its code logged
    cut_tracebacks: tuple[TracebackCut, ...] = ()  # per rank, a traceback the text ends inside
    last_fingerprints: tuple[FingerprintRan, ...] = ()  # per rank, the last collective DETAIL logged it entering
    dropped: int = 0  # facts past MAX_LISTED of their kind, not kept
    unrecognized: Unrecognized = NOTHING_UNREAD  # lines no handler read: how many, the first few

    def counts(self) -> dict[str, int]:
        """Facts of each kind, kinds with none left out."""
        return {name: len(getattr(self, name)) for name in FACT_KINDS if getattr(self, name)}

    @property
    def ranks(self) -> tuple[int, ...]:
        """Every global rank a fact names, sorted. Where a line has no `[rankN]:` or
        launcher label, a message's `[... Rank N]` stands for it on the default group
        (PG 0) or where no group is printed (torch <= 2.2 prints none); the desync
        report's, the ChildFailedError's and monitoredBarrier's ranks are global."""
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
                elif isinstance(fact, MonitoredBarrierFailure):
                    seen.update(r for r in (*fact.ranks, fact.reporter, fact.waited_on) if r is not None)
        return tuple(sorted(seen))

    def final_exceptions(self) -> dict[int | None, ExceptionRaised]:
        """The last exception of each rank (None: lines with no rank)."""
        return {e.rank: e for e in self.exceptions}


FACT_KINDS = ("timeouts", "progress", "stuck", "aborts", "desync", "mismatches", "barrier_failures",
              "backend_errors", "gloo", "flight_recorder", "address_in_use", "rendezvous", "store_lost",
              "store_barrier",
              "child_failed",
              "worker_failures", "agent_signals", "closing_signals", "worker_group", "exceptions", "not_in_group",
              "task_exits", "cut_timeouts", "stalled", "harness_caught",
              "ddp_starts", "mpi_abort_calls", "coordination_timeouts", "task_states", "setup_failures",
              "tasks_lost", "member_ends", "size_mismatches")
