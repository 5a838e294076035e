"""One rule for every number an operator types on a command line: it is a number, it
is finite, and it lies inside its range.

Click's FloatRange lets NaN through (every comparison with NaN is false, so NaN is
"inside" any range), `type=float` takes nan, inf and -1, and `type=int` any integer at
all (a 5,000-digit pid). `cli/params.py` wraps this rule as Click types, and the
argparse helpers (`hc diagnose collect`) call it directly, so the rule is written once.
"""

from __future__ import annotations

import math

# The most a pid can be on Linux (PID_MAX_LIMIT on 64-bit; /proc/sys/kernel/pid_max is at most this).
PID_MAX = 4_194_304


def _show(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    text = text.strip()
    return text if len(text) <= 40 and text.isprintable() else repr(text[:40]) + "..."


def _as_number(value: object, integer: bool) -> int | float:
    if isinstance(value, bool):
        raise ValueError(f"{_show(value)} is not a number")
    if integer:
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        try:
            return int(str(value).strip())
        except ValueError:
            raise ValueError(f"{_show(value)} is not an integer") from None
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{_show(value)} is not a number") from None


def bounded(value: object, low: float, high: float, *, integer: bool = False, low_open: bool = False,
            high_open: bool = False) -> int | float:
    """`value` (text or a number) as an int or float that is finite and in [low, high]
    (open at an end where asked); ValueError with a one-line message otherwise."""
    number = _as_number(value, integer)
    if isinstance(number, float) and not math.isfinite(number):
        raise ValueError(f"{_show(value)} is not a finite number")
    below = number <= low if low_open else number < low
    above = number >= high if high_open else number > high
    if below or above:
        raise ValueError(f"{_show(value)} is not in {describe(low, high, low_open, high_open)}")
    return number


def describe(low: float, high: float, low_open: bool = False, high_open: bool = False) -> str:
    """The range as an operator reads it: `1 <= x <= 600`, `0 < x <= 1`."""
    return f"{low:g} {'<' if low_open else '<='} x {'<' if high_open else '<='} {high:g}"
