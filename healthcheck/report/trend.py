"""Nodes over their recent runs, from the run history: status and busbw per run, for the
HTML report's small multiples.

A 2,000-node report is ~24 MB of JSON; decoding ten of them whole takes seconds. So the
runs are decoded into slim structs that keep each node's name and status and leave its
metrics (and each group's) as raw JSON, decoded only for the few nodes followed.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from healthcheck.core import typed
from healthcheck.core.errors import HcError
from healthcheck.core.model import READABLE_SCHEMAS, Report
from healthcheck.core.units import parse_size

NODE_BUSBW = "busbw_gbytes_per_s"  # checks/bw.py: a node's own busbw, component collective/scope/size
PAIR_BUSBW = "busbw"  # a test between nodes (orchestrate/pairsweep/measure.py): component the size
_NO_METRICS = msgspec.Raw(b"[]")


class _Metric(msgspec.Struct, gc=False):
    name: str
    value: Any = None
    component: str = ""


class _Node(msgspec.Struct, gc=False):
    node: str
    status: str
    metrics: msgspec.Raw = _NO_METRICS


class _Group(msgspec.Struct, gc=False):
    kind: str = ""
    members: list[str] = []
    metrics: msgspec.Raw = _NO_METRICS


class _Run(msgspec.Struct):
    schema: str = ""
    run_id: str = ""
    started_at: str = ""
    nodes: list[_Node] = []
    groups: list[_Group] = []


@dataclass(frozen=True)
class Point:
    """One node in one run: its status and busbw (None where it was not in the run or not measured)."""

    run_id: str
    started_at: str
    status: str | None
    own: float | None = None
    pair: float | None = None


@dataclass(frozen=True)
class NodeTrend:
    node: str
    points: list[Point]  # oldest first


@dataclass
class Trend:
    """What the history says about the followed nodes; `note` says why there is nothing to show."""

    nodes: list[NodeTrend] = field(default_factory=list)
    runs: int = 0
    own_label: str = ""  # which busbw "own" is (collective/scope/size)
    pair_label: str = ""
    note: str | None = None
    skipped: list[str] = field(default_factory=list)  # runs that could not be read, and why


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def own_key(report: Report, nodes: Iterable[str]) -> str:
    """The node busbw to follow: single_node at the largest size measured (else any scope)."""

    wanted = set(nodes)
    best: tuple[int, int, str] | None = None
    for n in report.nodes:
        if n.node not in wanted:
            continue
        for m in n.metrics:
            if m.name != NODE_BUSBW or m.component.count("/") != 2:
                continue
            _coll, scope, size = m.component.split("/")
            try:
                rank = (int(scope == "single_node"), parse_size(size), m.component)
            except ValueError:
                continue
            if best is None or rank > best:
                best = rank
    return best[2] if best else ""


def pair_size(report: Report) -> str:
    """The size of the tests between nodes to follow: the largest measured."""

    sizes = set()
    for g in report.groups:
        for m in g.metrics:
            if m.name == PAIR_BUSBW:
                try:
                    sizes.add((parse_size(m.component), m.component))
                except ValueError:
                    continue
    return max(sizes)[1] if sizes else ""


def _points(run_id: str, started_at: str, statuses: dict[str, str], own: dict[str, float],
            pair: dict[str, list[float]], node: str) -> Point:
    values = pair.get(node)
    return Point(run_id, started_at, statuses.get(node), own.get(node),
                 statistics.median(values) if values else None)


def _current(report: Report, followed: set[str], key: str, size: str) -> dict[str, Point]:
    """The report itself as the newest run (it may not be in the history: a saved file)."""
    statuses = {n.node: n.status.value for n in report.nodes if n.node in followed}
    own = {n.node: v for n in report.nodes if n.node in followed for m in n.metrics
           if m.name == NODE_BUSBW and m.component == key and (v := _number(m.value)) is not None}
    pair: dict[str, list[float]] = {}
    for g in report.groups:
        if g.kind != "pair" or not followed.intersection(g.members):
            continue
        got = [v for m in g.metrics if m.name == PAIR_BUSBW and m.component == size
               and (v := _number(m.value)) is not None]
        if got:
            for member in set(g.members) & followed:
                pair.setdefault(member, []).append(max(got))
    return {node: _points(report.run_id, report.started_at, statuses, own, pair, node) for node in followed}


def _decode_run(data: bytes, followed: set[str], key: str, size: str) -> dict[str, Point]:
    run = typed.decode_json(data, _Run)
    if run.schema not in READABLE_SCHEMAS:
        raise ValueError(f"report schema {run.schema!r} is not one this hc reads")
    metrics = typed.decoder(list[_Metric])
    statuses: dict[str, str] = {}
    own: dict[str, float] = {}
    for n in run.nodes:
        if n.node in followed:
            statuses[n.node] = n.status
            for m in metrics.decode(n.metrics):
                if m.name == NODE_BUSBW and m.component == key and (v := _number(m.value)) is not None:
                    own[n.node] = v
    pair: dict[str, list[float]] = {}
    for g in run.groups:
        if g.kind != "pair" or not followed.intersection(g.members):
            continue
        got = [v for m in metrics.decode(g.metrics) if m.name == PAIR_BUSBW and m.component == size
               and (v := _number(m.value)) is not None]
        if got:
            for member in set(g.members) & followed:
                pair.setdefault(member, []).append(max(got))
    return {node: _points(run.run_id, run.started_at, statuses, own, pair, node) for node in followed}


def read_trend(raw_runs: Sequence[tuple[str, bytes]], report: Report, nodes: Sequence[str],
               limit: int | None = None) -> Trend:
    """The followed `nodes` over the runs (newest first, as History.raw_reports gives them) and
    the report itself, oldest first, at most `limit` runs. A run that cannot be read is
    skipped and named."""
    followed = set(nodes)
    key, size = own_key(report, followed), pair_size(report)
    trend = Trend(own_label=key, pair_label=size)
    per_run: list[dict[str, Point]] = []
    seen = {report.run_id}
    for run_id, data in raw_runs:
        if run_id in seen:
            continue
        seen.add(run_id)
        try:
            per_run.append(_decode_run(data, followed, key, size))
        except (msgspec.DecodeError, ValueError) as exc:
            trend.skipped.append(f"run {run_id}: {str(exc)[:200]}")
    per_run.reverse()  # oldest first
    per_run.append(_current(report, followed, key, size))
    if limit is not None:
        per_run = per_run[-limit:]
    trend.runs = len(per_run)
    trend.nodes = [NodeTrend(node, [run[node] for run in per_run]) for node in nodes]
    return trend


def from_history(history: Any, report: Report, nodes: Sequence[str], runs: int) -> Trend:
    """The trend of `nodes` over the last `runs` runs of the report's command and tier up to it,
    from `history` (a History, or None where none is kept); a Trend with only a note where
    there is nothing to draw (no history, no earlier run, no node to follow)."""

    if history is None:
        return Trend(note="no run history is kept (history.path is null in the config)")
    if not history.path.exists():
        return Trend(note=f"no run history yet at {history.path}")
    if not nodes:
        return Trend(note="no node has a finding: there is no node to follow over its runs")
    try:
        with history:
            raw = history.raw_reports(report.command, report.tier, report.started_at, runs)
    except HcError as exc:
        return Trend(note=f"the history could not be read: {exc}")
    trend = read_trend(raw, report, nodes, runs)
    if trend.runs < 2:
        return Trend(note=f"the history at {history.path} holds no earlier run of {report.command!r} "
                          f"(tier {report.tier}) than this one", skipped=trend.skipped)
    return trend
