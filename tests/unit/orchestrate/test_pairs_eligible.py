"""Which nodes a deep sweep pairs: reachable ones whose own bandwidth tests did not fail."""

from __future__ import annotations

from healthcheck.core.model import CheckResult, Finding, NodeResult
from healthcheck.core.status import Status
from healthcheck.orchestrate.pairsweep.sweep import eligible


def node(name: str, status: Status, *, error: str | None = None, bw_fail: bool = False) -> NodeResult:
    findings = [Finding(id="bw.E001", status=Status.FAIL, message="slow", check="bw.nccl", node=name)] \
        if bw_fail else []
    return NodeResult(node=name, fabric="f", status=status, mode="agentless", error=error,
                      checks=[CheckResult("bw.nccl", Status.SKIP, 0.0, "no GPU on this node")], findings=findings)


def test_cpu_nodes_whose_checks_all_skipped_are_paired_but_not_busy_unreachable_or_slow_ones():
    results = [node("n1", Status.SKIP), node("n2", Status.PASS), node("n3", Status.SKIP, error="not checked: busy"),
               node("n4", Status.ERROR, error="unreachable"), node("n5", Status.FAIL, bw_fail=True)]
    assert eligible(results) == ["n1", "n2"]
