"""Dead-rank from srun's task-state report (parsers/torch_log/taskstates.py), for deaths.py.

srun prints the report when a task exited first (`-W`: `First task exited 60s ago`) or on
an interrupt: the tasks of a step that `exited abnormally` while others of it were still
`running` ended first, on their own, and srun (Slurm's task ids are the ranks under srun)
then terminated the rest (its kills after that are collateral, `after_abort`). Those tasks
are named, medium confidence, where the same step's report shows tasks still running, no
rank timed out (a rank that timed out waiting on a hung one exits first while the hung one
runs on), none of them reported a collective's failure (a victim), and no other rank's own
error is in the text.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import log_evidence
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import RankError, any_timed_out
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words
from healthcheck.diagnose.victims import spoke_of_failure

_ABNORMAL = "exited abnormally"
_RUNNING = "running"


def abnormal_while_running(col: Collected, firsts: dict[int, RankError]) -> list[tuple[int, str, Evidence]]:
    """(rank, how, the report's line) for each task srun reports exited abnormally while
    tasks of the same step still ran (module doc); [] where none is named."""
    if any_timed_out(col, firsts):
        return []
    out: dict[int, tuple[int, str, Evidence]] = {}
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        running = {(s.launcher, s.step) for s in f.log.task_states if s.state == _RUNNING}
        for s in f.log.task_states:
            if s.state != _ABNORMAL or (s.launcher, s.step) not in running:
                continue
            text = (f"{s.launcher}: step {s.step}: {rank_words(list(s.tasks))} exited abnormally while other tasks "
                    "of the step still ran")
            for rank in s.tasks:
                out.setdefault(rank, (rank, "exited abnormally first (srun's task states)",
                                      log_evidence(col, f.source, s.line, text, rank)))
    if set(firsts) - set(out) or spoke_of_failure(col) & set(out) or any(firsts[r].victim for r in firsts):
        return []
    return list(out.values())


__all__ = ["abnormal_while_running"]
