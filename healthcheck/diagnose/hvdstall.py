"""Horovod's stall inspector read for the ranks that never submitted a collective.

Horovod's coordinator lists, for each tensor some ranks submitted and the others did not,
the ranks missing (parsers/torch_log/stall.py; the oldest wording lists the ranks ready, the
missing being the world's others). The world is the ranks' environment's, else a torchrun
command's in the text, else an mpirun/horovodrun/srun command's process count (`-np N`), each
only where no rank the report names is past it. Without a world, a rank below the highest rank
seen ready is a member all the same (ranks are 0..world-1), so it is missing where no op lists
it ready; a rank above the highest seen is unknown and never named. The missing ranks did
not enter the collective the others wait in: stuck-rank naming them, where one set of ranks is
missing from every stalled op of the text's last report (a rank missing from some ops only
may be on its way). Where no rank is missing from every op, ranks submitted different tensors:
collective-mismatch naming none, unless the report shows every rank of the world ready on
some op and all but one agree on which: that one is out of step (loneodd.py, low
confidence). Where the missing ranks are more than half of a known world
(or, without one, of the ranks up to the highest seen ready), the few that did submit may as
well have made one call too many: none is named. The rank that printed the report (mpirun's
`[1,0]<stderr>:`) is the coordinator, never the culprit for that.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence, world_of
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.loneodd import lone_odd
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.parsers.torch_log import StalledTensors


def _launched(col: Collected) -> int | None:
    """The world a launch command in the text starts: torchrun's, else an MPI or Slurm
    launcher's process count; None where the files disagree or hold none."""
    logs = [f.log for f in col.evidence.torch_logs if f.log is not None]
    torchrun = {g.launched_world for g in logs if g.launched_world}
    for counts in (torchrun, {g.launched_np for g in logs if g.launched_np}):
        if counts:
            return counts.pop() if len(counts) == 1 else None
    return None


def _world(col: Collected, ops: list[tuple[str, StalledTensors]]) -> int | None:
    """The ranks' environment's world, else a launch command's where no rank the stall
    report names is past it."""
    _, world = world_of(col)
    if world:
        return world
    launched = _launched(col)
    named = [r for _, s in ops for r in (*s.ready, *s.missing)]
    return launched if launched and max(named, default=-1) < launched else None


def _last_report(col: Collected) -> list[tuple[str, StalledTensors]]:
    """The stalled ops of the text's last report (per file: its highest report number)."""
    out: list[tuple[str, StalledTensors]] = []
    for f in col.evidence.torch_logs:
        if f.log is None or not f.log.stalled:
            continue
        last = max(s.report for s in f.log.stalled)
        out.extend((f.source, s) for s in f.log.stalled if s.report == last)
    return out


def _missing(stalled: StalledTensors, world: int | None, bound: int) -> set[int]:
    """The op's missing ranks: as listed, else the world's ranks not ready, else (no world)
    the ranks below `bound`, one past the highest rank seen ready, not ready."""
    if stalled.missing:
        return set(stalled.missing)
    if stalled.ready:
        return set(range(world or bound)) - set(stalled.ready)
    return set()


def _per_op(ops: list[tuple[str, StalledTensors]], world: int | None, bound: int) -> dict[str, set[int]]:
    per: dict[str, set[int]] = {}
    for _, s in ops:
        gone = _missing(s, world, bound)
        if gone:
            per.setdefault(s.op, set()).update(gone)
    return per


def _lone_submitter(ops: list[tuple[str, StalledTensors]], world: int | None, bound: int) -> int | None:
    """The one rank whose submitted ops differ from every other rank's, all of which agree
    (loneodd.py), where the report shows each rank of the world ready on some op."""
    known = world or bound
    ready: dict[int, set[str]] = {}
    for _, s in ops:
        on = set(s.ready) if s.ready else (set(range(world)) - set(s.missing) if world and s.missing else set())
        for r in on:
            ready.setdefault(r, set()).add(s.op)
    return lone_odd({r: frozenset(v) for r, v in ready.items()}, known)


def horovod_stall(col: Collected) -> JobFinding | None:
    """stuck-rank (or collective-mismatch naming none) from Horovod's stall report (module doc)."""
    ops = _last_report(col)
    world = _world(col, ops)
    bound = max((r + 1 for _, s in ops for r in s.ready), default=0)
    per = _per_op(ops, world, bound)
    if not per:
        return None
    everywhere = set.intersection(*per.values())
    reporter = next((fact_rank(s, None) for _, s in ops if s.rank is not None), None)
    by = f" (reported by rank {reporter}, Horovod's coordinator)" if reporter is not None else ""
    items: list[Evidence] = [log_evidence(col, source, s.line, f"Horovod stalled op {s.op or '?'}: missing "
                                          f"{rank_words(sorted(_missing(s, world, bound)))}", None)
                             for source, s in ops[:12] if _missing(s, world, bound)]
    if not everywhere and (odd := _lone_submitter(ops, world, bound)) is not None:
        return job_finding(cls="collective-mismatch", confidence="low", ranks=(odd,), evidence=tuple(items),
                           summary=f"rank {odd} is out of step: Horovod's stall inspector{by} shows it alone ready on "
                                   "other ops than every other rank, which all agree")
    if not everywhere:
        return job_finding(cls="collective-mismatch", confidence="low", evidence=tuple(items),
                           summary=f"ranks submitted different tensors: Horovod's stall inspector{by} lists other "
                                   "ranks missing from different ops; none is missing from all of them")
    known = world or bound
    of = f"a world of {world}" if world else f"the {bound} ranks up to the highest seen ready"
    if known and 2 * len(everywhere) > known:
        return job_finding(cls="collective-mismatch", confidence="low", evidence=tuple(items),
                           summary=f"{rank_words(sorted(everywhere))} of {of} never submitted the "
                                   f"ops the others did{by}: so few submitting may be one call too many on their "
                                   "side; no rank is named")
    named = tuple(sorted(everywhere))
    sample = next(iter(per))
    return job_finding(cls="stuck-rank", confidence="medium", ranks=named, evidence=tuple(items),
                       summary=f"{rank_words(named)} never submitted the collective the other ranks wait in: "
                               f"Horovod's stall inspector{by} lists {'it' if len(named) == 1 else 'them'} missing "
                               f"from every stalled op ({len(per)}, e.g. {sample[:120]})")


__all__ = ["horovod_stall"]
