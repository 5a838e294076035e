"""What a diagnosis rule concludes: a `Finding` (a failure class about some ranks, with the
`Evidence` lines it stands on and a confidence). Shared by classify.py and the rule
modules beside it (deaths.py, postmortem.py, mismatch.py, startup.py), so that each rule
can live in a module of its own without importing classify.py.
"""

from __future__ import annotations

from typing import Literal

import msgspec

FailureClass = Literal["dead-rank", "collective-mismatch", "shape-mismatch", "stuck-rank", "host-wedged", "network",
                       "socket-fallback", "init-failure", "gpu-failure", "unknown"]
Confidence = Literal["high", "medium", "low"]


class Evidence(msgspec.Struct, frozen=True, omit_defaults=True):
    """One line (or dump, or stack) that a finding stands on."""

    source: str
    text: str
    line: int | None = None
    rank: int | None = None
    time: float | None = None  # epoch seconds, where the input says


class Finding(msgspec.Struct, frozen=True, omit_defaults=True, rename={"cls": "class"}):
    cls: FailureClass
    summary: str
    confidence: Confidence
    ranks: tuple[int, ...] = ()  # the odd ranks this finding names (each with evidence)
    evidence: tuple[Evidence, ...] = ()
    where: str = ""  # "train.py:37" where the odd rank is
    divergence: str = ""  # "seq 10 of default_pg", "SeqNum 52"
