"""Fleet analysis: findings no single node can give, from many nodes' results at once.

Three analyses of scope "fleet" (registry.analysis), pure functions over `NodeResult`s
(no I/O), run by core/analysis.py on a merged multi-node report:

- drift (fleet.E001): a categorical metric (MTU, firmware, driver) that differs from what
  most nodes of the same fabric have, per component;
- outliers (fleet.E002): a numeric metric far from the fabric's median for the same
  component, by the modified z-score of Iglewicz and Hoaglin;
- flapping (fleet.E003): a node that keeps changing between FAIL and not-FAIL across runs.

Every fleet finding is WARN: it says "unlike its peers", which is a reason to look, not
evidence to drain. Nodes that could not be checked (`NodeResult.error`) take no part.

Decisions, documented once here:

- Drift norm: the value strictly more common than any other (a plurality, not
  necessarily over half). When two or more values tie for most common there is no norm:
  every node of that group is flagged ("no majority") with no limit, since hc cannot tell
  which half is wrong and a split fabric is itself worth a look.
- Outliers are judged per (fabric, metric, component), not pooled across components: a
  node's GPU3 is compared with the other nodes' GPU3. Components of one node are not
  interchangeable (a frontend 100 Gb/s port next to 400 Gb/s compute ports, GPUs at the
  back of the chassis running hotter), and pooling would flag them on every node.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from itertools import pairwise, repeat
from operator import sub
from typing import Any

import msgspec

from healthcheck.core.analysis import FleetInput, analyse_fleet
from healthcheck.core.catalogue import finding
from healthcheck.core.config.schema import FleetSettings
from healthcheck.core.model import Finding, Limit, NodeResult
from healthcheck.core.registry import NotApplicable, analysis
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status
from healthcheck.core.tiers import ALL  # fleet analyses run in every tier and context

DRIFT = finding(
    "fleet.E001",
    "a setting or version differs from what most nodes of the same fabric have",
    "The odd nodes missed a rollout or were set up by hand (firmware, driver, MTU): bring them in line "
    "with the rest of the fabric; if the majority is the one that is wrong, set the expected value in "
    "the fabric config so the per-node checks fail the odd ones.",
    action="fix-config",
)
OUTLIER = finding(
    "fleet.E002",
    "a measurement is far from the median of the same component on the fabric's other nodes",
    "No threshold is crossed, but the component is unlike its peers: look at it before it fails "
    "(cooling for a hot GPU, cable or transceiver for growing IB error counters), and set a "
    "threshold in the fabric config if the value matters.",
    action="investigate",
)
FLAPPING = finding(
    "fleet.E003",
    "the node keeps changing between FAIL and healthy across recent runs",
    "An intermittent fault (a marginal cable or transceiver, a GPU that falls off the bus under load) "
    "or a threshold at the edge of normal: read the node's history (hc report history --node NODE) "
    "before resuming it again.",
    action="investigate",
)

CHECK_DRIFT = "fleet.drift"
CHECK_OUTLIER = "fleet.outlier"
CHECK_FLAP = "fleet.flap"

# Iglewicz and Hoaglin: 0.6745 makes the MAD consistent with the standard deviation of a
# normal distribution; 1.253314 (sqrt(pi/2)) does the same for the mean absolute deviation.
_MAD_K = 0.6745
_MEANAD_K = 1.253314
_DIST_SHOWN = 4  # values named in a drift message; the rest are counted

_Key = tuple[str, str, str]  # (fabric, metric name, component)


class _Group:
    """One metric of one component across a fabric's nodes: node index -> value."""

    __slots__ = ("values", "unit")

    def __init__(self, unit: str | None) -> None:
        self.values: dict[int, Any] = {}
        self.unit = unit


def analyse(
    nodes: list[NodeResult], settings: FleetSettings, history: dict[str, list[str]] | None = None
) -> list[NodeResult]:
    """The nodes, in the same order, with fleet findings appended and PASS raised to WARN where flagged.

    history: node -> its recent statuses, oldest first, not counting this run (for flapping).
    """

    return analyse_fleet(nodes, settings, history)[0]


def _judge(inputs: FleetInput, groups: dict[_Key, _Group],
           judge: Callable[[_Key, _Group], Iterable[tuple[int, Finding]]]) -> Iterator[tuple[str, Finding]]:
    """Judge every group, leaving out the nodes whose component a check already judged."""
    nodes = inputs.nodes
    for key, group in groups.items():
        # a node whose component a check already found WARN or FAIL is explained: it
        # neither gets a fleet finding nor sways the norm the others are judged by
        judged = [i for i in group.values if _already_judged(nodes[i], key[2])]
        if judged:
            kept = _Group(group.unit)
            kept.values = {i: v for i, v in group.values.items() if i not in judged}
            group = kept
        for i, f in judge(key, group):
            yield nodes[i].node, f


def _groups(inputs: FleetInput, settings: FleetSettings) -> tuple[dict[_Key, _Group], dict[_Key, _Group]]:
    """Drift and outlier groups, collected once for both analyses."""
    return inputs.shared("fleet.groups", lambda: _collect(inputs.nodes, settings))


def _need_peers(inputs: FleetInput) -> None:
    if len(inputs.reachable) < 2:
        raise NotApplicable("fewer than two nodes were checked: no peers to compare with")


@analysis(CHECK_DRIFT, scope="fleet", tier=ALL, findings=(DRIFT,))
def drift(inputs: FleetInput, settings: FleetSettings) -> Iterator[tuple[str, Finding]]:
    """A setting or version matches what most nodes of the same fabric have."""
    _need_peers(inputs)
    yield from _judge(inputs, _groups(inputs, settings)[0], _drift)


@analysis(CHECK_OUTLIER, scope="fleet", tier=ALL, findings=(OUTLIER,))
def outliers(inputs: FleetInput, settings: FleetSettings) -> Iterator[tuple[str, Finding]]:
    """A measurement is near the median of the same component on the fabric's nodes."""
    _need_peers(inputs)
    yield from _judge(inputs, _groups(inputs, settings)[1], lambda k, g: _outliers(k, g, settings))


@analysis(CHECK_FLAP, scope="fleet", tier=ALL, findings=(FLAPPING,))
def flaps(inputs: FleetInput, settings: FleetSettings) -> Iterator[tuple[str, Finding]]:
    """A node does not keep changing between FAIL and healthy across recent runs."""
    history = inputs.history
    if history is None:
        raise NotApplicable("no run history")
    if not history:  # a history was read: it holds no earlier run of these nodes by this command
        raise NotApplicable("no earlier run of these nodes in the history (runs of the same command only)")
    for node in inputs.nodes:
        if node.error is None and node.node in history:
            f = flap_finding(history[node.node], node.status, settings)
            if f is not None:
                yield node.node, f


def _already_judged(node: NodeResult, component: str) -> bool:
    """A component a check already found WARN or FAIL needs no fleet finding on top
    (node3's eth0 at MTU 1500 is net.E001 where the fabric sets an MTU; drift speaks
    only where no threshold did)."""
    if not component:
        return False
    return any(f.component == component and f.status.rank >= Status.WARN.rank for f in node.findings)


# ---------------------------------------------------------------------------- collect


def _collect(nodes: list[NodeResult], settings: FleetSettings) -> tuple[dict[_Key, _Group], dict[_Key, _Group]]:
    """One pass over every metric of every reachable node, into per-(fabric, name, component) groups."""
    # metric name -> (drift?, outlier?): one dict lookup rejects the metrics no one asked for
    route: dict[str, tuple[bool, bool]] = {}
    for name in settings.drift_metrics:
        route[name] = (True, False)
    for name in settings.outlier_metrics:
        route[name] = (name in route, True)
    drift: dict[_Key, _Group] = {}
    outlier: dict[_Key, _Group] = {}
    # bound methods in locals: this loop sees every metric of every node (a million at 10k nodes)
    route_get, drift_get, outlier_get = route.get, drift.get, outlier.get
    for i, node in enumerate(nodes):
        if node.error is not None:
            continue
        fabric = node.fabric
        for m in node.metrics:
            name = m.name
            kind = route_get(name)
            if kind is None:
                continue
            value = m.value
            if value is None:
                continue
            key = (fabric, name, m.component)
            t = type(value)
            if kind[0]:
                group = drift_get(key)
                if group is None:
                    group = drift[key] = _Group(m.unit)
                group.values[i] = value if (t is str or t is int or t is float) else _hashable(value)
            # bool is an int to Python, but True/False are states, not measurements;
            # x - x == 0 is false for NaN and infinities only
            if kind[1] and (t is int or (t is float and value - value == 0)):
                group = outlier_get(key)
                if group is None:
                    group = outlier[key] = _Group(m.unit)
                group.values[i] = value
    return drift, outlier


def _hashable(value: Any) -> Any:
    """Lists and dicts (unusual in a metric) compare by their JSON text."""
    try:
        hash(value)
        return value
    except TypeError:
        return msgspec.json.encode(value).decode()


# ------------------------------------------------------------------------------ drift


def _drift(key: _Key, group: _Group) -> Iterable[tuple[int, Finding]]:
    """Nodes whose value differs from the fabric's norm for this metric and component."""
    values = group.values
    if len(values) < 2:
        return
    counts = Counter(values.values())
    if len(counts) == 1:
        return
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], str(kv[0])))
    norm, top = ranked[0]
    tie = ranked[1][1] == top
    _, name, component = key
    label = f"{component} {name}" if component else name
    dist = _distribution(ranked)
    messages: dict[Any, str] = {}
    for i, value in values.items():
        if not tie and value == norm:
            continue
        message = messages.get(value)
        if message is None:
            if tie:
                message = f"{label} is {_show(value)}, no majority on the fabric: {dist}"
            else:
                message = f"{label} is {_show(value)}, most of the fabric has {_show(norm)}: {dist}"
            messages[value] = message
        limit = None if tie else Limit("==", norm, "fleet.drift_metrics")
        yield i, DRIFT.warn(message, component=_component(component, name), value=value, unit=group.unit,
                            limit=limit)


def _distribution(ranked: list[tuple[Any, int]]) -> str:
    """'3 nodes have 2044, 509 have 4092' (rarest first: the odd ones are the news)."""
    shown = sorted(ranked[:_DIST_SHOWN], key=lambda kv: (kv[1], str(kv[0])))
    parts = [f"{n} {'node has' if n == 1 else 'nodes have'} {_show(v)}" if j == 0 else
             f"{n} {'has' if n == 1 else 'have'} {_show(v)}" for j, (v, n) in enumerate(shown)]
    rest = ranked[_DIST_SHOWN:]
    if rest:
        parts.append(f"{sum(n for _, n in rest)} have {len(rest)} other values")
    return ", ".join(parts)


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _component(component: str, name: str) -> str:
    """The finding's component names the metric too, so two metrics of one part get two fingerprints."""
    return f"{component}/{name}" if component else name


# --------------------------------------------------------------------------- outliers


def robust_scale(values: list[float]) -> tuple[float, float]:
    """(median, scale) such that z = (x - median) / scale is the modified z-score; scale 0: no spread.

    scale is MAD / 0.6745, or 1.253314 * mean absolute deviation where the MAD is 0.
    """
    xs = sorted(values)
    n = len(xs)
    med = _median_sorted(xs)
    lo, hi = bisect_left(xs, med), bisect_right(xs, med)
    if hi - lo <= n // 2:  # more than half equal to the median: the MAD is 0 (common for error counters)
        # deviations of sorted values fall then rise: timsort merges the two runs in linear time
        mad = _median_sorted(sorted(map(abs, map(sub, xs, repeat(med, n)))))
        if mad > 0:
            return med, mad / _MAD_K
    # sum of |x - med| from the sorted halves, without a Python-level loop
    mean_ad = ((sum(xs[hi:]) - med * (n - hi)) + (med * lo - sum(xs[:lo]))) / n
    return med, _MEANAD_K * mean_ad


def _median_sorted(xs: list[float]) -> float:
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2


def _outliers(key: _Key, group: _Group, settings: FleetSettings) -> Iterable[tuple[int, Finding]]:
    """Nodes whose value of this metric and component is an outlier among the fabric's."""
    values = group.values
    if len(values) < max(2, settings.outlier_min_nodes):
        return
    med, scale = robust_scale(list(values.values()))
    if scale <= 0:
        return
    cut = settings.outlier_z
    _, name, component = key
    label = f"{component} {name}" if component else name
    unit = f" {group.unit}" if group.unit else ""
    # a cheap bound first (slightly inside the cut, so rounding cannot hide an outlier), then exact z
    reach = cut * scale * (1 - 1e-9)
    low, high = med - reach, med + reach
    for i, x in [(i, x) for i, x in values.items() if x < low or x > high]:
        z = (x - med) / scale
        if abs(z) <= cut:
            continue
        # the bound the value crossed, in the metric's own unit
        bound = med + math.copysign(cut * scale, z)
        limit = Limit("<=" if z > 0 else ">=", _round(bound), "fleet.outlier_z")
        message = (f"{label} is {_show(x)}{unit}, {'above' if z > 0 else 'below'} the fabric median "
                   f"{_show(_round(med))}{unit} (modified z {z:+.1f}, {len(values)} nodes)")
        yield i, OUTLIER.warn(message, component=_component(component, name), value=x, unit=group.unit,
                              limit=limit)


def _round(x: float) -> float:
    return float(f"{x:.6g}")


# --------------------------------------------------------------------------- flapping


def transitions(statuses: list[str]) -> int:
    """How often consecutive statuses change between FAIL and not-FAIL."""
    fails = [s == Status.FAIL.value for s in statuses]
    return sum(1 for a, b in pairwise(fails) if a != b)


def flap_finding(past: list[str], current: Status, settings: FleetSettings) -> Finding | None:
    """A flapping finding if the last `flap_runs` statuses (this run included) change often enough."""
    runs = max(settings.flap_runs, 1)
    recent = [str(s) for s in past[-(runs - 1):]] if runs > 1 else []
    recent.append(current.value)
    n = transitions(recent)
    if n < settings.flap_transitions or settings.flap_transitions <= 0:
        return None
    return FLAPPING.warn(
        f"changed between FAIL and not FAIL {n} times in the last {len(recent)} runs ({' '.join(recent)})",
        value=n,
        limit=Limit("<", settings.flap_transitions, "fleet.flap_transitions"),
    )


# ------------------------------------------------------------------------------ stamp


_CHECK_OF = {DRIFT.id: CHECK_DRIFT, OUTLIER.id: CHECK_OUTLIER, FLAPPING.id: CHECK_FLAP}


def _stamp(f: Finding, node: str) -> Finding:
    """A fleet finding stamped for `node` (the analyses' runner stamps them the same way)."""
    return stamp(f, check=_CHECK_OF[f.id], node=node)
