"""Which processes on this node are a job's ranks.

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
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from healthcheck.core.inputs import clip
from healthcheck.diagnose.launchers import runs_agent
from healthcheck.diagnose.nodeschema import PTRACE_FIX, CollectError, FoundBy, SkippedProcess, SkipReason
from healthcheck.diagnose.procs import (
    GONE_STATES,
    ProcInfo,
    children_map,
    in_other_netns,
    inspect_process,
    is_python,
    own_lineage,
    own_netns,
    read_environ,
)
from healthcheck.diagnose.rankenv import JOB_VARS, has_rank, rank_of
from healthcheck.runners.proctree import all_pids, descendants

MAX_SKIPPED = 100  # skipped processes listed per node

Candidates = dict[int, tuple[ProcInfo, FoundBy]]
# (ranks with how each was found, skipped processes, errors, {rank pid: agent pid}, {rank pid: helper pids})
FoundRanks = tuple[list[tuple[ProcInfo, FoundBy]], list[SkippedProcess], list[CollectError], dict[int, int],
                   dict[int, list[int]]]


class _Found:
    """What the search found so far: the skipped processes (bounded) and the errors."""

    def __init__(self) -> None:
        self.skipped: list[SkippedProcess] = []
        self.errors: list[CollectError] = []

    def skip(self, p: ProcInfo, reason: SkipReason) -> None:
        if len(self.skipped) < MAX_SKIPPED:
            self.skipped.append(SkippedProcess(p.pid, reason, clip(p.command, 200)))


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
            self._children = children_map(
                q for q in (inspect_process(x, self.proc, with_environ=False) for x in all_pids(self.proc)) if q)
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
    return _Collector(pid=os.getpid(), lineage=own_lineage(proc), step=step, netns=own_netns(proc))


def _candidates_by_pid(pids: Sequence[int], proc: str, found: _Found) -> Candidates:
    """The given processes; one without a rank (a torchrun agent, a shell) stands for the
    rank processes below it where there are any."""
    candidates: Candidates = {}
    tree = _ProcessTree(proc)
    for pid, p in _given_processes(pids, proc, found).items():
        if p.environ is None or has_rank(p.environ):
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


def _given_processes(pids: Sequence[int], proc: str, found: _Found) -> dict[int, ProcInfo]:
    """The given pids that exist (each once, in the order given); the others are errors."""
    procs: dict[int, ProcInfo] = {}
    for pid in dict.fromkeys(int(p) for p in pids):
        p = inspect_process(pid, proc)
        if p is None:
            found.errors.append(CollectError("process-gone", f"no process {pid} on this node", pid=pid))
            continue
        procs[pid] = p
    return procs


def _ranks_below(pid: int, proc: str, tree: _ProcessTree) -> list[ProcInfo]:
    """The Python processes with a rank below `pid`."""
    below = [q for q in (inspect_process(d, proc) for d in descendants(pid, tree.children())) if q]
    return [q for q in below if q.environ and has_rank(q.environ) and is_python(q)]


def _candidates_of_job(job: str, proc: str, found: _Found) -> Candidates:
    """Every process of job `job` here by its cgroup or its environ (not this collector's
    lineage, not init, kthreadd or kernel threads); Python processes whose environ is
    refused are an error (a rank may hide there)."""
    every_pid = all_pids(proc)
    if not every_pid:
        found.errors.append(CollectError("proc-unreadable", f"cannot list {proc}"))
    mine = own_lineage(proc)
    candidates: Candidates = {}
    hidden: list[int] = []  # Python processes whose environ we may not read (a rank may hide there)
    for pid in every_pid:
        if pid in mine or pid <= 2:  # init and kthreadd are never a job's
            continue
        p = inspect_process(pid, proc, with_environ=False)
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


def _job_member(p: ProcInfo, job: str, proc: str) -> FoundBy | None:
    """How `p` is known to be job `job`'s (its cgroup, else its environ, read here), None when it is not."""
    if p.cgroup_job is not None:  # Slurm's cgroup says whose it is
        if p.cgroup_job != job:
            return None
        p.environ, p.environ_error, p.environ_truncated = read_environ(p.pid, proc)
        return "cgroup"
    p.environ, p.environ_error, p.environ_truncated = read_environ(p.pid, proc)
    if p.environ is not None and any(p.environ.get(v) == job for v in JOB_VARS):
        return "environ"
    return None


def _environ_refused(p: ProcInfo) -> bool:
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


def _skip_reason(p: ProcInfo, me: _Collector, *, by_pid: bool, same_netns: bool) -> SkipReason | None:
    """Why a candidate is not a rank, None when it may be one. A pid named by hand is kept
    outside this collector's step and netns, and without a rank (a one-process job has none)."""
    env = p.environ or {}
    if p.pid == me.pid or p.pid in me.lineage or (me.step is not None and env.get("SLURM_STEP_ID") == me.step
                                                  and not by_pid):
        return "collector"
    if p.state in GONE_STATES:
        return "zombie"
    if same_netns and in_other_netns(p, me.netns) and not by_pid:
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


def _top_of_rank(p: ProcInfo, kept: Candidates,
                 rank: tuple[int | None, str | None]) -> ProcInfo:
    """The topmost kept ancestor-or-self of `p` that carries the same rank."""
    top = p
    while top.ppid in kept and rank_of(kept[top.ppid][0].environ or {}) == rank:
        top = kept[top.ppid][0]
    return top


def _add_agents_outside_steps(kept: Candidates, dropped: set[int], agents: dict[int, int], proc: str) -> None:
    """The agent of a torchrun outside any job step: a rank's parent whose command is torchrun."""
    for pid, (p, _) in kept.items():
        if pid not in dropped and pid not in agents and p.ppid is not None and runs_agent(p.ppid, proc):
            agents[pid] = p.ppid


def local_rank_pids(proc: str = "/proc", same_netns: bool = True) -> list[int]:
    """Every rank process on this machine (`hc diagnose pids --local`): Python processes with
    a rank variable (RANK, SLURM_PROCID, ...), in this collector's network namespace, not
    this collector or its ancestors. A rank's own workers (same rank, below it) are among
    them; collect_node lists them as its helpers."""
    mine = own_lineage(proc)
    own = own_netns(proc)
    out = []
    for pid in all_pids(proc):
        if pid in mine or pid <= 2:
            continue
        p = inspect_process(pid, proc, with_environ=False)
        if p is None or p.ppid == 2 or p.state in GONE_STATES or not is_python(p):
            continue
        if same_netns and in_other_netns(p, own):
            continue
        env, _, _ = read_environ(pid, proc)
        if has_rank(env):
            out.append(pid)
    return out
