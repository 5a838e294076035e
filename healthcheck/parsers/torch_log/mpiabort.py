"""Open MPI's MPI_ABORT box, read as the death of the rank that called MPI_Abort.

`ompi_mpi_abort` shows its help message (help-mpi-api.txt `[mpi-abort]`, printed by the
process or by mpirun on its behalf), whose own text breaks its first sentence over two lines:

    MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD
    with errorcode -1.

    NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.

The rank called MPI_Abort itself (its own code's decision: an error it could not go on
from, mpi4py's hook after an uncaught exception), and Open MPI then kills every other
process: the rank's own death, an exception of its own (native, unframed; type
`MPI_ABORT`, its error code in the message). The rank printed is its rank in the
communicator named: the global rank only in MPI_COMM_WORLD (`in communicator MPI
COMMUNICATOR 7 CREATE FROM 4` is another numbering), so elsewhere only a launcher's label
names it. The sentence is joined back wherever a wrap or the help text split it
(sentences.py's SENTENCES hold MPI_ABORT_WHOLE); a head read alone still gives the rank.
"""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import ExceptionRaised
from healthcheck.parsers.torch_log.state import TorchState, where

ABORT_TYPE = "MPI_ABORT"
ABORT_HEADS = ("MPI_ABORT was", "MPI_ABORT")
_WORLD = "MPI_COMM_WORLD"
# the communicator's name: Open MPI's own for a derived one holds blanks (`MPI COMMUNICATOR 7
# CREATE FROM 4`, bounded and lazy), any other is one word (MPI_COMM_WORLD, a name the program
# set): so a character wrap inside the name (`MPI_CO` / `MM_WORLD`) is told from a word wrap
_COMM = r"(MPI COMMUNICATOR [\w ]{1,64}?|\S{1,128})"
_ABORT = re.compile(rf"MPI_ABORT was invoked on rank (\d{{1,9}}) in communicator {_COMM}"
                    r"(?: {1,4}with errorcode (-?\d{1,12})\.?)?\s*$")
MPI_ABORT_WHOLE = re.compile(rf"MPI_ABORT was invoked on rank \d{{1,9}} in communicator {_COMM} {{1,4}}"
                             r"with errorcode -?\d{1,12}")


def read_mpi_abort(state: TorchState, line: Line) -> bool:
    """`MPI_ABORT was invoked on rank R in communicator C with errorcode E.`: rank R's own death."""
    m = _ABORT.search(line.text)
    if m is None:
        return False
    rank, comm, code = int(m.group(1)), m.group(2).strip(), m.group(3)
    at = where(line)
    if at["rank"] is None and comm == _WORLD:
        at["rank"] = rank
    state.add("exceptions", ExceptionRaised(
        **at, type=ABORT_TYPE, native=True,
        message=clip(f"rank {rank} of {comm} called MPI_Abort" + (f" with errorcode {code}" if code else ""), 300)))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("mpi-abort", lambda b: "MPI_ABORT was invoked on rank" in b, read_mpi_abort),
)

__all__ = ["ABORT_HEADS", "ABORT_TYPE", "HANDLERS", "MPI_ABORT_WHOLE", "read_mpi_abort"]
