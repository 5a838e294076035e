"""A CUDA error of the program's own making, read as its rank's death, not the GPU's.

classify's gpu-failure is evidence against a node (FAIL: drain it, run the deep tier). An
Xid in the kernel log is the driver's own word that the GPU failed; a CUDA error alone
usually is not: `an illegal memory access was encountered` (cudaErrorIllegalAddress) is a
kernel that read or wrote outside its memory, as are a misaligned address, an illegal
instruction and a device-side assert: a bug in the program, a library or a custom kernel
(the same code fails on any node). Without an Xid on that rank such an error is the death
of the rank that hit it: dead-rank, medium confidence, the error as its evidence. A CUDA
error that does point at the device (an uncorrectable ECC or NVLink error, `unspecified
launch failure`, `unknown error`) stays gpu-failure.
"""

from __future__ import annotations

from healthcheck.diagnose.analysis import fact_rank, log_evidence
from healthcheck.diagnose.findings import Evidence, JobFinding, job_finding
from healthcheck.diagnose.sources import Collected
from healthcheck.diagnose.stacks import rank_words

# CUDA's own error strings (cudaGetErrorString) of faults a program makes on any GPU
SOFTWARE_FAULTS = ("illegal memory access", "misaligned address", "illegal instruction", "device-side assert",
                   "invalid configuration argument", "no kernel image is available", "invalid device function")


def is_software_fault(reason: str) -> bool:
    return any(word in reason for word in SOFTWARE_FAULTS)


def software_faults(col: Collected) -> tuple[list[Evidence], set[int]]:
    """The CUDA errors of the program's own making the logs hold, and their ranks."""
    items: list[Evidence] = []
    ranks: set[int] = set()
    for f in col.evidence.torch_logs:
        assert f.log is not None
        for b in f.log.backend_errors:
            if b.kind == "cuda" and is_software_fault(b.reason):
                r = fact_rank(b, f.rank)
                items.append(log_evidence(col, f.source, b.line, f"CUDA error: {b.reason or b.detail}", r))
                if r is not None:
                    ranks.add(r)
    return items, ranks


def cuda_death(col: Collected, xid_ranks: set[int]) -> JobFinding | None:
    """dead-rank of the ranks that hit a CUDA error of the program's own making, where no Xid
    of theirs says the GPU failed (module doc); None where there is none."""
    items, ranks = software_faults(col)
    ranks -= xid_ranks
    if not ranks:
        return None
    reason = items[0].text.removeprefix("CUDA error: ")
    return job_finding(cls="dead-rank", confidence="medium", ranks=tuple(sorted(ranks)),
                       evidence=tuple(i for i in items[:20] if i.rank in ranks),
                       summary=f"{rank_words(ranks)} died of a CUDA error in its own process ({reason[:120]}): a "
                               "kernel's fault, the program's or a library's, that fails the same on any node; no Xid "
                               "in the kernel log says the GPU failed")


__all__ = ["SOFTWARE_FAULTS", "cuda_death", "is_software_fault", "software_faults"]
