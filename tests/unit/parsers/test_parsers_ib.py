"""ibstat, ibstatus and perfquery parsers on every corpus output, no-hardware outputs and garbage."""

from __future__ import annotations

import pytest
from support import CORPUS, FIXTURES, corpus_files, no_hardware_outputs

from healthcheck.core.errors import ParseError
from healthcheck.parsers.ib_common import phys_state, port_state, rate_gbps
from healthcheck.parsers.ibstat import parse_ibstat
from healthcheck.parsers.ibstatus import parse_ibstatus
from healthcheck.parsers.perfquery import parse_perfquery

NO_HW = no_hardware_outputs()


def ports_by_name(facts):
    return {p.name: p for p in facts.ports}


@pytest.mark.parametrize("path", corpus_files("ibstat"), ids=lambda p: p.name)
def test_every_ibstat_corpus_file_parses(path):
    facts = parse_ibstat(path.read_text())
    assert facts.ports
    for p in facts.ports:
        assert p.state in {"Active", "Down", "Init", "Armed"}
        assert p.phys_state in {"LinkUp", "Disabled", "Polling"}
        assert p.link_layer in {"InfiniBand", "Ethernet"}
        assert p.rate_gbps and p.ca_type and p.fw_ver


def test_ibstat_a100_hdr200():
    facts = parse_ibstat((CORPUS / "ibstat/a100-ib-hdr200-all-active.txt").read_text())
    ports = ports_by_name(facts)
    assert len(ports) == 9 and facts.cas == [f"mlx5_{i}" for i in range(9)]
    assert ports["mlx5_0/1"].link_layer == "Ethernet"
    assert {p.rate_gbps for p in facts.ports} == {200.0}
    assert all(p.state == "Active" and p.phys_state == "LinkUp" for p in facts.ports)


def test_ibstat_h100_some_down_disabled():
    ports = ports_by_name(parse_ibstat((CORPUS / "ibstat/h100-ib-some-down-disabled.txt").read_text()))
    down = {n for n, p in ports.items() if p.state == "Down"}
    assert down == {"mlx5_2/1", "mlx5_7/1", "mlx5_8/1"}
    assert all(ports[n].phys_state == "Disabled" and ports[n].rate_gbps == 40 for n in down)
    assert ports["mlx5_0/1"].ca_type == "MT4129" and ports["mlx5_0/1"].rate_gbps == 400


def test_ibstat_roce_down_polling():
    ports = ports_by_name(parse_ibstat((CORPUS / "ibstat/h100-roce-down-polling.txt").read_text()))
    assert (ports["mlx5_11/1"].state, ports["mlx5_11/1"].phys_state) == ("Down", "Polling")
    assert (ports["mlx5_5/1"].state, ports["mlx5_5/1"].phys_state) == ("Down", "Disabled")
    assert all(p.link_layer == "Ethernet" for p in ports.values())


def test_ibstat_ibpanic_keeps_ports_and_records_error():
    facts = parse_ibstat((CORPUS / "ibstat/a100-ibpanic-exit255.txt").read_text())
    assert len(facts.ports) == 8
    assert len(facts.errors) == 1 and "mlx5_8" in facts.errors[0]


def test_ibstat_empty_output_means_no_hca():
    stdout, _, code = NO_HW["ibstat"]
    assert (stdout, code) == ("", 0)
    facts = parse_ibstat(stdout)
    assert facts.ports == [] and facts.cas == []


def test_ibstat_device_not_found_is_an_error_record_not_a_crash():
    _, stderr, code = NO_HW["ibstat mlx5_0"]
    assert code == 255
    facts = parse_ibstat(stderr)
    assert facts.ports == [] and "can't be found" in facts.errors[0]


def test_ibstat_fake_sysfs_rendering_from_rig():
    # the real ibstat over the rig's fake sysfs (shared/rig/README.md)
    text = """CA 'mlx5_1'
\tCA type: MT4129
\tNumber of ports: 1
\tFirmware version: 28.39.1002
\tHardware version: 0
\tNode GUID: 0xb8cef60300a1b2c4
\tSystem image GUID: 0xb8cef60300a1b2c4
\tPort 1:
\t\tState: Down
\t\tPhysical state: Disabled
\t\tRate: 10
\t\tBase lid: 18
\t\tLMC: 0
\t\tSM lid: 1
\t\tCapability mask: 0xa751e848
\t\tPort GUID: 0xb8cef60300a1b2c4
\t\tLink layer: InfiniBand
"""
    (port,) = parse_ibstat(text).ports
    assert (port.ca, port.port, port.state, port.phys_state, port.rate_gbps, port.lid) == (
        "mlx5_1", 1, "Down", "Disabled", 10.0, 18)


def test_ibstat_discovers_ports_beyond_port_one():
    text = "CA 'mlx5_0'\n\tCA type: MT4123\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 200\n\t\tLink layer: InfiniBand\n\tPort 2:\n\t\tState: Down\n\t\tPhysical state: Polling\n\t\tRate: 10\n\t\tLink layer: InfiniBand\n"
    ports = ports_by_name(parse_ibstat(text))
    assert set(ports) == {"mlx5_0/1", "mlx5_0/2"} and ports["mlx5_0/2"].phys_state == "Polling"


def test_ibstatus_corpus():
    facts = parse_ibstatus((CORPUS / "ibstatus/a100-hdr200-all-active.txt").read_text())
    ports = ports_by_name(facts)
    assert len(ports) == 9
    assert ports["mlx5_0/1"].state == "Active" and ports["mlx5_0/1"].rate_gbps == 200
    assert ports["mlx5_0/1"].lid == 0x33BF
    assert ports["mlx5_8/1"].link_layer == "Ethernet" and ports["mlx5_8/1"].rate_gbps == 40


def test_ibstatus_no_devices_means_no_hca():
    stdout, _, code = NO_HW["ibstatus"]
    assert code == 255
    assert parse_ibstatus(stdout).ports == []


def test_ibstat_and_ibstatus_agree_on_states():
    a = {p.name: (p.state, p.phys_state) for p in parse_ibstatus((CORPUS / "ibstatus/a100-hdr200-all-active.txt").read_text()).ports}
    assert set(a.values()) == {("Active", "LinkUp")}


def test_perfquery_extended_hca():
    facts = parse_perfquery((CORPUS / "perfquery/hca-extended-capmask-5a00.txt").read_text(), ca="mlx5_0")
    (port,) = facts.ports
    assert (port.ca, port.port, port.lid) == ("mlx5_0", 1, 133)
    assert port.counters["symbol_error"] == 0 and port.counters["port_xmit_data"] == 37108676853855
    assert "PortSelect" not in port.counters and "CounterSelect2" not in port.counters


def test_perfquery_switch_port_with_errors():
    (port,) = parse_perfquery((CORPUS / "perfquery/switch-port-xmitdiscards-linkdowned.txt").read_text()).ports
    assert port.counters["link_downed"] == 1
    assert port.counters["port_xmit_discards"] == 20046
    assert port.counters["port_rcv_switch_relay_errors"] == 7
    assert port.name.startswith("lid")


def test_perfquery_two_switch_ports():
    facts = parse_perfquery((CORPUS / "perfquery/switch-2port-extended-clean.txt").read_text())
    assert [p.port for p in facts.ports] == [1, 2]
    assert facts.ports[0].counters["port_xmit_wait"] == 22730501


def test_perfquery_rcv_error_details():
    (port,) = parse_perfquery((CORPUS / "perfquery/rcv-error-details.txt").read_text()).ports
    assert port.counters["PortLocalPhysicalErrors"] == 0 and len(port.counters) == 6


@pytest.mark.parametrize("cmd", ["perfquery", "perfquery -x"])
def test_perfquery_without_hardware_is_a_parse_error(cmd):
    stdout, stderr, code = NO_HW[cmd]
    assert code == 255
    with pytest.raises(ParseError, match="Failed to open"):
        parse_perfquery(stdout + stderr)


@pytest.mark.parametrize("parser", [parse_ibstat, parse_ibstatus, parse_perfquery])
@pytest.mark.parametrize("text", ["garbage\nmore garbage", "\x00\xff\x10binary", "CA 'x", "{}"])
def test_garbage_is_a_parse_error(parser, text):
    with pytest.raises(ParseError):
        parser(text)


@pytest.mark.parametrize("path", corpus_files("ibstat") + corpus_files("perfquery"), ids=lambda p: p.name)
def test_truncated_outputs_never_crash(path):
    text = path.read_text()
    parser = parse_perfquery if "perfquery" in str(path) else parse_ibstat
    for cut in range(0, len(text), max(1, len(text) // 25)):
        try:
            parser(text[:cut])
        except ParseError:
            pass


@pytest.mark.parametrize(
    "raw, state", [("4: ACTIVE", "Active"), ("1: DOWN", "Down"), ("Initializing", "Init"), ("ARMED", "Armed"), ("9: ODD", "ODD")]
)
def test_port_state_decoding(raw, state):
    assert port_state(raw) == state


@pytest.mark.parametrize("raw, phys", [("5: LinkUp", "LinkUp"), ("2: Polling", "Polling"), ("Disabled", "Disabled")])
def test_phys_state_decoding(raw, phys):
    assert phys_state(raw) == phys


@pytest.mark.parametrize("raw, rate", [("400 Gb/sec (4X NDR)", 400.0), ("200", 200.0), ("2.5 Gb/sec (1X SDR)", 2.5), ("", None), ("N/A", None)])
def test_rate_decoding(raw, rate):
    assert rate_gbps(raw) == rate


# ---- ibstat as the field pastes it (issue 20; tuning files of the field corpus)

FIELD_IBSTAT = FIXTURES / "field"


def test_ca_lines_without_their_ports_are_cas_seen_not_no_hca():
    """`ibstat | grep mlx5` keeps only the CA lines: the CAs were dropped, leaving the
    'no HCA' an empty port list means."""
    facts = parse_ibstat((FIELD_IBSTAT / "repos/ibstat/grep-mlx5-ca-lines-only-with-prompt.txt").read_text())
    assert facts.ports == []
    assert [c.ca for c in facts.cas_without_ports] == [f"mlx5_{i}" for i in range(8)]


def test_a_port_block_the_paste_cuts_is_marked_cut_not_dropped_or_completed():
    """The cx7/cx6 paste ends after mlx5_10's `Physical state`: the port is kept with
    what was printed, marked cut, its rate and link layer unknown."""
    facts = parse_ibstat((FIELD_IBSTAT / "issues/ibstat/cx7-roce-200-and-cx6-disabled-cut.txt").read_text())
    last = facts.ports[-1]
    assert (last.ca, last.port, last.state, last.phys_state, last.cut) == ("mlx5_10", 1, "Down", "Disabled", True)
    assert last.rate_gbps is None and last.link_layer is None
    assert not any(p.cut for p in facts.ports[:-1])
    # a whole block is no cut, and a CA whose ports are shown is not listed without them
    whole = parse_ibstat((CORPUS / "ibstat/h100-ib-some-down-disabled.txt").read_text())
    assert not any(p.cut for p in whole.ports) and whole.cas_without_ports == []


def _headless(text: str) -> str:
    """A real perfquery output with its '# ... counters: Lid N port N' lines cut (as a
    paste that starts at the counters, after a prompt): a transformation, not a capture."""
    return "$ perfquery -x\n" + "".join(line for line in text.splitlines(keepends=True)
                                        if "counters:" not in line.lower())


@pytest.mark.parametrize("path", [FIXTURES / "field/issues/perfquery/x-extended-lid10-capmask2-rhel75.txt",
                                  CORPUS / "perfquery/switch-2port-extended-clean.txt"], ids=lambda p: p.name)
def test_perfquery_blocks_without_their_header_are_read_by_their_port_select(path):
    whole = parse_perfquery(path.read_text())
    cut = parse_perfquery(_headless(path.read_text()))
    assert [(p.port, p.lid, p.counters) for p in cut.ports] == [(p.port, None, p.counters) for p in whole.ports]


def test_perfquery_counters_without_header_or_port_select_are_not_read():
    text = (FIXTURES / "field/issues/perfquery/x-extended-lid10-capmask2-rhel75.txt").read_text()
    with pytest.raises(ParseError):
        parse_perfquery("".join(line for line in _headless(text).splitlines(keepends=True)
                                if not line.startswith("PortSelect")))


def test_an_indented_ca_line_still_names_its_ports():
    # a cluster manual's reStructuredText code block (field set held-out-20): the block indents
    # the prompt and `CA 'mlx5_0'` by four blanks, ibstat's own fields keep only their tabs;
    # the CA line was unread and every port lost its CA's name and firmware
    text = ("    [username@login509-02-r ~]$ ibstat\n    CA 'mlx5_0'\n\tCA type: MT4123\n\tNumber of ports: 1\n"
            "\tFirmware version: 20.35.1012\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"
            "\t\tRate: 100\n\t\tLink layer: InfiniBand\n")
    ports = parse_ibstat(text).ports
    assert [(p.ca, p.fw_ver, p.state, p.rate_gbps) for p in ports] == [("mlx5_0", "20.35.1012", "Active", 100.0)]
