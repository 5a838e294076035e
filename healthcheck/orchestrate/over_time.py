"""The history analyses of a run (analyses/over_time.py: counter rates, trends), fed from the
run history: each node's recorded readings before this run, its last repair on record before
this run (where its rates and trends start again), and its fabric's limits.

A history that cannot be read is a note for the operator (the run's warnings) and the
analyses are SKIP with the reason: never a PASS of rates nobody took, never a FAIL.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from healthcheck.analyses.over_time import (
    HistoryInput,
    NodeOverTime,
    Reading,
    judged_nodes,
    metric_names,
    parse_time,
)
from healthcheck.core.analysis import analyse_history
from healthcheck.core.config import Config
from healthcheck.core.model import AnalysisRun, NodeResult, Report
from healthcheck.core.status import Status
from healthcheck.report.build import with_nodes

# the readings one node's judgement reads at most (trends.window_runs is at most this)
MAX_READINGS = 1000


@dataclass
class OverTime:
    """The nodes with the history analyses' findings, how each analysis ran, and the notes."""

    nodes: list[NodeResult]
    analyses: list[AnalysisRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def judge_over_time(config: Config, history: Any, nodes: Sequence[NodeResult], started: dt.datetime,
                    tier: str | None = None) -> OverTime:
    """`nodes` judged against their recorded runs in `history` (a report.history.History, or
    None where none is kept) as of `started`, this run's start."""
    nodes = list(nodes)
    if history is None:
        return OverTime(nodes, [_skipped("no run history is kept")])
    inputs = HistoryInput(nodes)
    before = started.astimezone(dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    try:
        limits = {n.node: config.for_node(n.node).limits for n in nodes if n.error is None}
        if not limits:
            return OverTime(nodes, [_skipped("no node was checked")])
        window = min(max(max(f.trends.window_runs for f in limits.values()), 2), MAX_READINGS)
        past = history.counter_readings(list(limits), metric_names(list(limits.values())), before, window)
        repairs = history.last_repairs(before)  # where each node's rates and trends start again
        for name, fabric in limits.items():
            own = past.get(name, [])[-max(fabric.trends.window_runs, 2):]
            readings = [Reading(at, r.values) for r in own if (at := parse_time(r.started_at)) is not None]
            inputs.over_time[name] = NodeOverTime(fabric, readings, started, parse_time(repairs.get(name, "")))
    except Exception as exc:  # an unreadable history is a note: the run's own verdicts stand
        why = f"history not read for counter rates and trends: {exc}"
        return OverTime(nodes, [_skipped(why)], [why])
    results, runs = analyse_history(inputs, judged_nodes(inputs), tier=tier)
    return OverTime(results, runs)


def _skipped(why: str) -> AnalysisRun:
    return AnalysisRun(name="history", scope="history", status=Status.SKIP, reason=why)


def judge_report(config: Config, report: Report, history: Any) -> tuple[Report, list[str]]:
    """`report` (a run of this node) with its nodes judged against `history` (the run's one
    open of the configured history, a report.history.History; None where none is kept), and
    the notes for the operator; unchanged where no history is kept."""
    started = parse_time(report.started_at)
    if history is None or started is None:
        return report, []
    over = judge_over_time(config, history, report.nodes, started, report.tier)
    return with_nodes(report, over.nodes, over.analyses), over.notes
