"""sinfo parser: every layout captured from a real Slurm 22.05 (tests/fixtures/sinfo), hc's
own format as the Slurm actions read it, garbage, and `hc parse sinfo`."""

from __future__ import annotations

import json

import msgspec
import pytest
from support import FIXTURES, run_hc_inproc

from healthcheck.actions.slurm import parse_sinfo as actions_parse_sinfo
from healthcheck.core.errors import ParseError
from healthcheck.parsers.sinfo import HC_FORMAT, SinfoReport, fields_of_format, parse_hc_sinfo, parse_sinfo, split_state

DIR = FIXTURES / "sinfo"
FILES = sorted(DIR.glob("*.txt"))
# what the captures show: the cluster's four nodes (see SOURCES.md)
NODES = {"node1", "node2", "node3", "node4"}
HC_REASON = "hc: gpu.E020 gpu 3 Xid 79 fell off the bus (evidence: dmesg)"


def read(name: str) -> SinfoReport:
    return parse_sinfo((DIR / name).read_text())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_capture_parses(path):
    report = parse_sinfo(path.read_text())
    assert msgspec.json.decode(msgspec.json.encode(report), type=SinfoReport) == report
    if "controller-down" in path.name:
        assert report.rows == [] and report.error and "Unable to contact slurm controller" in report.error
        return
    assert report.error is None and report.rows
    assert {r.nodes for r in report.rows} <= NODES
    assert all(r.state for r in report.rows if {"STATE", "STATECOMPLETE"} & r.columns.keys())
    # node4's slurmd was stopped: every layout that shows a state says it does not respond
    node4 = [r for r in report.rows if r.nodes == "node4" and r.state]
    assert all(not r.responding for r in node4)
    assert all(r.responding for r in report.rows if r.nodes != "node4")


def test_reasons_R_and_R_l():
    r = read("slurm-22.05-R-reasons-truncated-20.txt")
    assert r.layout == "reasons"
    assert [(x.nodes, x.reason, x.reason_user, x.reason_time, x.reason_maybe_cut) for x in r.rows] == [
        ("node4", "Not responding", "root", "2026-11-23T13:29:05", False),
        ("node3", "ib cable reseat | ti", "root", "2026-11-23T13:28:24", True),  # %20E: cut
        ("node2", "hc: gpu.E020 gpu 3 X", "root", "2026-11-23T13:28:24", True),
    ]
    long = read("slurm-22.05-R-l-user-uid-state.txt")
    assert long.timestamp == "Mon Nov 23 13:29:29 2026"
    assert [(x.nodes, x.state, x.state_flags, x.reason_user, x.reason_uid) for x in long.rows] == [
        ("node4", "down", ["not_responding"], "root", 0), ("node3", "draining", [], "root", 0),
        ("node2", "drained", [], "root", 0)]  # compact names read as the long ones
    brackets = read("slurm-22.05-R-reason-with-brackets.txt")
    assert brackets.rows[0].reason == "psu swap [ticket 99]"


def test_nodes_long_and_summary():
    r = read("slurm-22.05-N-l-two-partitions-down-star.txt")
    assert r.timestamp == "Mon Nov 23 13:29:29 2026" and len(r.rows) == 6
    n1 = [x for x in r.rows if x.nodes == "node1"]
    assert [(x.partition, x.default_partition) for x in n1] == [("debug", True), ("gpu", False)]
    x = n1[0]
    assert (x.node_count, x.state, x.cpus, x.sockets_cores_threads, x.memory_mb, x.tmp_disk_mb, x.weight, x.features, x.reason) == (
        1, "mixed", 2, "2:1:1", 1000, 0, 1, None, None)  # AVAIL_FE (null), REASON none
    assert r.rows[-1].state == "down" and r.rows[-1].reason == "Not responding"
    drained = read("slurm-22.05-N-l-drained-star.txt").rows[-1]
    assert (drained.state, drained.state_flags, drained.responding, drained.reason) == (
        "drained", ["not_responding"], False, "psu swap [ticket 99]")
    summary = read("slurm-22.05-summary.txt")
    assert [(x.partition, x.avail, x.timelimit, x.state, x.nodes) for x in summary.rows][:2] == [
        ("debug", "up", "infinite", "down", "node4"), ("debug", "up", "infinite", "draining", "node3")]
    compact = read("slurm-22.05-N-compact-states.txt").rows
    assert {x.state for x in compact} == {"mixed", "drained", "draining", "down"}
    assert {x.columns["STATE"] for x in compact} == {"mix", "drain", "drng", "down*"}  # as printed


def test_o_and_O_with_headers():
    piped = read("slurm-22.05-N-O-pipe-suffix-statecomplete.txt")  # -O Field:| (a "|" after every cell)
    assert [(x.nodes, x.state, x.responding) for x in piped.rows][2:] == [
        ("node2", "idle+drain", True), ("node2", "idle+drain", True), ("node3", "allocated+drain", True),
        ("node4", "down+not_responding", False)]
    assert piped.rows[4].reason == "ib cable reseat | ticket 4711 by ops"  # the reason keeps its "|"
    assert piped.rows[4].columns["STATECOMPLETE"] == "allocated+drain"
    header = read("slurm-22.05-N-o-NTHE-with-header.txt")
    assert header.rows == read("slurm-22.05-hc-format-h-N-o-NTHE.txt").rows  # same output, with and without -h
    sized = read("slurm-22.05-N-O-sized.txt")
    assert sized.rows[2].reason == HC_REASON and sized.rows[0].partition == "gpu"
    widths = read("slurm-22.05-N-O-default-widths-truncated.txt")  # -O default width 20
    assert widths.rows[2].reason == "hc: gpu.E020 gpu 3 X" and widths.rows[2].reason_maybe_cut


def test_hc_format_is_what_the_actions_read():
    text = (DIR / "slurm-22.05-hc-format-h-N-o-NTHE.txt").read_text()
    report = parse_sinfo(text)
    assert report.layout == "hc" and HC_FORMAT == "%N|%T|%H|%E" and fields_of_format(HC_FORMAT) == (
        "NODELIST", "STATE", "TIMESTAMP", "REASON")
    nodes = actions_parse_sinfo(text)
    assert set(nodes) == NODES  # node1 and node2 are in two partitions: once each
    assert nodes["node2"].reason == HC_REASON and nodes["node2"].drained and nodes["node2"].reason_time == "2026-11-23T13:28:24"
    assert nodes["node3"].state == "draining" and nodes["node3"].busy and nodes["node3"].reason == "ib cable reseat | ticket 4711 by ops"
    assert nodes["node4"].hands_off == "down, not responding" and nodes["node1"].reason == "" and nodes["node1"].reason_time == ""
    star = actions_parse_sinfo((DIR / "slurm-22.05-hc-format-drained-star.txt").read_text())
    assert star["node4"].state == "drained" and not star["node4"].responding and star["node4"].hands_off
    # the rig's format, without %H, is told apart by its third field
    rig = parse_sinfo((DIR / "slurm-22.05-h-N-o-NTE.txt").read_text())
    assert rig.rows[2].reason == HC_REASON and rig.rows[2].reason_time is None


def test_hc_format_skips_lines_it_cannot_read():
    rows = parse_hc_sinfo("garbage\n|idle|Unknown|none\nn1|idle|Unknown|none\nn2|down*\n")
    assert [r.nodes for r in rows] == ["n1"]
    assert actions_parse_sinfo("") == {} and actions_parse_sinfo("complete garbage\n") == {}


def test_state_suffixes():
    assert split_state("down*") == ("down", ["not_responding"], False)
    assert split_state("idle~") == ("idle", ["powered_down"], True)
    assert split_state("MIXED-") == ("mixed", ["planned"], True)
    assert split_state("down+not_responding") == ("down+not_responding", [], False)


@pytest.mark.parametrize(
    "text",
    ["hello world\n", "NODELIST STATE\nnode1\n", "a|b\n", "\x00\x01\x02\xff" * 50, bytes(range(256)).decode("latin-1") * 4,
     "Mon Nov 23 13:29:29 2026\n"],
    ids=["words", "short-row", "two-fields", "binary", "all-bytes", "timestamp-only"],
)
def test_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_sinfo(text)


def test_unknown_format_letter_is_a_parse_error():
    with pytest.raises(ParseError, match="unsupported sinfo format"):
        parse_sinfo("n1|x\n", fmt="%N|%Z")
    assert parse_sinfo("n1|idle\n", fmt="%N|%T").rows[0].state == "idle"


@pytest.mark.parametrize("fmt", [(), ("--format", "json")], ids=["default", "json"])
def test_hc_parse_sinfo(fmt):
    r = run_hc_inproc("parse", "sinfo", str(DIR / "slurm-22.05-R-l-user-uid-state.txt"), *fmt)
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)["facts"]
    assert facts["layout"] == "reasons" and facts["rows"][0]["nodes"] == "node4" and facts["rows"][0]["responding"] is False
    r = run_hc_inproc("parse", "sinfo", str(DIR / "slurm-22.05-controller-down.txt"), *fmt)
    assert r.returncode == 0 and "Unable to contact" in json.loads(r.stdout)["facts"]["error"]
    r = run_hc_inproc("parse", "sinfo", "-", input=b"complete garbage\n")
    assert r.returncode == 4 and r.stderr.startswith(b"hc: error: sinfo:") and r.stderr.count(b"\n") == 1


def test_every_fixture_has_its_source_listed():
    listed = (DIR / "SOURCES.md").read_text()
    assert [p.name for p in sorted(DIR.glob("*.txt")) if f"`{p.name}`" not in listed] == []


def test_a_unicode_digit_in_a_count_is_no_number_and_no_crash():
    """str.isdigit takes '²', int() refuses it: a count must be ASCII digits (sinfo and scontrol)."""
    from healthcheck.parsers.scontrol_node import parse_scontrol_show_node
    from healthcheck.parsers.sinfo import slurm_int

    assert (slurm_int("²"), slurm_int(" 64 "), slurm_int("1" * 19)) == (None, 64, None)
    (node,) = parse_scontrol_show_node("NodeName=n1 State=IDLE CPUTot=²\n").nodes
    assert node.name == "n1" and node.cpu_tot is None
    from healthcheck.parsers.nvidia_smi_table import _int as smi_int

    assert (smi_int("²"), smi_int("7")) == (None, 7)


# ---- a paste carries more than sinfo printed (issue 20; tuning files of the field corpus)

FIELD_SINFO = FIXTURES / "field" / "repos" / "sinfo"


def field(name: str) -> str:
    return (FIELD_SINFO / name).read_text()


@pytest.mark.parametrize(("name", "before"), [
    ("slinky-hyperpod-eks-2-partitions-command-line-blank.txt", None),  # the command line, no prompt: noise
    ("p5-o-format-after-slurmd-C-prompts.txt", "NodeName=p5-st-p5-1"),  # another command's output first
    ("hybrid-cloud-idle-tilde-powered-down-prompt.txt", None),  # `$ sinfo`: a prompt, noise
])
def test_the_table_is_read_from_its_header_after_a_prompt_command_or_other_output(name, before):
    report = parse_sinfo(field(name))
    assert report.layout == "columns" and report.rows
    assert all(r.partition and "$" not in r.partition for r in report.rows)
    if before is None:
        assert report.unrecognized.count == 0
    else:  # what came before the table is shown, never read as a row
        assert any(s.text.startswith(before) for s in report.unrecognized.sample)


def test_the_powered_down_cloud_nodes_after_a_prompt_keep_their_flags():
    rows = parse_sinfo(field("hybrid-cloud-idle-tilde-powered-down-prompt.txt")).rows
    assert [(r.partition, r.default_partition, r.node_count, r.state, r.state_flags) for r in rows] == [
        ("static", True, 4, "idle", []), ("compute", False, 20, "idle", ["powered_down"]),
        ("debug", False, 10, "idle", ["powered_down"])]


def test_O_all_fields_with_repeated_headers_an_empty_field_and_a_stray_suffix():
    """`sinfo -O` with every field: STATE, USER and PARTITION printed twice, an empty
    RESERVATION (`||`), and one row ending in the "|" suffix its header lacks. The row
    with the suffix was read one column to the right before (state 'root(0)')."""
    rows = parse_sinfo(field("gcm-O-all-fields-pipe-separated-drain-star-alloc.txt")).rows
    assert [(r.nodes, r.state, r.state_flags, r.reason, r.gres, r.version) for r in rows] == [
        ("node0201", "drained", ["not_responding"], "replace", "gpu:gen:8", None),
        ("node0201", "drained", ["not_responding"], "replace", "gpu:gen:8", None),
        ("node1537", "allocated", [], None, "gpu:gen:8(S:0-1)", "20.11.8"),
        ("node4180", "allocated", [], None, "gpu:gen:2(S:0-1)", "20.11.8")]
    first = rows[0].columns
    assert first["STATE#1"] == "drain*" and first["STATE"] == "drained*" and first["RESERVATION"] == ""
    assert first["USER#1"] == "root" and first["USER"] == "root(0)" and rows[0].reason_uid == 0


def _hard_wrap(text: str, width: int) -> str:
    """A terminal `width` columns wide: every longer line continued on the next."""
    out = []
    for line in text.splitlines():
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return "\n".join(out) + "\n"


def test_a_nodelist_hard_wrapped_by_the_terminal_is_joined_back():
    """Synthetic shape from a real file: the hybrid-cloud table wrapped at 50 columns cuts
    each host list in two; the rest lands alone on the next line."""
    text = field("hybrid-cloud-idle-tilde-powered-down-prompt.txt")
    clean = parse_sinfo(text)
    wrapped = parse_sinfo(_hard_wrap(text, 50))
    assert [r.nodes for r in wrapped.rows] == [r.nodes for r in clean.rows]
    assert "hybridconf-compute-ghpc-[0-19]" in [r.nodes for r in wrapped.rows]
    assert wrapped.unrecognized.count == 0


def test_a_prompt_closes_a_table_and_the_next_header_opens_one():
    """Two commands pasted one after the other (real outputs, joined here): the rows of
    both tables, and what follows a prompt without a header is not read as a row."""
    summary = field("hybrid-cloud-idle-tilde-powered-down-prompt.txt")
    reasons = (DIR / "slurm-22.05-R-reasons-truncated-20.txt").read_text()
    report = parse_sinfo(summary + "$ sinfo -R\n" + reasons + "$ hostname\nnode4\n")
    assert [r.partition for r in report.rows[:3]] == ["static", "compute", "debug"]
    assert [(r.nodes, r.reason) for r in report.rows[3:]] == [
        ("node4", "Not responding"), ("node3", "ib cable reseat | ti"), ("node2", "hc: gpu.E020 gpu 3 X")]
    assert [s.text for s in report.unrecognized.sample] == ["node4"]


def test_a_line_that_fits_no_column_among_rows_is_counted_not_a_refusal():
    """Another command's line (slurmd -C's, from the p5 file) inside a real table."""
    other = field("p5-o-format-after-slurmd-C-prompts.txt").splitlines()[1]
    text = field("hybrid-cloud-idle-tilde-powered-down-prompt.txt").splitlines()
    text.insert(3, other)
    report = parse_sinfo("\n".join(text) + "\n")
    assert [r.partition for r in report.rows] == ["static", "compute", "debug"]
    assert report.unrecognized.count == 1 and report.unrecognized.sample[0].line == 4


def test_a_long_listing_after_another_table_keeps_its_timestamp():
    reasons = (DIR / "slurm-22.05-R-reasons-truncated-20.txt").read_text()
    long = (DIR / "slurm-22.05-N-l-two-partitions-down-star.txt").read_text()
    report = parse_sinfo("$ sinfo -R\n" + reasons + "$ sinfo -N -l\n" + long)
    alone = parse_sinfo(long)
    assert report.timestamp == alone.timestamp and report.timestamp
    assert report.rows[3:] == alone.rows and report.unrecognized.count == 0


def test_a_table_rendered_one_cell_a_line_is_read_row_by_row():
    # a manual page's rendering of `sinfo -R` (field set held-out-19): the header's names and
    # each row's cells one per line, blank lines between; the reasons were unread before
    page = "$ sinfo -R\n\n \n\nREASON\n\nNODELIST\n\nMemory errors\n\ndev[0,5]\n\nNot Responding\n\ndev8\n"
    report = parse_sinfo(page)
    assert [(r.reason, r.nodes) for r in report.rows] == [("Memory errors", "dev[0,5]"), ("Not Responding", "dev8")]
    assert report.unrecognized.count == 0 and report.incomplete is None


def test_a_per_line_table_cut_inside_a_row_reads_the_whole_rows_and_says_so():
    report = parse_sinfo("REASON\nNODELIST\nMemory errors\ndev[0,5]\nNot Responding\n")
    assert [(r.reason, r.nodes) for r in report.rows] == [("Memory errors", "dev[0,5]")]
    assert report.incomplete and "a cell a line" in report.incomplete


def test_one_name_headers_after_a_row_do_not_join_it():
    # `sinfo -o %N` then `sinfo -o %P` with no prompt between: the second header opens its own table
    report = parse_sinfo("NODELIST\nnode1\nPARTITION\ngpu\n")
    assert [r.nodes for r in report.rows if r.nodes] == ["node1"]
    assert [r.partition for r in report.rows if r.partition] == ["gpu"]
