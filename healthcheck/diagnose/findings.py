"""A diagnosis finding is a kernel finding about a job: `JobFinding`.

The kernel's `core.model.Finding` (catalogued ID, status, message, subject, members,
fingerprint) is what tickets, Prometheus and the HTML report carry. A rule of
`classify.py` concludes one failure class about some ranks; `job_finding` makes that a
kernel finding with the class's catalogue ID (`diag.E0xx`, core/catalogue.py) and status,
and keeps what only a diagnosis has beside it (a thin specialisation, nothing renamed):

    cls         the failure class ("dead-rank", ...; "class" in JSON)
    confidence  high, medium or low
    ranks       the odd ranks it names (each with evidence)
    lines       the evidence lines, structured (source, line, rank, time); the kernel's
                `evidence` holds the same lines as text ("source:line: text")
    where       where the odd rank is ("train.py:37"); divergence: "seq 10 of default_pg"

`component` is the ranks ("rank 4", "ranks 3,5-6"); the verdict stamps check "diagnose",
the job's subject ("<job>:<component>", so the fingerprint is per job and culprit) and the
culprits' hosts as `members` (core/stamp.py, as every finding is stamped).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

import msgspec

from healthcheck.core import catalogue
from healthcheck.core.catalogue import FindingSpec
from healthcheck.core.model import Finding
from healthcheck.core.status import Status
from healthcheck.diagnose.stacks import fold_ranks

FailureClass = Literal["dead-rank", "collective-mismatch", "shape-mismatch", "stuck-rank", "host-wedged", "network",
                       "socket-fallback", "init-failure", "gpu-failure", "progressing", "unknown"]
Confidence = Literal["high", "medium", "low"]

CHECK = "diagnose"  # the `check` every diagnosis finding is stamped with
MAX_EVIDENCE_TEXT = 16 * 1024  # characters of the evidence text (the structured lines are kept whole)

# failure class -> its catalogue ID; a class without one is refused at import (tests walk FailureClass)
SPECS: dict[str, FindingSpec] = {
    "dead-rank": catalogue.DIAG_DEAD_RANK,
    "collective-mismatch": catalogue.DIAG_COLLECTIVE_MISMATCH,
    "shape-mismatch": catalogue.DIAG_SHAPE_MISMATCH,
    "stuck-rank": catalogue.DIAG_STUCK_RANK,
    "host-wedged": catalogue.DIAG_HOST_WEDGED,
    "network": catalogue.DIAG_NETWORK,
    "socket-fallback": catalogue.DIAG_SOCKET_FALLBACK,
    "init-failure": catalogue.DIAG_INIT_FAILURE,
    "gpu-failure": catalogue.DIAG_GPU_FAILURE,
    "progressing": catalogue.DIAG_PROGRESSING,
    "unknown": catalogue.DIAG_UNKNOWN,
}
# a job that failed is FAIL (about the job: a diagnosis never drains); a performance cliff
# is WARN; a live job seen progressing is PASS; no diagnosis is ERROR (not judged: never
# read as a healthy job)
_STATUS: dict[str, Status] = {"socket-fallback": Status.WARN, "progressing": Status.PASS, "unknown": Status.ERROR}


def status_of(cls: str) -> Status:
    return _STATUS.get(cls, Status.FAIL)


class Evidence(msgspec.Struct, frozen=True, omit_defaults=True):
    """One line (or dump, or stack) that a finding stands on."""

    source: str
    text: str
    line: int | None = None
    rank: int | None = None
    time: float | None = None  # epoch seconds, where the input says

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source


def evidence_text(lines: Iterable[Evidence], limit: int = MAX_EVIDENCE_TEXT) -> str | None:
    """The lines as the kernel's evidence text ("source:line: text" a line), bounded."""
    out: list[str] = []
    size = 0
    for e in lines:
        row = f"{e.where}: {e.text}"
        if size + len(row) > limit:
            out.append("...")
            break
        out.append(row)
        size += len(row) + 1
    return "\n".join(out) or None


def ranks_component(ranks: Iterable[int]) -> str:
    """"rank 4", "ranks 3,5-6", or "" (the job as a whole)."""

    ranks = sorted(set(ranks))
    if not ranks:
        return ""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {fold_ranks(ranks)}"


class JobFinding(Finding, frozen=True, kw_only=True, rename={"cls": "class"}):
    """A kernel Finding about a job's ranks (see the module's docstring)."""

    cls: FailureClass
    confidence: Confidence
    ranks: tuple[int, ...] = ()
    lines: tuple[Evidence, ...] = ()
    where: str = ""
    divergence: str = ""


def job_finding(*, cls: FailureClass, summary: str, confidence: Confidence, ranks: Iterable[int] = (),
                evidence: Iterable[Evidence] = (), where: str = "", divergence: str = "") -> JobFinding:
    """What a rule concludes (a class about some ranks, with its evidence lines) as a kernel
    finding of the class's catalogue ID and status."""
    spec = SPECS.get(cls)
    if spec is None:
        raise ValueError(f"failure class {cls!r} has no finding ID in diagnose.findings.SPECS")
    lines = tuple(evidence)
    odd = tuple(ranks)
    return JobFinding(id=spec.id, status=status_of(cls), message=summary, component=ranks_component(odd),
                      evidence=evidence_text(lines), check=CHECK, cls=cls, confidence=confidence, ranks=odd,
                      lines=lines, where=where, divergence=divergence)
