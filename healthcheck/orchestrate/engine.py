"""Run checks on one node: gather the facts they need (in parallel, under deadlines),
evaluate each check, and stamp its findings.

Providers run in daemon threads the engine can abandon: a probe that hangs in the
kernel (NVML on a dying GPU, statvfs on a dead NFS mount) costs its budget and becomes
an ERROR, never a hung prologue. Exclusive providers (bandwidth tests) run after all
the others have finished, one at a time, each alone on the node.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any

import msgspec

from healthcheck.core import catalogue
from healthcheck.core.config import NodeConfig
from healthcheck.core.facts import ProbeContext, ProbeError, ProbeKind, Provider, current_providers
from healthcheck.core.model import CheckResult, Finding, Metric, NodeResult
from healthcheck.core.registry import CheckSpec, NotApplicable
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst

_ERROR_SPECS = {
    ProbeKind.MISSING: catalogue.TOOL_MISSING,
    ProbeKind.TIMEOUT: catalogue.TIMED_OUT,
    ProbeKind.FAILED: catalogue.TOOL_FAILED,
    ProbeKind.UNPARSABLE: catalogue.UNPARSABLE,
    ProbeKind.UNREADABLE: catalogue.TOOL_FAILED,
    ProbeKind.NOT_RUN: catalogue.TIMED_OUT,  # the run's time ran out, or it could not run alone
}

# After a provider's timeout the runner has killed its command; this covers collecting
# the output. A thread still alive after that is stuck in-process and is abandoned.
_GRACE_S = 0.5


class _Gathering(threading.Thread):
    def __init__(self, fact: str, provider: Provider, ctx: ProbeContext) -> None:
        super().__init__(name=f"hc-fact-{fact}", daemon=True)
        self.fact = fact
        self.provider = provider
        self.ctx = ctx
        self.value: Any = None
        self.error: ProbeError | None = None
        self.began = time.monotonic()
        self.ended: float | None = None  # None while it runs (or was abandoned)

    def run(self) -> None:
        self.began = time.monotonic()
        try:
            self.value = self.provider.fn(self.ctx)
        except ProbeError as exc:
            self.error = exc
        except Exception as exc:  # a provider bug must not take the run down
            self.error = ProbeError(ProbeKind.FAILED, f"gathering {self.fact} raised {type(exc).__name__}: {exc}",
                                    stack(limit=5))
        finally:
            self.ended = time.monotonic()

    @property
    def took(self) -> float:
        """How long gathering this fact took (so far, for one still running: abandoned)."""
        return (self.ended if self.ended is not None else time.monotonic()) - self.began


def stack(limit: int) -> str:
    """The traceback of the exception being handled, `limit` frames: traceback (and the
    modules it loads, ~2 ms) is imported only once a provider or a check raised."""
    import traceback  # noqa: PLC0415 -- only after a provider or check raised; never on a healthy run's path

    return traceback.format_exc(limit=limit)


def _budget(budget: float, deadline: float | None) -> tuple[float, bool]:
    """The time a fact gets now, and whether the run's deadline cut it below its budget."""
    if deadline is None:
        return budget, False
    left = max(0.0, deadline - time.monotonic())
    return min(budget, left), left < budget


def _start(fact: str, provider: Provider, ctx: ProbeContext, budget: float, deadline: float | None
           ) -> tuple[_Gathering, float, bool]:
    """Start gathering `fact`; returns the thread, when to give up on it, and whether it was cut short."""
    timeout, cut = _budget(budget, deadline)
    t = _Gathering(fact, provider, msgspec.structs.replace(ctx, timeout_s=timeout))
    t.start()
    return t, time.monotonic() + timeout, cut


def _collect(t: _Gathering, give_up_at: float, cut: bool) -> tuple[Any, bool]:
    """Wait for a gathering thread until its budget (plus grace); returns its result and whether it was abandoned."""
    t.join(max(0.0, give_up_at + _GRACE_S - time.monotonic()))
    if t.is_alive():
        result: Any = ProbeError(ProbeKind.TIMEOUT, f"gathering {t.fact} did not finish within {t.ctx.timeout_s:g}s")
    else:
        result = t.error if t.error is not None else t.value
    if cut and isinstance(result, ProbeError):
        result.cut_short = True  # the run's deadline, not the probe's budget, stopped it
    return result, t.is_alive()


def gather(
    needs: dict[str, float], ctx: ProbeContext, deadline: float | None = None,
    took: dict[str, float] | None = None,
) -> tuple[dict[str, Any], bool]:
    """Gather each fact (name -> time budget): concurrent providers each in its own
    thread, then exclusive ones one at a time, alone.

    Returns fact -> value or ProbeError, and whether any thread had to be abandoned;
    `took`, where given, gets fact -> the seconds its provider ran (a fact no provider
    was started for is not in it).
    """
    took = {} if took is None else took
    results: dict[str, Any] = {}
    concurrent: list[tuple[str, Provider]] = []
    exclusive: list[tuple[str, Provider]] = []
    providers = current_providers()
    for fact in needs:
        try:
            provider = providers.get(fact, ctx.transport)
        except ProbeError as exc:
            results[fact] = exc
            continue
        (exclusive if provider.exclusive else concurrent).append((fact, provider))
    started = [(_start(fact, p, ctx, needs[fact], deadline)) for fact, p in concurrent]
    stuck: list[str] = []
    for t, give_up_at, cut in started:
        results[t.fact], alive = _collect(t, give_up_at, cut)
        took[t.fact] = t.took
        if alive:
            stuck.append(t.fact)
    for fact, provider in exclusive:  # only runs that need a bandwidth test get here
        began = time.monotonic()
        results[fact], alive = _gather_alone(fact, provider, ctx, needs[fact], deadline, stuck)
        took[fact] = time.monotonic() - began
        if alive:
            stuck.append(fact)
    return {fact: results[fact] for fact in needs}, bool(stuck)


def _gather_alone(fact: str, provider: Provider, ctx: ProbeContext, budget: float, deadline: float | None,
                  stuck: list[str]) -> tuple[Any, bool]:
    """Run one exclusive provider with nothing else running; returns its result and whether it was abandoned."""
    if stuck:  # an abandoned provider may still hold the GPUs or HCAs: this one would not run alone
        return ProbeError(ProbeKind.NOT_RUN, f"{fact} was not started: it must run alone, and "
                          f"{', '.join(stuck)} did not finish within its budget and may still be running"), False
    timeout, _ = _budget(budget, deadline)
    if timeout <= 0:
        return ProbeError(ProbeKind.NOT_RUN, f"{fact} was not started: the run's deadline had passed"), False
    t, give_up_at, cut = _start(fact, provider, ctx, budget, deadline)
    return _collect(t, give_up_at, cut)


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
    deadline: float | None = None,
    mode: str = "local",
    budget_floor: float = 0.0,
) -> tuple[NodeResult, bool]:
    """Run `specs` on the node; returns its result and whether work was abandoned.

    budget_floor: the least time any fact gets (commands over SSH take longer than the
    local budgets assume).
    """
    limits = node_config.limits
    ctx = msgspec.structs.replace(ctx, limits=limits)
    runnable, skipped, needs = plan_facts(specs, limits, budget_floor)
    took: dict[str, float] = {}
    facts, abandoned = gather(needs, ctx, deadline, took)

    checks: list[CheckResult] = []
    findings: list[Finding] = []
    metrics: list[Metric] = []
    for name, why in skipped.items():
        checks.append(CheckResult(name, Status.SKIP, 0.0, why))
    for spec in runnable:
        start = time.monotonic()
        status, reason, out_findings, out_metrics = _evaluate(spec, facts, limits)
        # its own time: the slowest of the facts it waited for (gathered side by side, so
        # a check's time is not the run's), then its evaluation
        waited = max((took.get(f, 0.0) for f in spec.needs + spec.optional), default=0.0)
        duration = round(time.monotonic() - start + waited, 4)
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
) -> tuple[Status, str | None, list[Finding], list[Metric]]:
    errors = [facts[f] for f in spec.needs if isinstance(facts.get(f), ProbeError)]
    if errors:
        return _not_evaluated(spec, errors)
    try:
        # by keyword: a check's parameters are its facts' names (registration checks them)
        given = {f: facts[f] for f in spec.needs}
        given.update((f, None if isinstance(facts.get(f), ProbeError) else facts.get(f)) for f in spec.optional)
        output = list(spec.fn(**given, limits=limits))
    except NotApplicable as exc:
        return Status.SKIP, str(exc), [], []
    except Exception as exc:
        message = f"{spec.name} raised {type(exc).__name__}: {exc}"
        finding = catalogue.CHECK_CRASHED(
            Status.ERROR, message, evidence=stack(limit=8)
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


def _not_evaluated(spec: CheckSpec, errors: list[ProbeError]
                   ) -> tuple[Status, str | None, list[Finding], list[Metric]]:
    """A check whose facts could not be gathered: ERROR, or FAIL where it declared a hang evidence."""
    hang = spec.hang_finding
    hangs = [e for e in errors if e.is_hang] if hang is not None else []
    others = [e for e in errors if e not in hangs]
    findings = [_error_finding(spec, others[0])] if others else []
    if hang is None or not hangs:
        return Status.ERROR, others[0].message, findings, []
    # the probe had its whole budget and never finished: that is what the check judges
    hung = [hang(Status.FAIL, f"{spec.name}: {e.message} (a hang is evidence against the node)",
                 evidence=e.evidence) for e in hangs]
    return Status.FAIL, hangs[0].message, hung + findings, []


def _error_finding(spec: CheckSpec, err: ProbeError) -> Finding:
    """The hc.E00x finding of a check that could not run because a fact could not be gathered."""
    return _ERROR_SPECS.get(err.kind, catalogue.TOOL_FAILED)(
        Status.ERROR, f"{spec.name} could not run: {err.message}", evidence=err.evidence
    )


def _stamp(f: Finding, node_config: NodeConfig, check: str) -> Finding:
    """A check's finding stamped for this node (limits' sources from its config)."""
    return stamp(f, check=check, node=node_config.node, limit_source=node_config.source)


def unreachable_result(node: str, fabric: str, message: str, mode: str, evidence: str | None = None,
                       value: Any = None) -> NodeResult:
    """The result of a node that could not be checked at all: ERROR, never FAIL."""
    f = stamp(catalogue.UNREACHABLE(Status.ERROR, message, evidence=evidence, value=value), check="hc.reach",
              node=node)
    return NodeResult(node=node, fabric=fabric, status=Status.ERROR, mode=mode, findings=[f], error=message)
