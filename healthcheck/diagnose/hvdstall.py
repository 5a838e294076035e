"""Horovod's stall inspector read for the ranks that never submitted a collective.

Horovod's coordinator lists, for each tensor some ranks submitted and the others did not,
the ranks missing (parsers/torch_log/stall.py; the oldest wording lists the ranks ready, the
missing being the world's others, read only where the world is known). The missing ranks did
not enter the collective the others wait in: stuck-rank naming them, where one set of ranks is
missing from every stalled op of the text's last report (a rank missing from some ops only
may be on its way). Where no rank is missing from every op, ranks submitted different tensors:
collective-mismatch naming none. Where the missing ranks are more than half of a known world,
the few that did submit may as well have made one call too many: none is named. The rank that
printed the report (mpirun's `[1,0]<stderr>:`) is the coordinator, never the culprit for that.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence, world_of
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.parsers.torch_log import StalledTensors


def _world(col: Collected) -> int | None:
    _, world = world_of(col)
    launched = {f.log.launched_world for f in col.evidence.torch_logs if f.log is not None and f.log.launched_world}
    return world or (launched.pop() if len(launched) == 1 else None)


def _last_report(col: Collected) -> list[tuple[str, StalledTensors]]:
    """The stalled ops of the text's last report (per file: its highest report number)."""
    out: list[tuple[str, StalledTensors]] = []
    for f in col.evidence.torch_logs:
        if f.log is None or not f.log.stalled:
            continue
        last = max(s.report for s in f.log.stalled)
        out.extend((f.source, s) for s in f.log.stalled if s.report == last)
    return out


def _missing(stalled: StalledTensors, world: int | None) -> set[int]:
    if stalled.missing:
        return set(stalled.missing)
    if stalled.ready and world:
        return set(range(world)) - set(stalled.ready)
    return set()


def _per_op(ops: list[tuple[str, StalledTensors]], world: int | None) -> dict[str, set[int]]:
    per: dict[str, set[int]] = {}
    for _, s in ops:
        gone = _missing(s, world)
        if gone:
            per.setdefault(s.op, set()).update(gone)
    return per


def horovod_stall(col: Collected) -> JobFinding | None:
    """stuck-rank (or collective-mismatch naming none) from Horovod's stall report (module doc)."""
    ops = _last_report(col)
    world = _world(col)
    per = _per_op(ops, world)
    if not per:
        return None
    everywhere = set.intersection(*per.values())
    reporter = next((fact_rank(s, None) for _, s in ops if s.rank is not None), None)
    by = f" (reported by rank {reporter}, Horovod's coordinator)" if reporter is not None else ""
    items: list[Evidence] = [log_evidence(col, source, s.line, f"Horovod stalled op {s.op or '?'}: missing "
                                          f"{rank_words(sorted(_missing(s, world)))}", None)
                             for source, s in ops[:12] if _missing(s, world)]
    if not everywhere:
        return job_finding(cls="collective-mismatch", confidence="low", evidence=tuple(items),
                           summary=f"ranks submitted different tensors: Horovod's stall inspector{by} lists other "
                                   "ranks missing from different ops; none is missing from all of them")
    if world and 2 * len(everywhere) > world:
        return job_finding(cls="collective-mismatch", confidence="low", evidence=tuple(items),
                           summary=f"{rank_words(sorted(everywhere))} of a world of {world} never submitted the "
                                   f"ops the others did{by}: so few submitting may be one call too many on their "
                                   "side; no rank is named")
    named = tuple(sorted(everywhere))
    sample = next(iter(per))
    return job_finding(cls="stuck-rank", confidence="medium", ranks=named, evidence=tuple(items),
                       summary=f"{rank_words(named)} never submitted the collective the other ranks wait in: "
                               f"Horovod's stall inspector{by} lists {'it' if len(named) == 1 else 'them'} missing "
                               f"from every stalled op ({len(per)}, e.g. {sample[:120]})")


__all__ = ["horovod_stall"]
