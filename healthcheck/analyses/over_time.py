"""A node over its recorded runs (scope "history"): error counters judged by their rate since
the node's previous run, and the trends that reach a limit before a job breaks.

- rates (ib.E006; a GPU's counters gpu.E015, by `gpu.rates`, which sets none by default):
  per port counter, the fabric's `ib.rates` sets "any increase" or a
  WARN and a FAIL rate (each per second, minute or hour), judged between this run's reading
  and the node's previous one in the history. A counter that went down was cleared or
  wrapped (perfquery -R, a reboot, a new HCA): no rate is computed and a note (ib.E007, PASS)
  says so; a node with no earlier reading is judged against the absolute limits only
  (ib.counters), and the same note says that. A repair on record since the previous reading
  (`hc node NODE --repaired`) is the same: a rate across it would compare two different parts
  (the errors of the replaced cable with the new one's), so none is taken and the note says so.
- trends (trend.W001): over the newest `trends.window_runs` readings since the last reset and
  the node's last repair on record (a replaced part does not inherit its predecessor's rise), a
  least-squares slope that would take a counter to its absolute limit within
  `trends.warn_within_days` WARNs, never FAILs, with the projected time. A slope whose line
  explains little of the readings (`trends.min_fit`) is noise: a flat noisy counter never warns.
  The series (`TREND_SERIES`) are IB symbol and link-recovery errors, a GPU's corrected ECC,
  retired pages, banks low on spare rows (NVML's row-remapper histogram) and its temperature
  when idle (a gauge: it has no reset); a GPU that gives no histogram is said once (trend.E002).

The input (`HistoryInput`) is built by orchestrate/over_time.py from the history; this
module does no I/O.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from healthcheck.core.catalogue import FindingSpec, finding
from healthcheck.core.config.schema import CounterRate, Fabric
from healthcheck.core.model import Finding, Limit, NodeResult
from healthcheck.core.registry import NotApplicable, analysis
from healthcheck.core.status import Status

RATE_HIGH = finding(
    "ib.E006",
    "a port error counter rose faster than the fabric allows since the node's previous run",
    "A counter that climbs between runs is a link going bad now, whatever its total: reseat or replace "
    "the cable or transceiver named, then put it on record (hc node NODE --repaired TEXT): a drain for it "
    "is resumed only after one; link_downed means it flapped.",
    action="replace-cable",
)
RATE_UNJUDGED = finding(
    "ib.E007",
    "a port counter's rate could not be taken: no earlier reading, a repair since it, or the counter went down",
    "No action: a first run, or the first run after a repair on record, is judged against the absolute limits "
    "only; a counter that went down was cleared (perfquery -R, a reboot, a new HCA) or wrapped, and its rate "
    "is taken again from this run.",
    action="none",
)
GPU_RATE_HIGH = finding(
    "gpu.E015",
    "a GPU error counter rose faster than the fabric allows since the node's previous run",
    "ECC errors or row remaps that climb between runs are memory going bad: run dcgmi diag -r 3, reset the "
    "GPU at the next drain and plan its replacement if the rate stays.",
    action="investigate",
)
GPU_RATE_UNJUDGED = finding(
    "gpu.E016",
    "a GPU counter's rate could not be taken: no earlier reading, a repair since it, or the counter went down",
    "No action: a first run, or the first run after a repair on record, is judged against the absolute limits "
    "only; volatile ECC counts start again at a driver reload, a GPU reset or a reboot, and the rate is taken "
    "again from this run.",
    action="none",
)
TREND = finding(
    "trend.W001",
    "an error counter is rising steadily and will reach the fabric's limit soon at this rate",
    "Plan the repair before a job breaks: for IB counters reseat or replace the cable or transceiver, "
    "for a GPU's corrected ECC errors run dcgmi diag and plan the GPU's replacement; the warning "
    "never drains the node.",
    action="investigate",
)

TREND_UNTAKEN = finding(
    "trend.E002",
    "a trend cannot be taken: the GPU does not give the reading it is of",
    "No action: a GPU without NVML's row-remapper histogram (before Ampere, or in MIG mode) has no row-remap "
    "spares trend; its pending and failed remaps are still judged at once by gpu.ecc.",
    action="none",
)

CHECK_RATES = "ib.rates"
CHECK_GPU_RATES = "gpu.rates"
CHECK_TRENDS = "trend.counters"
ALL = ("quick", "standard", "deep", "epilogue")
RESET_NOTES_MAX = 8  # components named in one note


@dataclass(frozen=True)
class Reading:
    """One run's counters of one node: (component, name) -> value, at `at`."""

    at: dt.datetime
    values: dict[tuple[str, str], float]


@dataclass
class NodeOverTime:
    """What the history says of one node, and its fabric's limits."""

    limits: Fabric
    past: list[Reading]  # oldest first, not this run
    now: dt.datetime  # when this run started
    # the node's last repair on record before this run (`hc node NODE --repaired`): a reading
    # before it is of the part that was replaced or reseated, so no rate or trend spans it
    repaired: dt.datetime | None = None

    def since_repair(self) -> list[Reading]:
        """The readings taken after the node's last repair on record (all of them where none is)."""
        return self.past if self.repaired is None else [r for r in self.past if r.at >= self.repaired]


@dataclass
class HistoryInput:
    """The input of scope "history": this run's node results and each node's recorded readings."""

    nodes: list[NodeResult]
    over_time: dict[str, NodeOverTime] = field(default_factory=dict)


def parse_time(stamp: str) -> dt.datetime | None:
    """A report's timestamp (`2026-11-22T03:00:00.000Z`) as an aware datetime; None if unreadable."""
    try:
        at = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=dt.timezone.utc)


def current_values(node: NodeResult, names: frozenset[str]) -> dict[tuple[str, str], float]:
    """This run's numeric metrics of `node` named `names`, by (component, name)."""
    return {(m.component, m.name): float(m.value) for m in node.metrics
            if m.name in names and isinstance(m.value, (int, float)) and not isinstance(m.value, bool)}


def _rate_text(per_second: float) -> str:
    for unit, seconds in (("s", 1.0), ("min", 60.0), ("h", 3600.0), ("day", 86400.0)):
        value = per_second * seconds
        if value >= 1.0 or unit == "day":
            return f"{value:.3g}/{unit}"
    return f"{per_second:.3g}/s"  # pragma: no cover - the loop always returns


# ------------------------------------------------------------------------------ rates


@dataclass(frozen=True)
class RateFamily:
    """The counters of one family whose rates a fabric sets: where, and what they are called."""

    key: str  # the fabric's section: ib.rates, gpu.rates
    what: str  # "port counter", "GPU counter"
    high: FindingSpec
    unjudged: FindingSpec

    def rules(self, fabric: Fabric) -> dict[str, CounterRate]:
        rules: dict[str, CounterRate] = getattr(fabric, self.key).rates
        return rules


IB_RATES = RateFamily("ib", "port counter", RATE_HIGH, RATE_UNJUDGED)
GPU_RATES = RateFamily("gpu", "GPU counter", GPU_RATE_HIGH, GPU_RATE_UNJUDGED)


def rate_finding(component: str, name: str, before: float, after: float, seconds: float,
                 rule: CounterRate, family: RateFamily = IB_RATES) -> Finding | None:
    """The finding for one counter's rise of `after - before` over `seconds`, or None (within limits)."""
    rise = after - before
    if rise <= 0:
        return None
    rate = rise / seconds if seconds > 0 else float("inf")
    where = f"{component} {name} rose {before:g} -> {after:g} ({rise:g}) in {seconds:.0f} s"
    evidence = f"rate {_rate_text(rate)} between the node's previous recorded run and this one"
    if rule.any_increase is not None:
        status = Status.FAIL if rule.any_increase == "FAIL" else Status.WARN
        return family.high(status, f"{where}: any increase is {rule.any_increase}", component=f"{component}:{name}",
                           value=rise, limit=Limit("<=", 0, f"{family.key}.rates.{name}.any_increase"),
                           evidence=evidence)
    if rule.delta is not None and rise > rule.delta.above:
        status = Status.FAIL if rule.delta.status == "FAIL" else Status.WARN
        return family.high(status, f"{where}: a rise above {rule.delta.above:g} between runs is {rule.delta.status}",
                           component=f"{component}:{name}", value=rise,
                           limit=Limit("<=", rule.delta.above, f"{family.key}.rates.{name}.delta"), evidence=evidence)
    for level, status in (("fail", Status.FAIL), ("warn", Status.WARN)):
        limit = getattr(rule, level)
        if limit is not None and rate > limit.per_second:
            return family.high(status, f"{where}: {_rate_text(rate)}, above {limit.count:g}/{limit.per}",
                               component=f"{component}:{name}", value=round(rate, 6), unit="/s",
                               limit=Limit("<=", limit.per_second, f"{family.key}.rates.{name}.{level}"),
                               evidence=evidence)
    return None


def node_rates(node: NodeResult, history: NodeOverTime, family: RateFamily = IB_RATES) -> Iterator[Finding]:
    """`node`'s counters of `family` judged by their rate since its previous recorded run."""
    rules = family.rules(history.limits)
    now = current_values(node, frozenset(rules))
    if not now:
        return
    previous = next((r for r in reversed(history.past) if any(k in r.values for k in now)), None)
    if previous is None:
        yield family.unjudged(Status.PASS, f"no earlier reading of {node.node}'s {family.what}s in the history: "
                              "judged against the absolute limits only", value=len(now),
                              evidence="first run in the history: no rate between runs was taken")
        return
    if history.repaired is not None and previous.at < history.repaired:
        yield across_repair_note(node, history, previous, family, len(now))
        return
    seconds = (history.now - previous.at).total_seconds()
    went_down: list[str] = []
    for (component, name), value in sorted(now.items()):
        before = previous.values.get((component, name))
        if before is None:
            continue
        if value < before:
            went_down.append(f"{component} {name} {before:g} -> {value:g}")
            continue
        found = rate_finding(component, name, before, value, seconds, rules[name], family)
        if found is not None:
            yield found
    if went_down:
        yield family.unjudged(Status.PASS, f"{len(went_down)} {family.what}(s) went down since the previous run "
                              "(cleared or wrapped): no rate taken for them", value=len(went_down),
                              evidence="; ".join(went_down[:RESET_NOTES_MAX]))


def across_repair_note(node: NodeResult, history: NodeOverTime, previous: Reading, family: RateFamily,
                       counters: int) -> Finding:
    """The note that no rate was taken across the node's repair on record: the counters before it
    were of the part replaced or reseated, so their rise to now is no rate of the part there now."""
    repaired = history.repaired.isoformat() if history.repaired is not None else "?"
    return family.unjudged(Status.PASS, f"a repair of {node.node} was put on record since its previous reading of "
                           f"its {family.what}s: no rate taken across it (it would compare two different parts); "
                           "judged against the absolute limits only, rates start again from this run",
                           value=counters, evidence=f"previous reading {previous.at.isoformat()}, "
                                                    f"repair on record {repaired}")


def rated_nodes(inputs: HistoryInput, family: RateFamily) -> list[str]:
    """The nodes whose history was read and that read, this run, a counter `family`'s rates name."""
    return [n.node for n in inputs.nodes if n.error is None and n.node in inputs.over_time
            and current_values(n, frozenset(family.rules(inputs.over_time[n.node].limits)))]


def trended_nodes(inputs: HistoryInput) -> list[str]:
    """The nodes whose history was read and that read, this run, a counter trends are taken of."""
    names = frozenset(s.name for s in TREND_SERIES)
    return [n.node for n in inputs.nodes if n.error is None and n.node in inputs.over_time
            and inputs.over_time[n.node].limits.trends.enabled and current_values(n, names)]


def judged_nodes(inputs: HistoryInput) -> dict[str, list[str]]:
    """Per history analysis, the nodes it judges: only those that gave it evidence this run, so
    a node whose counters could not be read is never said to have passed (nor resumed by) it."""
    return {CHECK_RATES: rated_nodes(inputs, IB_RATES), CHECK_GPU_RATES: rated_nodes(inputs, GPU_RATES),
            CHECK_TRENDS: trended_nodes(inputs)}


def _rates(inputs: HistoryInput, family: RateFamily) -> Iterator[tuple[str, Finding]]:
    rated = rated_nodes(inputs, family)
    if not rated:
        raise NotApplicable(f"no node read a {family.what} that {family.key}.rates names, with its history read")
    by_name = {n.node: n for n in inputs.nodes}
    for name in rated:
        for f in node_rates(by_name[name], inputs.over_time[name], family):
            yield name, f


@analysis(CHECK_RATES, scope="history", tier=ALL, findings=(RATE_HIGH, RATE_UNJUDGED))
def rates(inputs: HistoryInput, settings: object) -> Iterator[tuple[str, Finding]]:
    """Each node's port error counters against the fabric's rates since its previous recorded run."""
    yield from _rates(inputs, IB_RATES)


@analysis(CHECK_GPU_RATES, scope="history", tier=ALL, findings=(GPU_RATE_HIGH, GPU_RATE_UNJUDGED))
def gpu_rates(inputs: HistoryInput, settings: object) -> Iterator[tuple[str, Finding]]:
    """Each node's GPU error counters against the fabric's gpu.rates since its previous recorded run."""
    yield from _rates(inputs, GPU_RATES)


# ----------------------------------------------------------------------------- trends


@dataclass(frozen=True)
class TrendSeries:
    """A reading that trends are taken of, and where its fabric limit is."""

    name: str
    limit_key: str  # the fabric key its limit is read from, for the finding
    # a counter only goes down when it is cleared (the series starts again there); a gauge
    # (a temperature) goes up and down, and every reading counts
    counter: bool = True

    def limit(self, fabric: Fabric) -> float | None:
        section, _, rest = self.limit_key.partition(".")
        value: object = getattr(fabric, section)
        for part in rest.split("."):
            value = getattr(value, part, None)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# Issue 23's list: each reading hc records and the absolute limit it is projected to. A series
# whose limit the fabric leaves unset (gpu.remap_banks_low_max by default) is not taken; one whose
# reading a GPU does not give (no remap histogram before Ampere or in MIG mode; no idle reading
# of a busy GPU) has no points that run.
TREND_SERIES = (
    TrendSeries("symbol_error", "ib.counters_fail.symbol_error"),
    TrendSeries("link_error_recovery", "ib.counters_fail.link_error_recovery"),
    TrendSeries("ecc_volatile_corrected", "gpu.ecc_volatile_corrected_max"),
    TrendSeries("retired_pages", "gpu.retired_pages_max"),  # row-remap's predecessor (pre-Ampere)
    TrendSeries("remap_banks_low", "gpu.remap_banks_low_max"),  # banks low on or out of spare rows
    TrendSeries("temperature_idle_c", "gpu.temp_max_c", counter=False),  # only runs that found the GPU idle
)
REMAP_SERIES = "remap_banks_low"


@dataclass(frozen=True)
class Fit:
    slope: float  # per second
    fit: float  # R²: the share of the readings' variance the line explains


def fit_line(points: Sequence[tuple[float, float]]) -> Fit | None:
    """Least squares through (seconds, value); None where the times do not spread."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    stt = sum((t - mean_t) ** 2 for t, _ in points)
    if stt <= 0:
        return None
    stv = sum((t - mean_t) * (v - mean_v) for t, v in points)
    svv = sum((v - mean_v) ** 2 for _, v in points)
    slope = stv / stt
    fit = (stv * stv) / (stt * svv) if svv > 0 else 0.0
    return Fit(slope, fit)


def since_reset(points: list[tuple[dt.datetime, float]]) -> list[tuple[dt.datetime, float]]:
    """The readings after the last one that went down (a reset starts the series again)."""
    start = 0
    for i in range(1, len(points)):
        if points[i][1] < points[i - 1][1]:
            start = i
    return points[start:]


def trend_finding(component: str, series: TrendSeries, points: list[tuple[dt.datetime, float]],
                  limit: float, fabric: Fabric) -> Finding | None:
    """A WARN where the counter's slope takes it past `limit` within the fabric's horizon."""
    settings = fabric.trends
    points = (since_reset(points) if series.counter else points)[-settings.window_runs:]
    if len(points) < settings.min_runs:
        return None
    first, last = points[0][0], points[-1][0]
    if (last - first).total_seconds() < settings.min_span_h * 3600:
        return None
    line = fit_line([((at - first).total_seconds(), v) for at, v in points])
    if line is None or line.slope <= 0 or line.fit < settings.min_fit:
        return None
    value = points[-1][1]
    if value > limit:
        return None  # already past it: the absolute check (and the rate) judge it now
    days = (limit - value) / line.slope / 86400
    if days > settings.warn_within_days:
        return None
    per_day = line.slope * 86400
    return TREND(Status.WARN, f"{component} {series.name} rising {per_day:.3g}/day over {len(points)} runs: "
                 f"{limit - value:g} left to {series.limit_key} ({limit:g}), reached in ~{days:.1f} days at this rate",
                 component=f"{component}:{series.name}", value=round(days, 3), unit="days",
                 limit=Limit(">", settings.warn_within_days, "trends.warn_within_days"),
                 evidence=f"slope {per_day:.4g}/day, fit R² {line.fit:.2f}, from {first.isoformat()} "
                          f"to {last.isoformat()}")


def node_trends(node: NodeResult, history: NodeOverTime) -> Iterator[Finding]:
    fabric = history.limits
    if not fabric.trends.enabled:
        return
    now = current_values(node, frozenset(s.name for s in TREND_SERIES))
    past = history.since_repair()  # a part replaced or reseated does not inherit its predecessor's rise
    for series in TREND_SERIES:
        limit = series.limit(fabric)
        if limit is None:
            continue
        for (component, name), value in sorted(now.items()):
            if name != series.name:
                continue
            points = [(r.at, r.values[(component, name)]) for r in past if (component, name) in r.values]
            found = trend_finding(component, series, [*points, (history.now, value)], limit, fabric)
            if found is not None:
                yield found
    note = no_histogram_note(node, history)
    if note is not None:
        yield note


def no_histogram_note(node: NodeResult, history: NodeOverTime) -> Finding | None:
    """Once, a note that the GPUs read without a row-remap histogram have no spares trend: on
    the node's first run that read them, and on the run after one that had it; never an ERROR
    (pre-Ampere GPUs and GPUs in MIG mode have none)."""
    if history.limits.gpu.remap_banks_low_max is None:
        return None
    now = current_values(node, frozenset(s.name for s in TREND_SERIES if s.limit_key.startswith("gpu.")))
    gpus = {component for component, _ in now}
    missing = sorted(gpus - {c for c, name in now if name == REMAP_SERIES})
    if not missing:
        return None
    before = next((r for r in reversed(history.past) if any(c in missing for c, _ in r.values)), None)
    if before is not None and not any((c, REMAP_SERIES) in before.values for c in missing):
        return None  # said already
    return TREND_UNTAKEN(Status.PASS, f"{len(missing)} GPU(s) gave no row-remap histogram: no row-remap spares "
                         f"trend for {', '.join(missing[:RESET_NOTES_MAX])}", value=len(missing),
                         evidence="NVML's row-remapper histogram (nvidia-smi -q's Bank Remap Availability "
                                  "Histogram) is given on Ampere and later GPUs, not in MIG mode")


@analysis(CHECK_TRENDS, scope="history", tier=ALL, findings=(TREND, TREND_UNTAKEN))
def trends(inputs: HistoryInput, settings: object) -> Iterator[tuple[str, Finding]]:
    """Error counters whose slope over the node's recorded runs reaches the fabric's limit soon."""
    trended = trended_nodes(inputs)
    if not trended:
        raise NotApplicable("no node read a counter trends are taken of, with its history read")
    by_name = {n.node: n for n in inputs.nodes}
    for name in trended:
        for f in node_trends(by_name[name], inputs.over_time[name]):
            yield name, f


def metric_names(fabrics: Sequence[Fabric]) -> frozenset[str]:
    """The metric names the history must give for these fabrics' rates and trends."""
    names = {s.name for s in TREND_SERIES}
    for fabric in fabrics:
        names.update(fabric.ib.rates)
        names.update(fabric.gpu.rates)
    return frozenset(names)

