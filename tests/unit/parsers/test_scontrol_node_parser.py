"""`scontrol show node` parser: the corpus capture (Slurm 23.11) and real Slurm 22.05 captures
(multi-node, one node, -o, --details, not found, controller down), garbage, hostile
reasons, and `hc parse scontrol-show-node`."""

from __future__ import annotations

import json

import msgspec
import pytest
from support import CORPUS, FIXTURES, run_hc_inproc

from healthcheck.core.errors import ParseError
from healthcheck.parsers.scontrol_node import ScontrolNodes, parse_scontrol_show_node

DIR = FIXTURES / "scontrol-show-node"
CAPTURES = sorted((CORPUS / "scontrol-show-node").glob("*.txt")) + sorted(DIR.glob("*.txt"))
HC_REASON = "hc: gpu.E020 gpu 3 Xid 79 fell off the bus (evidence: dmesg)"


def read(name: str) -> ScontrolNodes:
    path = DIR / name if (DIR / name).exists() else CORPUS / "scontrol-show-node" / name
    return parse_scontrol_show_node(path.read_text())


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_capture_parses(path):
    facts = parse_scontrol_show_node(path.read_text())
    assert msgspec.json.decode(msgspec.json.encode(facts), type=ScontrolNodes) == facts
    for n in facts.nodes:
        assert n.name and n.state and n.base_state and n.cpu_tot and n.real_memory_mb and n.partitions
        assert n.fields["NodeName"] == n.name
        # a drained node names who drained it and when; Slurm always stamps the reason
        assert (n.reason is None) == (n.reason_user is None) == (n.reason_time is None)
        assert n.drain == ("DRAIN" in n.state_flags)


def test_corpus_h100_drain_maintenance_reserved():
    facts = read("h100-4nodes-idle-drain-xid-reason.txt")
    assert [n.name for n in facts.nodes] == ["cluster-h100-9-78", "cluster-h100-9-69", "cluster-h100-9-79", "cluster-h100-9-75"]
    n = facts.nodes[0]
    assert (n.base_state, n.state_flags, n.drain, n.responding) == ("IDLE", ["DRAIN", "MAINTENANCE", "RESERVED"], True, True)
    assert (n.reason, n.reason_user, n.reason_time) == ("Prolog error: 571 xid 13 errors", "root", "2023-12-24T06:51:08")
    assert (n.gres, n.cpu_tot, n.cpu_alloc, n.cpu_load, n.real_memory_mb, n.free_mem_mb) == ("gpu:8", 96, 0, 1.15, 1048576, 1803228)
    assert n.partitions == ["low", "general", "high"] and n.available_features == ["gpu", "h100", "cluster-h100-9"]
    assert n.os == "Linux 5.15.133+ #1 SMP Wed Nov 8 17:30:28 UTC 2023" and n.version == "23.11.0-0rc1"
    assert n.reservation == "example" and n.fields["CfgTRES"] == "cpu=96,mem=1T,billing=96" and n.fields["AllocTRES"] == ""
    assert facts.nodes[1].reason is None and facts.nodes[1].base_state == "ALLOCATED"


def test_slurm_22_05_states_and_reasons():
    facts = read("slurm-22.05-4nodes-mixed-drain-draining-not-responding.txt")
    states = [(n.name, n.base_state, n.state_flags, n.responding, n.drain) for n in facts.nodes]
    assert states == [("node1", "MIXED", [], True, False), ("node2", "IDLE", ["DRAIN"], True, True),
                      ("node3", "ALLOCATED", ["DRAIN"], True, True), ("node4", "DOWN", ["NOT_RESPONDING"], False, False)]
    assert facts.nodes[1].reason == HC_REASON
    assert facts.nodes[2].reason == "ib cable reseat | ticket 4711 by ops"
    assert (facts.nodes[3].reason, facts.nodes[3].reason_time) == ("Not responding", "2026-11-23T13:29:05")
    later = read("slurm-22.05-4nodes-comment-extra-down-drain-not-responding.txt")
    n1, n4 = later.nodes[0], later.nodes[3]
    assert (n1.comment, n1.extra) == ("rack 12 slot 4 = spare PSU", "burnin=2026-11-01 owner=ops")  # "=" inside
    assert (n4.state, n4.responding, n4.drain, n4.reason) == ("DOWN+DRAIN+NOT_RESPONDING", False, True, "psu swap [ticket 99]")
    assert read("slurm-22.05-details-gresused.txt").nodes[0].gres_used == "gpu:0"


def test_one_line_output_reads_like_the_multi_line():
    multi = read("slurm-22.05-4nodes-mixed-drain-draining-not-responding.txt")
    oneline = read("slurm-22.05-oneliner-o.txt")
    assert oneline.nodes == multi.nodes  # OS and Reason hold spaces; with -o they run on the line
    # a reason with "Key=value" words in it, on one line
    text = "NodeName=n1 State=IDLE+DRAIN Reason=gpu temp=93C Xid=79 [hc@2026-01-01T00:00:00] Partitions=p CPUTot=2\n"
    (n,) = parse_scontrol_show_node(text).nodes
    assert (n.reason, n.reason_user, n.partitions, n.cpu_tot) == ("gpu temp=93C Xid=79", "hc", ["p"], 2)


def test_messages_are_facts():
    assert read("slurm-22.05-node-not-found.txt").not_found == ["nosuch9"]
    down = read("slurm-22.05-controller-down.txt")
    assert down.nodes == [] and down.error == "slurm_load_node error: Unable to contact slurm controller (connect failure)"


def test_older_star_state_and_reason_without_stamp():
    (n,) = parse_scontrol_show_node("NodeName=a State=DOWN* Reason=cable\n").nodes
    assert (n.base_state, n.responding, n.reason, n.reason_user) == ("DOWN", False, "cable", None)


def test_a_hostile_run_of_words_costs_its_length_and_is_bounded():
    text = "NodeName=a OS=" + "word " * 200_000 + "\n"
    (n,) = parse_scontrol_show_node(text).nodes
    assert n.os is not None and len(n.os) <= 4096


@pytest.mark.parametrize(
    "text",
    ["hello world\n", "State=IDLE\n", "NodeName=\n", "\x00\x01\x02\xff" * 50, bytes(range(256)).decode("latin-1") * 4],
    ids=["words", "no-record", "empty-name", "binary", "all-bytes"],
)
def test_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_scontrol_show_node(text)


@pytest.mark.parametrize("fmt", [(), ("--format", "json")], ids=["default", "json"])
def test_hc_parse_scontrol_show_node(fmt):
    r = run_hc_inproc("parse", "scontrol-show-node", str(CORPUS / "scontrol-show-node/h100-4nodes-idle-drain-xid-reason.txt"), *fmt)
    assert r.returncode == 0, r.stderr
    nodes = json.loads(r.stdout)["facts"]["nodes"]
    assert len(nodes) == 4 and nodes[0]["reason_user"] == "root" and nodes[0]["drain"] is True
    r = run_hc_inproc("parse", "scontrol-show-node", "-", input=b"garbage\n")
    assert r.returncode == 4 and r.stderr.startswith(b"hc: error: scontrol show node:") and r.stderr.count(b"\n") == 1


def test_every_fixture_has_its_source_listed():
    listed = (DIR / "SOURCES.md").read_text()
    assert [p.name for p in sorted(DIR.glob("*.txt")) if f"`{p.name}`" not in listed] == []
