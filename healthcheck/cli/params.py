"""The Click types of every numeric option and argument: finite and in range.

Each is Click's FloatRange or IntRange (the help shows the range) whose conversion is
`core.bounds.bounded`: NaN and infinities are refused (Click's FloatRange lets NaN
through), and both ends of the range are required, so no option takes -1 for a
timeout, 0 for a parallelism or a 5,000-digit pid. `tests/unit/cli/test_cli_numbers.py`
walks every command and fails on a numeric parameter of any other type.
"""

from __future__ import annotations

from typing import Any

import click

from healthcheck.core.bounds import PID_MAX, bounded


class Bounded:
    """Marker of the one rule: a numeric parameter type hc accepts."""


class FiniteFloat(Bounded, click.FloatRange):
    """A float in [min, max] (open ends as asked), never NaN or infinite."""

    def __init__(self, low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> None:
        super().__init__(low, high, min_open=low_open, max_open=high_open)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return bounded(value, self.min, self.max, low_open=self.min_open, high_open=self.max_open)  # type: ignore[arg-type]
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class BoundedInt(Bounded, click.IntRange):
    """An integer in [min, max]."""

    def __init__(self, low: int, high: int) -> None:
        super().__init__(low, high)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return bounded(value, self.min, self.max, integer=True)  # type: ignore[arg-type]
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def number(low: float, high: float, *, low_open: bool = False, high_open: bool = False) -> FiniteFloat:
    return FiniteFloat(low, high, low_open=low_open, high_open=high_open)


def integer(low: int, high: int) -> BoundedInt:
    return BoundedInt(low, high)


def pid() -> BoundedInt:
    """A process id: 1 to the kernel's largest."""
    return BoundedInt(1, PID_MAX)
