"""Two processes claiming one global rank as they start: the ranks' assignment is wrong.

PyTorch Lightning prints, once per process before `init_process_group`, the global rank it
takes: `initializing ddp: GLOBAL_RANK: R, MEMBER: R+1/N` (parsers/torch_log/ddpstart.py).
Two processes printing the same R (two nodes given the same node rank, or the same
`SLURM_PROCID`) cannot both join: the group of N never forms, whoever started. That is an
init failure naming no rank (no rank is at fault; the launch is), read only where the text
says it and nothing else explains the lines:

* some rank is claimed twice, the two claims on lines apart (a logger whose every line is
  printed twice puts its copies side by side) and interleaved with the other ranks' claims
  (some rank's second claim comes before another's first: a rerun or a restart prints a
  whole world's claims again after the first), every claim of one world N;
* some rank of the N is never claimed (a world fully claimed twice is two runs of it);
* the text holds no failure, no restart of a worker group and no step a rank logged (the
  group formed): nothing of a job that got past its start.

A paste that ends at these lines with every rank claimed once names nothing: a healthy
start looks the same until its next line, and the paste does not say the job stopped there.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import failures_held
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.parsers.torch_log import DdpStart


def _interleaved(claims: list[DdpStart]) -> bool:
    """Whether some rank's second claim comes before another rank's first claim."""
    seen: set[int] = set()
    second_at: int | None = None
    for i, c in enumerate(claims):
        if c.global_rank in seen:
            second_at = i if second_at is None else second_at
        elif second_at is not None:
            return True  # a first claim after a second one
        seen.add(c.global_rank)
    return False


def _apart(claims: list[DdpStart], rank: int) -> bool:
    """Whether two claims of the rank lie on lines apart (not a doubled logger's copy)."""
    lines = sorted(c.line for c in claims if c.global_rank == rank)
    return any(b - a > 1 for a, b in zip(lines, lines[1:], strict=False))


def _got_past_start(col: Collected) -> bool:
    """A failure, a worker group's restart or a logged step: the job is past its start."""
    logs = [f.log for f in col.evidence.torch_logs if f.log is not None]
    return bool(failures_held(col)) or any(log.worker_group or log.last_steps for log in logs)


def duplicate_rank_claims(col: Collected) -> JobFinding | None:
    """The init-failure of two processes claiming one global rank, or None (module doc)."""
    found = [(f.source, c) for f in col.evidence.torch_logs if f.log is not None for c in f.log.ddp_starts]
    if len({src for src, _ in found}) != 1:
        return None  # claims across files: their order is not one
    claims = [c for _, c in found]
    worlds = {c.world for c in claims}
    if len(worlds) != 1:
        return None
    world = worlds.pop()
    counts: dict[int, int] = {}
    for c in claims:
        counts[c.global_rank] = counts.get(c.global_rank, 0) + 1
    twice = sorted(r for r, n in counts.items() if n > 1)
    never = sorted(set(range(world)) - set(counts))
    if not any(_apart(claims, r) for r in twice) or not never or not _interleaved(claims) or _got_past_start(col):
        return None
    source = found[0][0]
    items: list[Evidence] = [log_evidence(col, source, c.line, f"a process claims global rank {c.global_rank} "
                                                                f"of {world}", None)
                             for c in claims if c.global_rank in twice][:20]
    summary = (f"two processes each claim {rank_words(twice)} of {world} as they start (Lightning's "
               f"`GLOBAL_RANK: R, MEMBER: m/{world}`), and {rank_words(never)} never start: the ranks are assigned "
               "wrongly (two nodes given the same node rank?), the group cannot form")
    return job_finding(cls="init-failure", summary=summary, confidence="medium", ranks=(), evidence=tuple(items))


__all__ = ["duplicate_rank_claims"]
