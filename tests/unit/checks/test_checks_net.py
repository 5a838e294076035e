"""net.mtu from real ip link outputs and shipped fabric limits, at the edges."""

from __future__ import annotations

import json

import msgspec
from support import CORPUS, FIXTURES

from healthcheck.checks.net import mtu
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.config.schema import Fabric
from healthcheck.core.model import Finding, Metric
from healthcheck.core.status import Status
from healthcheck.parsers.ip_link import parse_ip_link


def run(links, limits):
    out = list(mtu(ip_links=links, limits=limits))
    return [o for o in out if isinstance(o, Finding)], [o for o in out if isinstance(o, Metric)]


def fabric(data) -> Fabric:
    return msgspec.convert(data, Fabric)


def links(*specs):
    """specs: (name, mtu, flags) -> IpLinks via the JSON parser."""
    return parse_ip_link(json.dumps([{"ifname": n, "mtu": m, "flags": f, "operstate": "UP"} for n, m, f in specs]))


UP = ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"]


def test_ipoib_2044_on_a_4092_fabric_fails_every_interface():
    limits = Config(EMBEDDED_DEFAULT).fabric("h100-ndr400")
    facts = parse_ip_link((CORPUS / "ip-json-link/ipoib-8x-mtu2044-up-filtered.txt").read_text())
    findings, metrics = run(facts, limits)
    # the corpus capture has 8 interfaces: only the MTU is wrong
    assert [f.id for f in findings] == ["net.E001"] * 8
    assert all(f.status is Status.FAIL and f.value == 2044 and f.limit.value == 4092 for f in findings)
    assert findings[0].limit.key == "net.interfaces.ib*.mtu"
    assert len([m for m in metrics if m.name == "mtu"]) == 8


def test_ipoib_seven_of_eight_is_a_count_failure_on_a_2044_fabric():
    limits = Config(EMBEDDED_DEFAULT).fabric("a100-hdr200")  # ib* mtu 2044, count 8
    facts = parse_ip_link((CORPUS / "ip-json-link/ipoib-7of8-missing-interface.txt").read_text())
    findings, _ = run(facts, limits)
    assert [(f.id, f.status) for f in findings] == [("net.E003", Status.FAIL)]
    assert findings[0].value == 7 and findings[0].limit.key == "net.interfaces.ib*.count"


def test_all_eight_at_2044_pass_on_a_2044_fabric():
    limits = Config(EMBEDDED_DEFAULT).fabric("a100-hdr200")
    facts = parse_ip_link((CORPUS / "ip-json-link/ipoib-8x-mtu2044-up-filtered.txt").read_text())
    assert run(facts, limits)[0] == []


def test_missing_required_interface():
    findings, _ = run(links(("eth0", 9000, UP)), fabric({"net": {"interfaces": {"ib*": {"mtu": 4092}}}}))
    assert [f.id for f in findings] == ["net.E002"]


def test_optional_interface_pattern_may_be_absent():
    limits = fabric({"net": {"interfaces": {"ib*": {"mtu": 4092, "required": False}}}})
    assert run(links(("eth0", 9000, UP)), limits)[0] == []


def test_down_and_no_carrier_interfaces():
    limits = fabric({"net": {"interfaces": {"eth*": {"mtu": 9000}}}})
    findings, _ = run(
        links(("eth0", 9000, ["BROADCAST"]), ("eth1", 9000, ["UP", "NO-CARRIER"]), ("eth2", 9000, UP)), limits
    )
    assert [(f.id, f.component) for f in findings] == [("net.E004", "eth0"), ("net.E004", "eth1")]
    assert "administratively down" in findings[0].message and "no carrier" in findings[1].message


def test_mtu_edges_one_below_equal_one_above():
    limits = fabric({"net": {"interfaces": {"eth0": {"mtu": 9000}}}})
    for value, expect in [(8999, ["net.E001"]), (9000, []), (9001, ["net.E001"])]:
        assert [f.id for f in run(links(("eth0", value, UP)), limits)[0]] == expect, value


def test_sanity_bounds_warn_but_skip_ignored_and_down_interfaces():
    limits = fabric({"net": {"mtu_min": 1280, "mtu_max": 65536, "ignore": ["lo", "docker*"]}})
    facts = links(
        ("lo", 65536, UP), ("eth0", 1279, UP), ("eth1", 1280, UP), ("eth2", 65537, UP),
        ("docker0", 500, UP), ("eth3", 100, ["BROADCAST"]),
    )
    findings, _ = run(facts, limits)
    assert [(f.id, f.status, f.component) for f in findings] == [
        ("net.E005", Status.WARN, "eth0"), ("net.E005", Status.WARN, "eth2")
    ]


def test_count_exact_more_interfaces_than_expected_also_fails():
    limits = fabric({"net": {"interfaces": {"ib*": {"count": 2}}}})
    findings, _ = run(links(("ib0", 2044, UP), ("ib1", 2044, UP), ("ib2", 2044, UP)), limits)
    assert [f.id for f in findings] == ["net.E003"] and findings[0].value == 3


def test_netns_capture_no_carrier_eth0():
    limits = fabric({"net": {"interfaces": {"eth0": {"mtu": 9000}, "ib0": {"mtu": 4092}}}})
    findings, _ = run(parse_ip_link((FIXTURES / "ip-link/netns-veth-detail.txt").read_text()), limits)
    assert sorted((f.id, f.component) for f in findings) == [("net.E001", "ib0"), ("net.E004", "eth0")]
