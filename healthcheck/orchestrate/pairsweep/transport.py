"""The seam between the sweep and how its torch tests reach the nodes: `PairTransport`,
which the sweep chooses once (choose.py) and asks for every torch test, and the
`TorchOutcome` each implementation returns. Three implement it, one class each:
`SshTransport` (ssh.py: `hc bw allreduce` per test over hc's own SSH),
`LauncherTransport` (launched.py: per test through mpirun or srun) and
`WorkerTransport` (workers.py: one persistent `hc bw serve` per node for the sweep).

An implementation never raises for one test's trouble: a member that cannot start, a
timeout, an unreadable result are a TorchOutcome with no samples and one line why,
naming the members; one test's surprise must not end the sweep.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import msgspec

from healthcheck.core import typed
from healthcheck.core.inputs import middle_cut
from healthcheck.parsers.bandwidth_common import BandwidthSample

EVIDENCE_MAX = 8000  # characters of a launcher's output kept as a test's evidence


@dataclass(frozen=True)
class TorchOutcome:
    """One torch test: rank 0's samples (None: the test gave no result) and why, one line
    naming the members ('' when nothing went wrong); `evidence` is what a launcher or a
    worker printed, whole (bounded: its start and its end), for the test's finding: Open
    MPI explains a failure in banners of many lines, one of which says little."""

    samples: list[BandwidthSample] | None
    why: str = ""
    evidence: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "evidence", middle_cut(self.evidence.strip("\n"), EVIDENCE_MAX))


class PairTransport(Protocol):
    """How one sweep's torch tests run on their members (chosen once per sweep)."""

    def run(self, members: Sequence[str]) -> TorchOutcome:
        """The torch sweep across `members` at once, rank 0 on members[0]; never raises."""
        ...

    def release(self, node: str) -> None:
        """Free whatever the transport holds on `node` (a job took it: no more tests there)."""
        ...

    def close(self) -> list[str]:
        """End what the transport started; notes for the run (what could not be ended)."""
        ...


class SweepSamples(msgspec.Struct):
    """The part of `hc bw allreduce --format json` a pair test reads."""

    samples: list[BandwidthSample] = []


def samples_from_json(text: str) -> list[BandwidthSample] | None:
    """Rank 0's samples from its JSON document (anything before the first "{", a login
    banner or a warning, is not the worker's); None when there is no readable document."""
    start = text.find("{")
    if start < 0:
        return None
    try:
        return typed.decode_json(text[start:], SweepSamples).samples
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
