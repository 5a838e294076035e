"""A process's own report of the fatal signal it is dying of, printed by the handler of the
runtime it links, whatever that runtime (Open MPI's `*** Process received signal ***` is
signalreport.py's):

* abseil's failure signal handler (linked by TensorFlow, JAX, gRPC and what bundles them):
  `*** SIGSEGV received at time=1775734074 on cpu 19 ***`;
* glog's / folly's: `*** SIGSEGV (@0x0) received by PID 4242 (TID 0x7f...) from PID 0; stack
  trace: ***`;
* Julia's: `signal (6): Aborted` on a line of its own.

* a shell's report of the fault signal that killed the command it ran (its strsignal):
  `Segmentation fault (core dumped)`, `Bus error`, `Illegal instruction`, `Floating point
  exception`, a line of its own, read only under a label that names the rank (horovodrun's
  `[1]<stderr>:`, mpirun's `[1,1]<stderr>:`, srun --label's `1: `): that rank's shell, so the
  rank's process; an unlabelled one is the shell's around the whole launch, no rank's.

Each is the death of the process that printed it, by that signal: an ExceptionRaised of the
signal's type, native, on the rank the line's labels name and else on none (a process of the
job, not a rank: the diagnosis places it only by elimination, diagnose/stuckdied.py).
"""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import SIGNAL_NAMES, SIGNALS, ExceptionRaised
from healthcheck.parsers.torch_log.state import TorchState, where

# (runtime, pattern): group "sig" a signal's name or group "num" its number; group "pid" where printed
_REPORTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("abseil", re.compile(r"\*\*\* (?P<sig>SIG[A-Z]{2,7}) received at time=\d{1,20}(?: on cpu \d{1,6})? \*\*\*")),
    ("glog", re.compile(r"\*\*\* (?P<sig>SIG[A-Z]{2,7}) \(@[^)\s]{1,40}\) received by PID (?P<pid>\d{1,10})\b")),
    ("julia", re.compile(r"signal \((?P<num>\d{1,3})\): [A-Z][A-Za-z ]{1,40}")),
)


# a shell's strsignal of the fault that killed its command (module doc)
_SHELL = re.compile(r"(Segmentation fault|Bus error|Illegal instruction|Floating point exception)(?: \(core dumped\))?")
_SHELL_ENDS = ("(core dumped)", "Segmentation fault", "Bus error", "Illegal instruction", "Floating point exception")
_SHELL_SIGNALS = {"Segmentation fault": "SIGSEGV", "Bus error": "SIGBUS", "Illegal instruction": "SIGILL",
                  "Floating point exception": "SIGFPE"}


def read_crash_report(state: TorchState, line: Line) -> bool:
    """One runtime's report of its process's fatal signal (module doc)."""
    text = line.text.strip()
    shell = _SHELL.fullmatch(text)
    if shell is not None:
        at = where(line)
        if at["rank"] is None and at["task"] is None:
            return False
        signal = _SHELL_SIGNALS[shell.group(1)]
        state.add("exceptions", ExceptionRaised(
            **at, type=signal, native=True, message=clip(f"the process died of {signal} (its shell: {text})", 200)))
        return True
    for runtime, pattern in _REPORTS:
        m = pattern.fullmatch(text) if runtime == "julia" else pattern.search(text)
        if m is None:
            continue
        signal = m.group("sig") if "sig" in pattern.groupindex else SIGNALS.get(int(m.group("num")), "")
        if signal not in SIGNAL_NAMES:
            return False
        pid = m.groupdict().get("pid")
        state.add("exceptions", ExceptionRaised(
            **where(line), type=signal, native=True, pid=int(pid) if pid else None,
            message=clip(f"the process died of {signal} ({runtime}'s failure signal handler: {text})", 200)))
        return True
    return False


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("crash-report", lambda b: "received at time=" in b or "received by PID" in b or b.startswith("signal (")
            or b.rstrip().endswith(_SHELL_ENDS), read_crash_report),
)

__all__ = ["HANDLERS", "read_crash_report"]
