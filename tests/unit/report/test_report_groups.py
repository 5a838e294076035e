"""Run-level results (pairs, groups, jobs) in hc.report/2, and reading hc.report/1 reports."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import msgspec
from support import run_hc

from healthcheck.core.model import CheckResult, Finding, GroupResult, Metric, NodeResult, fingerprint
from healthcheck.core.status import Status
from healthcheck.report.build import make_report, with_groups
from healthcheck.report.diff import diff, render_diff, to_json
from healthcheck.report.history import History
from healthcheck.report.jsonio import decode, encode, read_report
from healthcheck.report.table import LIST_PASSING_UP_TO, render

V1 = Path(__file__).parents[2] / "fixtures" / "reports" / "hc-report-1.json"  # written by hc before /2
T0 = dt.datetime(2026, 11, 23, 3, 0, tzinfo=dt.timezone.utc)


def node(name: str) -> NodeResult:
    return NodeResult(node=name, fabric="f1", status=Status.PASS, checks=[CheckResult("bw.pairs", Status.PASS, 1.0)])


def pair(a: str, b: str, busbw: float, limit: float = 150.0) -> GroupResult:
    """A bandwidth pair: busbw per message size, FAIL below the limit."""
    name = f"{a}-{b}"
    findings = []
    if busbw < limit:
        findings.append(Finding(id="bw.E001", status=Status.FAIL, message=f"busbw {busbw} GB/s below {limit} GB/s",
                                component="1MiB", value=busbw, unit="GB/s", check="bw.pairs", subject=name,
                                members=(a, b), fingerprint=fingerprint("", "bw.pairs", name, "bw.E001")))
    metrics = [Metric("busbw", busbw, "GB/s", component=size) for size in ("64KiB", "1MiB")]
    return GroupResult(kind="pair", name=name, members=[a, b], status=Status.FAIL if findings else Status.PASS,
                       findings=findings, metrics=metrics)


def report(k: int, groups: list[GroupResult], names=("gpu01", "gpu02", "gpu03", "gpu04")):
    start = T0 + dt.timedelta(hours=k)
    return make_report(command="sweep", tier="bw", config_digest="sha256:" + "0" * 64, config_path="/x",
                       started=start, finished=start + dt.timedelta(seconds=5), nodes=[node(n) for n in names],
                       groups=groups)


SLOW = [pair("gpu01", "gpu02", 180.0), pair("gpu03", "gpu04", 42.5)]


# ------------------------------------------------------------ hc.report/1 still reads


def test_a_version_1_report_decodes_upgraded_without_groups(validate_report):
    data = V1.read_bytes()
    assert validate_report(data)["schema"] == "hc.report/1"  # the fixture is a genuine /1 report
    r = decode(data)
    assert r.schema == "hc.report/2" and r.groups == [] and r.status is Status.FAIL
    assert [n.node for n in r.nodes] == ["gpu01", "gpu02", "gpu03"]
    assert all(f.members == () for n in r.nodes for f in n.findings)
    validate_report(encode(r))  # re-encoded, it is a valid /2 report


def test_hc_report_show_and_diff_read_a_version_1_report(tmp_path, validate_report):
    shown = run_hc("report", "show", str(V1))
    assert shown.returncode == 0, shown.stderr
    assert b"ib.E002" in shown.stdout and b"gpu[01-02]" in shown.stdout
    as_json = run_hc("report", "show", str(V1), "--format", "json")
    assert as_json.returncode == 0 and validate_report(as_json.stdout)["schema"] == "hc.report/2"
    newer = tmp_path / "new.json"
    newer.write_bytes(encode(report(0, SLOW, names=("gpu01", "gpu02", "gpu03"))))
    d = run_hc("report", "diff", str(V1), str(newer), "--format", "json")
    assert d.returncode == 2, d.stderr  # the slow pair is a new failure
    doc = json.loads(d.stdout)
    # the /1 failures came from ib.port_state, which the newer run did not run
    assert [c["node"] for c in doc["unverified"]] == ["gpu01", "gpu02"]
    assert [(c["group"], c["members"]) for c in doc["new_failures"]] == [("pair gpu03-gpu04", ["gpu03", "gpu04"])]
    old = decode(V1.read_bytes())
    assert diff(old, decode(newer.read_bytes())).new_failures[0].group == "pair gpu03-gpu04"  # and in process


# --------------------------------------------------------------- hc.report/2 groups


def test_a_report_with_groups_round_trips_and_validates(validate_report):
    r = report(0, SLOW)
    data = encode(r)
    doc = validate_report(data)
    assert doc["schema"] == "hc.report/2"
    assert doc["groups"][1]["metrics"][1] == {"name": "busbw", "value": 42.5, "unit": "GB/s", "component": "1MiB"}
    assert decode(data) == r
    assert decode(encode(r, indent=0)) == r


def test_a_report_without_groups_stays_small():
    doc = json.loads(encode(report(0, [])))
    assert doc["groups"] == []
    # node metrics gain no key when they have no members
    assert "members" not in msgspec.to_builtins(Metric("mtu", 1500))


def test_groups_count_towards_the_run_status_and_the_summary():
    r = report(0, SLOW)
    assert r.status is Status.FAIL and r.summary["PASS"] == 4  # summary counts nodes
    assert r.findings_summary == [{"status": "FAIL", "id": "bw.E001", "component": "1MiB",
                                   "message": "busbw 42.5 GB/s below 150.0 GB/s", "nodes": "gpu[03-04]", "count": 1}]
    assert report(0, [pair("gpu01", "gpu02", 180.0)]).status is Status.PASS


def test_identical_group_findings_fold_their_members():
    slow = [pair("gpu01", "gpu02", 42.5), pair("gpu03", "gpu04", 42.5)]
    (row,) = report(0, slow).findings_summary
    assert row["nodes"] == "gpu[01-04]" and row["count"] == 2


def test_with_groups_keeps_run_findings_rows():
    r = make_report(command="sweep", tier="bw", config_digest="sha256:" + "0" * 64, config_path="/x",
                    started=T0, finished=T0, nodes=[NodeResult(node="gpu01", fabric="f1", status=Status.SKIP)])
    assert r.run_findings and r.findings_summary[-1]["id"] == "hc.E007"
    r2 = with_groups(r, SLOW)
    assert [g["id"] for g in r2.findings_summary] == ["bw.E001", "hc.E007"]
    assert r2.groups == SLOW and with_groups(r2, []) is r2


def test_the_table_lists_groups_worst_first_with_members_folded():
    text = render(report(0, SLOW))
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("GROUP"))
    first, second = lines[header + 2].split(), lines[header + 3].split()
    assert first[:4] == ["pair", "gpu03-gpu04", "gpu[03-04]", "FAIL"] and first[4] == "bw.E001"
    assert second[:5] == ["pair", "gpu01-gpu02", "gpu[01-02]", "PASS", "-"]
    assert "GROUP" not in render(report(0, []))


def test_many_passing_groups_are_counted_not_listed():
    names = [f"n{i:03d}" for i in range(2 * LIST_PASSING_UP_TO + 2)]
    groups = [pair(a, b, 180.0) for a, b in zip(names[::2], names[1::2], strict=True)]
    groups.append(pair("x1", "x2", 10.0))
    text = render(report(0, groups, names=names))
    listed = text.split("\nGROUP ")[-1]  # the run-level results table (the pair matrix lists slow pairs above)
    assert "x1-x2" in listed and "n000-n001" not in listed
    assert f"{len(groups) - 1} more pair/group/job results passed" in text


def test_hostile_member_names_are_listed_not_folded():
    g = GroupResult(kind="job", name="job 7\x1b[31m", members=["a[1]", "b,2"], status=Status.WARN)
    text = render(report(0, [g]))
    assert "a[1],b,2" in text and "\x1b" not in text


# --------------------------------------------------------------------------- diffs


def test_group_findings_diff_by_fingerprint():
    old = report(0, SLOW)
    fixed_now = report(1, [pair("gpu01", "gpu02", 40.0), pair("gpu03", "gpu04", 170.0)])
    d = diff(old, fixed_now)
    assert [(c.group, c.members) for c in d.new_failures] == [("pair gpu01-gpu02", ["gpu01", "gpu02"])]
    assert [(c.group, c.before, c.after) for c in d.fixed] == [("pair gpu03-gpu04", Status.FAIL, None)]
    text = render_diff(d)
    assert any(line.split()[:4] == ["NEW", "FAIL", "bw.E001", "gpu[01-02]"] for line in text.splitlines())
    assert json.loads(to_json(d))["counts"]["fixed"] == 1


def test_a_group_not_measured_again_is_not_fixed():
    old = report(0, SLOW)
    errored = GroupResult(kind="pair", name="gpu03-gpu04", members=["gpu03", "gpu04"], status=Status.ERROR)
    for groups in ([], [pair("gpu01", "gpu02", 180.0)], [errored]):
        d = diff(old, report(1, groups))
        assert not d.fixed and [c.group for c in d.unverified] == ["pair gpu03-gpu04"]


def test_a_group_finding_never_matches_a_node_finding():
    old = report(0, SLOW)
    same = report(1, SLOW)
    d = diff(old, same)
    assert [c.group for c in d.still_failing] == ["pair gpu03-gpu04"] and not d.new_failures


# ------------------------------------------------------------------------- history


def test_history_records_and_returns_reports_with_groups(tmp_path):
    r0, r1 = report(0, SLOW), report(1, [])
    with History(tmp_path / "h.sqlite") as h:
        h.record(r0)
        h.record(r1)
        assert h.last(2) == [r1, r0]
        assert h.previous(r1) == r0 and h.get(r0.run_id).groups == SLOW
        # groups are not indexed per node (yet): the nodes' own statuses are
        assert h.node_statuses(["gpu03"], 5) == {"gpu03": ["PASS", "PASS"]}


def test_history_reads_a_version_1_run_recorded_before_the_upgrade(tmp_path):
    import zlib

    old = read_report(V1)
    with History(tmp_path / "h.sqlite") as h:
        h.record(old)
        # as an older hc stored it: the /1 bytes themselves
        h.db.execute("UPDATE runs SET report = ? WHERE run_id = ?", (zlib.compress(V1.read_bytes()), old.run_id))
        assert h.get(old.run_id) == old
