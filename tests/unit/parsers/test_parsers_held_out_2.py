"""The mechanisms behind the field files of issue 20's second held-out set (retired as a
measure; each shape fixed here on the real file and, where one exists, on a transformation
of another real fixture, which says so): a test framework's logger prefix before every
line, markdown emphasis in a table row, nvidia-smi's driver warnings, an Xid split over
bare lines, an NVLink Xid's link, a file of two nccl-tests, a headerless sinfo layout.
"""

from __future__ import annotations

import pytest
from support import FIXTURES, best_time

from healthcheck.core.errors import ParseError
from healthcheck.parsers import lines
from healthcheck.parsers.nccl_tests import parse_nccl_tests
from healthcheck.parsers.nvidia_smi_table import parse_nvidia_smi_table
from healthcheck.parsers.perftest import parse_perftest
from healthcheck.parsers.sinfo import parse_sinfo
from healthcheck.parsers.xid import parse_kernel_log

FIELD = FIXTURES / "field"
AVOCADO = FIELD / "issues-2" / "ib_write_bw" / "avocado-logger-prefixed-ud-send-row.txt"
BOLD = FIELD / "issues-2" / "ib_write_bw" / "send-bw-markdown-bold-average-two-cases.txt"
PERFTEST = FIXTURES / "ib_write_bw" / "client-bidir-4qp-all-sizes-ainic-800g.txt"
INFOROM = FIELD / "unseen" / "nvidia-smi" / "v100-8gpu-460.32.03-azure-inforom-corrupted-warning.txt"
SMI = FIXTURES / "nvidia-smi" / "h200-idle-no-processes-590.48.01.txt"
SMI_Q = FIXTURES / "corpus" / "nvidia-smi-q" / "a10-1gpu-driver-535.129.03.txt"
XID31 = FIELD / "unseen" / "xid" / "xid31-mmu-fault-three-lines-no-stamp.txt"
XID74 = FIELD / "unseen" / "xid" / "xid74-nvlink-fatal-link14-md-backticks.txt"
XID79_BARE = FIELD / "issues" / "xid" / "xid79-bare-lines-rtx5090.txt"
TWO_TESTS = FIELD / "unseen" / "nccl-tests" / "all_reduce-then-sendrecv-h100-2node-smoke-2.17.8.txt"
ALL_REDUCE = FIXTURES / "nccl-tests" / "all_reduce-h100-1gpu-2.19.6-nccl-2.28.9.txt"
BROADCAST = FIXTURES / "nccl-tests" / "broadcast-h100-1gpu-2.19.6.txt"
SINFO_GCM = FIELD / "unseen" / "sinfo" / "sinfo-N-o-gres-pipe-padded-no-header-drained-dollar.txt"
SINFO_HC = FIXTURES / "sinfo" / "slurm-22.05-hc-format-h-N-o-NTHE.txt"

# the prefix avocado's logger wrote before each of perftest's lines (the real file's first line)
AVOCADO_PREFIX = "2019-07-16 03:43:24,132 process          L0458 DEBUG| [stdout] "


def _rows(run) -> list[tuple[int, float]]:
    return [(r.size_bytes, r.msg_rate_mpps) for r in run.rows]


# ---------------------------------------------------------------- a logger's prefix


def test_perftest_under_a_test_frameworks_logger_prefix_is_read():
    run = parse_perftest(AVOCADO.read_text())
    assert _rows(run) == [(1024, 1.512181)]
    assert [a.role for a in run.addresses] == ["local", "remote"]


def test_a_logger_prefix_on_every_line_of_another_perftest_output_changes_nothing():
    # transformation: a real client's output, each line prefixed as avocado logged the real file
    text = PERFTEST.read_text()
    prefixed = "".join(AVOCADO_PREFIX + line for line in text.splitlines(keepends=True))
    assert lines.logger_prefixed(prefixed.splitlines())
    assert parse_perftest(prefixed) == parse_perftest(text)


def test_the_logger_prefix_is_a_pylog_stamp_on_the_line_layer():
    # transformation: a real nccl-tests output logged through logging's cookbook format
    text = ALL_REDUCE.read_text()
    logged = "".join(f"2024-03-01 10:00:00,123 - bench - INFO - {line}" for line in text.splitlines(keepends=True))
    read = [line for line in lines.read_lines(logged) if line.text.strip()]
    assert all(line.stamp_kind == "pylog" and line.source == "bench" and line.level == "I" for line in read)
    run, again = parse_nccl_tests(text), parse_nccl_tests(logged)
    assert (again.samples, again.avg_busbw_gbytes_per_s) == (run.samples, run.avg_busbw_gbytes_per_s)


def test_a_lone_logged_line_is_no_logger_prefixed_text():
    text = PERFTEST.read_text().splitlines()
    assert not lines.logger_prefixed([AVOCADO_PREFIX + text[0], *text[1:]])
    assert lines.pasted_lines("\n".join([AVOCADO_PREFIX + text[0], *text[1:]]))[0].startswith("2019-07-16")


# ---------------------------------------------------------------- markdown emphasis


def test_markdown_bold_numbers_in_perftest_rows_are_read():
    run = parse_perftest(BOLD.read_text())
    assert _rows(run) == [(1024, 5.67734), (1024, 0.942218)]


def test_bold_averages_in_another_perftest_output_change_nothing():
    # transformation: the real client's rows with each average marked `**...**` as the real paste did
    text = PERFTEST.read_text()
    run = parse_perftest(text)
    bold = []
    for line in text.splitlines():
        words = line.split()
        if len(words) == 5 and all(w.replace(".", "").isdigit() for w in words):
            line = line.replace(words[3], f"**{words[3]}**", 1)
        bold.append(line)
    assert "**" in "\n".join(bold)
    assert parse_perftest("\n".join(bold)).rows == run.rows


def test_emphasis_is_taken_off_only_around_a_word():
    assert lines.unemphasized("1024  **5544.28**  5.6") == "1024  5544.28  5.6"
    assert lines.unemphasized("f(**kwargs)") == "f(**kwargs)"
    assert lines.unemphasized("** 3 **") == "** 3 **"


# ---------------------------------------------------------------- nvidia-smi's warnings


def test_nvidia_smis_inforom_warning_after_the_table_is_surfaced():
    table = parse_nvidia_smi_table(INFOROM.read_text())
    assert [(w.pci_bus_id, "infoROM is corrupted" in w.message) for w in table.warnings] == [("0008:00:00.0", True)]
    assert len(table.gpus) == 8


def test_a_driver_warning_after_another_table_is_surfaced():
    # transformation: a real H200 table with the real file's warning line after it
    warning = INFOROM.read_text().splitlines()[-1]
    base = parse_nvidia_smi_table(SMI.read_text())
    table = parse_nvidia_smi_table(SMI.read_text() + warning + "\n")
    assert table.gpus == base.gpus and not base.warnings
    assert [w.pci_bus_id for w in table.warnings] == ["0008:00:00.0"]


def test_a_driver_warning_before_a_q_report_is_surfaced():
    # transformation: a real `nvidia-smi -q` with the real file's warning line before it
    from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q

    warning = INFOROM.read_text().splitlines()[-1]
    report = SMI_Q.read_text()
    base, facts = parse_nvidia_smi_q(report), parse_nvidia_smi_q(warning + "\n" + report)
    assert facts.gpus == base.gpus and not base.warnings
    assert [(w.pci_bus_id, "infoROM" in w.message) for w in facts.warnings] == [("0008:00:00.0", True)]


# ---------------------------------------------------------------- Xids


def test_an_xid_split_over_bare_lines_keeps_its_continuation():
    (xid,) = parse_kernel_log(XID31.read_text()).xids
    assert xid.code == 31 and "FAULT_PDE ACCESS_TYPE_VIRT_READ" in xid.message and "MMU Fault" in xid.message


def test_bare_driver_lines_after_an_xid_stay_their_own():
    # the real tuning file: `NVRM:` lines after a bare Xid 79 are messages of their own
    log = parse_kernel_log(XID79_BARE.read_text())
    assert [x.message for x in log.xids if x.code == 79][0].rstrip(".") == "GPU has fallen off the bus"


def test_a_stamped_xid_takes_no_bare_line_after_it():
    # transformation: the real Xid 31 with a dmesg stamp: a stamped log's bare line is no continuation
    head, *rest = XID31.read_text().splitlines()
    (xid,) = parse_kernel_log("\n".join([f"[ 1234.567890] {head}", *rest])).xids
    assert "FAULT_PDE" not in xid.message


def test_an_nvlink_xid_names_its_link():
    (xid,) = parse_kernel_log(XID74.read_text()).xids
    assert (xid.code, xid.link) == (74, 14)
    # transformation: the same line naming another link
    (other,) = parse_kernel_log(XID74.read_text().replace("link 14(", "link 3(")).xids
    assert other.link == 3


# ---------------------------------------------------------------- nccl-tests


def test_each_tests_average_of_a_file_of_two_tests_is_kept():
    run = parse_nccl_tests(TWO_TESTS.read_text())
    assert [(a.collective, a.avg_busbw_gbytes_per_s) for a in run.averages] == [
        ("all_reduce", 43.6076), ("sendrecv", 42.9182)]


def test_two_real_outputs_one_after_the_other_keep_both_averages():
    # transformation: two real single-test outputs concatenated, as a job running both prints them
    first, second = parse_nccl_tests(ALL_REDUCE.read_text()), parse_nccl_tests(BROADCAST.read_text())
    both = parse_nccl_tests(ALL_REDUCE.read_text() + BROADCAST.read_text())
    assert [a.avg_busbw_gbytes_per_s for a in both.averages] == [
        first.avg_busbw_gbytes_per_s, second.avg_busbw_gbytes_per_s]


# ---------------------------------------------------------------- sinfo without a header


def test_a_headerless_gres_layout_is_read_by_its_cells_never_gres_as_state():
    report = parse_sinfo(SINFO_GCM.read_text())
    states = {r.nodes: (r.state, r.state_flags) for r in report.rows}
    assert states["node2654"] == ("drained", ["maintenance_reservation"])
    assert states["node1221"] == ("allocated", [])
    assert all(not (r.state or "").startswith("gpu") for r in report.rows)
    assert report.rows[0].gres == "gpu:ampere:8"


def test_a_headerless_layout_with_no_state_column_is_refused():
    # transformation: the real file without its state column: nothing may be read as a state
    cut = ["|".join(c for i, c in enumerate(line.split("|")) if i != 5) for line in SINFO_GCM.read_text().splitlines()]
    with pytest.raises(ParseError, match="no column of node states"):
        parse_sinfo("\n".join(cut))


def test_hcs_own_headerless_format_is_still_hcs():
    report = parse_sinfo(SINFO_HC.read_text())
    assert report.layout == "hc" and report.rows


# ---------------------------------------------------------------- hostile runs


@pytest.mark.parametrize("filler", ["**1", "*", "2019-07-16 03:43:24,132 a ", "2019-07-16 03:43:24,132 process   L0458 ",
                                    "NVRM: Xid (PCI:0000:b5:00): 31, x\nMMU Fault\n"])
def test_the_new_shapes_cost_their_length(filler):
    def each(text: str) -> None:
        lines.pasted_lines(text)
        list(lines.read_lines(text, max_line=10**7))
        parse_perftest(text)
        parse_kernel_log(text)

    small, large = filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler))
    bound = 50 * best_time(each, small) + 0.15
    assert best_time(each, large, enough=bound) <= bound  # the first run under it ends the measuring


def test_a_headerless_sinfo_line_of_many_fields_costs_its_length():
    # a node, a state, then thousands of fields: refused or read, never quadratic in the fields
    def each(n: int) -> float:
        return best_time(parse_sinfo, "n1|gpu:a:8|idle" + "|x" * n)

    assert each(32_000) <= 25 * each(2_000) + 0.02  # 16x the fields: ~16x when linear, ~256x quadratic


@pytest.mark.parametrize("filler", ["|", "n|gpu:a:8|", "n1|gpu:a:8|idle\n"])
def test_headerless_sinfo_costs_its_length(filler):
    def each(text: str) -> None:
        try:
            parse_sinfo(text)
        except ParseError:
            pass

    small, large = filler * (100_000 // len(filler)), filler * (1_000_000 // len(filler))
    bound = 50 * best_time(each, small) + 0.15
    assert best_time(each, large, enough=bound) <= bound  # the first run under it ends the measuring
