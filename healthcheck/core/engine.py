"""Run checks on one node: gather the facts they need (in parallel, under deadlines),
evaluate each check, and stamp its findings.

Providers run in daemon threads the engine can abandon: a probe that hangs in the
kernel (NVML on a dying GPU, statvfs on a dead NFS mount) costs its budget and becomes
an ERROR, never a hung prologue.
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from typing import Any, Iterable, Optional

import msgspec

from healthcheck.core import catalogue
from healthcheck.core.config import NodeConfig
from healthcheck.core.facts import ProbeContext, ProbeError, provider_for
from healthcheck.core.model import CheckResult, Finding, Metric, NodeResult, fingerprint
from healthcheck.core.registry import CheckSpec, NotApplicable
from healthcheck.core.status import Status, worst

_ERROR_SPECS = {
    "missing": catalogue.TOOL_MISSING,
    "timeout": catalogue.TIMED_OUT,
    "failed": catalogue.TOOL_FAILED,
    "unparsable": catalogue.UNPARSABLE,
    "unreadable": catalogue.TOOL_FAILED,
}


class _Gathering(threading.Thread):
    def __init__(self, fact: str, ctx: ProbeContext) -> None:
        super().__init__(name=f"hc-fact-{fact}", daemon=True)
        self.fact = fact
        self.ctx = ctx
        self.value: Any = None
        self.error: Optional[ProbeError] = None

    def run(self) -> None:
        try:
            self.value = provider_for(self.fact, self.ctx.transport)(self.ctx)
        except ProbeError as exc:
            self.error = exc
        except Exception as exc:  # a provider bug must not take the run down
            self.error = ProbeError("failed", f"gathering {self.fact} raised {type(exc).__name__}: {exc}",
                                    traceback.format_exc(limit=5))


def gather(
    needs: dict[str, float], ctx: ProbeContext, deadline: Optional[float] = None
) -> tuple[dict[str, Any], bool]:
    """Gather each fact (name -> time budget) in its own thread.

    Returns fact -> value or ProbeError, and whether any thread had to be abandoned.
    """
    threads = []
    for fact, budget in needs.items():
        timeout = budget if deadline is None else max(0.0, min(budget, deadline - time.monotonic()))
        t = _Gathering(fact, dataclasses.replace(ctx, timeout_s=timeout))
        t.start()
        threads.append((t, time.monotonic() + timeout))
    results: dict[str, Any] = {}
    abandoned = False
    for t, fact_deadline in threads:
        # the runner kills a hung command at its timeout; the grace covers collecting
        # its output. A thread still alive after that is stuck in-process: abandon it.
        t.join(max(0.0, fact_deadline + 0.5 - time.monotonic()))
        if t.is_alive():
            abandoned = True
            results[t.fact] = ProbeError("timeout", f"gathering {t.fact} did not finish within {t.ctx.timeout_s:g}s")
        else:
            results[t.fact] = t.error if t.error is not None else t.value
    return results, abandoned


def plan_facts(specs: Iterable[CheckSpec], limits: Any, budget_floor: float = 0.0
               ) -> tuple[list[CheckSpec], dict[str, str], dict[str, float]]:
    """The checks that apply, those skipped (name -> why), and the facts they need
    (name -> time budget: the largest budget of the checks that need it)."""
    skipped: dict[str, str] = {}
    runnable: list[CheckSpec] = []
    for spec in specs:
        reason = spec.applies(limits) if spec.applies is not None else None
        if reason:
            skipped[spec.name] = reason
        else:
            runnable.append(spec)
    needs: dict[str, float] = {}
    for spec in runnable:
        for fact in spec.needs + spec.optional:
            needs[fact] = max(needs.get(fact, 0.0), spec.budget_s, budget_floor)
    return runnable, skipped, needs


def run_checks(
    node_config: NodeConfig,
    specs: Iterable[CheckSpec],
    ctx: ProbeContext,
    *,
    deadline: Optional[float] = None,
    mode: str = "local",
    budget_floor: float = 0.0,
) -> tuple[NodeResult, bool]:
    """Run `specs` on the node; returns its result and whether work was abandoned.

    budget_floor: the least time any fact gets (commands over SSH take longer than the
    local budgets assume).
    """
    limits = node_config.limits
    ctx = dataclasses.replace(ctx, limits=limits)
    runnable, skipped, needs = plan_facts(specs, limits, budget_floor)
    gather_start = time.monotonic()
    facts, abandoned = gather(needs, ctx, deadline)
    gather_s = time.monotonic() - gather_start

    checks: list[CheckResult] = []
    findings: list[Finding] = []
    metrics: list[Metric] = []
    for name, reason in skipped.items():
        checks.append(CheckResult(name, Status.SKIP, 0.0, reason))
    for spec in runnable:
        start = time.monotonic()
        status, reason, out_findings, out_metrics = _evaluate(spec, facts, limits)
        duration = round(time.monotonic() - start + gather_s, 4)
        checks.append(CheckResult(spec.name, status, duration, reason))
        findings.extend(_stamp(f, node_config, spec.name) for f in out_findings)
        metrics.extend(out_metrics)
    checks.sort(key=lambda c: c.name)
    status = worst((c.status for c in checks), default=Status.SKIP)
    return (
        NodeResult(
            node=node_config.node,
            fabric=node_config.fabric_name,
            status=status,
            mode=mode,
            checks=checks,
            findings=findings,
            metrics=metrics,
        ),
        abandoned,
    )


def _evaluate(
    spec: CheckSpec, facts: dict[str, Any], limits: Any
) -> tuple[Status, Optional[str], list[Finding], list[Metric]]:
    errors = [facts[f] for f in spec.needs if isinstance(facts.get(f), ProbeError)]
    if errors:
        err = errors[0]
        finding = _ERROR_SPECS.get(err.kind, catalogue.TOOL_FAILED)(
            Status.ERROR, f"{spec.name} could not run: {err.message}", evidence=err.evidence
        )
        return Status.ERROR, err.message, [finding], []
    try:
        optional = (None if isinstance(facts.get(f), ProbeError) else facts.get(f) for f in spec.optional)
        output = list(spec.fn(*(facts[f] for f in spec.needs), *optional, limits))
    except NotApplicable as exc:
        return Status.SKIP, str(exc), [], []
    except Exception as exc:
        message = f"{spec.name} raised {type(exc).__name__}: {exc}"
        finding = catalogue.CHECK_CRASHED(
            Status.ERROR, message, evidence=traceback.format_exc(limit=8)
        )
        return Status.ERROR, message, [finding], []
    found = [o for o in output if isinstance(o, Finding)]
    metrics = [o for o in output if isinstance(o, Metric)]
    undeclared = sorted({f.id for f in found} - spec.finding_ids)
    if undeclared:
        message = f"{spec.name} emitted undeclared finding IDs {undeclared}"
        return Status.ERROR, message, [catalogue.CHECK_CRASHED(Status.ERROR, message)], metrics
    status = worst((f.status for f in found), default=Status.PASS)
    return status, None, found, metrics


def _stamp(f: Finding, node_config: NodeConfig, check: str) -> Finding:
    node = node_config.node
    subject = f"{node}:{f.component}" if f.component else node
    spec = catalogue.CATALOGUE.get(f.id)
    limit = f.limit
    if limit is not None and limit.source is None:
        limit = msgspec.structs.replace(limit, source=node_config.source(limit.key))
    return msgspec.structs.replace(
        f,
        node=node,
        check=check,
        subject=subject,
        hint=spec.hint if spec else "",
        suggested_action=spec.action if spec else "",
        limit=limit,
        fingerprint=fingerprint(node, check, subject, f.id),
    )


def unreachable_result(node: str, fabric: str, message: str, mode: str, evidence: Optional[str] = None,
                       value: Any = None) -> NodeResult:
    """The result of a node that could not be checked at all: ERROR, never FAIL."""
    f = catalogue.UNREACHABLE(Status.ERROR, message, evidence=evidence, value=value)
    f = msgspec.structs.replace(
        f, node=node, check="hc.reach", subject=node, hint=catalogue.UNREACHABLE.hint,
        suggested_action=catalogue.UNREACHABLE.action, fingerprint=fingerprint(node, "hc.reach", node, f.id),
    )
    return NodeResult(node=node, fabric=fabric, status=Status.ERROR, mode=mode, findings=[f], error=message)
