"""One test between nodes measured by every tool the fabric lists (`bandwidth.pairs.tests`),
one after another: the torch sweep through the sweep's transport (transport.py), then
nccl-tests and ib_write_bw (tools.py); each tool's figure as the sweep judges it
(`Measured`: the value compared, its floor, whether the tool failed itself), and the
metrics the report shows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from healthcheck.core.model import Metric
from healthcheck.core.units import format_size
from healthcheck.orchestrate.pairsweep import tools
from healthcheck.orchestrate.pairsweep.plan import PairPlan
from healthcheck.orchestrate.pairsweep.transport import PairTransport
from healthcheck.parsers.bandwidth_common import BandwidthSample

if TYPE_CHECKING:
    from healthcheck.core.config import Config
    from healthcheck.orchestrate.pairsweep.tools import PairMeasurement


def value_at_judged(samples: list[BandwidthSample] | None, plan: PairPlan) -> float | None:
    """The best busbw at the size a test is judged at (None: not measured)."""
    if not samples:
        return None
    got = [s.busbw_gbytes_per_s for s in samples if s.collective == plan.collective and s.size_bytes == plan.judged]
    return max(got) if got else None


@dataclass
class Measured:
    """What one tool of a test between nodes gave, as the sweep judges it."""

    tool: str  # torch | nccl_tests | ib_write_bw (bandwidth.pairs.tests)
    value: float | None  # the figure compared; None: this tool gave no verdict (why says why)
    floor: float | None = None  # the fabric's floor for value; None: judged against its peers
    against: bool = False  # the tool's own failure (hang, wrong data, NCCL/HCA error): short whatever value says
    why: str = ""
    kind: str = ""  # what value measures, e.g. "all_reduce 1G"
    limit_key: str = ""
    metrics: list[Metric] = field(default_factory=list)
    evidence: str = ""
    not_applicable: bool = False  # nothing to test (no GPU for nccl-tests, no HCA for ib_write_bw)


def measure_test(config: Config, plan: PairPlan, torch: PairTransport | None, members: Sequence[str]
                 ) -> list[Measured]:
    """Every tool the fabric lists (bandwidth.pairs.tests), one after another, on these members;
    the torch sweep through `torch`, the sweep's transport (None where torch is not listed)."""
    out = []
    for tool in plan.tools:
        if tool == "torch":
            if torch is None:
                raise ValueError("torch is listed: the sweep opens a transport for it")
            got = torch.run(members)
            samples, why = got.samples, got.why
            evidence = got.evidence  # what the launcher printed, whole, where it said why
            value = value_at_judged(samples, plan)
            # wrong data is evidence against the pair whatever its bandwidth, as nccl-tests' #wrong is
            wrong = sum(s.wrong or 0 for s in samples or [])
            if wrong:
                bad = sorted({format_size(s.size_bytes) for s in samples or [] if s.wrong})
                why = (f"{','.join(members)}: {wrong} wrong elements in the torch sweep's checked results "
                       f"({plan.collective} at {', '.join(bad)})")
            out.append(Measured("torch", value, plan.floor, against=bool(wrong),
                                why=why if wrong or value is None else "",
                                kind=f"{plan.collective} {format_size(plan.judged)}", limit_key=plan.limit_key,
                                metrics=busbw_metrics(samples or [], plan, "torch"), evidence=evidence))
        elif tool == "nccl_tests":
            nccl = tools.nccl_tests_pair(config, members, collective=plan.collective, sizes=plan.sizes,
                                         gpus=plan.gpus, timeout_s=plan.pairs.timeout_s)
            out.append(from_tool(nccl, busbw_metrics(list(nccl.samples), plan, "nccl_tests")))
        elif tool == "ib_write_bw":
            if len(members) != 2:  # HCA i <-> HCA i is a pair's test; groups are judged by the others
                out.append(Measured("ib_write_bw", None, not_applicable=True,
                                    why="ib_write_bw between nodes runs on pairs, not on groups"))
                continue
            ib = tools.ib_write_bw_pair(config, members, timeout_s=plan.pairs.timeout_s)
            out.append(from_tool(ib, [Metric("ib_write_bw_gbits", h.gbits, "Gb/s", component=h.hca)
                                      for h in ib.hcas if h.gbits is not None]))
    return out


def from_tool(got: PairMeasurement, metrics: list[Metric]) -> Measured:
    """A tools.py measurement as the sweep judges it."""
    common: dict[str, Any] = dict(kind=f"{got.tool} {got.kind}".strip(), limit_key=got.limit_key, metrics=metrics,
                                  evidence=got.evidence)
    if got.outcome == "not-applicable":
        return Measured(got.tool, None, why=got.why, not_applicable=True, **common)
    if got.passed is None:  # misconfigured, not run: no verdict
        return Measured(got.tool, None, why=got.why, **common)
    against = got.outcome in ("hung", "wrong", "failed")
    return Measured(got.tool, got.value if got.value is not None else 0.0, got.threshold, against=against,
                    why=got.why if against else "", **common)


def metric_name(plan: PairPlan, tool: str) -> str:
    """The name of a tool's busbw metric in the report."""
    # the first tool listed gives the pair matrix its figures ("busbw"); the others keep their own names
    return "busbw" if plan.tools and plan.tools[0] == tool else f"{tool}_busbw"


def busbw_metrics(samples: list[BandwidthSample], plan: PairPlan, tool: str) -> list[Metric]:
    """The best busbw per size of the plan's collective, as the report's metrics."""
    best: dict[int, float] = {}
    for s in samples:
        if s.collective == plan.collective:
            best[s.size_bytes] = max(best.get(s.size_bytes, 0.0), s.busbw_gbytes_per_s)
    name = metric_name(plan, tool)
    return [Metric(name, v, "GB/s", component=format_size(size)) for size, v in sorted(best.items())]
