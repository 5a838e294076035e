"""A training loop's own step lines (`step 3 loss 12.0`, `iteration 40`, `global_step=7`):
the last step each rank logged, kept per rank (not a list: a loop logs thousands and only
the last says how far the rank got). Lines that report a failure are not
steps logged. Read only on lines whose rank is known (a
`[rankN]:` prefix or a launcher's label; a per-rank file gives its own later), so a
combined stream without labels gives none.

Why: when collectives pair across ranks that are out of step (one skipped a call, or
made one more), the rank off the others is also off in the step it last logged
(captured with torch 2.13: a rank that skipped an all_reduce logged one step more than
its peers; one that called one more, one step fewer).
"""

from __future__ import annotations

import re

from healthcheck.parsers.lines import Line
from healthcheck.parsers.torch_log.facts import RankWarned, StepLogged
from healthcheck.parsers.torch_log.state import OPEN_MAX, TorchState, where

# the word, then a separator and the number: `step 3`, `Step: 3`, `global_step=3`, `iter #3`;
# not `steps/s`, not a traceback's `in train_step` (no number after it)
_STEP = re.compile(r"(?<![\w/.])(?:global[_ ]step|step|iteration|iter)(?:\s{0,3}[:=#]\s{0,3}|\s{1,3})(\d{1,9})\b",
                   re.IGNORECASE)


# a line that reports a failure says where the rank was when it failed (`collective failed at
# step 2`), not how far its loop got: a rank gloo aborted prints none, so they never compare
_FAILURE = re.compile(r"error|fail|exception|traceback|timed? ?out", re.IGNORECASE)


# a loop's round by any counter it logs (`epoch 2`, `step 30`, `iter 7`, `batch 12`), only to
# tell whether a job's loop went round at all (loop_rounds), never which rank is where: an epoch
# and a step are no numbers to compare across ranks
_ROUND = re.compile(r"(?<![\w/.])(epoch|global[_ ]step|step|iteration|iter|batch)(?:\s{0,3}[:=#]\s{0,3}|\s{1,3})"
                    r"(\d{1,9})\b", re.IGNORECASE)
ROUND_VALUES_MAX = 8  # values kept per counter word: two say the loop went round


def looks_like_step(text: str) -> bool:
    return "tep" in text or "ter" in text


def looks_like_round(text: str) -> bool:
    return looks_like_step(text) or "poch" in text or "atch" in text


def _count_round(state: TorchState, text: str) -> bool:
    """A loop counter's value into the job's rounds (`TorchState.rounds`): True where the line logs one."""
    m = _ROUND.search(text)
    if m is None:
        return False
    values = state.rounds.setdefault(m.group(1).lower().replace(" ", "_"), set())
    if len(values) < ROUND_VALUES_MAX:
        values.add(int(m.group(2)))
    return True


def read_step(state: TorchState, line: Line) -> bool:
    """Keep the step a line logs as its rank's last; any loop counter it logs into the job's rounds."""
    if line.text.lstrip().startswith("File ") or _FAILURE.search(line.text):
        return False
    counted = _count_round(state, line.text)
    m = _STEP.search(line.text)
    if m is None:
        return counted
    at = where(line)
    key = (at["rank"], at["task"])
    if key not in state.last_step and len(state.last_step) >= OPEN_MAX:
        return False
    state.last_step[key] = StepLogged(**at, step=int(m.group(1)))
    return True


# a logging level word near the head of a line (`2026-11-27 22:17:00,238 WARNING [train] ...`,
# `W1127 ...` is glog's and not read): what a rank's own code said at warning level or above
_LEVEL = re.compile(r"(?:^|[\s\[|])(?:WARNING|WARN|ERROR|CRITICAL|FATAL)(?:[\s\]|:]|$)")
_LEVEL_HEAD = 80


def looks_like_warning(text: str) -> bool:
    return "WARN" in text or "ERROR" in text or "CRITICAL" in text or "FATAL" in text


def read_warning(state: TorchState, line: Line) -> bool:
    """Keep a line logged at warning level or above as its rank's last (not a traceback's)."""
    text = line.text
    if _LEVEL.search(text[:_LEVEL_HEAD]) is None or text.lstrip().startswith(("File ", "Traceback")):
        return False
    at = where(line)
    key = (at["rank"], at["task"])
    if key not in state.last_warning and len(state.last_warning) >= OPEN_MAX:
        return False
    state.last_warning[key] = RankWarned(**at, text=text.strip()[:200])
    return True


__all__ = ["looks_like_round", "looks_like_step", "looks_like_warning", "read_step", "read_warning"]
