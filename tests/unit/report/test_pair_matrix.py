"""The table's bandwidth between nodes: a pair matrix per message size, the slowest pairs
past MATRIX_UP_TO nodes, the groups' busbw; and reports without them render as before."""

from __future__ import annotations

import datetime as dt
import itertools
import re
from pathlib import Path

import msgspec

from healthcheck.core.model import CheckResult, Finding, GroupResult, Metric, NodeResult, Report
from healthcheck.core.status import Status, worst
from healthcheck.report.build import make_report, with_groups
from healthcheck.report.jsonio import decode, encode
from healthcheck.report.table import MATRIX_UP_TO, SLOWEST_PAIRS, render

V1 = Path(__file__).parents[2] / "fixtures" / "reports" / "hc-report-1.json"
T0 = dt.datetime(2026, 11, 23, 3, 0, tzinfo=dt.timezone.utc)
RUN = "20261123T030000Z-a1b2c3"


def node(name: str) -> NodeResult:
    return NodeResult(node=name, fabric="h100-ndr400", status=Status.PASS,
                      checks=[CheckResult("bw.pairs", Status.PASS, 1.0)])


def pair(a: str, b: str, busbw: float | None, status: Status = Status.PASS, *, purpose: str = "screen",
         sizes: dict[str, float] | None = None, findings: tuple[Finding, ...] = ()) -> GroupResult:
    """A test between two nodes as orchestrate/pairsweep/judging.py records it: busbw per size (none when ERROR)."""
    per_size = sizes if sizes is not None else ({} if busbw is None else {"1G": busbw})
    name = f"{a}-{b}" + ("" if purpose == "screen" else f" ({purpose})")
    return GroupResult(kind="pair", name=name, members=[a, b], status=worst((status, *(f.status for f in findings))),
                       findings=list(findings),
                       metrics=[Metric("busbw", v, "GB/s", component=s) for s, v in per_size.items()])


def slow_link(a: str, b: str) -> Finding:
    return Finding(id="bw.E102", status=Status.WARN, message=f"{a} and {b} are slow together", component="mlx5_0",
                   check="bw.pairs", subject=f"{a}-{b}", members=(a, b))


def report(names, groups) -> Report:
    r = make_report(command="sweep", tier="deep", config_digest="sha256:" + "0" * 64, config_path="/x",
                    started=T0, finished=T0 + dt.timedelta(seconds=5), nodes=[node(n) for n in names], groups=groups)
    return msgspec.structs.replace(r, run_id=RUN)


def matrix(text: str, size: str = "1G") -> dict[tuple[str, str], str]:
    """The cells of the matrix at `size`, by (row, column), read by the columns' dashes."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(f"pair busbw at {size} "))
    header, dashes = lines[at + 1], lines[at + 2]
    spans = [m.span() for m in re.finditer(r"-+", dashes)]
    cols = [header[s:e].strip() for s, e in spans[1:]]
    cells = {}
    for line in itertools.takewhile(bool, lines[at + 3:]):
        row = line[spans[0][0]:spans[0][1]].strip()
        for col, (s, e) in zip(cols, spans[1:], strict=True):
            cells[row, col] = line[s:e].strip()
    return cells


FOUR = ["gpu01", "gpu02", "gpu03", "gpu04"]


def four_nodes_one_slow() -> list[GroupResult]:
    groups = [pair(a, b, 180.0 + i) for i, (a, b) in enumerate(itertools.combinations(FOUR, 2))]
    groups[-1] = pair("gpu03", "gpu04", 42.5, Status.WARN, findings=(slow_link("gpu03", "gpu04"),))
    return groups


# ------------------------------------------------------------------------ the matrix


def test_four_nodes_six_pairs_one_slow_render_a_matrix_with_the_slow_pair_marked():
    text = render(report(FOUR, four_nodes_one_slow()))
    cells = matrix(text)
    assert sorted({r for r, _ in cells}) == FOUR and sorted({c for _, c in cells}) == FOUR
    expected = {("gpu01", "gpu02"): "180.0", ("gpu01", "gpu03"): "181.0", ("gpu01", "gpu04"): "182.0",
                ("gpu02", "gpu03"): "183.0", ("gpu02", "gpu04"): "184.0", ("gpu03", "gpu04"): "42.5!"}
    for (a, b), cell in expected.items():
        assert cells[a, b] == cell and cells[b, a] == cell  # both triangles
    assert all(cells[n, n] == "-" for n in FOUR)
    assert [c for c in cells.values() if c.endswith("!")] == ["42.5!", "42.5!"]
    assert "pair busbw at 1G (GB/s): 6 of 6 pairs tested" in text
    # the slow link's finding is the findings table's row (and the GROUP table's worst finding), not repeated
    assert text.count("gpu03 and gpu04 are slow together") == 2
    assert re.search(r"^WARN +bw\.E102 +gpu\[03-04\] +mlx5_0 +gpu03 and gpu04", text, re.M)


def test_values_line_up_with_and_without_marks():
    text = render(report(FOUR, four_nodes_one_slow()))
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("pair busbw at 1G"))
    rows = lines[at + 3:at + 7]
    column = lines[at + 2].rindex(" ")  # the last column's dashes start after it
    decimal_points = {line.rindex(".") for line in rows if "." in line[column:]}
    assert len(decimal_points) == 1, rows  # "184.0" and "42.5!" end their digits in the same place


def test_an_error_test_shows_err_and_an_untested_pair_stays_blank():
    groups = [pair("gpu01", "gpu02", 180.0), pair("gpu01", "gpu03", None, Status.ERROR),
              pair("gpu02", "gpu03", 181.0)]  # gpu04 tested with gpu03 only
    groups.append(pair("gpu03", "gpu04", 179.0))
    text = render(report(FOUR, groups))
    cells = matrix(text)
    assert cells["gpu01", "gpu03"] == cells["gpu03", "gpu01"] == "ERR"
    assert cells["gpu01", "gpu04"] == cells["gpu04", "gpu02"] == ""
    assert "4 of 6 pairs tested, 1 without a result" in text


def test_a_pair_shows_its_best_test_and_that_tests_status():
    groups = [pair("gpu01", "gpu02", 40.0, Status.WARN), pair("gpu01", "gpu02", 170.0, purpose="confirm"),
              pair("gpu03", "gpu04", 41.0, Status.WARN), pair("gpu03", "gpu04", 44.0, Status.WARN, purpose="confirm"),
              pair("gpu01", "gpu03", None, Status.ERROR), pair("gpu01", "gpu03", 175.0, purpose="confirm"),
              pair("gpu02", "gpu04", 20.0, Status.FAIL)]
    cells = matrix(render(report(FOUR, groups)))
    assert cells["gpu01", "gpu02"] == "170.0"  # the re-test passed: no mark
    assert cells["gpu03", "gpu04"] == "44.0!"  # both tests short: the better one, marked
    assert cells["gpu01", "gpu03"] == "175.0"  # one test could not run, the other gave a value
    assert cells["gpu02", "gpu04"] == "20.0!!"  # FAIL


def test_one_matrix_per_size_smallest_first_nodes_in_natural_order():
    names = ["n10", "n2", "n1"]
    groups = [pair(a, b, None, sizes={"1G": 100.0 + i, "64M": 50.0 + i})
              for i, (a, b) in enumerate([("n10", "n2"), ("n1", "n10"), ("n2", "n1")])]
    text = render(report(names, groups))
    assert text.index("pair busbw at 64M ") < text.index("pair busbw at 1G ")  # by bytes, not by text
    lines = text.splitlines()
    header = lines[lines.index(next(x for x in lines if x.startswith("pair busbw at 64M "))) + 1]
    assert header.split() == ["n1", "n2", "n10"]
    assert matrix(text, "64M")["n10", "n2"] == "50.0" and matrix(text)["n1", "n2"] == "102.0"


def test_node_names_are_escaped_in_the_matrix():
    text = render(report(["a\x1b[31m", "b"], [pair("a\x1b[31m", "b", 100.0)]))
    assert "\x1b" not in text and "a\\x1b[31m" in text


def test_matrix_up_to_the_limit():
    names = [f"gpu{i:02d}" for i in range(1, MATRIX_UP_TO + 1)]
    text = render(report(names, [pair(a, b, 180.0) for a, b in itertools.combinations(names, 2)]))
    assert len(matrix(text)) == MATRIX_UP_TO ** 2 and "too many for a matrix" not in text


# ------------------------------------------------------------ too many nodes: a list


def test_forty_nodes_list_the_slowest_pairs_instead_of_a_matrix():
    names = [f"gpu{i:02d}" for i in range(1, 41)]
    groups = []
    for a, b in itertools.combinations(names, 2):
        slow = a == "gpu07"  # gpu07 is slow with every later partner: 40.0 + the partner's number
        value = 40.0 + names.index(b) if slow else 180.0
        groups.append(pair(a, b, value, Status.WARN if slow else Status.PASS))
    groups = [g for g in groups if g.name != "gpu38-gpu40"] + [pair("gpu38", "gpu40", None, Status.ERROR)]
    groups.append(pair("gpu39", "gpu40", None, Status.ERROR, purpose="confirm"))  # its screening test gave 180.0
    text = render(report(names, groups))
    assert "pair busbw at 1G (GB/s): 780 of 780 pairs tested, 1 without a result, among 40 nodes" in text
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("pair busbw at 1G"))
    assert f"the {SLOWEST_PAIRS} slowest" in lines[at]
    assert lines[at + 1].split() == ["PAIR", "BUSBW", "1G", "STATUS"]
    rows = [line.split() for line in lines[at + 3:at + 3 + SLOWEST_PAIRS]]
    assert rows[0] == ["gpu07-gpu08", "47.0", "WARN"] and rows[-1] == ["gpu07-gpu27", "66.0", "WARN"]
    assert lines[at + 3 + SLOWEST_PAIRS] == ""  # 20 rows, no more
    assert not any(line.startswith("gpu01 ") for line in lines)  # no matrix: no row per node
    assert not re.search(r"\bERR\b", text)  # the pair without a result is counted, and the GROUP table lists it
    assert re.search(r"^pair +gpu38-gpu40 +gpu\[38,40\] +ERROR", text, re.M)


# ---------------------------------------------------------------------------- groups


def test_groups_are_listed_with_their_busbw_per_size():
    members = ["gpu01", "gpu02", "gpu03", "gpu04"]
    group = GroupResult(kind="group", name="gpu01-gpu02-gpu03-gpu04", members=members, status=Status.WARN,
                        metrics=[Metric("busbw", 120.4, "GB/s", component="64M"),
                                 Metric("busbw", 95.25, "GB/s", component="1G")])
    broken = GroupResult(kind="group", name="gpu05-gpu06-gpu07", members=["gpu05", "gpu06", "gpu07"],
                         status=Status.ERROR)
    text = render(report([*members, "gpu05", "gpu06", "gpu07"], [group, broken]))
    lines = text.splitlines()
    at = lines.index("group busbw (GB/s):")
    assert lines[at + 1].split() == ["GROUP", "MEMBERS", "STATUS", "64M", "1G"]
    assert lines[at + 3].split() == ["gpu01-gpu02-gpu03-gpu04", "gpu[01-04]", "WARN", "120.4", "95.2"]
    assert lines[at + 4].split() == ["gpu05-gpu06-gpu07", "gpu[05-07]", "ERROR", "ERR", "ERR"]
    assert "pair busbw" not in text  # no pairs, no matrix


# ------------------------------------------------------- everything else as before


# rendered by table.py before the pair matrix existed, for the same reports
BEFORE_V1 = "\n".join([
    "STATUS    ID       NODES       SUBJECT    MESSAGE",
    "--------  -------  ----------  ---------  -------------------------------------------------",
    "FAIL      ib.E002  gpu[01-02]  mlx5_2/1   mlx5_2/1 is Down/Polling (expected Active/LinkUp)",
    "",
    "FAIL: 3 nodes (1 PASS, 2 FAIL), tier quick, fabric h100-ndr400, config /etc/hc/hc.yaml, 3.00s, run 20261122T030000Z-0a1b2c",
])
BEFORE_V1_CHECKS = "\n".join([
    "STATUS    ID       NODES       SUBJECT    MESSAGE",
    "--------  -------  ----------  ---------  -------------------------------------------------",
    "FAIL      ib.E002  gpu[01-02]  mlx5_2/1   mlx5_2/1 is Down/Polling (expected Active/LinkUp)",
    "",
    # each node named; a FAIL row carries its finding, a PASS row its evidence (issue 21, 7)
    "gpu01:",
    "CHECK          STATUS      SECONDS  NOTE",
    "-------------  --------  ---------  ---------------------------------------------------------",
    "ib.port_state  FAIL          0.012  ib.E002 mlx5_2/1 is Down/Polling (expected Active/LinkUp)",
    "",
    "gpu02:",
    "CHECK          STATUS      SECONDS  NOTE",
    "-------------  --------  ---------  ---------------------------------------------------------",
    "ib.port_state  FAIL          0.012  ib.E002 mlx5_2/1 is Down/Polling (expected Active/LinkUp)",
    "",
    "gpu03:",
    "CHECK          STATUS      SECONDS  NOTE",
    "-------------  --------  ---------  ---------------------------",
    "ib.port_state  PASS          0.012  mlx5_2/1 rate_gbps 400 Gb/s",
    "",
    "FAIL: 3 nodes (1 PASS, 2 FAIL), tier quick, fabric h100-ndr400, config /etc/hc/hc.yaml, 3.00s, run 20261122T030000Z-0a1b2c",
])
BEFORE_FOLDED = "\n".join([
    "STATUS    ID       NODES             SUBJECT    MESSAGE",
    "--------  -------  ----------------  ---------  -------------------------------------------------",
    "FAIL      ib.E002  gpu[017,033-035]  mlx5_2/1   mlx5_2/1 is Down/Polling (expected Active/LinkUp)",
    "WARN      ib.E005  gpu002            x          w",
    "",
    "FAIL: 6 nodes (1 PASS, 1 WARN, 4 FAIL), tier quick, fabric h100-ndr400, config /x, 2.00s, run 20261122T130000Z-000000",
])
BEFORE_SKIPPED = "\n".join([
    "STATUS    ID       NODES    SUBJECT    MESSAGE",
    "--------  -------  -------  ---------  ----------------------------------------------------------------------------------",
    "ERROR     hc.E007  gpu001   -          nothing was checked: no check of tier quick was selected (see --checks and --tier)",
    "",
    "gpu001: SKIP, no check ran",  # not an empty CHECK table (issue 21, 7)
    "",
    "ERROR (nothing was checked): 1 node (1 SKIP), tier quick, fabric f1, config /x, 2.00s, run 20261122T130000Z-000000",
])
BEFORE_JOB = "\n".join([
    "STATUS    ID       NODES    SUBJECT    MESSAGE",
    "--------  -------  -------  ---------  -----------",
    "ERROR     hc.E002  gpu002   -          rank 1 hung",
    "",
    "GROUP    NAME      MEMBERS       STATUS    WORST FINDING",
    "-------  --------  ------------  --------  -------------------",
    "job      job 4711  gpu[001-002]  ERROR     hc.E002 rank 1 hung",
    "",
    # the verdict says where its ERROR comes from (issue 18, C.10): "2 PASS" alone contradicted it
    "ERROR: 2 nodes (2 PASS) + 1 job ERROR, tier quick, fabric h100-ndr400, config /x, 2.00s, run 20261122T130000Z-000000",
])


def node_result(name, *findings, status=None):  # as tests/unit/report/test_report.py builds them
    fs = [Finding(id=fid, status=st, message=msg, component=comp, node=name, check="ib.port_state",
                  subject=f"{name}:{comp}", fingerprint="0123456789abcdef") for fid, st, comp, msg in findings]
    return NodeResult(node=name, fabric="h100-ndr400",
                      status=status or worst((f.status for f in fs), default=Status.PASS),
                      checks=[CheckResult("ib.port_state", status or Status.PASS, 0.01)], findings=fs)


def quick_report(nodes):
    now = dt.datetime(2026, 11, 22, 13, 0, tzinfo=dt.timezone.utc)
    r = make_report(command="node", tier="quick", config_digest="sha256:" + "0" * 64, config_path="/x",
                    started=now, finished=now + dt.timedelta(seconds=2), nodes=nodes)
    return msgspec.structs.replace(r, run_id="20261122T130000Z-000000")


DOWN = ("ib.E002", Status.FAIL, "mlx5_2/1", "mlx5_2/1 is Down/Polling (expected Active/LinkUp)")


def test_reports_without_pairs_or_groups_render_exactly_as_before():
    v1 = decode(V1.read_bytes())
    assert render(v1) == BEFORE_V1
    assert render(v1, show_checks=True) == BEFORE_V1_CHECKS
    nodes = [node_result(n, DOWN) for n in ("gpu017", "gpu033", "gpu034", "gpu035")]
    nodes += [node_result("gpu001"), node_result("gpu002", ("ib.E005", Status.WARN, "x", "w"))]
    assert render(quick_report(nodes)) == BEFORE_FOLDED
    assert render(quick_report([NodeResult(node="gpu001", fabric="f1", status=Status.SKIP)])) == BEFORE_SKIPPED


def test_a_report_with_only_a_job_result_renders_as_before():
    job = GroupResult(kind="job", name="job 4711", members=["gpu001", "gpu002"], status=Status.ERROR,
                      findings=[Finding(id="hc.E002", status=Status.ERROR, message="rank 1 hung", check="job",
                                        members=("gpu002",))])
    r = with_groups(quick_report([node_result("gpu001"), node_result("gpu002")]), [job])
    assert render(r) == BEFORE_JOB


def test_the_json_report_is_unchanged_by_rendering():
    r = report(FOUR, four_nodes_one_slow())
    before = encode(r)
    render(r)
    assert encode(r) == before and decode(before) == r
