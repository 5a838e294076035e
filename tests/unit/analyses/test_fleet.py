"""Fleet analysis: drift within a fabric, peer-relative outliers, flapping."""

from __future__ import annotations

import pytest

from healthcheck.analyses import fleet
from healthcheck.core.catalogue import CATALOGUE
from healthcheck.core.config.schema import FleetSettings
from healthcheck.core.model import Finding, Metric, NodeResult, fingerprint
from healthcheck.core.status import Status

SETTINGS = FleetSettings()


def node(name, *metrics, fabric="f1", status=Status.PASS, error=None, findings=()):
    return NodeResult(node=name, fabric=fabric, status=status, error=error, findings=list(findings),
                      metrics=[Metric(n, v, component=c) for n, c, v in metrics])


def flagged(nodes, fid=None):
    """node -> [(id, component)] of fleet findings."""
    out = {}
    for n in nodes:
        for f in n.findings:
            if f.id.startswith("fleet.") and (fid is None or f.id == fid):
                out.setdefault(n.node, []).append((f.id, f.component))
    return out


def test_ids_are_catalogued_with_hint_and_action():
    for fid in ("fleet.E001", "fleet.E002", "fleet.E003"):
        spec = CATALOGUE[fid]
        assert spec.hint and spec.title and spec.action


# ------------------------------------------------------------------------- drift


def test_drift_clear_majority_flags_exactly_the_minority():
    nodes = [node(f"n{i:02d}", ("mtu", "ib0", 2044 if i < 3 else 4092)) for i in range(12)]
    out = fleet.analyse(nodes, SETTINGS)
    assert flagged(out) == {f"n{i:02d}": [("fleet.E001", "ib0/mtu")] for i in range(3)}
    f = out[0].findings[0]
    assert f.status is Status.WARN and f.value == 2044
    assert f.limit.op == "==" and f.limit.value == 4092 and f.limit.key == "fleet.drift_metrics"
    assert f.node == "n00" and f.check == "fleet.drift" and f.subject == "n00:ib0/mtu"
    assert f.hint == CATALOGUE["fleet.E001"].hint and f.suggested_action == "fix-config"
    assert f.fingerprint == fingerprint("n00", "fleet.drift", "n00:ib0/mtu", "fleet.E001")
    assert "2044" in f.message and "4092" in f.message
    assert [n.status for n in out] == [Status.WARN] * 3 + [Status.PASS] * 9


def test_drift_is_per_component():
    # ib0 agrees everywhere; ib1 differs on one node
    nodes = [node(f"n{i}", ("mtu", "ib0", 4092), ("mtu", "ib1", 2044 if i == 4 else 4092)) for i in range(6)]
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {"n4": [("fleet.E001", "ib1/mtu")]}


def test_drift_node_wide_metric_component_is_the_name():
    nodes = [node(f"n{i}", ("driver_version", "", "535.1" if i == 0 else "550.54")) for i in range(5)]
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {"n0": [("fleet.E001", "driver_version")]}


def test_drift_tie_flags_every_node_without_a_limit():
    nodes = [node(f"n{i}", ("fw_ver", "mlx5_0/1", "28.36" if i % 2 else "28.39")) for i in range(6)]
    out = fleet.analyse(nodes, SETTINGS)
    assert sorted(flagged(out)) == [f"n{i}" for i in range(6)]
    assert all(n.findings[0].limit is None for n in out)


def test_drift_plurality_without_half_still_has_a_norm():
    values = ["a"] * 4 + ["b"] * 3 + ["c"] * 2
    nodes = [node(f"n{i}", ("fw_ver", "mlx5_0/1", v)) for i, v in enumerate(values)]
    out = fleet.analyse(nodes, SETTINGS)
    assert sorted(flagged(out)) == [f"n{i}" for i in range(4, 9)]
    assert {n.findings[0].limit.value for n in out if n.findings} == {"a"}


def test_drift_metric_missing_on_some_nodes():
    nodes = [node(f"n{i}", ("mtu", "ib0", 2044 if i == 1 else 4092)) for i in range(4)]
    nodes += [node("n8"), node("n9", ("mtu", "eth0", 1500))]  # no ib0; eth0 on one node only
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {"n1": [("fleet.E001", "ib0/mtu")]}


def test_drift_needs_two_nodes_and_ignores_unlisted_metrics():
    assert flagged(fleet.analyse([node("n1", ("mtu", "ib0", 2044))], SETTINGS)) == {}
    nodes = [node(f"n{i}", ("pcie_gen", "GPU0", 4 if i == 0 else 5)) for i in range(5)]
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {}


def test_two_fabrics_are_never_mixed():
    nodes = [node(f"a{i}", ("mtu", "ib0", 4092), fabric="ndr") for i in range(5)]
    nodes += [node(f"b{i}", ("mtu", "ib0", 2044), fabric="hdr") for i in range(3)]
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {}
    nodes.append(node("b9", ("mtu", "ib0", 4092), fabric="hdr"))
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {"b9": [("fleet.E001", "ib0/mtu")]}


def test_unreachable_nodes_take_no_part():
    nodes = [node(f"n{i}", ("mtu", "ib0", 4092)) for i in range(2)]
    nodes += [node(f"x{i}", ("mtu", "ib0", 2044), status=Status.ERROR, error="ssh: timed out") for i in range(3)]
    out = fleet.analyse(nodes, SETTINGS)
    assert flagged(out) == {}
    assert out == nodes


def test_status_raised_only_from_pass():
    fail = Finding(id="ib.E002", status=Status.FAIL, message="down", node="n0")
    nodes = [node("n0", ("mtu", "ib0", 2044), status=Status.FAIL, findings=[fail])]
    nodes += [node(f"n{i}", ("mtu", "ib0", 4092)) for i in range(1, 4)]
    out = fleet.analyse(nodes, SETTINGS)
    assert out[0].status is Status.FAIL and [f.id for f in out[0].findings] == ["ib.E002", "fleet.E001"]
    assert out[1:] == nodes[1:]


# ---------------------------------------------------------------------- outliers

def test_outlier_z_edge():
    base = [50, 52, 54, 56, 58, 60, 60, 62, 64, 66, 68, 70]  # median 60, MAD 6
    def run(x):
        nodes = [node(f"n{i}", ("temperature_c", "GPU3", v)) for i, v in enumerate(base)]
        nodes.append(node("odd", ("temperature_c", "GPU3", x)))
        return flagged(fleet.analyse(nodes, SETTINGS), "fleet.E002")
    # 13 values: median 60; MAD of |x-60| with the odd one large: sorted devs 0,0,2,2,4,4,6,6,8,8,10,10,big -> 6
    scale = 6 / 0.6745
    assert run(60 + 3.49 * scale) == {}
    assert run(60 + 3.51 * scale) == {"odd": [("fleet.E002", "GPU3/temperature_c")]}
    assert run(60 - 3.51 * scale) == {"odd": [("fleet.E002", "GPU3/temperature_c")]}


def test_outlier_finding_fields():
    base = [50, 52, 54, 56, 58, 60, 60, 62, 64, 66, 68, 70]
    nodes = [node(f"n{i}", ("temperature_c", "GPU3", v)) for i, v in enumerate(base)] + [
        node("odd", ("temperature_c", "GPU3", 95))]
    out = fleet.analyse(nodes, SETTINGS)
    (f,) = out[-1].findings
    assert f.id == "fleet.E002" and f.check == "fleet.outlier" and f.value == 95 and f.status is Status.WARN
    assert f.limit.op == "<=" and f.limit.key == "fleet.outlier_z" and f.limit.value < 95
    assert out[-1].status is Status.WARN


def test_outlier_mad_zero_falls_back_to_mean_absolute_deviation():
    # 9 of 10 ports have no symbol errors: MAD 0, mean AD 0.5 -> z = 5 / (1.253314 * 0.5) = 8
    nodes = [node(f"n{i}", ("symbol_error", "mlx5_0/1", 5 if i == 7 else 0)) for i in range(10)]
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {"n7": [("fleet.E002", "mlx5_0/1/symbol_error")]}
    assert fleet.robust_scale([0] * 9 + [5]) == (0, pytest.approx(1.253314 * 0.5))


def test_outlier_all_equal_flags_nothing():
    nodes = [node(f"n{i}", ("rate_gbps", "mlx5_0/1", 400.0)) for i in range(20)]
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {}


def test_outlier_needs_min_nodes():
    nodes = [node(f"n{i}", ("symbol_error", "mlx5_0/1", 500 if i == 0 else 0)) for i in range(7)]
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {}  # 7 < outlier_min_nodes 8
    nodes.append(node("n7", ("symbol_error", "mlx5_0/1", 0)))
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {"n0": [("fleet.E002", "mlx5_0/1/symbol_error")]}


def test_outlier_per_component_not_pooled():
    # every node has a 100 Gb/s frontend port next to 400 Gb/s compute ports: not an outlier
    nodes = [node(f"n{i}", ("rate_gbps", "mlx5_0/1", 400.0), ("rate_gbps", "mlx5_1/1", 400.0),
                  ("rate_gbps", "mlx5_bond/1", 100.0)) for i in range(10)]
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {}


def test_outlier_ignores_non_numbers():
    nodes = [node(f"n{i}", ("temperature_c", "GPU0", v)) for i, v in
             enumerate([60, 61, 59, 60, 60, 61, 59, 60, True, "hot", float("nan"), None])]
    assert flagged(fleet.analyse(nodes, SETTINGS)) == {}


# ---------------------------------------------------------------------- flapping


@pytest.mark.parametrize("past, now, flaps", [
    (["FAIL", "PASS"], Status.FAIL, True),
    (["FAIL", "FAIL"], Status.PASS, False),
    (["PASS", "PASS", "PASS", "PASS"], Status.PASS, False),
    (["PASS", "WARN", "ERROR", "PASS"], Status.WARN, False),  # not-FAIL changes are not flaps
    (["FAIL", "PASS", "FAIL", "PASS", "PASS", "PASS"], Status.PASS, False),  # only the last 5 runs count: 1 change
    (["FAIL", "PASS", "FAIL", "PASS"], Status.FAIL, True),
    ([], Status.FAIL, False),
])
def test_flapping(past, now, flaps):
    nodes = [node("n1", status=now)]
    out = fleet.analyse(nodes, SETTINGS, {"n1": past})
    assert bool(flagged(out, "fleet.E003")) is flaps
    if flaps:
        (f,) = [f for f in out[0].findings if f.id == "fleet.E003"]
        assert f.check == "fleet.flap" and f.component == "" and f.subject == "n1" and f.limit.value == 2
        assert out[0].status is (Status.FAIL if now is Status.FAIL else Status.WARN)


def test_flapping_transitions_setting():
    settings = FleetSettings(flap_transitions=3)
    assert fleet.analyse([node("n1", status=Status.FAIL)], settings, {"n1": ["FAIL", "PASS"]})[0].findings == []
    assert fleet.transitions(["FAIL", "PASS", "FAIL", "PASS"]) == 3


def test_flapping_skips_unreachable_and_unknown_nodes():
    nodes = [node("n1", status=Status.ERROR, error="unreachable"), node("n2")]
    assert flagged(fleet.analyse(nodes, SETTINGS, {"n1": ["FAIL", "PASS", "FAIL", "PASS"]})) == {}


# ------------------------------------------------------------------------ scale


def test_ten_thousand_nodes_cost_linear_time():
    """10,000 nodes are analysed, with the fleet findings, in about ten times what 1,000 take
    (no absolute time: the machine is shared; bin/bench prints the seconds against its target)."""
    from support import assert_linear
    from synthetic import synthetic_node

    nodes = [synthetic_node(i) for i in range(10_000)]
    out = fleet.analyse(nodes, SETTINGS)
    assert len(out) == 10_000
    ids = {f.id for n in out for f in n.findings}
    assert {"fleet.E001", "fleet.E002"} <= ids
    assert_linear(lambda ns: fleet.analyse(ns, SETTINGS), nodes[:1_000], nodes, what="fleet.analyse")
