"""ib.port_state and ib.counters from real ibstat/perfquery/sysfs outputs and shipped fabrics."""

from __future__ import annotations

import msgspec
import pytest
from support import CORPUS, no_hardware_outputs

from healthcheck.checks.ib import counters, port_state
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.config.schema import Fabric
from healthcheck.core.model import Finding
from healthcheck.core.registry import NotApplicable
from healthcheck.parsers.ib_common import IbCounters, IbPortCounters, IbPorts
from healthcheck.parsers.ibstat import parse_ibstat
from healthcheck.parsers.perfquery import parse_perfquery

CFG = Config(EMBEDDED_DEFAULT)


def findings(gen):
    return [o for o in gen if isinstance(o, Finding)]


def ibstat(name):
    return parse_ibstat((CORPUS / "ibstat" / name).read_text())


def ids(fs):
    return sorted((f.id, f.status.value, f.component) for f in fs)


def test_h100_ndr_with_disabled_frontend_ports_is_healthy():
    # 8 ConnectX-7 IB ports Active at 400; the Down/Disabled ports are MT4125 Ethernet frontends
    assert findings(port_state(ib_ports=ibstat("h100-ib-some-down-disabled.txt"), limits=CFG.fabric("h100-ndr400"))) == []


def test_generic_fabric_ignores_disabled_ports_but_not_polling_ones():
    assert findings(port_state(ib_ports=ibstat("h100-ib-some-down-disabled.txt"), limits=CFG.fabric("generic"))) == []
    fs = findings(port_state(ib_ports=ibstat("h100-roce-down-polling.txt"), limits=CFG.fabric("generic")))
    assert ids(fs) == [("ib.E002", "FAIL", "mlx5_11/1")]


def test_roce_fabric_fails_down_ports_including_disabled():
    fs = findings(port_state(ib_ports=ibstat("h100-roce-down-polling.txt"), limits=CFG.fabric("h100-roce400")))
    assert ids(fs) == [("ib.E002", "FAIL", "mlx5_11/1"), ("ib.E002", "FAIL", "mlx5_5/1")]
    assert "Down/Polling" in next(f.message for f in fs if f.component == "mlx5_11/1")


def test_roce_all_active_passes_on_roce_fabric_and_fails_count_on_ib_fabric():
    facts = ibstat("h100-roce-12ca-all-active.txt")
    assert findings(port_state(ib_ports=facts, limits=CFG.fabric("h100-roce400"))) == []
    fs = findings(port_state(ib_ports=facts, limits=CFG.fabric("h100-ndr400")))
    assert ids(fs) == [("ib.E001", "FAIL", "")]
    assert fs[0].value == 0 and "not counted: mlx5_0/1 (MT4129, Ethernet)" in fs[0].message


def test_a100_hdr200_with_ethernet_frontend_passes():
    assert findings(port_state(ib_ports=ibstat("a100-ib-hdr200-all-active.txt"), limits=CFG.fabric("a100-hdr200"))) == []


def test_a100_hdr_on_an_ndr_fabric_fails_count_not_rate():
    # MT4126 is not a ConnectX-7: none of these count as NDR compute HCAs
    fs = findings(port_state(ib_ports=ibstat("a100-ib-hdr200-all-active.txt"), limits=CFG.fabric("h100-ndr400")))
    assert [f.id for f in fs] == ["ib.E001"]


def test_empty_ibstat_is_never_healthy_where_hcas_are_expected():
    stdout, _, _ = no_hardware_outputs()["ibstat"]
    fs = findings(port_state(ib_ports=parse_ibstat(stdout), limits=CFG.fabric("h100-ndr400")))
    assert ids(fs) == [("ib.E001", "FAIL", "")] and fs[0].value == 0 and fs[0].limit.value == 8


def test_no_hca_on_generic_fabric_is_not_applicable():
    with pytest.raises(NotApplicable):
        list(port_state(ib_ports=IbPorts(ports=[]), limits=CFG.fabric("generic")))


def test_rate_edges():
    base = parse_ibstat("CA 'mlx5_0'\n\tCA type: MT4129\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: RATE\n\t\tLink layer: InfiniBand\n".replace("RATE", "399"))
    limits = msgspec.convert({"ib": {"rate_gbps": 400}}, Fabric)
    fs = findings(port_state(ib_ports=base, limits=limits))
    assert ids(fs) == [("ib.E004", "FAIL", "mlx5_0/1")] and fs[0].limit.key == "ib.rate_gbps"
    for rate in ("400", "800"):
        ok = parse_ibstat(f"CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: {rate}\n")
        assert findings(port_state(ib_ports=ok, limits=limits)) == []


def test_active_but_not_linkup():
    facts = parse_ibstat("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkErrorRecovery\n\t\tRate: 400\n")
    assert ids(findings(port_state(ib_ports=facts, limits=CFG.fabric("generic")))) == [("ib.E003", "FAIL", "mlx5_0/1")]


def test_ibpanic_partial_output_judges_the_ports_listed():
    # ibstat died on mlx5_8 (exit 255): the provider turns the exit into ERROR; the parser
    # keeps the 8 listed ports, which the check judges on their own merits, and the HCA it
    # could not read is an ERROR, never a PASS and never a count FAIL it could have made up
    facts = ibstat("a100-ibpanic-exit255.txt")
    assert facts.errors
    fs = findings(port_state(ib_ports=facts, limits=CFG.fabric("a100-hdr200")))
    assert ids(fs) == [("hc.E003", "ERROR", "")] and "mlx5_8" in fs[0].message
    fs = findings(port_state(ib_ports=facts, limits=msgspec.convert({"ib": {"hca_count": 9}}, Fabric)))
    assert ids(fs) == [("hc.E003", "ERROR", "")]
    fs = findings(port_state(ib_ports=facts, limits=msgspec.convert({"ib": {"hca_count": 7}}, Fabric)))
    assert ids(fs) == [("hc.E003", "ERROR", ""), ("ib.E001", "FAIL", "")]  # more than expected is evidence


def counter_facts(**values):
    return IbCounters(ports=[IbPortCounters(ca="mlx5_0", port=1, counters=values)])


def test_counter_edges_warn_and_fail():
    limits = msgspec.convert(
        {"ib": {"counters_warn": {"symbol_error": 10}, "counters_fail": {"symbol_error": 100}}}, Fabric
    )
    for value, expect in [(10, []), (11, [("ib.E005", "WARN", "mlx5_0/1:symbol_error")]),
                          (100, [("ib.E005", "WARN", "mlx5_0/1:symbol_error")]),
                          (101, [("ib.E005", "FAIL", "mlx5_0/1:symbol_error")])]:
        fs = findings(counters(ib_counters=counter_facts(symbol_error=value), limits=limits))
        assert ids(fs) == expect, value
    fs = findings(counters(ib_counters=counter_facts(symbol_error=101), limits=limits))
    assert fs[0].limit.key == "ib.counters_fail.symbol_error" and fs[0].limit.value == 100


def test_perfquery_switch_port_with_link_downed_and_discards_on_generic():
    facts = parse_perfquery((CORPUS / "perfquery/switch-port-xmitdiscards-linkdowned.txt").read_text(), ca="mlx5_0")
    fs = findings(counters(ib_counters=facts, limits=CFG.fabric("generic")))
    # link_downed 1 <= warn 2; 20046 xmit discards > warn 1000 (no fail limit: congestion, not hardware)
    assert ids(fs) == [("ib.E005", "WARN", "mlx5_0/1:port_xmit_discards")]


def test_clean_counters_pass():
    facts = parse_perfquery((CORPUS / "perfquery/hca-extended-capmask-5a00.txt").read_text(), ca="mlx5_0")
    assert findings(counters(ib_counters=facts, limits=CFG.fabric("h100-ndr400"))) == []


def test_counters_of_non_compute_hcas_are_ignored():
    limits = msgspec.convert({"ib": {"hcas": ["mlx5_[0-7]"], "counters_fail": {"link_downed": 0}}}, Fabric)
    facts = IbCounters(ports=[IbPortCounters(ca="mlx5_9", port=1, counters={"link_downed": 5})])
    assert findings(counters(ib_counters=facts, limits=limits)) == []


def test_no_ports_is_not_applicable():
    with pytest.raises(NotApplicable):
        list(counters(ib_counters=IbCounters(ports=[]), limits=CFG.fabric("generic")))


def test_cas_listed_without_their_ports_are_an_error_never_no_hca_nor_a_count_fail():
    """A capture naming CAs with none of their ports (field corpus: `ibstat | grep mlx5`)."""
    from support import FIXTURES

    from healthcheck.core import catalogue

    facts = parse_ibstat((FIXTURES / "field/repos/ibstat/grep-mlx5-ca-lines-only-with-prompt.txt").read_text())
    for fabric in ("generic", "h100-ndr400"):
        fs = findings(port_state(ib_ports=facts, limits=CFG.fabric(fabric)))
        assert [f.status.value for f in fs] == ["ERROR"], ids(fs)  # no FAIL: the count was not seen
        assert fs[0].id == catalogue.TOOL_FAILED.id and "mlx5_0" in fs[0].message


def test_counters_of_a_frontend_port_the_fabric_does_not_select_are_ignored():
    # the H100 node's MT4125 Ethernet frontend ports are not compute HCAs (ib.hca_types,
    # ib.link_layer): their counters do not drain a GPU node, as their state does not;
    # where ibstat could not be read, the name globs alone select (as before)
    ports = ibstat("h100-ib-some-down-disabled.txt")
    clean = parse_perfquery((CORPUS / "perfquery/hca-extended-capmask-5a00.txt").read_text(), ca="mlx5_0").ports[0]
    facts = IbCounters(ports=[IbPortCounters(ca=ca, port=1, counters={**clean.counters, "link_downed": 12})
                              for ca in ("mlx5_0", "mlx5_7")])
    fs = findings(counters(ib_counters=facts, ib_ports=ports, limits=CFG.fabric("h100-ndr400")))
    assert ids(fs) == [("ib.E005", "FAIL", "mlx5_0/1:link_downed")]
    fs = findings(counters(ib_counters=facts, ib_ports=None, limits=CFG.fabric("h100-ndr400")))
    assert ids(fs) == [("ib.E005", "FAIL", "mlx5_0/1:link_downed"), ("ib.E005", "FAIL", "mlx5_7/1:link_downed")]
