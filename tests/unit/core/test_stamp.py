"""One stamper: every producer's findings get the same node, subject, hint and fingerprint.

The fingerprints below were computed by the code before the stamper was shared; ticket
de-duplication, report history and report diffs depend on them staying the same.
"""

from __future__ import annotations

from healthcheck.analyses import fleet
from healthcheck.core import catalogue
from healthcheck.core.config.loader import NodeConfig
from healthcheck.core.config.schema import Fabric, FleetSettings
from healthcheck.core.model import Finding, Limit, Metric, NodeResult
from healthcheck.core.status import Status
from healthcheck.orchestrate import engine
from healthcheck.report import build


def _node_config() -> NodeConfig:
    return NodeConfig("gpu017", "test", Fabric(), {("ib", "rate_gbps"): "fab.yaml:12"})


def test_check_findings_keep_their_fingerprints_and_limit_source():
    f = Finding(id="ib.E002", status=Status.FAIL, message="m", component="mlx5_0/1",
                limit=Limit(">=", 400, "ib.rate_gbps"))
    s = engine._stamp(f, _node_config(), "ib.rate")
    assert (s.node, s.check, s.subject) == ("gpu017", "ib.rate", "gpu017:mlx5_0/1")
    assert s.limit.source == "fab.yaml:12"
    assert s.fingerprint == "81e9a8d930b02d37"
    whole = engine._stamp(Finding(id="ib.E002", status=Status.FAIL, message="m"), _node_config(), "ib.rate")
    assert whole.subject == "gpu017" and whole.fingerprint == "a5ea457618b3d640"


def test_unreachable_keeps_its_fingerprint():
    n = engine.unreachable_result("gpu9", "generic", "refused", "agentless")
    f = n.findings[0]
    assert (f.node, f.check, f.subject, f.id) == ("gpu9", "hc.reach", "gpu9", "hc.E006")
    assert f.hint == catalogue.UNREACHABLE.hint and f.suggested_action == "investigate"
    assert f.fingerprint == "a6955c17f767d506"


def test_fleet_findings_keep_their_fingerprints():
    nodes = [NodeResult(node=f"n{i:02d}", fabric="f1", status=Status.PASS,
                        metrics=[Metric("mtu", 2044 if i == 0 else 4092, component="ib0")]) for i in range(5)]
    f = fleet.analyse(nodes, FleetSettings())[0].findings[0]
    assert (f.node, f.check, f.subject) == ("n00", "fleet.drift", "n00:ib0/mtu")
    assert f.hint == fleet.DRIFT.hint and f.suggested_action == "fix-config"
    assert f.fingerprint == "18c53e67ff3032d4"
    flap = fleet.analyse([nodes[1]], FleetSettings(), {"n01": ["FAIL", "PASS", "FAIL", "PASS"]})
    f = flap[0].findings[0]
    assert (f.check, f.subject, f.fingerprint) == ("fleet.flap", "n01", "73d6253a93392d18")


def test_run_findings_keep_their_fingerprints():
    a = build.action_finding(catalogue.GUARDED, "g", scope="gpu[1-4]", value=["gpu1"])
    assert (a.node, a.check, a.subject, a.status) == ("", "hc.actions", "gpu[1-4]", Status.ERROR)
    assert a.hint == catalogue.GUARDED.hint and a.fingerprint == "96802b712c2c674a"
    b = build.run_finding(catalogue.NOTHING_CHECKED, "n", scope="gpu[1-4]", value=3)
    assert (b.check, b.subject, b.suggested_action) == ("hc.run", "gpu[1-4]", "fix-config")
    assert b.fingerprint == "7c017777ea3f0c1e"
