"""Check statuses and how they combine."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """The verdict of a check or a finding.

    FAIL is evidence that the hardware or its setup is bad; ERROR means the check could
    not run (tool missing, timeout, unparsable output). Only FAIL may drain a node.
    """

    PASS = "PASS"
    SKIP = "SKIP"
    WARN = "WARN"
    ERROR = "ERROR"
    FAIL = "FAIL"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def __str__(self) -> str:
        return self.value


# "Worst" order for a node or a run: a FAIL outranks an ERROR because it is evidence,
# an ERROR outranks a WARN because the node's health is unknown.
_RANK = {Status.SKIP: 0, Status.PASS: 1, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}


def worst(statuses: object, default: Status = Status.PASS) -> Status:
    """The most severe of `statuses` (an iterable of Status), or `default` if empty."""
    result: Status | None = None
    for status in statuses:  # type: ignore[attr-defined]
        if result is None or status.rank > result.rank:
            result = status
    return default if result is None else result


def against_limits(value: float, fail_above: float | None,
                   warn_above: float | None) -> tuple[Status, float, str] | None:
    """The status `value` earns against upper limits: (FAIL or WARN, the limit crossed,
    "fail" or "warn"), or None within both. A limit of None is not checked."""
    if fail_above is not None and value > fail_above:
        return Status.FAIL, fail_above, "fail"
    if warn_above is not None and value > warn_above:
        return Status.WARN, warn_above, "warn"
    return None
