"""Analyses with a scope: one decorated function is a whole analysis, whatever its scope."""

from __future__ import annotations

import pytest

from healthcheck.core import registry
from healthcheck.core.analysis import analyse_fleet, run_analyses
from healthcheck.core.catalogue import EMITTERS, FindingSpec
from healthcheck.core.config.schema import FleetSettings
from healthcheck.core.model import Metric, NodeResult
from healthcheck.core.registry import NotApplicable, Registry
from healthcheck.core.status import Status

# a throw-away ID: not declared in the process-wide catalogue, so nothing leaks
SLOW_PAIR = FindingSpec("pairtest.E001", "a pair of nodes moves data slower than the fabric's floor",
                        "Reseat or replace the cable between the two nodes.", action="reseat-cable")


def test_a_pair_analysis_is_one_decorated_function():
    reg = Registry()

    @reg.analysis("pairtest.bw", scope="pairs", tier="quick", findings=(SLOW_PAIR,))
    def bandwidth(pairs, floor):
        """Every pair of nodes moves data at least at the fabric's floor."""
        for (a, b), gbps in pairs.items():
            if gbps < floor:
                yield (a, b), SLOW_PAIR.fail(f"{a} <-> {b} at {gbps} Gb/s", value=gbps)

    pairs = {("n1", "n2"): 390.0, ("n3", "n4"): 120.0}
    with registry.using(reg):
        assert [a.name for a in registry.current().select_analyses("pairs", "deep")] == ["pairtest.bw"]
        out = run_analyses("pairs", pairs, 300.0, judged=["n1", "n2", "n3", "n4"], tier="standard")
    [(who, f)] = out.findings
    assert who == ("n3", "n4")
    assert (f.id, f.status, f.check, f.node, f.members) == ("pairtest.E001", Status.FAIL, "pairtest.bw", "",
                                                           ("n3", "n4"))
    assert f.subject == "n3-n4" and f.fingerprint and f.hint == ""  # not in the catalogue: no hint
    [run] = out.runs
    assert (run.name, run.scope, run.status, run.nodes) == ("pairtest.bw", "pairs", Status.FAIL, "n[1-4]")
    assert "pairtest.E001" not in EMITTERS  # a test's registry tells the catalogue nothing
    assert "pairtest.bw" not in registry.DEFAULT.all_analyses()


def test_an_analysis_that_does_not_apply_or_breaks_judges_no_node():
    reg = Registry()

    @reg.analysis("pairtest.none", scope="pairs", tier="quick", findings=(SLOW_PAIR,))
    def none(pairs, limits):
        raise NotApplicable("no pairs were measured")

    @reg.analysis("pairtest.crash", scope="pairs", tier="quick", findings=())
    def crash(pairs, limits):
        yield ("n1", "n2"), SLOW_PAIR.fail("undeclared")

    with registry.using(reg):
        out = run_analyses("pairs", {}, None, judged=["n1", "n2"])
    assert out.findings == []
    assert [(r.name, r.status, r.nodes) for r in out.runs] == [
        ("pairtest.none", Status.SKIP, ""), ("pairtest.crash", Status.ERROR, "")]
    assert "undeclared" in out.runs[1].reason


def test_scopes_and_tiers_are_checked_when_registering():
    reg = Registry()
    for scope in ("rack", "job"):  # "job" was declared and never used: a job's diagnosis is no analysis
        with pytest.raises(ValueError, match="scope"):
            reg.analysis("x.y", scope=scope, tier="quick", findings=())
    with pytest.raises(ValueError, match="tier"):
        reg.analysis("x.y", scope="pairs", tier="nightly", findings=())


def test_fleet_analyses_are_registered_with_their_scope_and_emitters():
    analyses = registry.DEFAULT.all_analyses()
    assert {n: a.scope for n, a in analyses.items() if n.startswith("fleet.")} == {
        "fleet.drift": "fleet", "fleet.outlier": "fleet", "fleet.flap": "fleet"}
    assert EMITTERS["fleet.E001"] == {"fleet.drift"} and EMITTERS["fleet.E003"] == {"fleet.flap"}


def test_fleet_runs_record_which_nodes_each_analysis_judged():
    nodes = [NodeResult(node=f"n{i}", fabric="f", status=Status.PASS,
                        metrics=[Metric("mtu", 2044 if i == 0 else 4092, component="ib0")]) for i in range(4)]
    nodes.append(NodeResult(node="n9", fabric="f", status=Status.ERROR, error="unreachable"))
    out, runs = analyse_fleet(nodes, FleetSettings())
    by_name = {r.name: r for r in runs}
    assert (by_name["fleet.drift"].status, by_name["fleet.drift"].nodes) == (Status.WARN, "n[0-3]")
    assert by_name["fleet.outlier"].status is Status.PASS
    assert by_name["fleet.flap"].status is Status.SKIP and by_name["fleet.flap"].reason == "no run history"
    assert [n.status for n in out] == [Status.WARN, Status.PASS, Status.PASS, Status.PASS, Status.ERROR]


def test_a_history_without_earlier_runs_of_the_nodes_is_not_said_to_be_missing():
    """A history was read (hc node after only hc health runs, say): flaps say what was missing."""
    nodes = [NodeResult(node=f"n{i}", fabric="f", status=Status.PASS) for i in range(2)]
    run = {r.name: r for r in analyse_fleet(nodes, FleetSettings(), {})[1]}["fleet.flap"]
    assert run.status is Status.SKIP
    assert run.reason == "no earlier run of these nodes in the history (runs of the same command only)"
