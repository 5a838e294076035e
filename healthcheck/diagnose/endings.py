"""How a job ended where no rule names a culprit: what the verdict says instead of "no
failure hc recognises" when the output itself says how it ended.

* interrupted: every rank the evidence knows of printed a KeyboardInterrupt: a Ctrl-C the
  launcher passed to all its workers (torchrun's agent and mpirun forward SIGINT to every
  rank), an operator's stop, no rank's own death (logfacts.interrupted_everywhere; one
  rank's interrupt alone is that rank's death: deaths.py).
* finished: the ranks' output (a launcher's labelled stream, per-rank files) holds no
  error, timeout or traceback, every rank heard logged its last step, and where the
  launcher or `hc run` recorded exit statuses every one is 0: the job finished.
"""

from __future__ import annotations

from healthcheck.diagnose.logfacts import failures_held, interrupted_everywhere, rank_errors, ranks_heard
from healthcheck.diagnose.outofstep import last_steps
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import fold_ranks, rank_words


def interrupted(col: Collected) -> str:
    """Why nothing is named when every rank was interrupted, or ""."""
    errors = rank_errors(col)
    if not interrupted_everywhere(col, errors):
        return ""
    return (f"every rank ({rank_words(sorted(errors))}) printed a KeyboardInterrupt: a Ctrl-C its launcher "
            "passed to all its workers (an operator's stop), no rank's own death")


def finished(col: Collected) -> str:
    """What says the job finished (see the module's docstring), or ""."""
    ev = col.evidence
    heard = ranks_heard(col)
    if not ev.torch_logs or not heard or failures_held(col) or rank_errors(col):
        return ""
    if any(r.alive or r.signal or r.exit_code not in (None, 0) for r in ev.ranks.values()):
        return ""
    steps = last_steps(col)
    if set(steps) != heard:
        return ""
    by_step: dict[int, list[int]] = {}
    for rank, (step, _) in steps.items():
        by_step.setdefault(step, []).append(rank)
    reached = "; ".join(f"{rank_words(rs)} step {s}" for s, rs in sorted(by_step.items()))
    exits = [r.exit_code for r in ev.ranks.values() if r.exit_code is not None]
    exited = ", every one exited 0" if exits and len(exits) == len(heard) else ""
    return (f"the job shows no failure: ranks {fold_ranks(heard)} printed no error, timeout or traceback{exited}; "
            f"the last step each logged: {reached} (a job that finished, or output cut before its end)")


def ending(col: Collected) -> str:
    """The job's ending where the output says it, or ""."""
    return interrupted(col) or finished(col)


__all__ = ["ending", "finished", "interrupted"]
