"""nccl-tests parser: every real output in tests/fixtures/nccl-tests, the formats of every
2.x version (built from nccl-tests' own printf formats), the -J JSON, rccl-tests' JSON
lines, failures, launchers, garbage and hostile sizes."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import FIXTURES, assert_linear, run_hc, run_hc_inproc

from healthcheck.core.errors import ParseError
from healthcheck.parsers import TOOLS, parser_for
from healthcheck.parsers.bandwidth_common import COLLECTIVES
from healthcheck.parsers.nccl_tests import (
    UNKNOWN,
    NcclTestsRun,
    collective_name,
    parse_nccl_tests,
    parse_nccl_tests_json,
)

DIR = FIXTURES / "nccl-tests"


def read(name: str) -> str:
    return (DIR / name).read_text()


def parse(name: str, collective: str | None = None) -> NcclTestsRun:
    return parse_nccl_tests(read(name), collective)


def sample(run: NcclTestsRun, size: int, placement: str = "out-of-place", redop: str | None = None):
    found = [s for s in run.samples if s.size_bytes == size and s.placement == placement
             and (redop is None or s.redop == redop)]
    assert found, (size, placement)
    return found[-1]


# ------------------------------------------------------------ every fixture

# file -> (collective, samples, rank_count, completed, failures, launcher error)
EXPECTED = {
    "all_gather-a100-8gpu-old-format-c0.txt": (UNKNOWN, 68, 8, True, 0, False),
    "all_reduce-1gpu-2.18-tail-scientific-notation.txt": ("all_reduce", 24, 1, True, 0, False),
    "all_reduce-2018-oldest-header-no-hash-openmpi-gid-warning.txt": (UNKNOWN, 0, 8, False, 0, False),
    "all_reduce-2gpu-mixed-gtx-p2p-disabled-socket-header-and-init-warn.txt": (UNKNOWN, 0, 2, False, 0, False),
    "all_reduce-2host-4rank-test-nccl-failure-internal-error-mpirun-abort.txt": (UNKNOWN, 0, 4, False, 2, False),
    "all_reduce-a100-2node-16rank-pairwise-templated-hosts.txt": (UNKNOWN, 12, 16, True, 0, False),
    "all_reduce-a100-8gpu-old-format-c0.txt": (UNKNOWN, 68, 8, True, 0, False),
    "all_reduce-a100-pcie-4gpu-collective-test-starting-header-nccl-2.19.3-init.txt": ("all_reduce", 0, 4, False, 0, False),
    "all_reduce-h100-2node-ring-large-sizes-tail-95gbs.txt": (UNKNOWN, 10, 0, True, 0, False),
    "all_reduce-h100-1gpu-2.19.6-nccl-2.28.9.txt": ("all_reduce", 28, 1, True, 0, False),
    "all_gather-h100-1gpu-2.19.6-nccl-debug-info-2.28.9.txt": ("all_gather", 6, 1, True, 0, False),
    "broadcast-h100-1gpu-2.19.6.txt": ("broadcast", 12, 1, True, 0, False),
    "all_reduce-h100-a3mega-2node-16rank.txt": (UNKNOWN, 62, 16, True, 0, False),
    "all_reduce-mpi-tag-output-2.18-socket-rtx5090.txt": ("all_reduce", 16, 2, True, 0, False),
    "all_reduce-multi-redop-max-min-rows-fragment.txt": (UNKNOWN, 22, 0, False, 0, False),
    "alltoall-a100-8gpu-old-format-c0.txt": (UNKNOWN, 68, 8, True, 0, False),
    "mpirun-not-enough-slots-failure.txt": ("all_reduce", 0, 0, False, 0, True),
    "rccl-tests-output-file-json-lines-allreduce-4gpu.txt": ("all_reduce", 5, 4, False, 0, False),
    "reduce_scatter-2node-4gpu-each-zero-size-rows-newer-format.txt": (UNKNOWN, 14, 0, False, 0, False),
    "reduce_scatter-a100-8gpu-old-format-c0.txt": (UNKNOWN, 68, 8, True, 0, False),
    "test-nccl-failure-common-cu-961-with-nccl-chains-two-hosts-4090.txt": (UNKNOWN, 0, 0, False, 2, False),
}


def test_every_fixture_is_expected_and_listed_in_sources():
    files = sorted(p.name for p in DIR.glob("*.txt"))
    assert files == sorted(EXPECTED)
    sources = read("SOURCES.md")
    assert all(f"`nccl-tests/{name}`" in sources for name in files)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_parses(name):
    collective, n_samples, rank_count, completed, n_failures, launcher = EXPECTED[name]
    run = parse(name)
    assert (run.collective, len(run.samples), run.rank_count, run.completed, len(run.failures),
            run.launcher_error is not None) == (collective, n_samples, rank_count, completed, n_failures, launcher)
    assert all(s.collective == collective and s.ranks == rank_count for s in run.samples)
    assert run.bad_rows == 0 and not run.lone_ranks
    # the facts survive a JSON round trip (hc parse prints them)
    assert msgspec.json.decode(msgspec.json.encode(run), type=NcclTestsRun) == run


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECTED.items() if e[1]))
def test_the_caller_names_the_collective_where_the_output_does_not(name):
    run = parse(name, collective="all_gather_perf")
    printed = EXPECTED[name][0]
    assert run.collective == (printed if printed != UNKNOWN else "all_gather")
    assert {s.collective for s in run.samples} == {run.collective}


# ------------------------------------------------------------ the fixtures, value by value


def test_h100_two_nodes_newer_format():
    run = parse("all_reduce-h100-a3mega-2node-16rank.txt", "all_reduce")
    assert run.collective == "all_reduce" and run.headers == 1 and run.tables == 1
    assert (run.threads, run.gpus_per_thread, run.min_bytes, run.max_bytes, run.warmup_iters, run.iters,
            run.validation) == (1, 1, 8, 8589934592, 5, 20, True)
    assert run.hosts == ("ztan-mig-235z", "ztan-mig-gq73")
    assert [r.host for r in run.ranks] == ["ztan-mig-235z"] * 8 + ["ztan-mig-gq73"] * 8
    r8 = run.ranks[8]
    assert (r8.rank, r8.group, r8.pid, r8.device, r8.bus_id, r8.model) == (
        8, 0, 6733, 0, "0000:04:00", "NVIDIA H100 80GB HBM3")
    last = sample(run, 8589934592)
    assert (last.busbw_gbytes_per_s, last.algbw_gbytes_per_s, last.time_us, last.wrong, last.ranks,
            last.dtype, last.redop) == (338.82, 180.71, 47535.0, 0, 16, "float", "sum")
    assert sample(run, 8589934592, "in-place").busbw_gbytes_per_s == 337.35
    assert [s.placement for s in run.samples[:2]] == ["out-of-place", "in-place"]
    assert run.samples[0].size_bytes == 8 and run.last_size_bytes == 8589934592
    assert (run.out_of_bounds, run.out_of_bounds_ok, run.avg_busbw_gbytes_per_s, run.avg_ok) == (0, True, 70.742, None)


def test_old_format_c0_all_reduce():
    """<= 2.11: no Group, no root, an `error` column; -c 0 prints N/A; an INFO line inside."""
    run = parse("all_reduce-a100-8gpu-old-format-c0.txt")
    assert run.validation is False and run.tables == 1
    assert all(s.wrong is None for s in run.samples)
    assert {s.redop for s in run.samples} == {"sum"}
    assert run.ranks[3].group is None and run.ranks[3].bus_id == "0x00" and run.ranks[3].model == "A100-SXM4-40GB"
    assert run.hosts == ("localhost",)
    assert sample(run, 8589934592).busbw_gbytes_per_s == 235.26
    assert sample(run, 8589934592, "in-place").time_us == 63959.0
    assert sample(run, 4194304).time_us == 112.0
    assert [s.size_bytes for s in run.samples[:4]] == [0, 0, 0, 0]
    assert run.avg_busbw_gbytes_per_s == 68.4048


def test_old_format_all_gather_has_neither_redop_nor_root():
    run = parse("all_gather-a100-8gpu-old-format-c0.txt", "all_gather")
    assert all(s.redop is None and s.wrong is None for s in run.samples)
    s = sample(run, 4294967296)
    assert (s.time_us, s.algbw_gbytes_per_s, s.busbw_gbytes_per_s) == (17016.0, 252.40, 220.85)
    assert run.avg_busbw_gbytes_per_s == 58.2651


def test_old_format_alltoall_prints_its_redop_column_blank():
    run = parse("alltoall-a100-8gpu-old-format-c0.txt", "alltoall")
    assert all(s.redop is None for s in run.samples)
    assert sample(run, 32).time_us == 89.00 and sample(run, 32, "in-place").time_us == 85.13
    assert sample(run, 8589934592).busbw_gbytes_per_s == 224.31
    assert run.avg_busbw_gbytes_per_s == 58.6481


def test_old_format_reduce_scatter():
    run = parse("reduce_scatter-a100-8gpu-old-format-c0.txt", "reduce_scatter")
    assert sample(run, 8589934592, "in-place").busbw_gbytes_per_s == 231.25
    assert run.avg_busbw_gbytes_per_s == 60.168 and run.rank_count == 8


def test_one_gpu_tail_with_scientific_notation():
    """busbw 0 on one rank; an in-place algbw so large it prints as 1e+06; NCCL INFO
    lines give the rank count where the rank map was cut off."""
    run = parse("all_reduce-1gpu-2.18-tail-scientific-notation.txt")
    assert run.program == "all_reduce_perf" and run.collective == "all_reduce"
    assert run.rank_count == 1 and not run.ranks
    s = sample(run, 134217728, "in-place")
    assert (s.algbw_gbytes_per_s, s.busbw_gbytes_per_s, s.time_us, s.wrong) == (1e6, 0.0, 0.10, 0)
    assert sample(run, 1048576, "in-place").algbw_gbytes_per_s == 11061.0
    assert all(s.busbw_gbytes_per_s == 0 for s in run.samples)
    assert run.avg_busbw_gbytes_per_s == 0.0 and run.completed


def test_mpirun_tag_output_prefixes_are_stripped():
    run = parse("all_reduce-mpi-tag-output-2.18-socket-rtx5090.txt")
    assert run.program == "all_reduce_perf_mpi" and run.collective == "all_reduce"
    assert (run.version, run.nccl_headers, run.nccl_library) == ("2.18.0", 22907, 22907)
    assert (run.warmup_iters, run.iters) == (10, 50)
    # two ranks on one GPU: the rank map shows it
    assert [(r.host, r.device, r.pid) for r in run.ranks] == [("lab", 0, 2994447), ("lab", 0, 2994448)]
    s = sample(run, 33554432)
    assert (s.time_us, s.busbw_gbytes_per_s, s.ranks) == (14977.1, 2.24, 2)
    assert run.avg_busbw_gbytes_per_s == 1.57614 and run.out_of_bounds == 0


def test_pairwise_two_nodes_with_the_nccl_banner_inside_the_header():
    run = parse("all_reduce-a100-2node-16rank-pairwise-templated-hosts.txt")
    assert run.nccl_version == "2.12.12+cuda11.6"
    assert run.hosts == ("{host1}", "{host2}") and run.ranks[15].pid == 73339
    s = sample(run, 1073741824)
    assert (s.time_us, s.busbw_gbytes_per_s) == (11013.0, 182.80)
    assert run.avg_busbw_gbytes_per_s == 150.209


def test_ring_tail_without_banner():
    run = parse("all_reduce-h100-2node-ring-large-sizes-tail-95gbs.txt", "all_reduce")
    assert run.headers == 0 and run.tables == 1 and run.rank_count == 0  # unknown
    assert sample(run, 536870912).time_us == 10052.0 and sample(run, 536870912, "in-place").time_us == 9676.9
    assert sample(run, 8589934592).time_us == 158070.0
    assert run.avg_busbw_gbytes_per_s == 95.3009


def test_rows_only_fragment_with_several_redops():
    run = parse("all_reduce-multi-redop-max-min-rows-fragment.txt", "all_reduce_perf")
    assert run.collective == "all_reduce" and run.tables == 0 and not run.completed
    assert [s.redop for s in run.samples[::2]] == ["max"] * 6 + ["min"] * 5
    assert sample(run, 199680, redop="max").busbw_gbytes_per_s == 2.98
    assert sample(run, 199680, "in-place", redop="min").busbw_gbytes_per_s == 2.99
    assert run.last_size_bytes == 200704


def test_zero_size_rows():
    run = parse("reduce_scatter-2node-4gpu-each-zero-size-rows-newer-format.txt")
    assert [s.size_bytes for s in run.samples[:10:2]] == [0] * 5
    assert sample(run, 128, "in-place").algbw_gbytes_per_s == 0.01
    assert run.last_size_bytes == 256 and not run.completed


def test_a_run_that_stopped_at_init_is_facts_without_samples():
    run = parse("all_reduce-2gpu-mixed-gtx-p2p-disabled-socket-header-and-init-warn.txt")
    assert run.samples == () and run.last_size_bytes is None and not run.completed
    assert [r.model for r in run.ranks] == ["NVIDIA GeForce GTX 1050 Ti", "NVIDIA GeForce GTX 950"]
    assert run.nccl_version == "2.16.5+cuda11.8" and run.validation is True

    run = parse("all_reduce-a100-pcie-4gpu-collective-test-starting-header-nccl-2.19.3-init.txt")
    assert run.collective == "all_reduce" and run.nccl_version == "2.19.3+cuda12.2"
    assert [r.bus_id for r in run.ranks] == ["0000:01:00", "0000:02:00", "0000:81:00", "0000:82:00"]

    run = parse("all_reduce-2018-oldest-header-no-hash-openmpi-gid-warning.txt")  # nThread line with no '#'
    assert (run.headers, run.threads, run.gpus_per_thread, run.max_bytes, run.validation) == (1, 1, 8, 33554432, True)
    assert run.launcher_error is None  # Open MPI's GID warning is no launcher failure


def test_nccl_failure_across_two_hosts():
    run = parse("all_reduce-2host-4rank-test-nccl-failure-internal-error-mpirun-abort.txt")
    assert run.hosts == ("fengyun416", "fengyun") and run.validation is False
    nccl, frame = run.failures
    assert (nccl.kind, nccl.host, nccl.file, nccl.line) == ("nccl", "fengyun", "common.cu", 959)
    assert nccl.message == "internal error - please report this issue to the NCCL developers"
    assert (frame.kind, frame.host, frame.pid, frame.file, frame.line) == ("test", "fengyun", 3164639, "common.cu", 844)
    assert run.root_failures == (nccl,)
    assert run.launcher_error is None  # "Primary job terminated normally, but 1 process returned" is the test's exit


def test_nccl_failure_amid_nccl_info_chains():
    run = parse("test-nccl-failure-common-cu-961-with-nccl-chains-two-hosts-4090.txt")
    assert [(f.kind, f.host, f"{f.file}:{f.line}") for f in run.failures] == [
        ("nccl", "DisAI-4090-2", "common.cu:961"), ("test", "DisAI-4090-2", "common.cu:844")]
    assert run.samples == () and run.headers == 0


def test_open_mpi_not_enough_slots_is_a_launcher_error():
    run = parse("mpirun-not-enough-slots-failure.txt")
    assert run.launcher_error == "Open MPI: not enough slots available for the 16 slots requested"
    assert run.program == "all_reduce_perf" and run.failures == () and run.samples == ()


def test_rccl_tests_json_lines():
    run = parse("rccl-tests-output-file-json-lines-allreduce-4gpu.txt")
    assert run.format == "rccl-json-lines" and run.program == "AllReduce"
    assert [(s.size_bytes, s.placement) for s in run.samples] == [
        (1024, "out-of-place"), (1024, "in-place"), (2048, "out-of-place"), (2048, "in-place"), (4096, "out-of-place")]
    s = run.samples[1]
    assert (s.ranks, s.wrong, s.redop, s.dtype) == (4, 0, "sum", "float")
    assert s.busbw_gbytes_per_s == pytest.approx(0.07719504564609389)
    assert s.time_us == pytest.approx(19.89765)


# ------------------------------------------------------------ formats built from nccl-tests' printf

BANNER = (
    "# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22705\n"
    "# Collective test starting: all_gather_perf\n"
    "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 1 iters: 20 "
    "agg iters: 1 validation: 1 graph: 0 unalign: 0\n"
    "#\n# Using devices\n"
    "#  Rank  0 Group  0 Pid   1001 on     gpu001 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n"
    "#  Rank  1 Group  0 Pid   1002 on     gpu002 device  0 [0000:18:00] NVIDIA H100 80GB HBM3\n"
)
HEADER = (
    "#\n#                                                              out-of-place                       in-place          \n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong \n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)         \n"
)
ROWS = (
    "     1048576        131072     float    none      -1    25.31   41.43   20.71       0    24.90   42.11   21.06       0\n"
    "     2097152        262144     float    none      -1    38.02   55.16   27.58      12    37.55   55.85   27.93     N/A\n"
)
FOOTER = "# Out of bounds values : 12 FAILED\n# Avg bus bandwidth    : 24.32 FAILED\n#\n# Collective test concluded: all_gather_perf\n#\n"


def test_newest_format_with_the_min_bw_gate_and_wrong_elements():
    run = parse_nccl_tests(BANNER + HEADER + ROWS + FOOTER + "# error: unhandled cuda error\n")
    assert run.collective == "all_gather" and (run.nccl_headers, run.nccl_library) == (22803, 22705)
    assert run.hosts == ("gpu001", "gpu002") and run.rank_count == 2
    assert [s.wrong for s in run.samples] == [0, 0, 12, None]
    assert all(s.redop is None for s in run.samples)  # "none": a non-reducing collective
    assert (run.out_of_bounds, run.out_of_bounds_ok, run.avg_busbw_gbytes_per_s, run.avg_ok) == (12, False, 24.32, False)
    assert run.errors == ("unhandled cuda error",)
    ok = parse_nccl_tests(BANNER + HEADER + ROWS + "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 24.32 OK\n")
    assert (ok.out_of_bounds_ok, ok.avg_ok) == (True, True)


def test_srun_labels_are_stripped():
    text = BANNER + HEADER + ROWS + FOOTER
    labelled = "".join(f"{i % 2}: {line}\n" for i, line in enumerate(text.splitlines()))
    assert parse_nccl_tests(labelled) == parse_nccl_tests(text)
    padded = "".join(f" 0: {line}\n" for line in text.splitlines())
    assert parse_nccl_tests(padded) == parse_nccl_tests(text)


def test_large_values_print_as_e_notation():
    # getFloatStr: %.2f, %.1f, %.0f, then %*.1e (time, width 7) or %*.0e (bandwidths, width 6)
    row = "  8589934592    2147483648     float     sum      -1  1.2e+07   1e+06   2e+06  1e+06  1.3e+07  0.70   1.31       0\n"
    s_oop, s_ip = parse_nccl_tests(HEADER + row, "all_reduce").samples
    assert (s_oop.time_us, s_oop.algbw_gbytes_per_s, s_oop.busbw_gbytes_per_s, s_oop.wrong) == (1.2e7, 1e6, 2e6, 1_000_000)
    assert s_ip.time_us == 1.3e7


def test_per_iteration_columns_and_timestamps():
    """-I 1 adds i_min i_max i_p99 i_cv% to each placement; -S 1 adds a timestamp; -C 1
    says cputime."""
    header = ("#       size         count      type   redop    root  cputime   algbw   busbw  #wrong    i_min    i_max"
              "    i_p99    i_cv%  cputime   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%           timestamp\n")
    row = ("     1048576        262144     float     sum      -1    25.31   41.43   72.50       0    24.00    30.00"
           "    29.90     3.10    24.90   42.11   73.69       0    23.90    29.00    28.80     2.90  2025-01-01 12:00:00\n")
    oop, ip = parse_nccl_tests(header + row, "all_reduce").samples
    assert (oop.time_us, oop.algbw_gbytes_per_s, oop.busbw_gbytes_per_s, oop.wrong) == (25.31, 41.43, 72.50, 0)
    assert (ip.time_us, ip.algbw_gbytes_per_s, ip.busbw_gbytes_per_s, ip.wrong) == (24.90, 42.11, 73.69, 0)

    stamped = HEADER.replace("#wrong \n", "#wrong            timestamp\n")
    rows = ROWS.replace("       0\n", "       0  2025-01-01 12:00:00\n").replace("N/A\n", "N/A  2025-01-01 12:00:01\n")
    assert len(parse_nccl_tests(stamped + rows, "all_gather").samples) == 4


def test_old_broadcast_and_reduce_headers():
    """<= 2.11 printed its own header per collective: broadcast has root only, reduce both."""
    broadcast = ("#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error\n"
                 "     8388608       2097152   float       0    162.0   51.79   51.79  0e+00    160.0   52.44   52.44  2e-02\n")
    oop, ip = parse_nccl_tests(broadcast, "broadcast").samples
    assert (oop.time_us, oop.busbw_gbytes_per_s, oop.redop) == (162.0, 51.79, None)
    assert (oop.wrong, ip.wrong) == (0, None)  # a deviation of 0 is none wrong; another is for nccl-tests to judge
    reduce = ("#       size         count    type   redop    root     time   algbw   busbw  error     time   algbw   busbw  error\n"
              "     8388608       2097152   float     sum       3    162.0   51.79   51.79  0e+00    160.0   52.44   52.44    N/A\n")
    oop, ip = parse_nccl_tests(reduce, "reduce").samples
    assert (oop.redop, oop.busbw_gbytes_per_s, ip.busbw_gbytes_per_s, ip.wrong) == ("sum", 51.79, 52.44, None)


def test_a_hung_run_shows_the_last_size_it_finished():
    cut = "     4194304        524288     float    none      -1    52.1"  # the line it was printing
    run = parse_nccl_tests(BANNER + HEADER + ROWS + cut)
    assert run.last_size_bytes == 2097152 and run.bad_rows == 1 and not run.completed


def test_a_binary_without_mpi_under_mpirun_shows_lone_ranks():
    """nccl-tests#182: every rank runs alone, prints its own banner and rank 0, busbw 0."""
    def lone(host: str, pid: int) -> str:
        return (f"# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n"
                f"#\n# Using devices\n#  Rank  0 Group  0 Pid {pid:6d} on {host:>10s} device  0 [0x07] NVIDIA A100-SXM4-80GB\n")
    row = "           8             2     float     sum      -1    10.51    0.00    0.00      0     0.30    0.03    0.00      0\n"
    text = lone("gpu001", 11) + lone("gpu002", 22) + HEADER + HEADER + row + row + (
        "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0 \n") * 2
    run = parse_nccl_tests(text, "all_reduce")
    assert (run.headers, run.tables, run.rank_count, len(run.ranks)) == (2, 2, 1, 2)
    assert run.lone_ranks and run.hosts == ("gpu001", "gpu002")
    assert run.avg_busbw_gbytes_per_s == 0.0
    assert not parse_nccl_tests(BANNER + HEADER + ROWS).lone_ranks


@pytest.mark.parametrize(("line", "expected"), [
    ("gpu7: Test CUDA failure common.cu:892 'out of memory'", ("cuda", "gpu7", "common.cu", 892, "out of memory", None)),
    ("host3: Test NCCL failure common.cu:1125 'unhandled system error'",
     ("nccl", "host3", "common.cu", 1125, "unhandled system error", None)),
    ("host3: Test NCCL failure common.cu:1125 'unhandled system error / socketProgress: Connection closed'",
     ("nccl", "host3", "common.cu", 1125, "unhandled system error / socketProgress: Connection closed", None)),
    ("gpu2: Test timeout (30s) common.cu:523", ("timeout", "gpu2", "common.cu", 523, "no completion within 30 s (-T)", None)),
    (" .. host3 pid 3590858: Test failure common.cu:1017", ("test", "host3", "common.cu", 1017, "", 3590858)),
    ("mpirun noticed that process rank 5 with PID 4242 on node gpu009 exited on signal 11 (Segmentation fault).",
     ("signal", "gpu009", "", None, "rank 5 exited on signal 11 (Segmentation fault)", 4242)),
    ("srun: error: gpu003: task 2: Exited with exit code 3", ("task", "gpu003", "", None, "task 2: Exited with exit code 3", None)),
    ("Invalid number of GPUs: 8 requested but only 4 were found.",
     ("setup", "", "", None, "Invalid number of GPUs: 8 requested but only 4 were found.", None)),
])
def test_failure_lines(line, expected):
    (failure,) = parse_nccl_tests(line + "\n").failures
    assert (failure.kind, failure.host, failure.file, failure.line, failure.message, failure.pid) == expected


@pytest.mark.parametrize("line", [
    "mpirun was unable to launch the specified application as it could not access or execute an executable:",
    "srun: error: Unable to allocate resources: Requested node configuration is not available",
])
def test_launcher_errors(line):
    run = parse_nccl_tests("--------------------------------------------------------------------------\n" + line + "\n")
    assert run.launcher_error == line and run.failures == ()


# ------------------------------------------------------------ JSON (-J, >= 2.17.3)


def nccl_json(**changes: object) -> str:
    """What src/util.cu writes (JSON_FILE_VERSION 3): booleans as strings, root as "%6i",
    nwrong null under -c 0, one device entry per process."""
    doc = {
        "version": 3, "start_time": "2025-06-01 10:00:00",
        "args": ["./build/all_reduce_perf", "-b", "1M", "-e", "2M", "-J", "out.json"],
        "env": ["PATH=/usr/bin", "SECRET_TOKEN=hunter2", "HOME=/home/me"],
        "nccl_version": 22803,
        "config": {"nthreads": 1, "ngpus": 4, "minimum_bytes": 1048576, "maximum_bytes": 2097152, "step_factor": 2,
                   "warmup_iters": 1, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
                   "blocking_collectives": "false", "per_iter_timing": "false", "per_iter_skip": 0,
                   "parallel_init": "false",
                   "devices": [
                       {"rank": 0, "group": 0, "pid": 11, "hostname": "gpu001", "device": 0, "device_hex": "0000:18:00",
                        "device_info": "NVIDIA H100 80GB HBM3"},
                       {"rank": 4, "group": 0, "pid": 22, "hostname": "gpu002", "device": 0, "device_hex": "0000:18:00",
                        "device_info": "NVIDIA H100 80GB HBM3"}]},
        "results": [
            {"size": 1048576, "count": 262144, "type": "float", "redop": "sum", "root": "    -1",
             "out_of_place": {"time": 25.31, "alg_bw": 41.43, "bus_bw": 72.50, "nwrong": 0.0},
             "in_place": {"time": 24.9, "alg_bw": 42.11, "bus_bw": 73.69, "nwrong": 0.0},
             "actual_iterations": 20, "experiment_name": ""},
            {"size": 2097152, "count": 524288, "type": "float", "redop": "sum", "root": "    -1",
             "out_of_place": {"time": 30.0, "alg_bw": 69.9, "bus_bw": 122.3, "nwrong": None},
             "in_place": {"cpu_time": 29.0, "alg_bw": 72.3, "bus_bw": 126.5, "nwrong": 3.0},
             "actual_iterations": 20, "experiment_name": ""}],
        "out_of_bounds": {"count": 0, "okay": "true"},
        "average_bus_bandwidth": {"bandwidth": 98.7, "okay": "unchecked"},
        "errors": [], "end_time": "2025-06-01 10:00:05",
    }
    doc.update(changes)
    return json.dumps(doc, separators=(",", ":"))


def test_nccl_tests_json():
    run = parse_nccl_tests(nccl_json())
    assert run == parse_nccl_tests_json(nccl_json())
    assert (run.format, run.collective, run.program, run.nccl_library) == ("json", "all_reduce", "all_reduce_perf", 22803)
    assert run.rank_count == 8  # 2 processes x 1 thread x 4 GPUs: devices hold each process's first rank
    assert [(r.rank, r.host, r.bus_id) for r in run.ranks] == [(0, "gpu001", "0000:18:00"), (4, "gpu002", "0000:18:00")]
    assert [(s.size_bytes, s.placement, s.busbw_gbytes_per_s, s.wrong) for s in run.samples] == [
        (1048576, "out-of-place", 72.5, 0), (1048576, "in-place", 73.69, 0),
        (2097152, "out-of-place", 122.3, None), (2097152, "in-place", 126.5, 3)]
    assert run.samples[3].time_us == 29.0 and all(s.ranks == 8 for s in run.samples)
    assert (run.out_of_bounds, run.out_of_bounds_ok, run.avg_busbw_gbytes_per_s, run.avg_ok, run.completed) == (
        0, True, 98.7, None, True)
    assert run.last_size_bytes == 2097152 and run.validation is True and run.iters == 20


def test_h100_json_and_text_of_one_run_agree():
    """nccl-tests 2.19.6 with -J on an H100 (captured on hardware): the file and the table agree."""
    text = parse("broadcast-h100-1gpu-2.19.6.txt")
    doc = parse_nccl_tests(read("broadcast-h100-1gpu-2.19.6-J.json"))
    assert (doc.format, doc.collective, doc.nccl_library, doc.rank_count) == ("json", "broadcast", 22809, 1)
    assert doc.errors == ()  # the file says "errors": [""] for a clean run
    assert [(r.host, r.bus_id, r.model) for r in doc.ranks] == [("vm", "0000:00:06", "NVIDIA H100 80GB HBM3")]
    assert [(s.size_bytes, s.placement) for s in doc.samples] == [(s.size_bytes, s.placement) for s in text.samples]
    for a, b in zip(doc.samples, text.samples, strict=True):
        # the table keeps 5 significant digits, and one only once a value passes 1e6 ("1e+06")
        assert a.busbw_gbytes_per_s == pytest.approx(b.busbw_gbytes_per_s, rel=1e-3 if b.busbw_gbytes_per_s < 1e6 else 0.5)
    assert "IS_SANDBOX" not in msgspec.json.encode(doc).decode()  # its env dump stays out of the facts


def test_h100_nccl_debug_lines_inside_the_table():
    run = parse("all_gather-h100-1gpu-2.19.6-nccl-debug-info-2.28.9.txt")
    assert (run.version, run.nccl_version, run.nccl_library) == ("2.19.6", "2.28.9+cuda13.0", 22809)
    assert [s.size_bytes for s in run.samples if s.placement == "out-of-place"] == [1 << 20, 8 << 20, 64 << 20]


def test_nccl_tests_json_never_keeps_the_environment():
    encoded = msgspec.json.encode(parse_nccl_tests(nccl_json())).decode()
    assert "hunter2" not in encoded and "SECRET_TOKEN" not in encoded and "PATH=" not in encoded
    r = run_hc("parse", "nccl-tests", "-", input=nccl_json())
    assert r.returncode == 0, r.stderr
    assert b"hunter2" not in r.stdout and json.loads(r.stdout)["facts"]["collective"] == "all_reduce"


def test_nccl_tests_json_verdicts_and_odd_values():
    run = parse_nccl_tests(nccl_json(average_bus_bandwidth={"bandwidth": 98.7, "okay": "false"},
                                     out_of_bounds={"count": 3, "okay": "false"}, errors=["remote process exited"]))
    assert (run.avg_ok, run.out_of_bounds, run.out_of_bounds_ok, run.errors) == (False, 3, False, ("remote process exited",))
    nan = json.loads(nccl_json())
    nan["results"][1]["out_of_place"]["bus_bw"] = "nan"  # jsonDouble writes NaN as a string
    run = parse_nccl_tests(json.dumps(nan))
    assert len(run.samples) == 2 and run.bad_rows == 1
    pretty = json.dumps(json.loads(nccl_json()), indent=2)  # after jq
    assert parse_nccl_tests(pretty) == parse_nccl_tests(nccl_json())


@pytest.mark.parametrize("text", [
    nccl_json()[:-40],  # a run that died leaves its JSON unclosed
    "{}", '{"results": 5}', '{"version": 3}', "{" * 100_000, '{"a":' * 100_000,
])
def test_broken_json_is_a_parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_nccl_tests(text)
    assert len(str(info.value)) < 400 and "\n" not in str(info.value)


# ------------------------------------------------------------ garbage


@pytest.mark.parametrize("text", [
    "", "\n\n", "complete garbage\n", "\x00\x01\x02\xff" * 100, "x" * 200_000, "[" * 100_000, "9" * 5000,
    "#       size         count      type\n",  # a header cut short
    ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
     "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)\n"),
    "# Out of bounds values : 0 OK\n",
    "1 2 3\n4 5 6\n", "Lorem ipsum dolor sit amet\n# comment\n",
    '{"#wrong":"0","algBw":"x"}\n{"oops"\n',
])
def test_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_nccl_tests(text)
    assert len(str(info.value)) < 400 and "\n" not in str(info.value)


def test_huge_numbers_are_no_crash():
    huge = "9" * 5000
    run = parse_nccl_tests(HEADER + f"{huge} {huge} float sum -1 1 2 3 0 1 2 3 0\n" + ROWS, "all_gather")
    assert run.bad_rows == 1 and len(run.samples) == 4
    run = parse_nccl_tests(f"#  Rank {huge} Group 0 Pid 1 on h device 0 [0x01] X\n" + HEADER + ROWS, "all_gather")
    assert run.ranks == () and len(run.samples) == 4
    parse_nccl_tests(f"h: Test NCCL failure common.cu:{huge} 'x'\n# nThread 1 nGpus {huge} minBytes 1 maxBytes 2\n")


def test_a_wrong_collective_argument_is_the_callers_error():
    with pytest.raises(ValueError, match="unknown collective"):
        parse_nccl_tests(ROWS, collective="all_reduce_typo")


def test_collective_names():
    assert collective_name("all_reduce_perf") == collective_name("/opt/nccl-tests/build/all_reduce_perf_mpi") == "all_reduce"
    assert collective_name("AllReduce") == collective_name("all_reduce") == "all_reduce"
    assert [collective_name(n) for n in ("AllGather", "ReduceScatter", "AlltoAll", "AllToAllv", "SendRecv", "HyperCube")] == [
        "all_gather", "reduce_scatter", "alltoall", "alltoallv", "sendrecv", "hypercube"]
    assert all(collective_name(f"{c}_perf") == c for c in COLLECTIVES)
    assert collective_name("bogus_perf") is None and collective_name("") is None


_FRAGMENTS = st.sampled_from(
    BANNER.splitlines(keepends=True) + HEADER.splitlines(keepends=True) + ROWS.splitlines(keepends=True)
    + FOOTER.splitlines(keepends=True) + [
        "0: ", "[1,0]<stdout>:", "h: Test NCCL failure a.cu:1 'x'\n", " .. h pid 1: Test failure a.cu:2\n",
        "There are not enough slots available in the system to satisfy the 4\n", "{", '"busBw":1', "N/A ", "1e+06 ",
        "nan ", "-1 ", "\x00", "\n", "²", "# nThread ", "#  Rank 1 Pid 2 on h device 0 [", "NCCL INFO comm 0x1 rank 0 nranks ",
    ])
_TEXT = st.one_of(st.text(max_size=400), st.lists(_FRAGMENTS | st.text(max_size=20), max_size=40).map("".join))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT)
def test_arbitrary_text_is_facts_or_a_parse_error(text):
    try:
        run = parse_nccl_tests(text)
    except ParseError as exc:
        assert "\n" not in str(exc)
        return
    # a footer's `# Avg bus bandwidth` alone is read too (the run's summary, `incomplete` saying
    # it is alone): it holds a fact, so it is no refusal this test pins
    assert (run.samples or run.failures or run.launcher_error or run.headers or run.ranks or run.program
            or run.version or (run.averages and run.incomplete))
    msgspec.json.encode(run)  # and always printable


# ------------------------------------------------------------ cost and the CLI


def _parse(text: str) -> object:
    return parse_nccl_tests(text, "all_reduce")


def test_rows_cost_linear_time():
    """200,000 rows against 20,000 (no absolute time: the machine is shared): linear is
    ~10x, quadratic ~100x."""
    row = "  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0    47743  179.92  337.35      0\n"
    head = read("all_reduce-h100-a3mega-2node-16rank.txt")
    assert_linear(_parse, head + row * 20_000, head + row * 200_000)


def test_one_long_line_costs_its_length():
    for prefix in ("#  Rank 0 Group 0 Pid 1 on ", "h: Test NCCL failure ", "1 2 float sum -1 ", "[1,0]<stdout>:", "0: "):
        assert_linear(_parse, BANNER + prefix + "a " * 50_000 + "\n", BANNER + prefix + "a " * 500_000 + "\n",
                      what=prefix)


def test_hc_parse_prints_the_facts():
    assert "nccl-tests" in TOOLS
    r = run_hc_inproc("parse", "nccl-tests", str(DIR / "all_reduce-mpi-tag-output-2.18-socket-rtx5090.txt"), "--format", "json")
    assert r.returncode == 0, r.stderr
    facts = json.loads(r.stdout)["facts"]
    assert facts["collective"] == "all_reduce" and len(facts["samples"]) == 16 and facts["rank_count"] == 2
    assert facts["samples"][0]["busbw_gbytes_per_s"] == 0.24 and facts["ranks"][1]["pid"] == 2994448
    r = run_hc_inproc("parse", "nccl-tests", "-", input=b"complete garbage\n")
    assert r.returncode == 4 and r.stderr.decode().startswith("hc: error: nccl-tests:")


def test_parser_for_refuses_empty_input():
    with pytest.raises(ParseError, match="empty input"):
        parser_for("nccl-tests")(" \n")


# ------------------------------------------------------------ issue 20: shapes from the field

FIELD_TESTS = FIXTURES / "field" / "issues" / "nccl-tests"


def _facts(run):
    return ([(r.rank, r.host, r.device, r.model) for r in run.ranks],
            [(s.size_bytes, s.placement, s.busbw_gbytes_per_s) for s in run.samples],
            run.avg_busbw_gbytes_per_s, run.out_of_bounds, run.completed)


def test_mpich_prepend_rank_tags_before_the_banner_the_rank_map_and_the_rows():
    # a real 16-rank run with MPICH / Intel MPI `-prepend-rank`'s `[N] ` before every line
    # (a transformation; the tag's shape is the real one in
    # corpus/nccl-debug/nccl-2.5.6-256rank-bracket-rank-prefix-roce-mixed-ring-p2p-ipc.txt)
    text = (DIR / "all_reduce-h100-a3mega-2node-16rank.txt").read_text()
    clean = parse_nccl_tests(text)
    tagged = "".join(f"[{i % 3}] {line}" for i, line in enumerate(text.splitlines(keepends=True)))
    run = parse_nccl_tests(tagged)
    assert _facts(run) == _facts(clean) and clean.samples and len(clean.ranks) == 16
    assert run.bad_rows == clean.bad_rows and run.unrecognized.count == clean.unrecognized.count


def test_a_rank_map_without_its_hash_is_read():
    # field/issues/nccl-tests/all-ranks-zero-misbuilt-without-mpi.txt: `Using devices` and
    # `Rank  0 Group  0 Pid ... on dgx01 device  0 [0x1a] NVIDIA H100 80GB HBM3` with no `#`
    run = parse_nccl_tests((FIELD_TESTS / "all-ranks-zero-misbuilt-without-mpi.txt").read_text())
    assert {r.host for r in run.ranks} == {"dgx01", "dgx02"}
    assert {(r.rank, r.model) for r in run.ranks} == {(0, "NVIDIA H100 80GB HBM3")}
    # the same rank map with its `#` reads the same
    hashed = "\n".join("#  " + line if line.startswith("Rank") else line
                       for line in (FIELD_TESTS / "all-ranks-zero-misbuilt-without-mpi.txt").read_text().splitlines())
    hashed += "\n"  # the file's line end (a text without one may end inside its last word: not read)
    assert parse_nccl_tests(hashed).ranks == run.ranks


def test_the_oldest_failure_line_without_host_or_test_is_a_failure():
    # field/issues/nccl-tests/socket-closed-by-peer-then-nccl-failure-921.txt (2018):
    # `NCCL failure common.cu:921 'unhandled system error'` after prose and an NCCL WARN
    run = parse_nccl_tests((FIELD_TESTS / "socket-closed-by-peer-then-nccl-failure-921.txt").read_text())
    (f,) = run.failures
    assert (f.kind, f.host, f.file, f.line, f.message) == ("nccl", "", "common.cu", 921, "unhandled system error")
    assert not run.completed and not run.samples
    # NCCL's own `Cuda failure 'out of memory'` (no file:line) is no failure of the test's
    with pytest.raises(ParseError):
        parse_nccl_tests("Cuda failure 'out of memory'\n")


def test_an_indented_paste_of_tagged_lines_keeps_its_tags_read():
    # field/repos/nccl-tests/all_reduce-aws-batch-tag-output-trailing-spaces-17G.txt (mpirun
    # --tag-output) indented 4 blanks as a whole (a transformation: a markdown list's code block)
    path = FIXTURES / "field" / "repos" / "nccl-tests" / "all_reduce-aws-batch-tag-output-trailing-spaces-17G.txt"
    text = path.read_text()
    clean = parse_nccl_tests(text)
    indented = parse_nccl_tests("".join("    " + line for line in text.splitlines(keepends=True)))
    assert _facts(indented) == _facts(clean) and len(clean.samples) > 10
    # an indented `[N] ` prepend-rank tag too
    tagged = parse_nccl_tests("".join(f"  [0] {line}" for line in text.replace("[1,0]<stdout>:", "")
                                      .splitlines(keepends=True)))
    assert _facts(tagged) == _facts(clean)


def test_the_nccl_1_0_rank_map_without_pid_names_host_and_model():
    # field/issues/nccl-tests/nccl-1.0-banner-failure-unhandled-cuda-error.txt (nccl-tests
    # compiled with NCCL 1.0, one process): `#   Rank  0 on     node03 device  0 [0x00]
    # Tesla P100-PCIE-16GB` has no Group and no Pid; then the failure before any row
    run = parse_nccl_tests((FIELD_TESTS / "nccl-1.0-banner-failure-unhandled-cuda-error.txt").read_text())
    assert [(r.rank, r.host, r.device, r.pid, r.group, r.bus_id, r.model) for r in run.ranks] == [
        (i, "node03", i, None, None, "0x00", "Tesla P100-PCIE-16GB") for i in range(8)]
    assert run.rank_count == 8 and not run.completed
    assert [(f.kind, f.file, f.line, f.message) for f in run.failures] == [
        ("nccl", "all_reduce.cu", 95, "unhandled cuda error")]
    assert run.unrecognized.count == 0  # the rank lines are the banner's, not left over
