"""What the log-side rules read from the parsed logs, rank by rank: the first error each
rank printed (its exception, where in its own code, when), the collective each rank
timed out in (its post-mortem), which ranks the evidence knows of, and the evidence lines
of a rank's error. Plain reading, no judgement: the rules are in deaths.py,
postmortem.py, mismatch.py and startup.py; the helpers every rule shares (log_evidence,
fact_rank, minority, world_of) are analysis.py's.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter

import msgspec

from healthcheck.diagnose.analysis import fact_rank, time_at, world_of
from healthcheck.diagnose.dcpgather import checkpoint_victim
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import raised_by_collective
from healthcheck.parsers.torch_log import ExceptionRaised, TorchLog

COLLATERAL = ("SIGTERM", "SIGINT", "SIGHUP")
# the words of an error that a collective raised on a rank because of another rank (a peer
# that died, timed out, disagreed): a victim's error, never the cause
# c10d's Work.wait(timeout=...) when the collective did not complete in time (torch 2.13's
# libtorch_cpu; captured: tests/fixtures/diagnose/rules10, extragather): a collective's timeout
_WORK_TIMEOUT = "Operation timed out!"
# torch.distributed.rpc's timeout of an rpc_sync/rpc_async whose callee did not answer in time
# (TensorPipe agent, torch 2.13; captured: tests/fixtures/diagnose/rules11, rpclock): the
# caller waited on a peer, a victim's line (rpcpeer.py names the peer)
RPC_TIMEOUT = "RPC ran for more than set timeout"
COLLECTIVE_ERRORS = ("DistBackendError", "DistNetworkError", "DistStoreError", "Connection closed by peer",
                     "Timed out waiting", "Connection reset", "NCCL error", "Watchdog caught", "ncclRemoteError",
                     "Read error", "failed to pass monitoredBarrier", "Detected mismatch", "ChildFailedError",
                     "preamble.length", "Received data size", "watchdog", "collective operation timeout",
                     "SignalException", "got signal:", "gloo::", "DistError",
                     "communicator was aborted", "ProcessGroupNCCL", "ProcessGroupGloo", "connectFullMesh",
                     _WORK_TIMEOUT, RPC_TIMEOUT,
                     # ProcessGroupGloo's monitoredBarrier on a rank that arrived and then lost rank 0:
                     # "Rank 1 successfully reached monitoredBarrier, but received errors while waiting
                     # for send/recv from rank 0" (mbarrier.py): that rank waited, a victim
                     "successfully reached monitoredBarrier",
                     # Horovod's SHUT_DOWN_ERROR (horovod/common/common.h), raised on every rank still in a
                     # collective once one rank raised or finished: "This was caused by an exception on one of
                     # the ranks ..." (older: "This has been caused by ..."); the cause is that other rank
                     "Horovod has been shut down",
                     # Open MPI's ULFM: the call observed a peer's failure (MPI_ERR_PROC_FAILED: Process Failure)
                     "MPI_ERR_PROC_FAILED")
# a SIGINT's exception: raised in whatever frame the rank was in (a collective's wait too), by
# a signal, never by a peer. One rank's alone is that rank's death; every rank's at once is
# an operator's Ctrl-C that a launcher (torchrun's agent, mpirun) passed to all its workers
_INTERRUPT = "KeyboardInterrupt"
_TIMEOUT_WORDS = ("Timed out waiting", "collective operation timeout", "Watchdog caught", _WORK_TIMEOUT, RPC_TIMEOUT)


def collective_error(text: str) -> bool:
    return any(word in text for word in COLLECTIVE_ERRORS)


def torchrun_time(text: str) -> float | None:
    """A ChildFailedError entry's `2026-11-23_07:20:56` (one-second resolution), as epoch seconds."""
    try:
        return _dt.datetime.strptime(text, "%Y-%m-%d_%H:%M:%S").replace(tzinfo=_dt.timezone.utc).timestamp()
    except ValueError:
        return None


def known_ranks(col: Collected) -> set[int]:
    """Every rank some evidence speaks of: the ranks heard, and the world size's range
    where one is known."""
    ranks = ranks_heard(col)
    _, world = world_of(col)
    if world is not None and world <= 65536:
        ranks.update(range(world))
    return ranks


def ranks_heard(col: Collected) -> set[int]:
    """The ranks with output or a record of their own (a file, a labelled line, a fact, a
    torchrun entry, a manifest, a live process): a rank only a world size implies is not
    heard, and "it printed no timeout" says nothing of it."""
    heard = set(col.evidence.ranks)  # a record is made only where something speaks of the rank
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        heard.update(f.log.ranks)
        heard.update(f.log.prefixed_ranks)
        if f.rank is not None:
            heard.add(f.rank)
    return heard


class RankError(msgspec.Struct, frozen=True, omit_defaults=True):
    """The first error one rank printed: the exception its traceback ends with, where in the
    program's own code, the collective it was raised in, and when (None: no time known)."""

    rank: int
    source: str
    line: int
    type: str
    message: str = ""
    frame: str = ""
    collective: str = ""
    time: float | None = None
    victim: bool = False  # a collective's error: caused by another rank
    chain: tuple[str, ...] = ()  # its traceback's own frames, outermost first
    library: str = ""  # the innermost library frame after its own (autograd's run_backward)
    uncaught: bool = False  # printed by torch's excepthook: nothing caught it, it ended the rank

    @property
    def text(self) -> str:
        return f"{self.type}: {self.message}" if self.type and self.message else self.type or self.message

    @property
    def timed_out(self) -> bool:
        return any(word in self.message for word in _TIMEOUT_WORDS)


def _counts(e: ExceptionRaised) -> bool:
    """An exception worth reading as a rank's error: a traceback's end, or C++'s terminate."""
    return e.framed or e.native or e.type.endswith(("Error", "Exception"))


def child_of_live_rank(col: Collected, child_process: bool, rank: int) -> bool:
    """A multiprocessing child's traceback in the output of a rank the live stacks show
    alive: the child died, not the rank (threads.py). Without a live stack (saved
    output) it is the rank's: a rank may itself be a multiprocessing child."""
    seen = col.evidence.ranks.get(rank)
    return child_process and seen is not None and seen.stack is not None


_BARE_TERMINATE = ("terminate called without an active exception", "terminate called recursively")


def rank_errors(col: Collected) -> dict[int, list[RankError]]:
    """Each rank's exceptions, in its own order (file order per file; files by time)."""
    out: dict[int, list[RankError]] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for e in f.log.exceptions:
            rank = fact_rank(e, f.rank)
            if rank is None and e.pid is not None:
                rank = col.pid_ranks.get(e.pid)  # a glog FATAL line's thread id: its process's pid
            if rank is None or not _counts(e) or e.thread or child_of_live_rank(col, e.child_process, rank):
                continue  # a thread's (or a living rank's child's) exception ended that, not its rank (threads.py)
            text = f"{e.type}: {e.message}"  # gloo::EnforceNotMet is gloo's own check on a peer's data
            victim = not interrupted(e.type) and raised_by_collective(collective_error(text), e.collective)
            gathered = checkpoint_victim(e.type, e.message, rank)  # dcpgather.py: DCP re-raises R's on every rank
            victim = victim if gathered is None else gathered
            out.setdefault(rank, []).append(RankError(
                rank=rank, source=f.source, line=e.line, type=e.type, message=e.message, frame=e.frame,
                collective=e.collective, time=time_at(col, f.source, e.line, rank), victim=victim, chain=e.chain,
                library=e.library, uncaught=e.uncaught))
    for errors in out.values():
        if len({e.source for e in errors}) > 1:  # one file is in the rank's own order already
            errors.sort(key=lambda x: (x.time is None, x.time or 0.0))
        errors.sort(key=teardown_only)  # stable: the others keep their order
    return _operator_interrupt(col, out)


def teardown_only(e: RankError) -> bool:
    """C++'s bare `terminate called without an active exception` (or `recursively`): a
    process that exits while one of its threads is still joinable (gloo's, a data loader's)
    prints it on its way out, after whatever ended it; where the rank printed another error
    (its stderr and stdout in two files, no times to order them), that one came first."""
    return not e.type and e.message.startswith(_BARE_TERMINATE)


def interrupted(exception_type: str) -> bool:
    """A KeyboardInterrupt: a SIGINT reached the rank (see _INTERRUPT)."""
    return exception_type.rsplit(".", 1)[-1] == _INTERRUPT


def interrupted_everywhere(col: Collected, errors: dict[int, list[RankError]]) -> bool:
    """Every rank the evidence knows of (two or more) printed a KeyboardInterrupt: a Ctrl-C
    the launcher passed to all its workers, no rank's own death."""
    hit = {r for r, errs in errors.items() if any(interrupted(e.type) for e in errs)}
    known = known_ranks(col)
    return len(hit) >= 2 and known <= hit


def _operator_interrupt(col: Collected, errors: dict[int, list[RankError]]) -> dict[int, list[RankError]]:
    """Where the interrupt reached every rank, it is collateral on each (a victim's error)."""
    if not interrupted_everywhere(col, errors):
        return errors
    return {r: [msgspec.structs.replace(e, victim=True) if interrupted(e.type) else e for e in errs]
            for r, errs in errors.items()}


def first_errors(col: Collected) -> dict[int, RankError]:
    """The first error of each rank that printed one."""
    return {rank: errors[0] for rank, errors in rank_errors(col).items() if errors}


class Wait(msgspec.Struct, frozen=True, omit_defaults=True):
    """One rank's post-mortem: the collective it timed out in. `op`: the collective (gloo:
    the torch.distributed function of its traceback, `all_reduce`; NCCL: the watchdog's
    OpType, `ALLREDUCE`); `key` compares them in one spelling; `seq`: NCCL's SeqNum; `where`: its own code's frame."""

    rank: int
    source: str
    line: int
    op: str = ""
    seq: int | None = None
    numel_in: int | None = None
    numel_out: int | None = None
    where: str = ""
    text: str = ""
    chain: tuple[str, ...] = ()  # gloo: its traceback's own frames, outermost first

    @property
    def key(self) -> tuple[str, int | None]:
        return _op_name(self.op), self.seq


def _op_name(op: str) -> str:
    """ALLREDUCE / all_reduce / _ALLGATHER_BASE -> one spelling: "allreduce", "allgather_base"."""
    return op.lower().replace("_", "").removeprefix("c10d")


def _native_wait(e: RankError) -> str:
    """The op a timeout with no c10d frame waited in: "wait" where the program's own frame
    called a Work's wait() itself, "all_reduce" where autograd's backward did (DDP's gradient
    buckets are all_reduced in hooks of the backward pass), else unknown."""
    if not (e.frame and e.chain):
        return ""
    if not e.library:
        return "wait"
    return "all_reduce" if "backward" in e.library else ""


def rank_waits(col: Collected) -> dict[int, Wait]:
    """Each rank's first timeout: the NCCL watchdog's `WorkNCCL(SeqNum, OpType, NumelIn,
    NumelOut)`, else its status line (`failure detected by watchdog at work sequence id: N`:
    the SeqNum only), else gloo's `Timed out waiting` with the collective of its traceback."""
    out: dict[int, Wait] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for t in f.log.timeouts:
            rank = fact_rank(t, f.rank)
            if rank is not None and rank not in out:
                out[rank] = Wait(rank=rank, source=f.source, line=t.line, op=t.op_type, seq=t.seq,
                                 numel_in=t.numel_in, numel_out=t.numel_out,
                                 text=f"watchdog timeout in {t.op_type}"
                                      + (f" SeqNum {t.seq}" if t.seq is not None else "")
                                      + (f" NumelIn {t.numel_in}" if t.numel_in is not None else ""))
        for p in f.log.progress:  # `failure detected by watchdog at work sequence id: N` and its elders
            rank = fact_rank(p, f.rank)
            if rank is not None and rank not in out and p.kind != "dump-signal" and p.seq is not None:
                out[rank] = Wait(rank=rank, source=f.source, line=p.line, seq=p.seq,
                                 text=f"watchdog: failed at work {p.seq} (last enqueued {p.last_enqueued}, last "
                                      f"completed {p.last_completed})")
    for rank, errors in rank_errors(col).items():
        first = errors[0]
        if rank in out or not first.timed_out:
            continue
        # a timeout with no c10d frame in its traceback was raised by a Work's own wait() (native:
        # `work.wait(timeout=...)`, an async op's): the rank waited at its call site, op "wait";
        # not where a library frame lies between (autograd's run_backward: DDP's bucket all_reduce
        # waited inside `loss.backward()`, a collective, not a point-to-point op)
        op = first.collective or _native_wait(first)
        out[rank] = Wait(rank=rank, source=first.source, line=first.line, op=op, where=first.frame,
                         chain=first.chain, text=f"timed out in {op or 'a collective'}"
                              + (f" at {first.frame}" if first.frame else "") + f": {first.message[:120]}")
    return out


def gloo_size_aborts(col: Collected) -> bool:
    """A gloo 'Received data size doesn't match' in the text: gloo aborts (SIGABRT) the
    ranks whose check failed, so their deaths are the mismatch's consequence."""
    return any(g.kind == "size-mismatch" for f in col.evidence.torch_logs if f.log is not None for g in f.log.gloo)


class CollAt(msgspec.Struct, frozen=True):
    """One rank's last NCCL COLL line on one communicator."""

    op_count: int
    op: str
    source: str
    line: int | None


def nccl_colls(col: Collected) -> dict[str, dict[int, CollAt]]:
    """NCCL_DEBUG_SUBSYS=COLL: per communicator (commId, the same on every rank; else its
    size), each global rank's last COLL line. A process's rank is its pid's where the
    evidence places it, else its rank in a communicator as big as the world."""
    _, world = world_of(col)
    out: dict[str, dict[int, CollAt]] = {}
    for n in col.evidence.nccl_logs:
        assert n.log is not None
        for c in n.log.comms:
            if c.last_op_count is None:
                continue
            rank = col.pid_ranks.get(c.pid)
            if rank is None and c.rank is not None and (world is None or c.nranks == world):
                rank = c.rank
            if rank is None:
                continue
            key = c.comm_id or (f"nranks={c.nranks}" if c.nranks else "")
            if key:
                out.setdefault(key, {})[rank] = CollAt(c.last_op_count, c.last_op, n.source, c.last_coll_line)
    return out


def _launcher_failures(log: TorchLog) -> int:
    """The ranks or workers a launcher reported failed in one log (torchrun's box entries and
    its agent's failed worker, srun's and mpirun's task ends), not those it stopped itself (a
    SIGTERM, an exit 0): a verdict that names none still lists them, so it says it saw them."""
    boxed = sum(1 for b in log.child_failed for x in b.failures
                if x.signal not in COLLATERAL and (x.signal or x.exitcode))
    agents = sum(1 for w in log.worker_failures
                 if w.signal not in COLLATERAL and (w.signal or w.exitcode or w.exitcode is None))
    tasks = sum(max(1, len(t.tasks)) for t in log.task_exits
                if not t.after_abort and t.signal not in COLLATERAL and (t.signal or t.exitcode or t.oom))
    return boxed + agents + tasks


def any_timed_out(col: Collected, firsts: dict[int, RankError]) -> bool:
    """Whether any rank timed out (its first error, a watchdog's timeout, gloo's): a rank that
    waited in vain may end first while another hangs, so its end names no culprit."""
    if any(e.timed_out for e in firsts.values()):
        return True
    return any(f.log is not None and (f.log.timeouts or any(g.kind == "timeout" for g in f.log.gloo))
               for f in col.evidence.torch_logs)


def failures_held(col: Collected) -> str:
    """What failures the logs hold, counted ("3 timeouts, 1 peer error"), "" for none: a
    verdict that names no rank says what it saw, never that there was nothing."""
    counts: Counter[str] = Counter()
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        log = f.log
        counts["timeout"] += len(log.timeouts) + sum(1 for g in log.gloo if g.kind == "timeout")
        counts["peer error"] += sum(1 for g in log.gloo if g.kind in ("peer-closed", "read-error", "write-error"))
        counts["size mismatch"] += len(log.mismatches) + sum(1 for g in log.gloo if g.kind == "size-mismatch")
        counts["backend error"] += len(log.backend_errors)
        counts["exception"] += sum(1 for e in log.exceptions if e.framed or e.native)
        counts["heartbeat-monitor stall"] += len(log.stuck)  # heartbeat.py: alike on all, it names none
        counts["launcher-reported failure"] += _launcher_failures(log)
        counts["MPI_Abort call"] += len({c.process for c in log.mpi_abort_calls})  # mpiends.py names one alone
    counts["NCCL warning"] += sum(len(n.log.warns) for n in col.evidence.nccl_logs if n.log is not None)
    return ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in counts.items() if n)


def rank_source(col: Collected, rank: int) -> str:
    """The file (or collection) a rank's own facts came from, for an evidence line."""
    r = col.evidence.ranks.get(rank)
    if r is not None and r.sources:
        return r.sources[0]
    return next((f.source for f in col.evidence.torch_logs if f.rank == rank),
                col.evidence.torch_logs[0].source if col.evidence.torch_logs else "logs")


def error_evidence(e: RankError) -> Evidence:
    at = f" in {e.collective}" if e.collective else ""
    at += f" at {e.frame}" if e.frame else ""
    return Evidence(source=e.source, line=e.line, rank=e.rank, time=e.time, text=f"rank {e.rank}{at}: {e.text}"[:300])


def watchdog_ranks(col: Collected) -> set[int]:
    """Ranks whose watchdog reported a failed or timed-out collective in any wording (the
    abort, a status line, an NCCL error, the desync report's own timeout): they waited too,
    whether or not the WorkNCCL line itself is in the text."""
    out: set[int] = set()
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        log = f.log
        facts = (*log.aborts, *log.progress, *log.stuck, *log.backend_errors,
                 *(d for d in log.desync if d.kind == "timeout-at"))
        out |= {r for r in (fact_rank(x, f.rank) for x in facts) if r is not None}
    return out


__all__ = ["COLLATERAL", "COLLECTIVE_ERRORS", "CollAt", "RankError", "Wait", "any_timed_out", "collective_error",
           "error_evidence", "failures_held", "first_errors", "gloo_size_aborts", "interrupted",
           "interrupted_everywhere", "known_ranks", "nccl_colls", "rank_errors", "rank_source", "rank_waits",
           "ranks_heard", "torchrun_time", "watchdog_ranks"]
