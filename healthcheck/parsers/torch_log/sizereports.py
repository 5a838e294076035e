"""A transport's or an MPI library's report that a message's size is not the size its
receiver posted, whatever tool prints it (gloo's own `Received data size doesn't match` is
errors.py's, with gloo's ring and broadcast logic in the diagnosis).

Every such report is the receiving side's: it names what arrived and what was expected, and
at most the receiver; which process sent the other size it does not say. The wordings read:

* MPICH (and its forks: Cray MPICH, Intel MPI, MVAPICH) in a collective's error stack:
  `message sizes do not match across processes in the collective routine: Received R but
  expected E`;
* MPICH's MPI_ERR_TRUNCATE in a receive: `Message truncated; R bytes received but buffer size
  is E`;
* Open MPI's `MPI_ERR_TRUNCATE: message truncated`, UCX's `Message truncated`
  (UCS_ERR_MESSAGE_TRUNCATED), sizes not given;
* NCCL's socket transport, `NET/Socket : peer ADDR message truncated : receiving R bytes
  instead of E` where a torch log holds it (an NCCL debug file's line is the NCCL parser's
  warning, read by the diagnosis: diagnose/transportsize.py).

Each is a SizeMismatch: `received` and `expected` where printed, `library` the wording's
owner, the line's rank where its labels place it (the reporter, never the odd side).
"""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import SizeMismatch
from healthcheck.parsers.torch_log.state import TorchState, where

# (library, pattern): a pattern's groups are the received and the expected size, where printed
SIZE_WORDINGS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("mpich", re.compile(r"message sizes do not match across processes in the collective routine: "
                         r"Received (-?\d{1,19}) but expected (-?\d{1,19})")),
    ("mpich", re.compile(r"Message truncated; (\d{1,19}) bytes received but buffer size is (\d{1,19})")),
    ("nccl", re.compile(r"message truncated : receiving (\d{1,19}) bytes instead of (\d{1,19})")),
    ("open-mpi", re.compile(r"MPI_ERR_TRUNCATE: message truncated()()")),
    ("ucx", re.compile(r"UCS_ERR_MESSAGE_TRUNCATED()()|UCX +ERROR .{0,200}\bMessage truncated()()")),
)
_WORDS = ("message sizes do not match", "Message truncated", "message truncated", "MPI_ERR_TRUNCATE",
          "UCS_ERR_MESSAGE_TRUNCATED")


def size_wording(text: str) -> tuple[str, int | None, int | None] | None:
    """The library, received and expected size of a size report in the text, or None."""
    for library, pattern in SIZE_WORDINGS:
        m = pattern.search(text)
        if m is not None:
            numbers = [g for g in m.groups() if g]
            received = int(numbers[0]) if len(numbers) == 2 else None
            expected = int(numbers[1]) if len(numbers) == 2 else None
            return library, received, expected
    return None


def read_size_report(state: TorchState, line: Line) -> bool:
    """A size report of the family (module doc), once a line."""
    found = size_wording(line.text)
    if found is None:
        return False
    library, received, expected = found
    state.add("size_mismatches", SizeMismatch(**where(line), library=library, received_bytes=received,
                                              expected_bytes=expected, message=clip(line.text.strip(), 300)))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("size-report", lambda b: any(w in b for w in _WORDS), read_size_report),
)

__all__ = ["HANDLERS", "SIZE_WORDINGS", "read_size_report", "size_wording"]
