"""Dead-rank from a launcher's own report of the one child that failed, for deaths.py.

torchrun's agent, once a worker exits non-zero, stops the others (`Sending process P
closing signal SIGTERM`) and logs its first failure in time: `failed (exitcode: -9)
local_rank: 4 (pid: 24905) of binary: ...` (elastic/multiprocessing/api.py, under the
legacy `ERROR:torch.distributed.elastic...` logger or glog's `E0526 ... api.py:826]`);
torch 1.9's `@record` prints `Child process P (local_rank R) FAILED (exitcode N)`, R a
global rank (parsers/torch_log/agent.py). Where a paste holds that and no rank's own
error, the failed child is the dead rank, read with care:

* one report only: several (another node's agent, a restart's) do not say which came first;
* not a signal the agent or an operator sent (SIGTERM, SIGINT, SIGHUP), nor SIGABRT (the
  NCCL watchdog's or gloo's abort after a peer failed: a victim's end), nor a pid the agent
  sent a closing signal (it stopped that one);
* not where a rank timed out: the first child to exit is then one that waited in vain for
  a rank that hung, which exits last or never; nor a rank whose own lines report a
  collective's failure (a victim);
* not where another child had ended before the agent's teardown: the agent sends its
  closing signal to every child still running and reports the first failure it polled,
  so a child that got no closing signal and is not the one reported had already ended,
  its exit code not shown (it may have failed as early). Its pid is known where the spawn's
  pids are shown consecutive: the pids sent a closing signal run without a gap (two or
  more), and a pid between that run and the failed child's got none
  (`unreported_children`: `failed ... local_rank: 0 (pid: 7331)` after closing signals to
  7334-7338 leaves 7332 and 7333, local ranks 1 and 2, ended unreported). The spawn is shown
  consecutive too where the failed child's pid less its local rank is the lowest closed pid
  (local rank 0's): `failed ... local_rank: 1 (pid: 750662)` after closing signals to 750661,
  750664 and 750668 leaves 750663 and 750665-750667 ended unreported. Where the closed pids
  are spread (threads took pids between the spawns) with no such anchor, or one alone,
  nothing is read;
* a local rank is the global rank only where the text shows one launcher's children and
  nothing beyond them (one node): no torchrun block or rank record naming another host or
  a rank off its local rank, no rank heard and no world size past the children the agent
  named (its closing signals and the failed one; at least local rank + 1 of them).
  Otherwise no global rank is named.

torchrun's ChildFailedError box is the same report printed again, by global rank: where the
text holds no agent line to read, a box whose entries name one rank that failed on its own
(an exit code above 0 or a signal nobody sent it: not SIGTERM/SIGINT/SIGHUP, not SIGABRT;
the Root Cause is the first observed failure, and no other entry failed beside it) and
none of that rank's own output (`lone_box_failure`) is that rank's death, on the same
conditions as the agent's line: no rank timed out, the rank's own lines report no
collective's failure, its pid got no closing signal; and the text shows no rank past the
box's node (another host, a rank no box lists, a world larger than its entries: torch 2.x's
box lists every worker it stopped too, so a rank alone in it was its node's only worker, and
a victim of a death on another node ends the same way). A box of several failed entries does
not say which came first (one-second times), and names none; nor does a box whose
`Failures:` entries (the failures other than the first) are in the text without its Root
Cause, cut away (`ChildFailedBlock.root_cause_cut`), here or across several boxes.

Several boxes (each launcher prints its own node's: a multi-node job, which the lone box's
guard above cannot judge) are read across: the entry with the earliest `time` of all the
boxes' entries is the first failure (`earliest_box_failure`) where its time is strictly
earlier than every other entry's (a one-second tie names none), every entry has a time, it
failed on its own (as above), no rank timed out, no rank's own error is earlier or untimed,
and none of its own output is in the text. A box's own `Root Cause` is only its node's
first; the earliest across the boxes is the job's.

Open MPI's own report (`mpirun detected that one or more processes exited with non-zero
status ... The first process to do so was: Process name: [[J,1],R] Exit code: N`) names a
global rank (R, the MPI rank). Where a paste holds that box and nothing of R's own output,
no timeout and no error but victims' (other ranks' collective errors, Horovod's `has been
shut down`, each raised because some rank failed first: `lone_mpirun_exit`), it is the
word on which rank that was and names R, at low confidence; where R's own output is there,
leavers.py reads the box with it (a rank that printed no error is named; one that raised is dead-rank by
its exception; one that timed out was waiting for another).
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import log_evidence, world_of
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import COLLATERAL, RankError, any_timed_out, ranks_heard, torchrun_time
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import spoke_of_failure
from healthcheck.parsers.torch_log import ChildFailedBlock, ChildFailure, WorkerFailed

_AGENT_ERROR = "ChildFailedError"
_NOT_OWN = (*COLLATERAL, "SIGABRT")  # ends another's doing gives a child (see the module's docstring)


def _reports(col: Collected) -> list[tuple[str, WorkerFailed]]:
    """(source, report) of every launcher's failed-child report, one per distinct child."""
    seen: set[tuple[int | None, int | None, int | None, int | None]] = set()
    out = []
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for w in f.log.worker_failures:
            key = (w.rank, w.local_rank, w.pid, w.exitcode)
            if key not in seen:
                seen.add(key)
                out.append((f.source, w))
    return out


def _closed(col: Collected) -> set[int | None]:
    """The pids the agent sent a closing signal (it stopped those children)."""
    return {c.pid for f in col.evidence.torch_logs if f.log is not None for c in f.log.closing_signals}


def _children(col: Collected, failed: WorkerFailed) -> int:
    """How many children the agent named: the pids it sent a closing signal, and the failed one."""
    return len(_closed(col) | {failed.pid})


def _other_node(col: Collected) -> bool:
    """Whether the text shows a node beside the launcher's: a torchrun block whose ranks are
    not its local ranks or that names two hosts, rank records on two hosts."""
    hosts: set[str] = set()
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for x in (x for b in f.log.child_failed for x in b.failures):
            if x.rank is not None and x.local_rank is not None and x.rank != x.local_rank:
                return True
            hosts |= {x.host} if x.host else set()
    hosts |= {r.host for r in col.evidence.ranks.values() if r.host}
    return len(hosts) > 1


def global_rank(col: Collected, failed: WorkerFailed) -> int | None:
    """The failed child's global rank: the report's own, else its local rank where the text
    shows one node (see the module's docstring), else None."""
    if failed.rank is not None:
        return failed.rank
    local = failed.local_rank
    if local is None or _other_node(col):
        return None
    children = max(_children(col, failed), local + 1)  # local ranks count from 0
    _, world = world_of(col)
    beyond = [r for r in ranks_heard(col) if r >= children]
    if beyond or (world is not None and world > children):
        return None
    return local


def unreported_children(col: Collected, failed: WorkerFailed) -> list[int]:
    """The pids of the agent's children that had ended before its teardown without a report
    (module doc): where the pids it sent a closing signal run consecutively (two or more:
    its spawn took consecutive pids on this node), each pid between that run and the failed
    child's that got none; [] where the pids do not show it."""
    closed = sorted({p for p in _closed(col) if p is not None})
    if failed.pid is None or not closed:
        return []
    if failed.local_rank is not None and closed[0] == failed.pid - failed.local_rank:
        # the failed child's pid less its local rank is a closed pid: local rank 0's, the
        # spawn's pids aligned with the local ranks; a pid up to the last named that got
        # no closing signal and is not the failed one was a child that had ended
        last = max(closed[-1], failed.pid)
        return [p for p in range(closed[0], last + 1) if p not in closed and p != failed.pid]
    if len(closed) < 2 or closed[-1] - closed[0] != len(closed) - 1:
        return []
    if failed.pid < closed[0]:
        return list(range(failed.pid + 1, closed[0]))
    return list(range(closed[-1] + 1, failed.pid))


def _victim(error: RankError | None) -> bool:
    """A rank's first error is a collective's (the agent's own ChildFailedError, read where a
    paste's block lines gave it a rank, is the launcher's word on the child, not the child's)."""
    return error is not None and error.victim and not error.type.endswith(_AGENT_ERROR)


def failed_child(col: Collected, firsts: dict[int, RankError]) -> tuple[int, str, Evidence] | None:
    """(rank, how it died, the report's line) for the one child a launcher reports failed,
    or None (see the module's docstring)."""
    reports = _reports(col)
    if len(reports) != 1:
        return None
    source, w = reports[0]
    if w.exitcode == 0 or w.signal in _NOT_OWN or w.pid in _closed(col) or any_timed_out(col, firsts):
        return None
    if unreported_children(col, w):
        return None
    rank = global_rank(col, w)
    if rank is None or rank in spoke_of_failure(col) or _victim(firsts.get(rank)):
        return None
    code = f"exitcode {w.exitcode}" if w.exitcode is not None else "no exit code given"
    how = (f"killed by {w.signal}" if w.signal else f"exited {w.exitcode}" if w.exitcode is not None
           else "reported failed")
    local = f" (local rank {w.local_rank}, one node)" if w.local_rank is not None else ""
    pid = f" pid {w.pid}" if w.pid is not None else ""
    text = (f"rank {rank}{local}{pid}: the launcher reports it the first child to fail, "
            f"{code}" + (f" ({w.signal})" if w.signal else ""))
    return rank, how, log_evidence(col, source, w.line, text, rank)


def _box_entries(col: Collected) -> list[tuple[str, ChildFailure]]:
    """(source, entry) of every torchrun box entry that failed on its own (not a closing or
    abort signal), one per distinct rank and pid."""
    seen: set[tuple[int | None, int | None]] = set()
    out = []
    for source, b in _boxes(col):
        for x in b.failures:
            if x.signal in COLLATERAL or (x.rank, x.pid) in seen:
                continue
            seen.add((x.rank, x.pid))
            out.append((source, x))
    return out


def _boxes(col: Collected) -> list[tuple[str, ChildFailedBlock]]:
    """(source, box) of every torchrun ChildFailedError box in the text."""
    return [(f.source, b) for f in col.evidence.torch_logs if f.log is not None for b in f.log.child_failed]


def _root_cause_cut(col: Collected) -> bool:
    """Whether a box's `Failures:` entries are in the text without its root cause: those are
    the failures other than the first, and the first (what these rules would name) is cut
    away, so no entry read may be taken for it."""
    return any(b.root_cause_cut for _, b in _boxes(col))


def _beyond_box(col: Collected) -> bool:
    """Whether the text shows ranks past the box's node: another node (_other_node), a rank
    heard that no box lists, or a world (the ranks' environment's, a torchrun command's)
    larger than the box's entries. A rank that failed there may have been a victim of a
    death elsewhere: its own exit says nothing of which."""
    listed = {x.rank for _, b in _boxes(col) for x in b.failures if x.rank is not None}
    _, world = world_of(col)
    launched = [f.log.launched_world for f in col.evidence.torch_logs if f.log is not None and f.log.launched_world]
    world = max([world or 0, *launched])
    return _other_node(col) or bool(ranks_heard(col) - listed) or world > len(listed)


def lone_box_failure(col: Collected, firsts: dict[int, RankError], own: set[int]) -> tuple[int, str, Evidence] | None:
    """(rank, how, the entry's line) for the one rank torchrun's box reports failed on its
    own where the text holds none of its output (`own`: leavers.own_output), else None (see
    the module's docstring)."""
    entries = _box_entries(col)
    if len(entries) != 1 or any_timed_out(col, firsts) or _beyond_box(col) or _root_cause_cut(col):
        return None
    source, x = entries[0]
    if x.rank is None or not _own_failure(col, firsts, own, x):
        return None
    text = (f"rank {x.rank} pid {x.pid}: torchrun's box reports it the one failure, exitcode {x.exitcode}"
            + (f" ({x.signal})" if x.signal else "") + "; its own output is not in the text")
    return x.rank, _how(x), log_evidence(col, source, x.line, text, x.rank)


def _how(x: ChildFailure) -> str:
    """How a box entry ended, as the verdict says it."""
    return f"killed by {x.signal}" if x.signal else f"exited {x.exitcode}"


def _own_failure(col: Collected, firsts: dict[int, RankError], own: set[int], x: ChildFailure) -> bool:
    """Whether a box entry failed on its own (an exit code above 0 or a signal nobody sent it)
    and the text holds none of its rank's output, no word of it failing in a collective."""
    if x.rank is None or x.rank in own or x.signal in _NOT_OWN or x.pid in _closed(col):
        return False
    if not (x.signal or (x.exitcode is not None and x.exitcode > 0)):
        return False
    return x.rank not in spoke_of_failure(col) and not _victim(firsts.get(x.rank))


def earliest_box_failure(col: Collected, firsts: dict[int, RankError],
                         own: set[int]) -> tuple[int, str, Evidence] | None:
    """(rank, how, the entry's line) for the entry strictly earliest across two or more
    torchrun boxes, else None (see the module's docstring)."""
    blocks = _boxes(col)
    if len(blocks) < 2 or any_timed_out(col, firsts) or _root_cause_cut(col):
        return None
    seen: dict[tuple[int | None, int | None], tuple[str, ChildFailure, float | None]] = {}
    for source, b in blocks:
        for x in b.failures:
            seen.setdefault((x.rank, x.pid), (source, x, torchrun_time(x.time)))
    timed = sorted(((t, source, x) for source, x, t in seen.values() if t is not None), key=lambda e: e[0])
    if len(timed) != len(seen) or len(timed) < 2:
        return None  # an entry with no time may be the earliest
    (first, source, x), second = timed[0], timed[1][0]
    if not first < second or not _own_failure(col, firsts, own, x) or x.rank is None:
        return None
    if any(e.time is None or e.time < first for r, e in firsts.items() if r != x.rank):
        return None  # a rank's own error before it (or at an unknown time) may be the first
    text = (f"rank {x.rank} pid {x.pid}: the earliest failure across {len(blocks)} torchrun boxes "
            f"({x.time}, exitcode {x.exitcode}" + (f", {x.signal}" if x.signal else "")
            + "); its own output is not in the text")
    return x.rank, _how(x), log_evidence(col, source, x.line, text, x.rank)


def lone_mpirun_exit(col: Collected, firsts: dict[int, RankError], own: set[int]) -> tuple[int, str, Evidence] | None:
    """(rank, how, the box's line) for Open MPI's one first-non-zero-exit report where the
    text holds none of that rank's own output (`own`: leavers.own_output), no error but
    victims' (a collective's, Horovod's shut-down: raised because another rank failed) and
    no timeout (see the module's docstring), else None. The others' victim errors say a
    rank failed first; mpirun's box says which, in the order it saw them exit."""
    exits = [(f.source, t) for f in col.evidence.torch_logs if f.log is not None for t in f.log.task_exits
             if t.launcher == "mpirun"]
    if len(exits) != 1 or any(not e.victim for e in firsts.values()) or any_timed_out(col, firsts):
        return None
    source, t = exits[0]
    if len(t.tasks) != 1 or t.signal or not t.exitcode:
        return None  # a signal is signals.py's; exit 0 is no failure
    rank = t.tasks[0]
    if rank in own or rank in firsts or rank in spoke_of_failure(col):
        return None  # its own output is in the text: leavers.py reads the box with it
    text = f"rank {rank}: mpirun reports it the first process to exit non-zero, exit code {t.exitcode}"
    return rank, f"exited {t.exitcode}", log_evidence(col, source, t.line, text, rank)


__all__ = ["earliest_box_failure", "failed_child", "global_rank", "lone_box_failure", "lone_mpirun_exit",
           "unreported_children"]
