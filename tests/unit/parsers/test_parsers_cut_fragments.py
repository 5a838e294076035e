"""Fragments cut at either end (issue 20, tests/field/mutate.py's head-cut and tail-cut).

A paste that starts mid-output lost its header, its first block, its first rows; one that
ends mid-line may end inside a value (`400` printed as `40`). Each test cuts a real fixture
as mutate.py does (`head_cut`: the first quarter of the lines gone; `tail_cut`: the last line
cut in half, no line end after it) and asserts what the fragment still determines is read,
what it does not is not guessed, and a value the cut may have shortened is never read whole.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from field.mutate import head_cut, tail_cut

from healthcheck.core.errors import FragmentError, ParseError
from healthcheck.parsers import lines
from healthcheck.parsers.nvidia_topo import parse_nvidia_topo

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


def fixture(path: str) -> str:
    return (FIXTURES / path).read_text()


# ---------------------------------------------------------------- the line layer


@pytest.mark.parametrize(("text", "want"), [
    ("GPU6\tNV18\tNV", ("GPU6\tNV18\t", "NV")),  # the paste ends inside a cell
    ("GPU6\tNV18\tNV18\n", ("GPU6\tNV18\tNV18\n", "")),  # a line end: nothing cut
    ("GPU6 NV18 ", ("GPU6 NV18 ", "")),  # a blank after the last word: it is whole
    ("a\n```", ("a\n```", "")),  # a markdown fence closing the paste is no value
    ("400", ("", "400")),
    ("(pid: 2630)", ("(pid: 2630)", "")),  # its `)` closes the pid: whole
    ("GID: 00:00:00:00:", ("GID: ", "00:00:00:00:")),  # a `:` may be inside a value: no closer
    ("", ("", "")),
])
def test_the_word_a_text_ends_inside_is_set_apart(text, want):
    assert lines.without_cut_end(text) == want


def test_read_lines_takes_the_cut_word_off_the_last_line_after_its_labels():
    """`cut_end`: the word is taken off the line's text (an srun label before it stays taken)."""
    last = list(lines.read_lines("0: NCCL WARN a\n1: NCCL WARN socketProg", cut_end=True))[-1]
    assert (last.task, last.text, last.repairs) == (1, "NCCL WARN ", ("cut-end",))
    whole = list(lines.read_lines("0: NCCL WARN a\n1: NCCL WARN socketProg\n", cut_end=True))[-1]
    assert whole.text == "NCCL WARN socketProg"


def test_the_cut_end_is_found_in_linear_time():
    text = "x" * 1_000_000  # one word: every character stepped over once
    assert lines.without_cut_end(text) == ("", text)


# ---------------------------------------------------------------- nvidia-smi topo -m


@pytest.mark.parametrize("shorter", [0, 1])
def test_topo_cut_inside_its_last_row_reads_no_cut_cell(shorter):
    """GPU7's row cut after its fifth cell (`NV12`, with nothing after it: it may be `NV1`
    or more), or one character earlier (`NV1`, the wrong value it must never be read as)."""
    text = tail_cut(fixture("corpus/nvidia-smi-topo/a100-8gpu-nv12.txt"))
    text = text[:len(text) - shorter]
    cut_word = text.split()[-1]
    topo = parse_nvidia_topo(text)
    assert all(value == "NV12" for row in topo.links.values() for value in row.values())
    assert topo.links["GPU7"] == {"GPU0": "NV12", "GPU1": "NV12", "GPU2": "NV12", "GPU3": "NV12"}
    assert topo.incomplete and repr(cut_word) in topo.incomplete


def test_topo_headerless_rows_name_the_nvlinked_columns_no_row_names():
    """A fragment of GPU1..GPU6's rows (header and GPU0 cut above, GPU7 below): column 7 holds
    NV12 in every row, so it is a GPU's, the eighth: GPU7."""
    whole = fixture("corpus/nvidia-smi-topo/a100-8gpu-nv12.txt")
    text = head_cut("\n".join(whole.splitlines()[:8]) + "\n")
    assert "GPU0 " not in text and "GPU7 " not in text
    topo = parse_nvidia_topo(text)
    assert topo.links["GPU1"]["GPU7"] == "NV12"
    assert topo.links["GPU6"]["GPU0"] == "NV12"
    assert "GPU7" not in topo.devices  # named by nvidia-smi's order, not a row: no device evidence


# ---------------------------------------------------------------- nccl-tests

NCCL_TESTS_H100 = "nccl-tests/all_reduce-h100-1gpu-2.19.6-nccl-2.28.9.txt"


def _rows_up_to(text: str, size: str) -> str:
    """The text up to (with) the row of `size`: a run that stopped there, or a paste cut there."""
    out = []
    for line in text.splitlines():
        out.append(line)
        if line.split()[:1] == [size]:
            break
    return "\n".join(out) + "\n"


def test_nccl_tests_row_the_text_ends_inside_is_where_the_run_stopped():
    """nccl-tests prints a row's size, count, type, redop and root before it runs that size:
    a text that ends inside the 2097152 row got that far (cut_row_bytes), no measurement."""
    from healthcheck.parsers.nccl_tests import parse_nccl_tests

    text = tail_cut(_rows_up_to(fixture(NCCL_TESTS_H100), "2097152"))
    assert text.splitlines()[-1].split()[0] == "2097152"
    run = parse_nccl_tests(text)
    assert run.cut_row_bytes == 2097152
    assert run.last_size_bytes == 524288 == max(s.size_bytes for s in run.samples)  # the cut row measured nothing
    assert run.incomplete
    assert run.max_bytes == 1073741824


def test_nccl_tests_banner_number_the_text_ends_on_is_not_read():
    """`maxBytes 1073741824` cut to `maxBytes 10737`: never max_bytes 10737."""
    from healthcheck.parsers.nccl_tests import parse_nccl_tests

    text = fixture(NCCL_TESTS_H100)
    text = text[:text.index("1073741824") + 5]
    run = parse_nccl_tests(text)
    assert run.max_bytes != 10737


def test_a_hung_run_that_stopped_inside_its_first_row_is_a_hang_not_a_misconfiguration():
    from healthcheck.probes.bw import nccl_attempt_from_text

    text = tail_cut(_rows_up_to(fixture(NCCL_TESTS_H100), "8"))
    attempt = nccl_attempt_from_text(text, "all_reduce", argv=("all_reduce_perf",), expected_ranks=1,
                                     duration_s=60.0, returncode=-9, hung=True, output_tail=text)
    assert attempt.hung and attempt.misconfigured is None
    assert attempt.samples == ()


# ---------------------------------------------------------------- kernel log


def _through_line(path: str, n: int) -> str:
    return "\n".join(fixture(path).splitlines()[:n + 1]) + "\n"


@pytest.mark.parametrize("shorter", [0, 1])
def test_an_xid_code_the_text_ends_on_is_not_read(shorter):
    """`NVRM: Xid (PCI:0000:91:00): 79` with no line end after it: 79 may be the head of a
    longer code (`14` of 144..149 likewise), and one character less is `7`, a wrong Xid."""
    from healthcheck.parsers.xid import parse_kernel_log

    text = tail_cut(_through_line("kernel-log/journal-short-xid79-sxid.txt", 3))
    text = text[:len(text) - shorter]
    assert text.endswith(": 79"[:4 - shorter])
    log = parse_kernel_log(text)
    assert [x.code for x in log.xids] == []  # the one Xid line is the cut one
    assert log.incomplete and "79"[:2 - shorter] in log.incomplete


def test_a_driver_version_the_text_ends_inside_is_not_read():
    """The load banner cut inside its version (`525.125` of `525.125.06`): no driver_version."""
    from healthcheck.parsers.xid import parse_kernel_log

    text = _through_line("kernel-log/dmesg-probe-fallen-off-bus-continuation.txt", 5)
    text = text[:text.index("525.125.06") + len("525.125")]
    log = parse_kernel_log(text)
    assert log.driver_version is None and log.incomplete


# ---------------------------------------------------------------- sinfo


def test_sinfo_default_rows_without_their_header_are_read_by_their_shape():
    """`sinfo`'s default table, its header cut: partition, a partition state (up), a time limit,
    a count that is the node list's host count, a node state, the node list: no doubt left."""
    from healthcheck.parsers.sinfo import parse_sinfo

    report = parse_sinfo(head_cut(fixture("sinfo/slurm-22.05-summary.txt")))
    assert [(r.partition, r.state, r.nodes, r.node_count) for r in report.rows][:2] == [
        ("debug", "draining", "node3", 1), ("debug", "drained", "node2", 1)]
    assert report.rows[-1].timelimit == "1:00:00"


@pytest.mark.parametrize("line", [
    "debug*       up   infinite     64  drain node2",  # 64 is no host count of `node2`: CPUS, not NODES
    "debug*       yes  infinite      1  drain node2",  # no partition state
    "debug*       up   infinite      1  drain",  # five words
])
def test_sinfo_headerless_rows_whose_shape_leaves_a_doubt_are_not_read_as_the_default(line):
    from healthcheck.parsers.sinfo import parse_sinfo

    try:
        report = parse_sinfo(line + "\n")
    except ParseError:
        return
    assert not any(r.state == "drained" and r.partition == "debug" for r in report.rows)


def test_sinfo_row_the_text_ends_inside_is_read_only_up_to_its_cut_cell():
    """The summary cut inside its last row's time limit (`1:00` of `1:00:00`): the row's partition
    and state of availability are read, never the time limit `1:00`, nor any cell after it."""
    from healthcheck.parsers.sinfo import parse_sinfo

    report = parse_sinfo(tail_cut(fixture("sinfo/slurm-22.05-summary.txt")))
    last = report.rows[-1]
    assert (last.partition, last.avail, last.timelimit, last.state) == ("gpu", "up", None, None)
    assert report.incomplete and "TIMELIMIT" in report.incomplete


def test_sinfo_reasons_row_the_text_ends_inside_is_not_read():
    """`sinfo -R` cut after `hc: gpu.E020 gpu 3 X root   `: the reason may hold blanks, so with
    cells missing after it no cell can be placed (a USER `X`, a node `root` were read before)."""
    from healthcheck.parsers.sinfo import parse_sinfo

    report = parse_sinfo(tail_cut(fixture("sinfo/slurm-22.05-R-reasons-truncated-20.txt")))
    assert [r.nodes for r in report.rows] == ["node4", "node3"]
    assert report.incomplete


def test_sinfo_headerless_pipe_rows_no_column_of_which_is_known_are_a_fragment():
    from healthcheck.parsers.sinfo import parse_sinfo

    with pytest.raises(FragmentError):
        parse_sinfo("up|gen|80|0|N/A\nup|gen|80|0|N/A\n")
    with pytest.raises(ParseError) as info:
        parse_sinfo("hello there\n")
    assert not isinstance(info.value, FragmentError)


# ---------------------------------------------------------------- nvidia-smi --query-gpu


def test_query_gpu_rows_whose_header_a_cut_took_are_a_fragment():
    """Which column is which only the CSV header says: its rows without it are refused, as a
    fragment (FragmentError), never read by a guessed field list."""
    from healthcheck.parsers import parser_for

    text = head_cut(fixture("corpus/nvidia-smi-query-gpu/h100-590-all-fields-idle.txt"))
    with pytest.raises(FragmentError, match="no CSV header"):
        parser_for("nvidia-smi-query-gpu")(text)
    with pytest.raises(ParseError) as info:
        parser_for("nvidia-smi-query-gpu")("no gpu here\n")
    assert not isinstance(info.value, FragmentError)


# ---------------------------------------------------------------- the audit's rule


def test_the_audit_expects_no_fact_of_a_fragment_a_cut_refused_and_every_one_after_a_shape():
    """mutate.py: a file refused as a FragmentError after a cut has no fact expected (the cut took
    what names them); the same refusal after a transformation that drops nothing is a miss."""
    from field import facts, mutate

    text = fixture("corpus/nvidia-smi-query-gpu/h100-590-all-fields-idle.txt")
    ff = facts.FieldFile(facts.FIELD / "not-a-field-file.txt",  # the audit names it so; its text is passed
                         "nvidia-smi-query-gpu", (facts.Fact("name", "NVIDIA H100 80GB HBM3"),))
    before, _, _ = mutate.surfaced(ff.tool, text, ff.facts)
    assert before == {0}
    cut = mutate.mutate_one(ff, text, before, "head-cut")
    assert (cut.fragments, cut.read, cut.misses) == (1, 0, [])
    mutate.TRANSFORMS["drop-header"] = lambda t, tool: "\n".join(t.splitlines()[1:])
    try:
        shaped = mutate.mutate_one(ff, text, before, "drop-header")  # drops text, but is no cut (DROPS_TEXT)
    finally:
        del mutate.TRANSFORMS["drop-header"]
    assert (shaped.fragments, shaped.read, shaped.kept) == (0, 1, 0) and shaped.misses


# ---------------------------------------------------------------- scontrol show node


def test_scontrol_key_the_text_ends_inside_does_not_extend_the_value_before_it():
    """`scontrol -o show node` cut after `State=DOWN+NOT_RESPONDING Thread` (ThreadsPerCore=):
    the cut key is no word of the state."""
    from healthcheck.parsers.scontrol_node import parse_scontrol_show_node

    nodes = parse_scontrol_show_node(tail_cut(fixture("scontrol-show-node/slurm-22.05-oneliner-o.txt")))
    assert nodes.nodes[-1].state == "DOWN+NOT_RESPONDING"
    assert nodes.nodes[-1].base_state == "DOWN" and nodes.incomplete


def test_scontrol_reason_the_text_ends_inside_keeps_only_its_whole_words():
    from healthcheck.parsers.scontrol_node import parse_scontrol_show_node

    text = tail_cut(fixture("scontrol-show-node/slurm-22.05-one-node-drained.txt"))
    (node,) = parse_scontrol_show_node(text).nodes
    assert node.reason is not None and text.endswith(node.reason + " " + text.split()[-1])
    assert parse_scontrol_show_node(text).incomplete


def test_scontrol_record_whose_nodename_line_a_cut_took_is_a_fragment():
    """Whose State=, Reason= these are, the cut NodeName= line said: never guessed."""
    from healthcheck.parsers.scontrol_node import parse_scontrol_show_node

    with pytest.raises(FragmentError, match="NodeName="):
        parse_scontrol_show_node(head_cut(fixture("scontrol-show-node/slurm-22.05-one-node-drained.txt")))
    with pytest.raises(ParseError) as info:
        parse_scontrol_show_node("hello there\n")
    assert not isinstance(info.value, FragmentError)


# ---------------------------------------------------------------- perfquery


def test_perfquery_counters_whose_port_lines_a_cut_took_are_a_fragment():
    """Head-cut past its header and PortSelect: which port's counters they are is not known."""
    from healthcheck.parsers.perfquery import parse_perfquery

    text = head_cut(fixture("corpus/perfquery/hca-extended-capmask-5a00.txt"))
    assert "PortSelect" not in text and "Lid 133" not in text
    with pytest.raises(FragmentError, match="which port"):
        parse_perfquery(text)


def test_perfquery_value_the_text_ends_inside_is_not_read():
    from healthcheck.parsers.perfquery import parse_perfquery

    text = fixture("corpus/perfquery/hca-extended-capmask-5a00.txt")
    text = text[:text.index("37108676853855") + 4]  # `PortXmitData:....3710`
    (port,) = parse_perfquery(text).ports
    assert "port_xmit_data" not in port.counters


def test_an_nvlink5_xid_the_text_ends_at_its_link_number_keeps_its_unit_and_severity():
    """`RLW_RXPIPE Nonfatal XC0 i0 Link 13` with no line end: 13 may be cut (not read), the unit
    and severity before it are whole."""
    from healthcheck.parsers.xid import parse_kernel_log

    line = fixture("field/issues/xid/xid145-rlw-rxpipe-nonfatal-link13.txt").strip()  # split: tuning
    (event,) = parse_kernel_log(line[:line.index(" (0x")]).xids
    assert (event.code, event.unit, event.severity, event.link) == (145, "RLW_RXPIPE", "Nonfatal", None)


def test_the_audit_takes_no_evidence_from_the_word_a_cut_text_ends_inside():
    """nvlink's `Link 11` cut to `Link 11` with no line end (11 may be the head of a longer
    number): its link=11 fact is not expected of the parser after the cut."""
    from field import facts, mutate

    path = "field/repos/nvidia-smi-nvlink/a100-p4de-gpu0-12-links-shell-prompt.txt"  # split: tuning
    text = fixture(path)
    assert tail_cut(text).endswith("Link 11")
    ff = facts.FieldFile(facts.FIELD / "not-a-field-file.txt", "nvidia-smi-nvlink", (facts.Fact("link", 11),))
    before, _, _ = mutate.surfaced(ff.tool, text, ff.facts)
    assert before == {0}
    assert mutate.mutate_one(ff, text, before, "tail-cut").facts == 0


# ---------------------------------------------------------------- perftest


def test_perftest_gid_the_text_ends_inside_is_not_read():
    """`GID: 00:00:00:00:00:00:00:` (the text ends inside the GID): no gid of half its bytes."""
    from healthcheck.parsers.perftest import parse_perftest

    text = tail_cut(fixture("ib_write_bw/server-roce-tabs-expanded-header-gid-index-3.txt"))
    assert text.rstrip().endswith("GID: 00:00:00:00:00:00:00:")
    run = parse_perftest(text)
    assert run.addresses and all(a.gid is None or len(a.gid.split(":")) == 16 for a in run.addresses)


@pytest.mark.parametrize("name", ["client-kernel-5.1-couldnt-create-ib-resources.txt",
                                  "failed-to-modify-qp-to-rtr-grh-required-two-qps.txt"])
def test_perftest_failure_message_the_text_ends_inside_keeps_only_whole_words(name):
    from healthcheck.parsers.perftest import parse_perftest

    text = tail_cut(fixture(f"ib_write_bw/{name}"))
    cut_word = text.split()[-1]  # `crea` of create, `the` (whole or not: nothing after it)
    run = parse_perftest(text)
    assert not any(m.endswith(" " + cut_word) for m in (f.message for f in run.failures))


# ---------------------------------------------------------------- NCCL and torch logs


def _strings(doc) -> list[str]:
    import msgspec
    from field.facts import leaves

    return [v for _, v in leaves(msgspec.to_builtins(doc)) if isinstance(v, str)]


@pytest.mark.parametrize(("tool", "path"), [
    ("nccl-log", "corpus/nccl-debug/net-socket-connect-fail-proxy-service-retcode2-socketprogress-closed.txt"),
    ("torch-log", "corpus/torch-nccl-error/distbackenderror-remote-process-exited-nccl-2.18.5-two-lines.txt"),
    ("torch-log", "corpus/torch-nccl-error/gloo-recv-connection-closed-by-peer-pair-cc-598.txt"),
])
def test_a_log_message_the_text_ends_inside_keeps_only_its_whole_words(tool, path):
    """`NCCL WARN socketProg`, `A call failed possibly due to a ne`, `[../third_party/gloo/...tcp/p`:
    the word the text ends inside is no part of any message, error or text read."""
    from healthcheck.parsers import parser_for

    text = tail_cut(fixture(path))
    cut_word = text.split()[-1]
    for value in _strings(parser_for(tool)(text)):
        assert not value.rstrip().endswith(cut_word), value


# ---------------------------------------------------------------- ibstatus

IBSTATUS = "corpus/ibstatus/a100-hdr200-all-active.txt"


def test_ibstatus_fields_whose_port_line_a_cut_took_are_a_fragment():
    from healthcheck.parsers.ibstatus import parse_ibstatus

    one_block = "".join(fixture(IBSTATUS).splitlines(True)[:8])
    text = head_cut(one_block)
    assert "Infiniband device" not in text and "state:" in text
    with pytest.raises(FragmentError, match="which device"):
        parse_ibstatus(text)


def test_ibstatus_rate_the_text_ends_inside_is_not_read():
    """`rate:            20` (of 200 Gb/sec): no rate of 20."""
    from healthcheck.parsers.ibstatus import parse_ibstatus

    text = fixture(IBSTATUS)
    text = text[:text.index("200 Gb/sec") + 2]
    ports = parse_ibstatus(text).ports
    assert ports[-1].rate_gbps is None and all(p.rate_gbps == 200 for p in ports[:-1])


# ---------------------------------------------------------------- NVRx's attribution table


def test_nvrx_attribution_rows_without_their_header_are_a_fragment():
    """The header's last column says whether a row's ranks are the missing or the completed
    ones: its rows without it are refused as a fragment, never read as either."""
    from healthcheck.parsers.flight_recorder import parse_fr_analysis

    path = "field/repos/flight-recorder-analysis/nvrx-fr-attribution-lock-gil-missing-ranks-9-14.txt"  # tuning
    text = head_cut(fixture(path))
    assert "PGID" not in text and "| 9,14" in text
    with pytest.raises(FragmentError, match="missing or the completed"):
        parse_fr_analysis(text)


# ---------------------------------------------------------------- ibv_devinfo


def test_ibv_devinfo_firmware_the_text_ends_inside_is_not_read():
    """The second HCA's `fw_ver: 20.37` (of 20.37.1700), the text ending there: no firmware
    version 20.37; the first HCA's, whole, stays."""
    from healthcheck.parsers.ibv_devinfo import parse_ibv_devinfo

    text = fixture("ibv_devinfo/cx6-vv-2hca-port2-down-disabled.txt")
    second = text.index("20.37.1700", text.index("20.37.1700") + 1)
    devices = parse_ibv_devinfo(text[:second + len("20.37")]).devices
    assert devices[0].fw_ver == "20.37.1700" and devices[-1].fw_ver is None
