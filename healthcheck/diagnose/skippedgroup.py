"""Rule (collective-mismatch, logs): a rank that passed a process group it does not belong to.

torch does not fail such a call: it warns "Running OP on global rank R which does not
belong to the given group" (distributed_c10d._warn_not_in_group, a UserWarning, in that
rank's output only) and returns at once. The rank goes on to its next collective while
the members of the group it should have used wait for it: its partner waits alone, in
another collective than everyone else, and is the one the post-mortem's "odd collective"
names. The partner is the victim; the rank torch warned about is the culprit.

Calling a group's collective from a rank outside it is also what some programs do on
purpose (every rank calls, non-members skip): then every non-member warns, a half of the
world or more. The rule names the warned ranks only where they are a strict minority of
the ranks heard, the job failed in its collectives (a rank's first error a collective's
timeout), and no warned rank's own first error is an exception of its own code (that is
the dead-rank rule's). Live, stackrules.group_culprit reads the same warning beside the
stacks. (Captured here: tests/fixtures/diagnose/rules11, wronggroup.)
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.logfacts import error_evidence, first_errors, ranks_heard
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words


def warned_ranks(col: Collected) -> dict[int, Evidence]:
    """Ranks torch warned had called a collective with a group they do not belong to, with
    the first such warning of each."""
    out: dict[int, Evidence] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        for w in f.log.not_in_group:
            if w.global_rank >= 0:
                out.setdefault(w.global_rank, log_evidence(
                    col, f.source, w.line, f"rank {w.global_rank} ran {w.operation} with a process group it does "
                                           "not belong to: torch skipped the call", w.global_rank))
    return out


def skipped_group(col: Collected) -> JobFinding | None:
    """See the module's docstring."""
    warned = warned_ranks(col)
    if not warned or len(warned) * 2 >= len(ranks_heard(col) | set(warned)):
        return None
    firsts = first_errors(col)
    waited = [e for e in firsts.values() if e.victim and e.timed_out]
    if not waited or any(not firsts[r].victim for r in warned if r in firsts):
        return None
    culprits = tuple(sorted(warned))
    victims = sorted(e.rank for e in waited if e.rank not in warned)
    items = [warned[r] for r in culprits] + [error_evidence(e) for e in waited[:8]]
    others = f"; {rank_words(victims)} timed out waiting in collectives (victims)" if victims else ""
    return job_finding(
        cls="collective-mismatch", ranks=culprits, confidence="high", evidence=tuple(items[:16]),
        summary=f"{rank_words(culprits)} passed a process group it does not belong to: torch warned and skipped its "
                f"call, so the members of its own group waited for it in a collective it never entered{others}")


__all__ = ["skipped_group", "warned_ranks"]
