"""The progress bar of a run over many nodes: the CLI's concern, so orchestration only
calls back when a node is done."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import click

from healthcheck.core.model import NodeResult


def progress_printer(total: int) -> Callable[[str, NodeResult], None] | None:
    """A progress bar on a terminal (stderr), nothing otherwise."""
    if not sys.stderr.isatty():
        return None

    bar = click.progressbar(length=total, label="checking", file=sys.stderr, show_pos=True)
    bar.__enter__()
    done = [0]
    lock = threading.Lock()  # workers finish from many threads at once

    def on_done(node: str, result: NodeResult) -> None:
        with lock:
            done[0] += 1
            bar.update(1)
            if done[0] == total:
                bar.__exit__(None, None, None)

    return on_done


class TextProgress:
    """One line of progress on stderr for a long read (`hc diagnose logs /usr`).

    On a terminal it shows from the start, rewritten in place at most every `every_s`
    and erased at the end. Elsewhere (a log file, a pipe) it says nothing unless the work
    has taken `delay_s` already; then one line every `log_every_s`, so a slow run is
    never silent and a quick one leaves no noise in a captured stderr.
    """

    def __init__(self, label: str, *, stream=None, delay_s: float = 2.0, every_s: float = 0.25,
                 log_every_s: float = 5.0, clock: Callable[[], float] | None = None) -> None:

        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock or time.monotonic
        self.start = self.clock()
        try:
            self.tty = bool(self.stream.isatty())
        except (AttributeError, ValueError, OSError):
            self.tty = False
        self.delay_s = 0.0 if self.tty else delay_s
        self.every_s = every_s if self.tty else log_every_s
        self.last: float | None = None
        self.width = 0  # of the line shown on a terminal, to erase it

    def __call__(self, text: str) -> None:
        now = self.clock()
        if now - self.start < self.delay_s:
            return
        if self.last is not None and now - self.last < self.every_s:
            return
        self.last = now
        line = f"{self.label}: {text}"
        try:
            if self.tty:
                self.stream.write("\r" + line.ljust(self.width))
                self.width = len(line)
            else:
                self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # stderr gone: progress is not worth an error

    def done(self) -> None:
        """Erase the terminal's progress line (a logged one stays)."""
        if self.tty and self.width:
            try:
                self.stream.write("\r" + " " * self.width + "\r")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self.width = 0
