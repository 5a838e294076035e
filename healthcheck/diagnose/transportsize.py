"""A transport's or an MPI library's own report that a message had another size than its
receiver posted (NCCL's socket transport `message truncated : receiving 8 bytes instead of
4`, MPICH's `message sizes do not match across processes`, MPI_ERR_TRUNCATE, UCX's `Message
truncated`: parsers/torch_log/sizereports.py, and NCCL's warning in its own debug lines):
the two sides of one transfer disagree on its size, a shape mismatch.

The report is the receiver's and names neither the sender nor which side holds the odd
size, so it names no rank: its evidence lines only (mismatch.py, where no other evidence of a
mismatch is in the text, concludes with none). The receiver's own abort on it (Cray MPICH's
`Abort(...) (rank 1 in comm 0): Fatal error in MPIR_CRAY_Bcast_Tree`) is that reaction, not a
fault of its own, and is not read as its death.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence
from healthcheck.diagnose.sources import Collected
from healthcheck.parsers.torch_log.sizereports import size_wording


def _said(library: str, received: int | None, expected: int | None) -> str:
    sizes = f": received {received} where {expected} was expected" if received is not None else ""
    return f"{library}: a message of another size than its receiver posted{sizes}"


def size_reports(col: Collected) -> list[Evidence]:
    """Every size report of the family in the logs (module doc), as evidence lines."""
    items: list[Evidence] = []
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for s in f.log.size_mismatches:
            items.append(log_evidence(col, f.source, s.line, _said(s.library, s.received_bytes, s.expected_bytes),
                                      fact_rank(s, f.rank)))
    for n in col.evidence.nccl_logs:
        assert n.log is not None
        for w in n.log.warns:
            found = size_wording(w.text)
            if found is not None:
                items.append(Evidence(source=n.source, line=w.line, text=_said(*found), rank=col.pid_ranks.get(w.pid),
                                      time=w.time))
    return items


__all__ = ["size_reports"]
