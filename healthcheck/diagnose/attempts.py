"""A job torchrun restarted: only its last attempt is the job's end.

Under `torchrun --max-restarts N` one console holds every attempt: the first attempt's
tracebacks, the agent's `failed (exitcode: 1) local_rank: R (pid: P)` (and, at INFO, its
`Worker group FAILED. N/M attempts left; will restart worker group`), then the workers
starting over. A diagnosis judges how the job ended: a failure of an earlier attempt that
the restart got past names no culprit (it is said, as transient), and where the last
attempt failed too, its own evidence names the ranks.

An attempt boundary is such an agent line after which every worker the console labelled
before it prints again something that is not an error: a fresh start (its banner, its
steps). Late lines of a dying worker (its traceback, flushed after the agent spoke) are
errors, so a last attempt's failure never reads as a restart. The earlier attempts' lines
are blanked, not cut, so that every line keeps its number (evidence is file:line)."""

from __future__ import annotations

import re

from healthcheck.parsers.lines import labels_of
from healthcheck.parsers.torch_log import TorchLog

# a line a failing worker prints (a traceback's header, frames, its exception), never a fresh start's
_ERROR_LINE = re.compile(r"(?:Traceback |\s|[\w.]{1,128}(?:Error|Exception|Interrupt|Exit)\b|$)")


class Attempts:
    """Where the last attempt starts (`start`: the first line after the boundary), what
    the earlier ones left (`failures`: the agent's lines on workers that failed) and their
    workers' pids (`pids`: those the agent named failing or closed, before the boundary):
    `hc run`'s per-rank outputs of those pids are an earlier attempt's too."""

    __slots__ = ("failures", "pids", "start")

    def __init__(self, start: int, failures: list[str], pids: frozenset[int] = frozenset()) -> None:
        self.start = start
        self.failures = failures
        self.pids = pids

    def note(self) -> str:
        said = "; ".join(self.failures[:4]) or "its workers failed"
        return (f"torchrun restarted the workers: an earlier attempt failed ({said}), a transient failure "
                f"the restart got past; only the last attempt (from line {self.start}) is judged")


def _worker(text: str) -> tuple[int | None, bool]:
    """A line's worker (its launcher label: torchrun's local rank, srun's/mpirun's task) and
    whether what it printed is an error's line (torch's own `[rankN]:` prefix is what it
    puts before a worker's traceback)."""
    labels = labels_of(text)
    worker = labels.local_rank if labels.local_rank is not None else labels.task
    return worker, labels.rank is not None or _ERROR_LINE.match(labels.rest) is not None


def _starts_over(lines: list[str], boundary: int) -> bool:
    """Every worker labelled before line `boundary` (1-based) prints a line that is no
    error's after it."""
    before: set[int] = set()
    for text in lines[:boundary]:
        worker, _ = _worker(text)
        if worker is not None:
            before.add(worker)
    if not before:
        return False
    again: set[int] = set()
    for text in lines[boundary:]:
        worker, error = _worker(text)
        if worker in before and not error:
            again.add(worker)
            if again == before:
                return True
    return False


def _gave_up(log: TorchLog, line: int, task: int | None) -> bool:
    """The same agent (its launcher task) printed its final failure box after `line` before
    failing a worker again: it did not restart (two nodes' agents under srun: one node's
    failure is followed by the other node's workers still printing, no restart at all)."""
    again = [f.line for f in log.worker_failures if f.task == task and f.line is not None and f.line > line]
    until = min(again, default=None)
    return any(b.task == task and b.line > line and (until is None or b.line < until) for b in log.child_failed)


def _boundaries(log: TorchLog) -> list[tuple[int, str]]:
    """The agent's lines that end an attempt: (line, what it said), in order."""
    found = [(f.line, f"local rank {f.local_rank} exited {f.exitcode}" + (f" ({f.signal})" if f.signal else "")
              + f" [line {f.line}]") for f in log.worker_failures
             if f.line is not None and not _gave_up(log, f.line, f.task)]
    found += [(e.line, f"worker group {e.state or 'failed'} [line {e.line}]") for e in log.worker_group
              if e.kind == "restart" and e.line is not None]
    return sorted(found)


def last_attempt(text: str, log: TorchLog) -> Attempts | None:
    """Where the last of the attempts `log` (the parse of `text`) shows starts; None where
    it shows one attempt only."""
    found = _boundaries(log)
    if not found:
        return None
    lines = text.split("\n")
    for index in range(len(found) - 1, -1, -1):
        line = found[index][0]
        if _starts_over(lines, line):
            return Attempts(line + 1, [said for at, said in found if at <= line], _pids_before(log, line))
    return None


def _pids_before(log: TorchLog, line: int) -> frozenset[int]:
    """The workers' pids the agent named up to `line`: the failed ones and those it closed."""
    failed = {f.pid for f in log.worker_failures if f.line <= line and f.pid is not None}
    return frozenset(failed | {c.pid for c in log.closing_signals if c.line <= line})


def blanked_before(text: str, start: int) -> str:
    """`text` with its lines before line `start` (1-based) emptied, the line count kept."""
    lines = text.split("\n")
    keep = max(0, min(start - 1, len(lines)))
    return "\n" * keep + "\n".join(lines[keep:])


__all__ = ["Attempts", "blanked_before", "last_attempt"]
