"""srun's tasks that aborted on their own before srun ended the step, for the dead-rank rule.

srun reports each task that ended badly, grouped per node and per ending, as the reports
reach it: `srun: error: HOST: tasks 1408-1418,1420,1422-1423: Aborted`. Once it (or
slurmstepd) ends the step (`*** STEP J.S ON HOST CANCELLED AT T ***`, `Force Terminated`,
`Job step aborted`: the torch log parser's `after_abort`), every task still running is sent
SIGTERM, then SIGKILL: those report `Terminated` / `Killed` and are srun's victims. Slurm never
sends SIGABRT, so a task srun reports `Aborted` before its first victim's report ended on its
own (abort(), a failed assert, an MPI library giving up): the first deaths, named here.
(Every other signal such a task can end in, SIGSEGV, SIGBUS, SIGFPE, a SIGKILL before the
step ended, is already its rank's death through sources.link_task_exits; SIGABRT is held
back there for gloo's abort of a mismatch's parties.)

A SIGABRT is also how NCCL's watchdog ends a rank whose collective timed out, every rank
that waited in it, and how gloo ends a rank whose size check failed: neither is the rank's
own failure. So nothing is named where the text holds a timeout or an abort of any rank, a
gloo size check, or a collective's failure in an aborted rank's own output; nor where the
aborted tasks are not a strict minority of the tasks srun reported, the aborted ones and
its victims together (a watchdog's abort takes nearly every rank, the hung one left to be
terminated); nor where the text holds none of the job's own output before srun's first
abort report (`TaskExit.job_lines_before`: a paste cut at srun's lines cannot show that no
rank printed a watchdog's timeout first). A task with an exception of its own is left to
that exception.

Not named either: a task absent from srun's victims (`tasks 0-57,59-63: Terminated`). srun
reports every task that ended badly, so an absent task's own report is outside the text,
or it exited 0 (srun reports no such task), or it ran on a node whose lines the paste left
out: the text does not say which, and the first two are not the same answer.
"""

from __future__ import annotations

from collections.abc import Iterator

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.logfacts import gloo_size_aborts
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.victims import spoke_of_failure
from healthcheck.parsers.torch_log.facts import TaskExit

_VICTIM_SIGNALS = ("SIGTERM", "SIGKILL")  # what slurmstepd sends the tasks of a step it ends
_SHOWN_RANKS = 8  # ranks spelled out in one evidence line


def _first_victim_line(exits: list[TaskExit]) -> int | None:
    """The line of srun's first report of a task it ended (after the step's end)."""
    lines = [t.line for t in exits if t.after_abort and t.signal in _VICTIM_SIGNALS]
    return min(lines) if lines else None


def _watchdog_words(col: Collected) -> bool:
    """Whether any rank in the text timed out or was aborted by its watchdog."""
    return any(f.log.timeouts or f.log.aborts or f.log.cut_timeouts
               for f in col.evidence.torch_logs if f.log is not None)


def _raised(col: Collected) -> set[int]:
    """The ranks with an exception of their own in the text."""
    return {r for f in col.evidence.torch_logs if f.log is not None
            for r in (fact_rank(e, f.rank) for e in f.log.exceptions) if r is not None}


def _shown(tasks: tuple[int, ...]) -> str:
    head = ",".join(str(t) for t in tasks[:_SHOWN_RANKS])
    return head + (f",... ({len(tasks)} tasks)" if len(tasks) > _SHOWN_RANKS else "")


def srun_own_aborts(col: Collected) -> Iterator[tuple[tuple[int, ...], str, Evidence]]:
    """(ranks, how they died, srun's line) for each srun report of tasks that aborted on
    their own before srun's first victim (module doc); nothing where a guard holds."""
    if gloo_size_aborts(col) or _watchdog_words(col):
        return
    barred = spoke_of_failure(col) | _raised(col)
    found: list[tuple[str, TaskExit]] = []
    victims: set[int] = set()
    for f in col.evidence.torch_logs:
        if f.log is None:
            continue
        exits = [t for t in f.log.task_exits if t.launcher == "srun" and t.tasks]
        first = _first_victim_line(exits)
        if first is None:
            continue
        victims |= {x for t in exits if t.after_abort and t.signal in _VICTIM_SIGNALS for x in t.tasks}
        found += [(f.source, t) for t in exits
                  if t.signal == "SIGABRT" and not t.after_abort and t.line < first]
    aborted = {x for _, t in found for x in t.tasks} - victims
    if not aborted or aborted & barred or len(aborted) >= len(victims):
        return
    if not min(found, key=lambda x: x[1].line)[1].job_lines_before:
        return  # srun's lines alone: nothing shows the job's output had no timeout before them
    for source, t in found:
        ranks = tuple(x for x in t.tasks if x in aborted)
        text = f"srun: tasks {_shown(ranks)} on {t.host or '?'} {t.state} before srun ended the step"
        yield ranks, "aborted (SIGABRT) before srun ended the step", log_evidence(col, source, t.line, text, ranks[0])


__all__ = ["srun_own_aborts"]
