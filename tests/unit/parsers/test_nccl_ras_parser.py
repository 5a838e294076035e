"""NCCL RAS parser: the real 2.28.9 replies (with and without the protocol transcript), the
sections a healthy job never prints (derived from NCCL's format strings: op-count
mismatches, missing and dead processes, errors, timeouts, uneven job summaries, 2.24's
wording, the 2.29+ JSON), ncclras's own errors, garbage and hostile sizes."""

from __future__ import annotations

import msgspec
import pytest
from support import FIXTURES, assert_linear

from healthcheck.core.errors import ParseError
from healthcheck.parsers import TOOLS, parser_for
from healthcheck.parsers.nccl_ras import NcclRasStatus, RasCount, RasProcess, RasRank, parse_nccl_ras

REAL = FIXTURES / "h100-captures"
DERIVED = FIXTURES / "nccl-ras"


def read(name: str) -> str:
    return ((REAL if name.startswith("nccl-ras-2.28.9") else DERIVED) / name).read_text()


def parse(name: str) -> NcclRasStatus:
    return parse_nccl_ras(read(name))


# ------------------------------------------------------------ every fixture

# file -> (format, NCCL version, ok, communicator groups, issues, lagging ranks)
EXPECTED = {
    "nccl-ras-2.28.9-status-1rank.txt": ("text", "2.28.9", True, 1, 0, ()),
    "nccl-ras-2.28.9-verbose-status-1rank.txt": ("text", "2.28.9", True, 1, 0, ()),
    "derived-2.24-incomplete-missing-rank-numbers-status.txt": ("text", "2.24.3", False, 1, 2, (3,)),
    "derived-2.28-dead-process-incomplete-timeout.txt": ("text", "2.28.9", False, 1, 1, ()),
    "derived-2.28-gpus-per-process-differ-no-communicators.txt": ("text", "2.28.9", True, 0, 0, ()),
    "derived-2.28-job-summary-outlier-node.txt": ("text", "2.28.9", True, 1, 0, ()),
    "derived-2.28-mismatch-allreduce-one-rank-behind.txt": ("text", "2.28.9", False, 2, 1, (13,)),
    "derived-2.28-verbose-incomplete-async-error-status-mismatch.txt": ("text", "2.28.9", False, 1, 2, (8,)),
    "derived-2.30-json-one-rank-behind-one-missing.txt": ("json", "2.30.7", False, 0, 0, ()),
    "derived-ncclras-connection-refused.txt": ("text", None, False, 0, 0, ()),
}


def test_every_fixture_is_expected_and_described():
    found = sorted([p.name for p in REAL.glob("nccl-ras-*.txt")] + [p.name for p in DERIVED.glob("*.txt")])
    assert found == sorted(EXPECTED)
    readme = (DERIVED / "README.md").read_text()
    assert "Derived, not captured" in readme and all(f"`{p.name}`" in readme for p in DERIVED.glob("*.txt"))


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_parses(name):
    fmt, version, ok, groups, issues, lagging = EXPECTED[name]
    s = parse(name)
    assert (s.format, s.nccl_version, s.ok, len(s.groups), len(s.issues)) == (fmt, version, ok, groups, issues)
    assert tuple(r.rank for _, behind in s.lagging for r in behind.ranks) == lagging
    # the facts survive a JSON round trip (hc parse prints them)
    assert msgspec.json.decode(msgspec.json.encode(s), type=NcclRasStatus) == s


def test_make_derived_writes_the_fixtures_as_they_are(tmp_path, monkeypatch):
    """The derived files are what make_derived.py writes (nobody edited them by hand)."""
    import runpy

    source = (DERIVED / "make_derived.py").read_text()
    script = tmp_path / "make_derived.py"
    script.write_text(source)
    runpy.run_path(str(script), run_name="__main__")
    for p in DERIVED.glob("*.txt"):
        assert (tmp_path / p.name).read_text() == p.read_text(), p.name


# ------------------------------------------------------------ the real replies


@pytest.mark.parametrize("name, verbose", [("nccl-ras-2.28.9-status-1rank.txt", False),
                                           ("nccl-ras-2.28.9-verbose-status-1rank.txt", True)])
def test_real_reply_with_and_without_the_transcript(name, verbose):
    s = parse(name)
    assert (s.protocol, s.verbose, s.nccl_version, s.cuda_compiled, s.cuda_runtime, s.cuda_driver) == (
        2, verbose, "2.28.9", "13.0", 13000, 13000)
    job = s.job
    assert (job.nodes, job.processes, job.gpus, job.processes_per_node, job.gpus_per_process) == (
        1, 1, 1, (RasCount(count=1, value=1),), (RasCount(count=1, value=1),))
    (g,) = s.groups
    assert (g.group, g.comms, g.nodes, g.ranks_per_node_min, g.ranks_per_node_max, g.ranks_per_comm,
            g.ranks_in_group, g.status, g.errors, g.ok) == (0, 1, 1, 1, 1, 1, 1, "RUNNING", (), True)
    assert (s.collection_s, s.complete, s.issues, s.client_error) == (0.0, True, (), None)
    bare = "\n".join(line for line in read(name).splitlines()
                     if not line.startswith(">>>") and line not in ("SERVER PROTOCOL 2", "OK"))
    assert parse_nccl_ras(bare) == msgspec.structs.replace(s, protocol=None, verbose=None)


# ------------------------------------------------------------ the derived sections, value by value


def test_one_rank_behind_in_all_reduce():
    s = parse("derived-2.28-mismatch-allreduce-one-rank-behind.txt")
    assert [(g.group, g.comms, g.nodes, g.ranks_per_comm, g.ranks_in_group, g.errors) for g in s.groups] == [
        (0, 1, 4, 32, 32, ("MISMATCH",)), (1, 4, 1, 8, 32, ())]
    (issue,) = s.issues
    assert (issue.kind, issue.group, issue.index, issue.hash) == ("MISMATCH", 0, 0, "9e0c6f4a2b1d3c58")
    (counts,) = issue.op_counts
    assert counts.operation == "AllReduce"
    assert [(c.count, c.value, c.ranks) for c in counts.sets] == [
        (31, "1205", ()), (1, "1204", (RasRank(rank=13, gpu=5, pid=48213, node="10.1.0.12"),))]
    assert counts.behind is counts.sets[1]
    assert s.lagging == (("AllReduce", counts.sets[1]),)


def test_a_dead_process_an_incomplete_communicator_and_a_timeout():
    s = parse("derived-2.28-dead-process-incomplete-timeout.txt")
    assert (s.dead_processes, s.dead, s.timeouts, s.collection_s) == (
        1, (RasProcess(pid=5121, node="10.1.0.13", gpus=(1,)),), 1, 5.004)
    (issue,) = s.issues
    assert (issue.kind, issue.missing_rank_count, issue.missing_ranks) == (
        "INCOMPLETE", 1, (RasRank(rank=9, gpu=1, pid=5121, node="10.1.0.13"),))
    assert s.groups[0].errors == ("INCOMPLETE",) and s.groups[0].ranks_in_group == 15


def test_verbose_errors_status_and_not_launched():
    s = parse("derived-2.28-verbose-incomplete-async-error-status-mismatch.txt")
    assert (s.incomplete_processes, s.missing_processes) == (
        1, (RasProcess(pid=7711, node="10.1.0.14", gpus=(0, 1), nvml_gpus=(2, 3)),))
    (g,) = s.groups
    assert (g.status, g.errors, g.ranks_per_node_min, g.ranks_per_node_max) == (
        "ABORT", ("INCOMPLETE", "ERROR", "MISMATCH"), 6, 8)
    error, mismatch = s.issues
    (errors,) = error.errors
    assert (errors.kind, errors.ranks) == ("async", 2)
    (reported,) = errors.sets
    assert (reported.count, reported.value, [r.rank for r in reported.ranks]) == (2, "Remote process error", [4, 5])
    assert [(x.count, x.value, [r.rank for r in x.ranks]) for x in mismatch.status_sets] == [
        (12, "RUNNING", []), (2, "ABORT", [4, 5])]
    (counts,) = mismatch.op_counts
    assert counts.operation == "Broadcast"
    assert [(x.count, x.value) for x in counts.sets] == [(13, "2"), (1, None)]
    assert counts.behind.ranks == (RasRank(rank=8, gpu=0, nvml_gpu=1, pid=7801, node="10.1.0.15"),)


def test_uneven_job_summaries():
    outlier = parse("derived-2.28-job-summary-outlier-node.txt").job
    assert (outlier.nodes, outlier.processes, outlier.gpus) == (4, 31, 31)
    assert outlier.processes_per_node == (RasCount(count=3, value=8), RasCount(count=1, value=7))
    assert outlier.gpus_per_process == (RasCount(count=31, value=1),)
    assert [(n.node, n.pids) for n in outlier.outlier_nodes] == [("10.1.0.15", tuple(range(9001, 9008)))]
    gpus = parse("derived-2.28-gpus-per-process-differ-no-communicators.txt")
    assert (gpus.job.nodes, gpus.job.processes, gpus.job.gpus) == (2, 8, 9)
    assert gpus.job.processes_per_node == (RasCount(count=2, value=4),)
    assert gpus.job.gpus_per_process == (RasCount(count=7, value=1), RasCount(count=1, value=2))
    assert gpus.no_communicators and gpus.groups == () and gpus.collection_s == 0.003


def test_nccl_2_24_wording():
    s = parse("derived-2.24-incomplete-missing-rank-numbers-status.txt")
    assert (s.nccl_version, s.cuda_compiled, s.collection_s) == ("2.24.3", "12.6", 0.01)
    incomplete, mismatch = s.issues
    assert (incomplete.missing_rank_count, incomplete.missing_ranks) == (1, (RasRank(rank=6),))
    assert [(x.count, x.value, [r.rank for r in x.ranks]) for x in mismatch.status_sets] == [
        (6, "RUNNING", []), (1, "FINALIZE", [3]), (1, "UNKNOWN", [6])]
    (counts,) = mismatch.op_counts
    assert counts.operation == "collective" and counts.behind.value == "87"


def test_json_reply_of_2_30():
    s = parse("derived-2.30-json-one-rank-behind-one-missing.txt")
    assert (s.format, s.protocol, s.verbose, s.cuda_runtime, s.collection_s, s.timeouts, s.complete) == (
        "json", 2, False, 13000, 5.002, 1, True)
    (comm,) = s.communicators
    assert (comm.hash, comm.size, [r.rank for r in comm.ranks]) == ("0x9e0c6f4a2b1d3c58", 3, [0, 1, 2])
    r0, r1, r2 = comm.ranks
    assert r1.collective_counts == {"Broadcast": 1, "Reduce": 0, "AllGather": 0, "ReduceScatter": 0, "AllReduce": 11}
    assert (r0.host, r0.pid, r0.init_state, r0.async_error, r0.abort_flag, r0.missing) == (
        "10.1.0.12", 4101, 0, 0, False, False)
    assert (r2.missing, r2.unresponsive, r2.dead, r2.collective_counts) == (True, True, True, {})
    assert comm.behind == {"AllReduce": (1,)} and not comm.ok and not s.ok


def test_ncclras_errors_and_server_errors():
    refused = parse("derived-ncclras-connection-refused.txt")
    assert refused.client_error == "Connecting to localhost:28028: Connection refused"
    assert (refused.complete, refused.ok, refused.job) == (False, False, None)
    unknown = parse_nccl_ras("SERVER PROTOCOL 2\nERROR: Unknown command DUMP\n")
    assert (unknown.protocol, unknown.server_errors, unknown.ok) == (2, ("ERROR: Unknown command DUMP",), False)
    handshake = parse_nccl_ras(">>> CLIENT PROTOCOL 2\nSERVER PROTOCOL 2\n>>> TIMEOUT 5\nOK\n>>> STATUS\n")
    assert (handshake.verbose, handshake.complete, handshake.ok) == (False, False, False)  # no reply: not OK


def test_a_reply_cut_before_warnings_is_not_ok():
    text = read("derived-2.28-job-summary-outlier-node.txt")
    cut = parse_nccl_ras(text[: text.index("Warnings")])
    assert not cut.complete and not cut.ok and len(cut.groups) == 1


def test_missing_data_warning_and_process_not_found():
    s = parse_nccl_ras("Errors\n======\n\nINCOMPLETE\n  Missing communicator data from 12 job processes\n"
                       "  [could not find information on 12 processes]\n\n"
                       " Warning: missing data from 3 processes (received from 5, expected 8)\n")
    assert (s.incomplete_processes, s.processes_not_found, s.missing_data) == (12, 12, 3)
    rank = parse_nccl_ras("Warnings\n========\n\n#1-2 (00000000deadbeef) MISMATCH\n"
                          "  Communicator ranks have different AllGather operation counts\n"
                          "  Rank 4 has launched up to operation 9 -- [process information not found]\n"
                          "  3 ranks have launched up to operation 10\n"
                          "  Rank 0 -- GPU 0 managed by process 1 on node fe80::1\n")
    counts = rank.issues[0].op_counts[0]
    assert [(x.count, x.value, x.ranks) for x in counts.sets] == [
        (1, "9", (RasRank(rank=4),)), (3, "10", (RasRank(rank=0, gpu=0, pid=1, node="fe80::1"),))]
    assert (rank.issues[0].group, rank.issues[0].index) == (1, 2)


@pytest.mark.parametrize("text", ["complete garbage\n", "x" * 200_000, "Rank 1 -- GPU 0\n", "OK\n", ":" * 1000,
                                  "{\"a\": 1}", "{\"nccl_version\": 3}", "#0-0 (abc) MISMATCH\n", "\n\n\n"])
def test_garbage_is_a_short_parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_nccl_ras(text)
    assert len(str(info.value)) < 400 and "\n" not in str(info.value)


# ------------------------------------------------------------ linear time


def test_rank_lines_cost_linear_time():
    head = read("derived-2.28-mismatch-allreduce-one-rank-behind.txt")
    line = "  Rank 13 has launched up to operation 1204 -- GPU 5 managed by process 48213 on node 10.1.0.12\n"
    assert_linear(parse_nccl_ras, head + line * 10_000, head + line * 100_000)


@pytest.mark.parametrize("prefix", ["", "  Rank 1 -- ", "  Rank 1 has launched up to operation ", "  Rank 1 reported ",
                                    "#0-0 (", "  Process 1 on node ", "  Node a running processes ", "NCCL version ",
                                    "  1 ranks reported ", "  The missing ranks: ", "Communicators... ("])
def test_one_long_line_costs_its_length(prefix):
    head = read("derived-2.28-verbose-incomplete-async-error-status-mismatch.txt")
    for filler in ("1,", " -- ", "a ", "GPU 0 "):
        assert_linear(parse_nccl_ras, head + prefix + filler * 20_000 + "x\n",
                      head + prefix + filler * 200_000 + "x\n", what=(prefix, filler))


def test_json_costs_linear_time():
    text = read("derived-2.30-json-one-rank-behind-one-missing.txt")
    rank = text[text.index('        {\n          "rank": 1'):text.index("\n      ],")]
    body = text.replace(rank, ",\n".join([rank] * 100)), text.replace(rank, ",\n".join([rank] * 1000))
    assert_linear(parse_nccl_ras, *body)


def test_the_proposed_tools_entry(monkeypatch):
    monkeypatch.setitem(TOOLS, "nccl-ras", ("healthcheck.parsers.nccl_ras", "parse_nccl_ras",
                                            "NCCL RAS status (port 28028 / ncclras, text or JSON)"))
    assert parser_for("nccl-ras")(read("nccl-ras-2.28.9-status-1rank.txt")).ok


def test_each_reply_line_is_read_by_a_named_handler_and_a_stray_one_counted():
    from healthcheck.parsers import lines, nccl_ras
    from healthcheck.parsers.explain import recording_dispatch

    assert nccl_ras.dispatch is lines.dispatch
    for path in [REAL / "nccl-ras-2.28.9-verbose-status-1rank.txt", DERIVED / "derived-ncclras-connection-refused.txt",
                 *sorted(DERIVED.glob("derived-2.2*.txt"))]:
        text = path.read_text()
        with recording_dispatch() as record:
            status = parse_nccl_ras(text)
        # every non-blank line of a whole reply is read, and `unrecognized` stays out of the JSON
        assert status.unrecognized.count == 0, (path.name, status.unrecognized)
        assert "unrecognized" not in msgspec.to_builtins(status)
        filled = [i for i, t in enumerate(text.splitlines(), 1) if t.strip()]
        assert sorted(record) == filled and "unrecognized" not in {n for v in record.values() for n in v}
    by = {number: names[0] for number, names in record.items()}  # the last derived reply (2.28, verbose)
    raw = text.splitlines()
    at = {t.strip(): i for i, t in enumerate(raw, 1)}
    assert by[at["NCCL version 2.28.9 compiled with CUDA 13.0"]] == "version"
    assert by[at["Job summary"]] == "job-summary" and by[at["0         1         2       6-8        16        14     "
                                                            "ABORT  INCOMPLETE,ERROR,MISMATCH"]] == "comms-row"
    assert by[at["#0-0 (0000a17c33e0f6d2) ERROR"]] == "comm-issue"
    assert by[at["12 ranks have status RUNNING"]] == "rank-set"
    # an NCCL INFO line (the real 2.28.9 debug capture's) pasted into the reply: counted and
    # sampled, the reply read the same (a transformation of real files)
    stray = (REAL / "nccl-2.28.9-debug-info-1rank-torch-2.11.txt").read_text().splitlines()[0]
    mixed = "\n".join([*raw[:at["Errors"]], stray, *raw[at["Errors"]:]]) + "\n"
    got = parse_nccl_ras(mixed)
    assert got.unrecognized.count == 1 and got.unrecognized.sample[0].line == at["Errors"] + 1
    assert got.unrecognized.sample[0].text == stray.strip()
    assert msgspec.structs.replace(got, unrecognized=status.unrecognized) == status
    # the handshake around a JSON reply: a stray line there is counted with its own line number
    js = (DERIVED / "derived-2.30-json-one-rank-behind-one-missing.txt").read_text()
    got = parse_nccl_ras(stray + "\n" + js)
    assert (got.format, got.unrecognized.count, got.unrecognized.sample[0].line) == ("json", 1, 1)
