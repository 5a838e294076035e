"""Run the registered analyses of a scope over many results, and stamp what they find.

An analysis (`registry.analysis`) is a pure function of its scope's input and limits;
this module gives it the input, checks the IDs it emits against what it declared,
stamps its findings (`stamp.stamp`) and records which nodes it judged (`AnalysisRun`),
which is what resuming a node drained for one of its findings asks.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from healthcheck.core.model import AnalysisRun, Finding, NodeResult
from healthcheck.core.nodes import fold
from healthcheck.core.registry import NotApplicable, current
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst

Who = str | tuple[str, ...]  # a node, or the member nodes a finding is about


@dataclass
class FleetInput:
    """The input of scope "fleet": a run's node results, and each node's recent statuses."""

    nodes: list[NodeResult]
    history: dict[str, list[str]] | None = None  # node -> statuses, oldest first, not this run
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def reachable(self) -> list[str]:
        """The nodes that were checked (an unreachable node takes no part in any analysis)."""
        return [n.node for n in self.nodes if n.error is None]

    def shared(self, key: str, make: Callable[[], Any]) -> Any:
        """`make()` once per input: analyses share one pass over a million metrics."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]


@dataclass
class AnalysisOutcome:
    """What a scope's analyses found (stamped, with who) and how each ran."""

    findings: list[tuple[Who, Finding]] = field(default_factory=list)
    runs: list[AnalysisRun] = field(default_factory=list)


def run_analyses(scope: str, inputs: Any, limits: Any, *, judged: Iterable[str], tier: str | None = None,
                 judged_by: Mapping[str, Iterable[str]] | None = None) -> AnalysisOutcome:
    """Run the current registry's analyses of `scope` over `inputs`; `judged`: the nodes they
    cover, or for an analysis named in `judged_by`, the nodes given there (an analysis that
    judges only the nodes that gave it evidence: no other node is said to have passed it)."""

    names = list(judged)
    out = AnalysisOutcome()
    for spec in current().select_analyses(scope, tier):
        own = list(judged_by[spec.name]) if judged_by is not None and spec.name in judged_by else names
        covered = fold(own) if own else ""
        try:
            found = list(spec.fn(inputs, limits))
        except NotApplicable as exc:
            out.runs.append(AnalysisRun(name=spec.name, scope=scope, status=Status.SKIP, reason=str(exc)))
            continue
        except Exception as exc:  # an analysis bug must not take the run down; it judged no node
            why = f"{spec.name} raised {type(exc).__name__}: {exc}"
            out.runs.append(AnalysisRun(name=spec.name, scope=scope, status=Status.ERROR,
                                        reason=why + "\n" + traceback.format_exc(limit=3)))
            continue
        undeclared = sorted({f.id for _, f in found} - spec.finding_ids)
        if undeclared:
            out.runs.append(AnalysisRun(name=spec.name, scope=scope, status=Status.ERROR,
                                        reason=f"{spec.name} emitted undeclared finding IDs {undeclared}"))
            continue
        for who, f in found:
            if isinstance(who, str):
                out.findings.append((who, stamp(f, check=spec.name, node=who)))
            else:
                out.findings.append((tuple(who), stamp(f, check=spec.name, members=who)))
        status = worst((f.status for _, f in found), default=Status.PASS)
        out.runs.append(AnalysisRun(name=spec.name, scope=scope, status=status, nodes=covered))
    return out


def analyse_fleet(nodes: list[NodeResult], settings: Any, history: dict[str, list[str]] | None = None,
                  tier: str | None = None) -> tuple[list[NodeResult], list[AnalysisRun]]:
    """The nodes, in the same order, with the fleet analyses' findings added (status raised to
    match), and how each analysis ran."""
    inputs = FleetInput(list(nodes), history)
    outcome = run_analyses("fleet", inputs, settings, judged=inputs.reachable, tier=tier)
    return with_findings(nodes, outcome), outcome.runs


def analyse_history(inputs: Any, judged_by: Mapping[str, Iterable[str]], tier: str | None = None
                    ) -> tuple[list[NodeResult], list[AnalysisRun]]:
    """The nodes of `inputs` (analyses/over_time.HistoryInput: each node's recorded readings),
    in the same order, with the history analyses' findings added (status raised to match),
    and how each ran; `judged_by`: per analysis, the nodes whose evidence it had."""
    outcome = run_analyses("history", inputs, None, judged=(), tier=tier, judged_by=judged_by)
    return with_findings(inputs.nodes, outcome), outcome.runs


def with_findings(nodes: list[NodeResult], outcome: AnalysisOutcome) -> list[NodeResult]:
    """The nodes, in the same order, with `outcome`'s findings added and their status raised to match."""
    extra: dict[str, list[Finding]] = {}
    for who, f in outcome.findings:
        for name in ((who,) if isinstance(who, str) else who):
            extra.setdefault(name, []).append(f)
    out = []
    for node in nodes:
        found = extra.pop(node.node, None)  # pop: a name listed twice gets its findings once
        if found:
            node = msgspec.structs.replace(node, findings=[*node.findings, *found],
                                           status=worst((node.status, *(f.status for f in found))))
        out.append(node)
    return out
