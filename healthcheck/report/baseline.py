"""Thresholds learned from sweep reports of healthy-looking nodes (`hc baseline`).

What is learned, from the metrics the checks record:

- busbw floors per collective, scope and size (`bandwidth.<coll>.<scope>.busbw_min_gbytes_per_s`):
  node metrics `busbw_gbytes_per_s` (component `collective/scope/size`, bw.nccl and
  bw.torch alike) and pair tests' `busbw` (GroupResult of kind pair, the fabric's first
  collective), at the sizes the fabric measures (`bandwidth.sizes`) or already judges;
- `bandwidth.ib_write_bw.per_hca_min_gbps` (and `per_hca_typical_gbps`): the loopback's
  `bw_gbps`, learned per HCA; the key takes the lowest HCA's floor;
- `gpu.temp_max_c`: `temperature_c`, learned per GPU index; the key takes the highest
  ceiling, and never tightens a ceiling the fabric sets (a sweep reads idle GPUs; a job
  heats them, and the epilogue reads them then).

Each series has one value per node (or pair): within a run the worst of what the node
gave (both tools are judged against one floor), across runs the median. Nodes that FAILed
or ERRORed in any run are dropped, except where every such finding is only a shortfall
against a threshold this baseline learns again (bw.E001, bw.E010, gpu.E031): a fleet
that misses a published floor everywhere is what a baseline is for, and the outlier cut
still drops a node that is slow among its peers. Pair tests with a finding (a tool's
failure, a slow link) or a dropped member are dropped too. Then values beyond
`outlier_z` robust z-scores (MAD) are dropped; fewer than `min_nodes` left, or a
MAD/median above `max_spread`, refuses the key with the reason. A floor is the
`percentile`-th percentile x (1 - `margin`), rounded down to 4 significant digits; a
temperature ceiling the (100 - `percentile`)-th percentile + `temp_margin_c`.

The output is a fabric file that `extends` the learned fabric, with comments recording
the runs, node counts, dates and NCCL versions, each key's statistics and what was
refused; `hc config validate` accepts it and the loader names it as the source of the
keys it sets.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import msgspec
import yaml

from healthcheck import __version__
from healthcheck.bandwidth.judge import SCOPES
from healthcheck.core.atomic import write_atomic
from healthcheck.core.config.loader import FABRIC_NAME_RE, ExtendsCycle, load_config
from healthcheck.core.config.schema import BandwidthLimits, BaselineSettings, CollectiveFloors, Fabric
from healthcheck.core.errors import HcError
from healthcheck.core.inputs import FLEET_REPORT_MAX_BYTES, read_bounded
from healthcheck.core.model import NodeResult, Report
from healthcheck.core.status import Status
from healthcheck.core.units import format_size, parse_size
from healthcheck.report.fleetread import RawReport, raw_nodes
from healthcheck.report.jsonio import parse_time

if TYPE_CHECKING:
    from healthcheck.core.config.loader import Config

BUSBW = "busbw_gbytes_per_s"  # node metric, component collective/scope/size (checks/bw.py)
PAIR_BUSBW = "busbw"  # pair test metric, component size (orchestrate/pairsweep/measure.py)
IB_BW = "bw_gbps"  # ib_write_bw loopback, component the HCA (checks/bw.py)
TEMP = "temperature_c"  # component GPU<index> (checks/gpu.py)
NCCL = "nccl_version"  # node-wide (checks/gpu.py)
_WANTED = frozenset((BUSBW, IB_BW, TEMP, NCCL))
_NODE_SCOPES = tuple(scope for scope in SCOPES if scope != "pair")

# Findings that only say "below (above) a threshold": the thresholds a baseline learns
# again. A node whose every FAIL/ERROR is one of these still counts as healthy-looking.
RELEARNED = frozenset(("bw.E001", "bw.E010", "gpu.E031"))

COLLECTIVES = tuple(name for name in BandwidthLimits.__struct_fields__
                    if isinstance(getattr(BandwidthLimits(), name), CollectiveFloors))
IB_KEY = ("bandwidth", "ib_write_bw", "per_hca_min_gbps")
IB_TYPICAL_KEY = ("bandwidth", "ib_write_bw", "per_hca_typical_gbps")
TEMP_KEY = ("gpu", "temp_max_c")
# the schema's upper bounds (core/config/schema.py: GBps, Gbps, Celsius)
_MAX = {"GB/s": 100_000.0, "Gb/s": 10_000.0, "C": 150.0}
_MAX_PARTS_SHOWN = 5  # reasons name this many HCAs/GPUs, then count the rest
_COMPONENT_MAX = 128  # longer components are not hc's: ignored


# Iglewicz and Hoaglin, as fleet.py: MAD / 0.6745 (or 1.253314 x the mean absolute
# deviation where the MAD is 0) estimates the standard deviation
_MAD_K = 0.6745
_MEANAD_K = 1.253314


@dataclass(frozen=True)
class BaselineKey:
    """One config key a baseline may set."""

    key: tuple[str, ...]  # in the fabric: ("bandwidth", "all_reduce", "pair", "busbw_min_gbytes_per_s", "16G")
    kind: Literal["floor", "ceiling"]
    unit: str
    label: str  # for people: "all_reduce/pair/16G busbw"
    subjects: Literal["nodes", "pairs"] = "nodes"

    @property
    def dotted(self) -> str:
        return ".".join(self.key)


def _busbw_target(collective: str, scope: str, text: str) -> BaselineKey:
    return BaselineKey(("bandwidth", collective, scope, "busbw_min_gbytes_per_s", text), "floor", "GB/s",
                  f"{collective}/{scope}/{text} busbw", "pairs" if scope == "pair" else "nodes")


IB_TARGET = BaselineKey(IB_KEY, "floor", "Gb/s", "ib_write_bw per HCA")
TEMP_TARGET = BaselineKey(TEMP_KEY, "ceiling", "C", "GPU temperature")


@dataclass(frozen=True)
class Stats:
    """One series (a key, or one HCA's or GPU's part of it) after dropping outliers."""

    part: str  # the HCA or GPU; "" for a busbw key
    count: int  # nodes (pairs) with a value
    outliers: int = 0
    median: float = 0.0
    mad: float = 0.0
    at_percentile: float = 0.0
    bound: float | None = None  # the floor or ceiling; None: refused
    refused: str = ""


@dataclass
class Learned:
    """A key the baseline sets (or keeps), with its statistics."""

    target: BaselineKey
    value: float | None  # None: kept as the fabric sets it (note says why)
    parts: list[Stats]
    previous: Any = None  # what the fabric set before
    previous_source: str = ""
    note: str = ""
    extra: dict[tuple[str, ...], float] = field(default_factory=dict)  # other keys set with it (typical)


@dataclass(frozen=True)
class Refusal:
    target: BaselineKey
    reason: str


@dataclass
class LearnedRun:
    """One report learned from, for the file's comments."""

    source: str
    run_id: str
    command: str
    tier: str
    started_at: str
    hc_version: str
    nodes: int = 0  # nodes of the fabric in the run
    dropped: int = 0  # of them FAIL/ERROR (beyond a re-learned threshold)
    pairs: int = 0  # pair tests between nodes of the fabric


@dataclass
class Baseline:
    fabric: str
    settings: BaselineSettings
    runs: list[LearnedRun]
    learned: list[Learned]
    refused: list[Refusal]
    nodes_used: int
    nodes_dropped: int
    kept_below_floor: int  # nodes kept although they FAILed, only below re-learned thresholds
    nccl_versions: Counter[str]
    skipped_sizes: list[str]  # collective/scope/size measured but neither in bandwidth.sizes nor judged

    @property
    def written(self) -> list[Learned]:
        return [item for item in self.learned if item.value is not None]


# ------------------------------------------------------------------- reading


def read_reports(paths: Iterable[Path]) -> Iterator[tuple[str, RawReport]]:
    """Each report, one at a time, its nodes decoded one at a time as they are learned from
    (fleetread.raw_nodes): a 50,000-node report (~1.2 GB) takes about its own size in
    memory, not the ~5 GB of its nodes decoded at once. Bounded by FLEET_REPORT_MAX_BYTES;
    any report hc cannot read (another schema version, not JSON) is a one-line HcError."""

    for path in paths:
        data = read_bounded(path, FLEET_REPORT_MAX_BYTES, what="report")
        yield str(path), raw_nodes(data, str(path))
        del data  # the next report's bytes are not read before these are let go


# ------------------------------------------------------------------ learning


def safe(text: Any, limit: int = 100) -> str:
    """Report-supplied text for a comment or a message: printable ASCII on one line (a
    newline in a node or HCA name must not start a YAML key), cut to `limit`."""
    shown = ascii(str(text))[1:-1]
    return shown if len(shown) <= limit else shown[:limit] + "..."


def _against(node: NodeResult) -> bool:
    """Whether the node's own result is evidence against it (it is then learned from in no run)."""
    if node.error is not None:
        return True
    if node.status not in (Status.FAIL, Status.ERROR):
        return False
    serious = [f for f in node.findings if f.status in (Status.FAIL, Status.ERROR)]
    return not serious or any(f.id not in RELEARNED for f in serious)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


class _Collector:
    def __init__(self, fabric: str, base: Fabric) -> None:
        self.fabric = fabric
        bw = base.bandwidth
        self.pair_collective = bw.collectives[0] if bw.collectives else "all_reduce"
        measured = {size for size in map(_size, bw.sizes) if size is not None}
        # the sizes floors are learned at, per (collective, scope): measured or judged there
        self.sizes: dict[tuple[str, str], set[int]] = {}
        # a size the fabric already judges keeps its spelling ("16 GiB"): the learned floor
        # must replace that key, not stand beside it as a second floor at the same size
        self.spelling: dict[tuple[str, str, int], str] = {}
        for coll in COLLECTIVES:
            for scope in SCOPES:
                judged = getattr(getattr(bw, coll), scope).busbw_min_gbytes_per_s
                for text in judged:
                    size = _size(text)
                    if size is not None:
                        self.spelling[(coll, scope, size)] = text
                self.sizes[(coll, scope)] = measured | {size for (c, sc, size) in self.spelling
                                                        if (c, sc) == (coll, scope)}
        self.targets: dict[tuple[str, str, int], BaselineKey] = {}
        # (target, part) -> subject -> one value per run
        self.samples: dict[tuple[BaselineKey, str], dict[Any, list[float]]] = {}
        self.bad: set[str] = set()
        self.kept_below: set[str] = set()
        self.seen: set[str] = set()
        self.nccl: dict[str, str] = {}
        self.skipped: set[str] = set()
        self.runs: list[LearnedRun] = []
        self.fabrics: Counter[str] = Counter()

    def target(self, collective: str, scope: str, size: int) -> BaselineKey:
        key = (collective, scope, size)
        found = self.targets.get(key)
        if found is None:
            text = self.spelling.get(key, format_size(size))
            found = self.targets[key] = _busbw_target(collective, scope, text)
        return found

    def add(self, source: str, report: Report | RawReport) -> None:
        nodes = report.nodes() if isinstance(report, RawReport) else report.nodes
        report = report.head if isinstance(report, RawReport) else report
        info = LearnedRun(source, report.run_id, report.command, report.tier, report.started_at, report.hc_version)
        run: dict[tuple[BaselineKey, str], dict[Any, float]] = {}
        names: set[str] = set()
        for node in nodes:
            self.fabrics[node.fabric] += 1
            if node.fabric != self.fabric:
                continue
            info.nodes += 1
            names.add(node.node)
            self.seen.add(node.node)
            if _against(node):
                info.dropped += 1
                self.bad.add(node.node)
                continue
            if node.status in (Status.FAIL, Status.ERROR):
                self.kept_below.add(node.node)
            hits = [m for m in node.metrics if m.name in _WANTED]
            for m in hits:
                self._node_metric(run, node.node, m.name, m.component, m.value)
        for group in report.groups:
            if group.kind != "pair" or len(group.members) != 2 or not set(group.members) <= names:
                continue
            info.pairs += 1
            if group.status in (Status.FAIL, Status.ERROR) or group.findings:
                continue  # evidence against the pair or its link, or no verdict
            subject = tuple(sorted(group.members))
            for m in group.metrics:
                if m.name != PAIR_BUSBW or m.members:
                    continue
                size, value = _size(m.component), _number(m.value)
                if size is None or value is None or value <= 0:
                    continue
                if size not in self.sizes[(self.pair_collective, "pair")]:
                    self.skipped.add(f"{self.pair_collective}/pair/{format_size(size)}")
                    continue
                # a pair's repeated tests: the best counts, as the judge takes the best attempt
                slot = run.setdefault((self.target(self.pair_collective, "pair", size), ""), {})
                slot[subject] = max(slot.get(subject, value), value)
        for series, values in run.items():
            into = self.samples.setdefault(series, {})
            for subject, value in values.items():
                into.setdefault(subject, []).append(value)
        self.runs.append(info)

    def _node_metric(self, run: dict, node: str, name: str, component: str, value: Any) -> None:
        if name == NCCL:
            if isinstance(value, str) and value:
                self.nccl[node] = value
            return
        number = _number(value)
        if number is None or not isinstance(component, str) or not component or len(component) > _COMPONENT_MAX:
            return
        if name == TEMP:
            if number < 0:
                return
            slot = run.setdefault((TEMP_TARGET, component), {})
            slot[node] = max(slot.get(node, number), number)  # a ceiling: the hotter reading
            return
        if number <= 0:
            return
        if name == IB_BW:
            slot = run.setdefault((IB_TARGET, component), {})
        else:  # busbw: collective/scope/size
            parts = component.split("/")
            # a node's own tests: pair figures come from the pair tests (GroupResult), not from a node
            if len(parts) != 3 or parts[0] not in COLLECTIVES or parts[1] not in _NODE_SCOPES:
                return
            size = _size(parts[2])
            if size is None:
                return
            if size not in self.sizes[(parts[0], parts[1])]:
                self.skipped.add(f"{parts[0]}/{parts[1]}/{format_size(size)}")
                return
            slot = run.setdefault((self.target(parts[0], parts[1], size), ""), {})
        # both tools (nccl-tests, torch) are judged against one floor: the lower one counts
        slot[node] = min(slot.get(node, number), number)


def _size(text: Any) -> int | None:
    try:
        return parse_size(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _median_sorted(xs: list[float]) -> float:
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2


def _percentile_sorted(xs: list[float], p: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def _round_down(x: float) -> float:
    """Down to 4 significant digits: a floor never ends up above what was learned."""
    if x <= 0:
        return 0.0
    q = 10.0 ** (math.floor(math.log10(x)) - 3)
    return float(f"{math.floor(x / q + 1e-9) * q:.6g}")


def _round_up(x: float) -> float:
    return float(f"{math.ceil(x * 10 - 1e-9) / 10:.6g}")


def learn_series(values: list[float], target: BaselineKey, settings: BaselineSettings, part: str = "") -> Stats:
    """Robust statistics of one series and its bound, or the reason it is refused."""
    what = target.subjects
    xs = sorted(values)
    n0 = len(xs)
    if n0 < settings.min_nodes:
        return Stats(part, n0, refused=f"{n0} {what}, fewer than baseline.min_nodes {settings.min_nodes}")
    med = _median_sorted(xs)
    mad = _median_sorted(sorted(abs(x - med) for x in xs))
    scale = mad / _MAD_K if mad > 0 else _MEANAD_K * sum(abs(x - med) for x in xs) / n0
    kept = xs if scale <= 0 else [x for x in xs if abs(x - med) <= settings.outlier_z * scale]
    outliers = n0 - len(kept)
    if len(kept) < settings.min_nodes:
        return Stats(part, n0, outliers, refused=f"{len(kept)} {what} left after dropping {outliers} outliers, "
                                                 f"fewer than baseline.min_nodes {settings.min_nodes}")
    med = _median_sorted(kept)
    mad = _median_sorted(sorted(abs(x - med) for x in kept))
    spread = mad / med if med > 0 else math.inf
    if spread > settings.max_spread:
        return Stats(part, n0, outliers, med, mad, refused=(
            f"spread too wide: MAD/median {spread:.3g} above baseline.max_spread {settings.max_spread:g} "
            f"(median {med:.6g}, MAD {mad:.6g}, {len(kept)} {what})"))
    if target.kind == "floor":
        at = _percentile_sorted(kept, settings.percentile)
        bound = _round_down(at * (1 - settings.margin))
    else:
        at = _percentile_sorted(kept, 100 - settings.percentile)
        bound = _round_up(at + settings.temp_margin_c)
    top = _MAX[target.unit]
    if not 0 < bound <= top:
        return Stats(part, n0, outliers, med, mad, at, refused=(
            f"the learned {target.kind} {bound:g} {target.unit} is outside what the fabric allows (0 to {top:g})"))
    return Stats(part, n0, outliers, med, mad, at, bound)


def _get(fabric: Fabric, key: tuple[str, ...]) -> Any:
    value: Any = fabric
    for part in key:
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
        if value is None:
            return None
    return value


def _parts_refused(target: BaselineKey, stats: list[Stats]) -> str:
    bad = [s for s in stats if s.bound is None]
    shown = "; ".join(f"{safe(s.part, 40)}: {s.refused}" for s in bad[:_MAX_PARTS_SHOWN])
    more = f"; and {len(bad) - _MAX_PARTS_SHOWN} more" if len(bad) > _MAX_PARTS_SHOWN else ""
    noun = "HCA" if target is IB_TARGET else "GPU"
    # the key holds for every HCA (GPU): one it was not learned from could be judged wrongly
    return f"{shown}{more} (the key is learned only when every {noun} is)"


def learn(reports: Iterable[tuple[str, Report | RawReport]], fabric: str, base: Fabric, settings: BaselineSettings,
          provenance: dict[tuple[Any, ...], str] | None = None) -> Baseline:
    """Learn the fabric's thresholds from the reports' nodes of `fabric`; `base` is what the
    output will extend (its sizes and current values), `provenance` where it set them."""
    col = _Collector(fabric, base)
    seen_runs: set[str] = set()
    for source, report in reports:
        run_id = report.head.run_id if isinstance(report, RawReport) else report.run_id
        if run_id in seen_runs:
            raise HcError(f"{source}: run {safe(run_id, 60)} is given twice: each run counts once")
        seen_runs.add(run_id)
        col.add(source, report)
        del report  # before the next report is read: one report's bytes held at a time
    if not col.seen:
        fabrics = ", ".join(f"{safe(f, 40)} ({n})" for f, n in col.fabrics.most_common(8)) or "none"
        raise HcError(f"no node of fabric {fabric} in the reports (their nodes' fabrics: {fabrics})")
    per_target: dict[BaselineKey, list[tuple[str, list[float]]]] = {}
    for (target, part), by_subject in col.samples.items():
        values = []
        for subject, runs in by_subject.items():
            members = subject if isinstance(subject, tuple) else (subject,)
            if any(m in col.bad for m in members):
                continue
            runs.sort()
            values.append(_median_sorted(runs))  # one vote per node (pair), whatever the number of runs
        per_target.setdefault(target, []).append((part, values))
    learned: list[Learned] = []
    refused: list[Refusal] = []
    prov = provenance or {}
    for target in sorted(per_target, key=lambda t: t.key):
        stats = [learn_series(values, target, settings, part)
                 for part, values in sorted(per_target[target], key=lambda pv: _natural(pv[0]))]
        if any(s.bound is None for s in stats):
            reason = stats[0].refused if stats[0].part == "" else _parts_refused(target, stats)
            refused.append(Refusal(target, reason))
            continue
        previous = _get(base, target.key)
        item = Learned(target, None, stats, previous, prov.get(target.key, ""))
        bounds = [s.bound for s in stats if s.bound is not None]
        if target.kind == "floor":
            item.value = min(bounds)
        else:
            ceiling = max(bounds)
            if previous is not None and ceiling <= previous:
                item.note = (f"the fabric's {previous:g} C stands: {ceiling:g} C learned here would tighten it "
                             "(a sweep reads idle GPUs; jobs, and the epilogue after them, see them hot)")
            else:
                item.value = ceiling
        if target is IB_TARGET and item.value is not None:
            medians = sorted(s.median for s in stats)
            item.extra[IB_TYPICAL_KEY] = max(item.value, _round_down(_median_sorted(medians)))
        learned.append(item)
    return Baseline(
        fabric=fabric, settings=settings, runs=col.runs, learned=learned, refused=refused,
        nodes_used=len(col.seen - col.bad), nodes_dropped=len(col.bad),
        kept_below_floor=len(col.kept_below - col.bad),
        nccl_versions=Counter(v for n, v in col.nccl.items() if n not in col.bad),
        skipped_sizes=sorted(col.skipped))


def _natural(text: str) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


# ------------------------------------------------------------------ the file


@dataclass
class _Leaf:
    value: float
    comment: str
    before: list[str] = field(default_factory=list)


def _num(value: float) -> str:
    """A YAML number without an exponent (PyYAML reads 1e-05 as a string)."""
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return text or "0"


def _key(key: str) -> str:
    return key if re.fullmatch(r"[a-z_]+", key) else json.dumps(key)


def _stats_text(s: Stats, target: BaselineKey, settings: BaselineSettings) -> str:
    p = settings.percentile if target.kind == "floor" else 100 - settings.percentile
    how = (f"p{p:g} {s.at_percentile:.6g} - {settings.margin * 100:g}%" if target.kind == "floor"
           else f"p{p:g} {s.at_percentile:.6g} + {settings.temp_margin_c:g} C")
    dropped = f", {s.outliers} outliers dropped" if s.outliers else ""
    return f"{how}; median {s.median:.6g}, MAD {s.mad:.3g}; {s.count} {target.subjects}{dropped}"


def _was(item: Learned) -> str:
    if item.previous is None:
        return "the fabric set none"
    where = f" at {safe(item.previous_source, 160)}" if item.previous_source else ""
    return f"the fabric had {item.previous:g}{where}"


def _tree(baseline: Baseline) -> tuple[dict, dict]:
    """The keys to write, as nested mappings with _Leaf values; and the same as plain data."""
    tree: dict = {}
    plain: dict = {}
    s = baseline.settings
    for item in baseline.written:
        t = item.target
        assert item.value is not None
        leaves: list[tuple[tuple[str, ...], _Leaf]]
        if t.key == IB_KEY:
            before = [f"{safe(p.part, 40)}: {_stats_text(p, t, s)}" for p in item.parts[:64]]
            if len(item.parts) > 64:
                before.append(f"and {len(item.parts) - 64} more HCAs")
            leaves = [(t.key, _Leaf(item.value, f"the lowest HCA's floor (loopback and pair tests); {_was(item)}",
                                    before))]
            typical = item.extra[IB_TYPICAL_KEY]
            leaves.append((IB_TYPICAL_KEY, _Leaf(typical, "the median of the HCAs' medians")))
        elif t.key == TEMP_KEY:
            hottest = max(item.parts, key=lambda p: p.bound or 0.0)
            leaves = [(t.key, _Leaf(item.value, f"{safe(hottest.part, 40)}, the hottest: "
                                                f"{_stats_text(hottest, t, s)}; {len(item.parts)} GPUs; {_was(item)}"))]
        else:
            leaves = [(t.key, _Leaf(item.value, f"{_stats_text(item.parts[0], t, s)}; {_was(item)}"))]
        for key, leaf in leaves:
            node, data = tree, plain
            for part in key[:-1]:
                node = node.setdefault(part, {})
                data = data.setdefault(part, {})
            node[key[-1]] = leaf
            data[key[-1]] = leaf.value
    return tree, plain


def _emit(tree: dict, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    for key, value in tree.items():
        if isinstance(value, dict):
            out.append(f"{pad}{_key(key)}:")
            _emit(value, depth + 1, out)
        else:
            out.extend(f"{pad}# {line}" for line in value.before)
            out.append(f"{pad}{_key(key)}: {_num(value.value)}  # {value.comment}")


def _when(started_at: str) -> tuple[float, str]:
    """A run's start, to put runs in time order (whatever offset each is written in)."""

    when = parse_time(started_at)
    return (when.timestamp() if when is not None else math.inf, started_at)


def render(baseline: Baseline, *, name: str, extends: str, written_at: str, hc_version: str) -> tuple[str, dict]:
    """The fabric file's text (comments and keys) and the data it holds (to check it reads back)."""
    b, s = baseline, baseline.settings
    tree, plain = _tree(b)
    runs = b.runs
    dates = sorted((r.started_at for r in runs), key=_when)
    lines = [
        f"# Fabric {name}: the thresholds of {extends} learned by `hc baseline` (hc {safe(hc_version, 40)}) "
        f"at {written_at}.",
        (f"# To use it, put it in a directory named in fabric_dirs: as {name}.yaml there it refines the next "
         f"{name}.yaml in the search order (hc's own last) for every node of fabric {name}." if name == extends else
         f"# To use it, put it in a directory named in fabric_dirs and map nodes to it, e.g. "
         f"nodes: {{\"gpu[001-128]\": {name}}}."),
        f"# Learned from {len(runs)} run{'s' if len(runs) != 1 else ''}, {safe(dates[0], 40)} to "
        f"{safe(dates[-1], 40)}: nodes of fabric {b.fabric} only.",
    ]
    for r in runs:
        pairs = f", {r.pairs} pair tests" if r.pairs else ""
        lines.append(f"#   run {safe(r.run_id, 60)} ({safe(r.command, 20)}, tier {safe(r.tier, 20)}, "
                     f"hc {safe(r.hc_version, 20)}) started {safe(r.started_at, 40)}: {r.nodes} nodes, "
                     f"{r.dropped} FAIL/ERROR{pairs}; {safe(r.source, 200)}")
    lines.append(f"# Nodes learned from: {b.nodes_used}; dropped (FAIL or ERROR in a run): {b.nodes_dropped}"
                 + (f"; kept although below a threshold learned here: {b.kept_below_floor}"
                    if b.kept_below_floor else "") + ".")
    versions = ", ".join(f"{safe(v, 40)} ({n} nodes)" for v, n in b.nccl_versions.most_common(8))
    unknown = b.nodes_used - sum(b.nccl_versions.values())
    lines.append(f"# NCCL versions: {versions or 'none recorded'}"
                 + (f"; not recorded on {unknown} nodes" if unknown > 0 and versions else "") + ".")
    lines.append(f"# Floor = p{s.percentile:g} x (1 - {s.margin:g}); temperature ceiling = p{100 - s.percentile:g} + "
                 f"{s.temp_margin_c:g} C; values beyond |modified z| {s.outlier_z:g} dropped; at least "
                 f"{s.min_nodes} nodes (pairs) and MAD/median at most {s.max_spread:g} per key.")
    if b.refused:
        lines.append("# Refused (left as the fabric sets them):")
        lines.extend(f"#   {r.target.dotted}: {safe(r.reason, 600)}" for r in b.refused)
    for item in b.learned:
        if item.value is None:
            lines.append(f"# Kept: {item.target.dotted}: {item.note}")
    if b.skipped_sizes:
        shown = ", ".join(b.skipped_sizes[:12]) + (" ..." if len(b.skipped_sizes) > 12 else "")
        lines.append(f"# Not learned (sizes neither in bandwidth.sizes nor judged by {extends}): {shown}")
    description = (f"{extends} with thresholds learned by hc baseline from {len(runs)} runs and "
                   f"{b.nodes_used} nodes, written {written_at}")
    lines.append(f"description: {json.dumps(description)}")
    lines.append(f"extends: {extends}")
    _emit(tree, 0, lines)
    return "\n".join(lines) + "\n", {"description": description, "extends": extends, **plain}


# ------------------------------------------------------------------ summary


def rows(baseline: Baseline) -> list[dict[str, Any]]:
    """One row per key learned, kept or refused: the command's table and JSON."""
    out: list[dict[str, Any]] = []
    for item in baseline.learned:
        main = min(item.parts, key=lambda p: p.bound or 0.0) if item.target.kind == "floor" else \
            max(item.parts, key=lambda p: p.bound or 0.0)
        out.append({"key": item.target.dotted, "status": "learned" if item.value is not None else "kept",
                    "value": item.value, "previous": item.previous, "unit": item.target.unit,
                    "count": min(p.count for p in item.parts), "median": main.median, "mad": main.mad,
                    "percentile_value": main.at_percentile, "part": main.part, "reason": item.note})
        for key, value in item.extra.items():
            out.append({"key": ".".join(key), "status": "learned", "value": value, "previous": None,
                        "unit": item.target.unit, "count": None, "median": None, "mad": None,
                        "percentile_value": None, "part": "", "reason": ""})
    for r in baseline.refused:
        out.append({"key": r.target.dotted, "status": "refused", "value": None, "previous": None,
                    "unit": r.target.unit, "count": None, "median": None, "mad": None, "percentile_value": None,
                    "part": "", "reason": r.reason})
    return out


# ------------------------------------------------------------------ the command


@dataclass(frozen=True)
class BaselineFile:
    """A fabric file `hc baseline` wrote: where, extending which fabric, and what was learned."""

    output: Path
    fabric: str
    result: Baseline


def _settings(config: Config, overrides: Mapping[str, float | int | None]) -> BaselineSettings:
    """The config's baseline section with the options given on the command line (None: not given)."""

    return msgspec.structs.replace(config.main.baseline, **{k: v for k, v in overrides.items() if v is not None})


def _nothing_learned(result: Baseline, fabric: str, output: Path) -> HcError:
    """Why no file is written: every key refused or kept, or nothing of the fabric's nodes to learn from."""
    return HcError(f"nothing learned for fabric {fabric} from {len(result.runs)} report(s) "
                   f"({result.nodes_used} nodes used, {result.nodes_dropped} dropped): "
                   + ("every key was refused (above)" if result.refused or result.learned
                      else "they hold no busbw, ib_write_bw or GPU temperature of its nodes (a deep sweep "
                           "records bandwidth)") + f"; {safe(output, 200)} not written")


def _check_and_write(text: str, expected: dict, output: Path, config: Config) -> None:
    """Write the file only where it is usable as-is: the text reads back as the data meant,
    and the loader accepts it as it will be found at the output's path."""

    if yaml.safe_load(text) != expected:
        raise HcError("internal error: the baseline file would not read back as written (HC_DEBUG=1 for more)")
    with tempfile.TemporaryDirectory(prefix="hc-baseline-") as tmp:
        check = Path(tmp) / output.name
        check.write_text(text)
        config.fabric_file(check, instead_of=output)
    write_atomic(output, text.encode())


def write_baseline(reports: Iterable[Path], fabric: str, output: Path, config_path: Path | None,
                   overrides: Mapping[str, float | int | None], *, warn: Callable[[str], None]) -> BaselineFile:
    """Learn `fabric`'s thresholds from the reports and write them to `output` (NAME.yaml) as
    a fabric file extending it; each refused key (and, when nothing is written, each kept
    one) is one line to `warn`, and an HcError says why nothing was written."""

    if output.suffix != ".yaml" or not re.fullmatch(FABRIC_NAME_RE, output.stem):
        raise HcError(f"{safe(output, 200)}: the output must be NAME.yaml with a fabric name "
                      "(letters, digits, '.', '_', '-'): fabrics are looked up as <name>.yaml")
    config = load_config(config_path)
    below = output if output.stem == fabric else None  # the output will refine the fabric of its own name
    try:  # as it will be looked up once installed: fabric <output's name>, extending --fabric
        _, prov = config.fabric_raw(fabric, key="--fabric", below=below, child=(output.stem, output))
    except ExtendsCycle as exc:
        raise HcError(f"{safe(output, 200)}: not written: installed as fabric {output.stem}, extending {fabric}, "
                      f"it would be an extends cycle ({' -> '.join(exc.chain)}) and no node of these fabrics "
                      f"could be checked; name it {fabric}.yaml (it then refines {fabric}) or after a new "
                      "fabric") from None
    base = config.fabric(fabric, below=below)
    result = learn(read_reports(reports), fabric, base, _settings(config, overrides), prov)
    for refusal in result.refused:
        warn(f"hc: refused: {refusal.target.dotted}: {refusal.reason}")
    if not result.written:
        for item in result.learned:
            warn(f"hc: kept: {item.target.dotted}: {item.note}")
        raise _nothing_learned(result, fabric, output)
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    text, expected = render(result, name=output.stem, extends=fabric, written_at=now, hc_version=__version__)
    _check_and_write(text, expected, output, config)
    return BaselineFile(output, fabric, result)


def baseline_json(done: BaselineFile) -> dict[str, Any]:
    """`hc baseline --format json`: the file written, the runs and node counts, and one row per key."""
    result = done.result
    return {"output": str(done.output), "fabric": done.fabric, "runs": [r.run_id for r in result.runs],
            "nodes_used": result.nodes_used, "nodes_dropped": result.nodes_dropped, "keys": rows(result)}


def _cell(value: object) -> str:
    return "-" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)


def baseline_table(done: BaselineFile) -> str:
    """`hc baseline`: one table row per key, then a line saying what was written and how to use it."""
    from tabulate import tabulate

    result = done.result
    table = tabulate([[r["key"], r["status"], _cell(r["value"]), _cell(r["previous"]), _cell(r["count"]),
                       _cell(r["median"]), _cell(r["mad"]), safe(r["part"], 24), safe(r["reason"], 80)]
                      for r in rows(result)],
                     headers=["KEY", "STATUS", "VALUE", "WAS", "NODES", "MEDIAN", "MAD", "PART", "NOTE"],
                     tablefmt="simple")
    return (f"{table}\nwrote {done.output}: {len(result.written)} keys learned, {len(result.refused)} refused, "
            f"from {len(result.runs)} run(s) and {result.nodes_used} nodes of {done.fabric} "
            f"({result.nodes_dropped} dropped); fabric {done.output.stem} once its directory is in fabric_dirs")
