"""Refusals that cost evidence (issue 20): a parser refuses a whole text (ParseError, `hc parse`
exit 4) on a structural precondition while the text plainly holds facts it reads. Each test
takes a real output (its file named), transforms it the way a paste or a query changes it
(said in the test), and asserts that what is readable is read and `incomplete` (or the parser's
own key) says what was missing; text with no fact of the tool's is still refused."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from healthcheck.core.errors import ParseError
from healthcheck.parsers import parser_for
from healthcheck.parsers.nvidia_smi_query import NO_BUS_ID_COLUMN, parse_nvidia_smi_query

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
# nvidia_gpu_exporter's H100 capture (tests/fixtures/corpus/SOURCES.md): ~250 fields, one GPU
QUERY_H100 = FIXTURES / "corpus" / "nvidia-smi-query-gpu" / "h100-590-all-fields-idle.txt"


def _query_table() -> list[list[str]]:
    lines = [line for line in QUERY_H100.read_text().splitlines() if line.strip()]
    return [next(csv.reader([line], skipinitialspace=True)) for line in lines]


def _csv(rows: list[list[str]]) -> str:
    return "".join(", ".join(row) + "\n" for row in rows)


def _without(rows: list[list[str]], column: str) -> list[list[str]]:
    at = rows[0].index(column)
    return [row[:at] + row[at + 1:] for row in rows]


def _with_cell(rows: list[list[str]], column: str, value: str) -> list[list[str]]:
    at = rows[0].index(column)
    return [rows[0]] + [row[:at] + [value] + row[at + 1:] for row in rows[1:]]


# ---------------------------------------------------------------- nvidia-smi --query-gpu


def test_a_query_without_a_bus_id_column_is_read_as_unnamed_gpus_and_says_so():
    """The capture's CSV with its pci.bus_id column taken out (a `--query-gpu=` list that
    did not ask for it): every other column is readable; the GPU is named by its row (and the
    `index` column), never given a bus id, and `incomplete` says the bus id is missing."""
    facts = parser_for("nvidia-smi-query-gpu")(_csv(_without(_query_table(), "pci.bus_id")))
    assert facts.gpus == [] and facts.incomplete == NO_BUS_ID_COLUMN
    (gpu,) = facts.unnamed
    assert (gpu.name, gpu.query_fields["index"], gpu.memory_total_mib) == ("NVIDIA H100 80GB HBM3", 0, 81559)
    assert facts.driver_version == "590.48.01"


def test_the_probe_still_refuses_a_query_without_a_bus_id_column():
    """The probe asks for pci.bus_id: without it, the GPU checks must see ERROR, never a node
    with no GPUs, so its strict reading still refuses."""
    with pytest.raises(ParseError, match="pci.bus_id"):
        parse_nvidia_smi_query(_csv(_without(_query_table(), "pci.bus_id")))


def test_a_bus_id_that_is_no_pci_address_keeps_the_rows_readings():
    """The capture's bus id redacted to `00000000:XX:00.0` (as pastes hide it): its readings are
    an unnamed GPU's, said in `incomplete`, not a refused file."""
    facts = parser_for("nvidia-smi-query-gpu")(_csv(_with_cell(_query_table(), "pci.bus_id", "00000000:XX:00.0")))
    assert facts.gpus == [] and [g.name for g in facts.unnamed] == ["NVIDIA H100 80GB HBM3"]
    assert "no PCI address" in (facts.incomplete or "")
    with pytest.raises(ParseError, match="not a PCI bus id"):
        parse_nvidia_smi_query(_csv(_with_cell(_query_table(), "pci.bus_id", "00000000:XX:00.0")))


def test_a_row_with_more_values_than_columns_is_left_unread_and_the_others_read():
    """The capture's row twice (two GPUs of one node), the second with a value too many (a torn
    line): the first row is read, the second counted unread, and `incomplete` says why."""
    header, row = _query_table()
    text = _csv([header, row, row + ["0"]])
    facts = parser_for("nvidia-smi-query-gpu")(text)
    assert [g.pci_bus_id for g in facts.gpus] == ["0000:00:09.0"]
    assert facts.unrecognized.count == 1 and facts.unrecognized.sample[0].line == 3
    assert "more values than" in (facts.incomplete or "")


def test_a_query_whose_only_row_has_too_many_values_is_still_refused():
    header, row = _query_table()
    with pytest.raises(ParseError, match="values for"):
        parser_for("nvidia-smi-query-gpu")(_csv([header, row + ["0"]]))


def test_a_whole_query_reads_as_before_with_nothing_incomplete():
    facts = parser_for("nvidia-smi-query-gpu")(QUERY_H100.read_text())
    assert [g.pci_bus_id for g in facts.gpus] == ["0000:00:09.0"] and facts.incomplete is None


# ---------------------------------------------------------------- nvidia-smi (the default table)

# a real capture under load (tests/fixtures/nvidia-smi/SOURCES.md): GI/CI columns, three processes
TABLE_H100 = FIXTURES / "nvidia-smi" / "h100-load-gpu-burn-processes-590.48.01.txt"
# driver 384's layout: no GI/CI columns, a process on each of 8 GPUs
TABLE_P100 = FIXTURES / "nvidia-smi" / "p100-8gpu-one-process-per-gpu-384.81.txt"


def _processes_cut(path: Path, above: str) -> str:
    """The capture from its processes table's column names, its `|===|` rule or its first row
    on: a paste cut at its head, below the `| Processes:` title."""
    lines = path.read_text().splitlines(keepends=True)
    first_row = next(i for i, line in enumerate(lines) if line.startswith("|    0 "))
    at = {"column-names": next(i for i, line in enumerate(lines) if line.startswith("|  GPU ")),
          "rule": first_row - 1, "rows": first_row}[above]
    return "".join(lines[at:])


@pytest.mark.parametrize("path", [TABLE_H100, TABLE_P100], ids=["gi-ci", "driver-384"])
@pytest.mark.parametrize("above", ["column-names", "rule", "rows"])
def test_a_processes_table_cut_below_its_title_keeps_its_processes(path, above):
    """Each capture cut to its processes table (the `| Processes:` title and all above it cut
    off the paste): the same processes as the whole capture (was: refused "not the default
    nvidia-smi table")."""
    cut = _processes_cut(path, above)
    assert "Processes:" not in cut
    whole = parser_for("nvidia-smi")(path.read_text()).processes
    assert whole and parser_for("nvidia-smi")(cut).processes == whole


def test_a_line_that_only_looks_like_a_process_row_is_still_refused():
    with pytest.raises(ParseError, match="not the default nvidia-smi table"):
        parser_for("nvidia-smi")("|    0   1   2   3 |\n| see C above |\n")


# ---------------------------------------------------------------- nccl-ras


# NCCL 2.24's reply, derived from NCCL's own format strings (tests/fixtures/nccl-ras/README.md):
# Errors/INCOMPLETE, then Warnings/MISMATCH of status and operation counts
RAS_224 = FIXTURES / "nccl-ras" / "derived-2.24-incomplete-missing-rank-numbers-status.txt"


def test_a_ras_reply_cut_above_its_section_title_keeps_its_communicator_block():
    """The reply from its last `#0-0 (HASH) MISMATCH` block on (the `Warnings` title and all
    above it cut off the paste): the block reads as in the whole reply, `incomplete` says the
    section is unknown, and the cut reply is never `ok` (was: refused "no RAS reply")."""
    lines = RAS_224.read_text().splitlines(keepends=True)
    at = max(i for i, line in enumerate(lines) if line.startswith("#0-0 "))
    whole = parser_for("nccl-ras")(RAS_224.read_text())
    cut = parser_for("nccl-ras")("".join(lines[at:]))
    assert cut.issues == tuple(i for i in whole.issues if i.kind == "MISMATCH")
    assert [(s.operation, s.sets[-1].ranks[0].rank) for s in cut.issues[0].op_counts] == [("collective", 3)]
    assert cut.incomplete and "Errors/Warnings" in cut.incomplete and whole.incomplete is None
    assert not cut.ok and not cut.complete


def test_rank_lines_without_their_block_line_are_still_refused():
    """The block's rank lines alone (no `#G-I (HASH) KIND` line, no section title): nothing
    says which communicator or issue they are of, so the text is refused as before."""
    with pytest.raises(ParseError, match="no RAS reply"):
        parser_for("nccl-ras")("  6 ranks have status RUNNING\n  Rank 6 has status UNKNOWN\n")


# ---------------------------------------------------------------- ibv_devinfo

# MLNX_OFED's ibv_devinfo, two mlx4 HCAs, port 2 of the first down (tests/fixtures/ibv_devinfo/SOURCES.md)
DEVINFO_MLX4 = FIXTURES / "ibv_devinfo" / "mlnx-ofed-mlx4-2hca-2port-device-ports-port2-down.txt"


@pytest.mark.parametrize("first", ["\ttransport:", "\t\tport:\t1"], ids=["transport", "port"])
def test_ibv_devinfo_cut_below_its_hca_id_line_keeps_the_ports(first):
    """The capture from its first `transport:` (the first `hca_id:` line cut off the paste) or
    its first `port: 1` line on: the first device's ports read, its name unknown (""), the
    second device whole, and `incomplete` says the name is missing (was: refused "no hca_id
    block")."""
    lines = DEVINFO_MLX4.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith(first))
    whole = parser_for("ibv_devinfo")(DEVINFO_MLX4.read_text())
    cut = parser_for("ibv_devinfo")("".join(lines[at:]))
    assert [d.name for d in cut.devices] == ["", whole.devices[1].name]
    assert cut.devices[0].ports == whole.devices[0].ports and cut.devices[1] == whole.devices[1]
    assert [p.state for p in cut.devices[0].ports] == ["PORT_ACTIVE", "PORT_DOWN"]
    assert cut.incomplete and "hca_id" in cut.incomplete and whole.incomplete is None


def test_ibv_devinfo_lines_from_inside_a_port_are_still_refused():
    """A port's fields without its `port:` line: which port they are of is not known, as before."""
    with pytest.raises(ParseError, match="no hca_id block"):
        parser_for("ibv_devinfo")("\t\t\tstate:\t\t\tPORT_DOWN (1)\n\t\t\tmax_mtu:\t\t4096 (5)\n")


# ---------------------------------------------------------------- nccl-tests

# nccl-tests 2.19.6 on one H100 (tests/fixtures/nccl-tests/SOURCES.md): banner, rank map, rows, footer
NCCL_TESTS_H100 = FIXTURES / "nccl-tests" / "all_reduce-h100-1gpu-2.19.6-nccl-2.28.9.txt"
# the 2-node 16-rank A100 run: a footer with a real average
NCCL_TESTS_A100 = FIXTURES / "nccl-tests" / "all_reduce-a100-2node-16rank-pairwise-templated-hosts.txt"


def _footer(path: Path) -> str:
    """The capture's `# Out of bounds values` and `# Avg bus bandwidth` lines alone: a paste of
    the summary nccl-tests ends with, everything above it cut."""
    return "".join(line for line in path.read_text().splitlines(keepends=True)
                   if "Out of bounds values" in line or "Avg bus bandwidth" in line)


@pytest.mark.parametrize("path", [NCCL_TESTS_H100, NCCL_TESTS_A100], ids=["h100", "a100-2node"])
def test_nccl_tests_footer_alone_is_read_and_says_it_is_alone(path):
    """The footer alone holds the run's summary (out-of-bounds count, the average busbw): read
    as in the whole capture, with no sample, and `incomplete` says the rest is missing (was:
    refused "no nccl-tests banner, row, failure or launcher error")."""
    whole = parser_for("nccl-tests")(path.read_text())
    alone = parser_for("nccl-tests")(_footer(path))
    assert (alone.avg_busbw_gbytes_per_s, alone.out_of_bounds, alone.out_of_bounds_ok) == (
        whole.avg_busbw_gbytes_per_s, whole.out_of_bounds, whole.out_of_bounds_ok)
    assert alone.samples == () and alone.incomplete and "footer" in alone.incomplete and whole.incomplete is None


def test_a_footer_alone_from_a_run_is_still_misconfigured_never_judged():
    """Where hc ran nccl-tests itself, a footer with no rows says nothing of the node's
    bandwidth: the attempt is `misconfigured` (bw.E005, ERROR) as the refusal made it before."""
    from healthcheck.probes.bw import nccl_attempt_from_text

    attempt = nccl_attempt_from_text(_footer(NCCL_TESTS_A100), "all_reduce", argv=("all_reduce_perf",),
                                     expected_ranks=8, returncode=0)
    assert attempt.samples == () and attempt.misconfigured


def test_a_column_header_with_no_row_is_still_refused():
    lines = NCCL_TESTS_H100.read_text().splitlines(keepends=True)
    header = "".join(line for line in lines if "algbw" in line or "(elements)" in line)
    with pytest.raises(ParseError, match="column header with no row"):
        parser_for("nccl-tests")(header)


# ---------------------------------------------------------------- nvidia-smi nvlink

NVLINK = FIXTURES / "corpus" / "nvidia-smi-nvlink"  # real captures (tests/fixtures/corpus/SOURCES.md)


@pytest.mark.parametrize("name", ["h100-18links-590.txt", "h800-nvlink-gt-d-throughput-during-training.txt"])
def test_nvlink_lines_cut_below_their_gpu_title_are_unnamed_links(name):
    """A capture with its `GPU 0: ...` title cut off the paste: its links (status) or per-link
    counters (-gt d) as the whole capture's GPU has them, `unnamed`, `incomplete` saying which
    GPU is not known (was: refused "no 'GPU n: ...' line")."""
    text = (NVLINK / name).read_text()
    (gpu,) = parser_for("nvidia-smi-nvlink")(text).gpus
    cut = parser_for("nvidia-smi-nvlink")(text.split("\n", 1)[1])
    assert cut.gpus == [] and cut.unnamed is not None
    assert (cut.unnamed.links, cut.unnamed.counters) == (gpu.links, gpu.counters) and (gpu.links or gpu.counters)
    assert cut.incomplete and "GPU" in cut.incomplete


def test_an_nvlink_capture_cut_mid_value_keeps_every_other_link():
    """The A100 capture (8 GPUs x 12 links) with its last line cut mid-value (`Link 11: 2`):
    every GPU and every other link read, the cut link left out and named in `incomplete` (was:
    the whole file refused "neither a speed nor <inactive>")."""
    text = (NVLINK / "a100-8gpu-nvlink-status.txt").read_text().rstrip("\n")
    cut = text[: text.rindex("25 GB/s") + 1]
    whole = parser_for("nvidia-smi-nvlink")(text)
    facts = parser_for("nvidia-smi-nvlink")(cut)
    assert [g.links for g in facts.gpus[:-1]] == [g.links for g in whole.gpus[:-1]]
    assert facts.gpus[-1].links == whole.gpus[-1].links[:-1]
    assert "Link 11" in (facts.incomplete or "") and whole.incomplete is None


# ---------------------------------------------------------------- sinfo

SINFO = FIXTURES / "sinfo"  # real output of a private Slurm 22.05 (tests/fixtures/sinfo/SOURCES.md)


@pytest.mark.parametrize("name", ["slurm-22.05-N-O-default-widths-truncated.txt", "slurm-22.05-N-O-sized.txt"])
def test_headerless_blank_separated_sinfo_reads_each_nodes_state(name):
    """`sinfo -N -O NodeList,StateComplete,...` with its header line cut (as `-h` prints it): each
    node and its state as with the header; the rest of the line kept as one unnamed column,
    also where a reason holds a '|' (was: refused "its '|' fields differ from line to line")."""
    text = (SINFO / name).read_text()
    whole = parser_for("sinfo")(text)
    cut = parser_for("sinfo")(text.split("\n", 1)[1])
    assert cut.layout == "inferred"
    assert [(r.nodes, r.state) for r in cut.rows] == [(r.nodes, r.state) for r in whole.rows]


def test_one_line_of_prose_with_a_state_word_is_no_node():
    with pytest.raises(ParseError):
        parser_for("sinfo")("system down\n")


# rccl-tests' `--output_file`: one JSON record per line (tests/fixtures/nccl-tests/SOURCES.md)
RCCL_LINES = FIXTURES / "nccl-tests" / "rccl-tests-output-file-json-lines-allreduce-4gpu.txt"


def test_a_line_that_is_no_record_among_rccl_json_lines_is_skipped_and_named():
    """The real records with a line of another program's inserted between two of them (a
    transformation: a launcher's warning written into the same file): every record read as in
    the untouched file, the line counted, `incomplete` naming it (was: refused "line N: ...")."""
    lines = RCCL_LINES.read_text().splitlines(keepends=True)
    mixed = "".join(lines[:2] + ["srun: warning: can't honor --ntasks-per-node set to 4\n"] + lines[2:])
    whole = parser_for("nccl-tests")(RCCL_LINES.read_text())
    facts = parser_for("nccl-tests")(mixed)
    assert facts.samples == whole.samples and facts.bad_rows == whole.bad_rows + 1
    assert "line 3" in (facts.incomplete or "") and whole.incomplete is None


# ---------------------------------------------------------------- nvidia-smi topo -m

TOPO = FIXTURES / "corpus" / "nvidia-smi-topo"  # real captures (tests/fixtures/corpus/SOURCES.md)


@pytest.mark.parametrize("name", ["h100-8gpu-nv18.txt", "h800-8gpu-nv8-4nic-truncated-copy.txt"])
def test_a_topo_header_alone_names_the_nodes_devices(name):
    """The capture cut right after its header line (the matrix rows cut off the paste): the
    devices the header names (devices of the whole capture too), each without a row, no link,
    `incomplete` saying so (was: refused "a header row but no device rows under it")."""
    lines = (TOPO / name).read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if "GPU0" in line and "GPU1" in line)
    whole = parser_for("nvidia-smi-topo")("".join(lines))
    alone = parser_for("nvidia-smi-topo")("".join(lines[: at + 1]))
    named = [word for word in lines[at].split() if word[:3] in ("GPU", "NIC") and word[3:].isdigit()]
    assert alone.devices == alone.devices_without_row == named and set(named) <= set(whole.devices)
    assert alone.links == {} and alone.incomplete and whole.incomplete is None


# ---------------------------------------------------------------- perftest (ib_write_bw)

# AMD AINIC client, bidirectional, 4 QPs (tests/fixtures/corpus/SOURCES.md)
PERFTEST = FIXTURES / "corpus" / "ib_write_bw" / "client-bidir-4qp-all-sizes-ainic-800g.txt"


def _perftest_part(keep) -> str:
    return "".join(line for line in PERFTEST.read_text().splitlines(keepends=True) if keep(line))


@pytest.mark.parametrize("part", ["box", "addresses"])
def test_perftests_parameters_box_or_addresses_alone_are_read(part):
    """The capture's parameters box alone (its title line and all after the box cut), or its QP
    address lines alone: device, link type, MTU, GID index, QPs, or each address and GID, as
    in the whole capture, `incomplete` saying the test and its end are unknown (was: refused
    "no test banner, result row or error")."""
    whole = parser_for("ib_write_bw")(PERFTEST.read_text())
    if part == "box":
        text = _perftest_part(lambda line: " : " in line and "address" not in line)
        run = parser_for("ib_write_bw")(text)
        assert (run.device, run.link_type, run.mtu, run.gid_index, run.qps) == (
            whole.device, whole.link_type, whole.mtu, whole.gid_index, whole.qps) and run.device == "ionic_1"
    else:
        text = _perftest_part(lambda line: "address:" in line or line.lstrip().startswith("GID:"))
        run = parser_for("ib_write_bw")(text)
        assert run.addresses == whole.addresses and run.addresses
    assert run.rows == () and run.title is None and run.incomplete and whole.incomplete is None


def test_the_ib_write_bw_probe_still_calls_a_box_alone_unreadable():
    """Where hc ran ib_write_bw itself, a box with no title, row or error says nothing of the
    port: the probe reads it as unreadable (bw.E012, ERROR), as the refusal made it."""
    from healthcheck.probes.ib_write_bw import read_perftest_output

    run, why = read_perftest_output(_perftest_part(lambda line: " : " in line and "address" not in line))
    assert run is None and why
