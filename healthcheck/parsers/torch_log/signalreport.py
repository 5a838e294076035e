"""Open MPI's signal report, read as the death of the process that printed it.

When a process of an Open MPI job dies of a signal, opal's handler prints, each line behind
the process's `[host:pid] `:

    [gn05:194928] *** Process received signal ***
    [gn05:194928] Signal: Segmentation fault (11)
    [gn05:194928] Signal code: Address not mapped (1)
    [gn05:194928] [ 0] /usr/lib64/libpthread.so.0(+0xf6d0)[0x2aaaab2446d0]
    ...
    [gn05:194928] *** End of error message ***

Under `mpirun --tag-output` each line also carries `[1,R]<stderr>:`, which names the rank. The
report is the rank's own death with its signal: an exception of its own (native, unframed),
one per report. A paste often holds only the middle of it (the frames, the header cut away):
the numbered frames are printed by the handler alone, so they are the same death. Where no
label names the rank the fact has none, and nobody is named from it (a process of a job, not
a rank). glibc's own `*** Error in ...` and Python's faulthandler are not this report.
"""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import SIGNALS, ExceptionRaised
from healthcheck.parsers.torch_log.state import TorchState, rank_key, where

_OPEN = "signal-report"
# the types a report gives its death: the signal's name, or "signal" where the header was cut
DEATH_TYPES = frozenset({*SIGNALS.values(), "signal"})
# the process's own prefix: `[host:pid] ` (a host name, then its pid)
_PROCESS = re.compile(r"\[([\w.-]{1,255}):(\d{1,10})\] ")
_HEADER = "*** Process received signal ***"
_END = "*** End of error message ***"
_SIGNAL = re.compile(r"Signal: ([A-Za-z][\w /-]{0,60}) \((\d{1,3})\)")
_FRAME = re.compile(r"\[ {0,3}\d{1,4}\] ")
_DETAILS = ("Signal code: ", "Failing at address: ", "Associated errno: ")


def _is_report(body: str) -> bool:
    return body.startswith("[") and "] " in body[:280]


def read_signal_report(state: TorchState, line: Line) -> bool:
    """A line of opal's signal report (see the module doc): the header or a frame opens the
    rank's death (once per report), the `Signal:` line names its signal, the end closes it."""
    m = _PROCESS.match(line.text)
    if m is None:
        return False
    rest = line.text[m.end():]
    key = rank_key(line)
    opened = state.find_open(_OPEN, key) if key != (None, None) else state.open.get((_OPEN, key))
    if rest.startswith(_END):
        if opened is not None:
            state.close(_OPEN, key)
        return opened is not None
    signal = _SIGNAL.match(rest)
    if rest.startswith(_HEADER) or signal is not None or _FRAME.match(rest):
        if opened is None:
            index = state.add("exceptions", ExceptionRaised(
                **where(line), type="signal", native=True, pid=int(m.group(2)),
                message="the process died of a signal (Open MPI's signal report: "
                        + ("its header cut, the crash's frames shown)" if _FRAME.match(rest) else "received signal)")))
            if index >= 0:
                state.start(_OPEN, index, key)
            opened = state.find_open(_OPEN, key)
        if signal is not None and opened is not None:
            number = int(signal.group(2))
            state.amend("exceptions", opened.index, type=SIGNALS.get(number, "signal"),
                        message=clip(f"{signal.group(1)} ({number}) (Open MPI's signal report)", 200))
        return True
    return opened is not None and rest.startswith(_DETAILS)


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("signal-report", _is_report, read_signal_report),
)


__all__ = ["DEATH_TYPES", "HANDLERS", "read_signal_report"]
