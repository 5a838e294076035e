"""ip link parsers on real outputs (corpus, this machine, veth in a netns) and on bad input."""

from __future__ import annotations

import json

import pytest
from support import FIXTURES, corpus_files

from healthcheck.core.errors import ParseError
from healthcheck.parsers.ip_link import parse_ip_link, parse_ip_link_json, parse_ip_link_text

IP = FIXTURES / "ip-link"


def test_corpus_ipoib_eight_interfaces_mtu_2044():
    facts = parse_ip_link((FIXTURES / "corpus/ip-json-link/ipoib-8x-mtu2044-up-filtered.txt").read_text())
    assert len(facts.links) == 8
    assert {link.mtu for link in facts.links} == {2044}
    assert all(link.link_type == "infiniband" and link.admin_up and link.carrier for link in facts.links)
    assert facts.links[0].name == "ibp12s0"


def test_corpus_ipoib_seven_of_eight():
    facts = parse_ip_link((FIXTURES / "corpus/ip-json-link/ipoib-7of8-missing-interface.txt").read_text())
    assert len(facts.links) == 7
    assert "ibp204s0" not in facts.by_name()


@pytest.mark.parametrize("path", corpus_files("ip-json-link"), ids=lambda p: p.name)
def test_every_corpus_file_parses(path):
    assert parse_ip_link(path.read_text()).links


def test_json_and_text_of_the_same_netns_agree():
    as_json = parse_ip_link((IP / "netns-veth-json.txt").read_text()).by_name()
    for name in ("netns-veth-detail.txt", "netns-veth-plain.txt"):
        as_text = parse_ip_link((IP / name).read_text()).by_name()
        assert set(as_text) == set(as_json) == {"lo", "eth0", "ib0", "ib0p"}
        for ifname, link in as_json.items():
            other = as_text[ifname]
            assert (other.mtu, other.flags, other.operstate, other.link_type) == (
                link.mtu, link.flags, link.operstate, link.link_type
            ), ifname


def test_text_strips_peer_suffix_and_reads_kind_and_carrier():
    links = parse_ip_link_text((IP / "netns-veth-detail.txt").read_text()).by_name()
    eth0 = links["eth0"]
    assert eth0.mtu == 9000 and eth0.kind == "veth"
    assert eth0.admin_up and not eth0.carrier  # NO-CARRIER: its peer is down
    assert links["ib0"].mtu == 2044
    assert links["lo"].kind is None


def test_json_detail_kind():
    links = parse_ip_link_json((IP / "netns-veth-json.txt").read_text()).by_name()
    assert links["eth0"].kind == "veth"


def test_this_vm_json_and_text_agree():
    a = parse_ip_link((IP / "vm-virtio-json.txt").read_text()).by_name()
    b = parse_ip_link((IP / "vm-virtio-detail.txt").read_text()).by_name()
    assert {k: v.mtu for k, v in a.items()} == {k: v.mtu for k, v in b.items()}
    assert b["ifb0"].kind == "ifb"


HOSTILE_NAMES = ['eth"0', "eth\n0", "ëth0", "eth0'; rm -rf /", "\u202eeth0", "a" * 300]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_hostile_interface_names_in_json_survive(name):
    text = json.dumps([{"ifindex": 2, "ifname": name, "flags": ["UP", "LOWER_UP"], "mtu": 1500,
                        "operstate": "UP", "link_type": "ether"}])
    facts = parse_ip_link(text)
    assert facts.links[0].name == name


def test_hostile_newline_in_text_output_does_not_crash():
    text = '2: eth"0\nX: <UP,LOWER_UP> mtu 1500 state UP\n    link/ether 00:11\n3: ok0: <UP> mtu 9000 state UP\n'
    facts = parse_ip_link_text(text)
    assert "ok0" in facts.by_name()


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("[{", "not valid JSON"),
        ('{"a": 1}', "no ifname"),
        ("[1, 2]", "not an object"),
        ('"just a string"', "no interface"),
        ("Device \"eth9\" does not exist.", "no interface"),
        ("\x00\x01\x02garbage", "no interface"),
        ("1: lo: <LOOPBACK", "no interface"),
    ],
)
def test_garbage_raises_parse_error(text, reason):
    with pytest.raises(ParseError, match=reason):
        parse_ip_link(text)


def test_truncated_text_keeps_complete_entries():
    text = (IP / "netns-veth-detail.txt").read_text()
    cut = text[: text.index("4: ib0@ib0p")] + "4: ib0@ib0p: <BROADCAST,MULTI"
    names = set(parse_ip_link(cut).by_name())
    assert names == {"lo", "eth0", "ib0p"}


def test_json_with_missing_or_odd_fields():
    facts = parse_ip_link('[{"ifname": "x", "mtu": "9000"}, {"ifname": "y", "mtu": true, "flags": "UP"}]')
    x, y = facts.links
    assert x.mtu == 9000 and y.mtu is None and y.flags == []
