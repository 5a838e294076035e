"""MVAPICH2's own report of a rank's fatal signal, read as that rank's death.

MVAPICH2 installs a handler for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT that prints, behind
its `[HOST:mpi_rank_N][FUNCTION] ` prefix (the rank N is the MPI rank, printed by the rank
itself), `Caught error: NAME (signal S)`:

    [gpu-07:mpi_rank_24][error_sighandler] Caught error: Segmentation fault (signal 11)

Each such line is that rank's own native death (ExceptionRaised, type the signal's name);
several ranks' lines are several deaths, judged together by diagnose/'s dead-rank rule.
"""

from __future__ import annotations

import re

from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import SIGNALS, ExceptionRaised
from healthcheck.parsers.torch_log.state import TorchState, where

_REPORT = re.compile(r"\[[\w.-]{1,255}:mpi_rank_(\d{1,9})\]\[\w{1,64}\] Caught error: ([^()]{1,60}) "
                     r"\(signal (\d{1,3})\)")


def read_mvapich_signal(state: TorchState, line: Line) -> bool:
    """One rank's `[HOST:mpi_rank_N][...] Caught error: NAME (signal S)` (module doc)."""
    m = _REPORT.search(line.text, 0, 600)
    if m is None:
        return False
    number = int(m.group(3))
    state.add("exceptions", ExceptionRaised(**(where(line) | {"rank": int(m.group(1))}),
                                            type=SIGNALS.get(number, "signal"), native=True,
                                            message=f"{m.group(2).strip()} (signal {number}) (MVAPICH2's handler)"))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("mvapich-signal", lambda b: ":mpi_rank_" in b and "Caught error: " in b, read_mvapich_signal),
)

__all__ = ["HANDLERS", "read_mvapich_signal"]
