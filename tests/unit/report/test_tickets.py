"""`hc report tickets`: records from real run sequences (new -> ongoing -> fixed), what counts
as looked at again, idempotency, the history's bounds, and bad input."""

from __future__ import annotations

import datetime as dt
import json

import msgspec
import pytest
from support import run_hc, run_hc_inproc, write_stub

from healthcheck.core.model import AnalysisRun, CheckResult, Finding, GroupResult, NodeResult
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst
from healthcheck.report.build import make_report
from healthcheck.report.history import History
from healthcheck.report.jsonio import encode
from healthcheck.report.tickets import build, decode_run, idempotency_key, render, tickets_for, to_jsonl

T0 = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)
CHECKS = ("net.mtu", "ib.port_state", "gpu.ecc")


# ------------------------------------------------------------ runs through the real hooks


def hook_setup(tmp_path, mtu):
    """`hc health` on node1 (real checks: net.mtu against lo), recorded in a history; sinfo and
    scontrol are stand-ins (the health hook acts in Slurm; --dry-run only prints)."""
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "sinfo", 'printf "node1|idle|Unknown|none\\n"\n')
    write_stub(bin_dir, "scontrol", "exit 0\n")
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    set_mtu(tmp_path, mtu)
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(
        "default_fabric: t\n"
        f"slurm:\n  state_dir: {tmp_path}/state\n  audit_log: {tmp_path}/audit.jsonl\n  report_dir: {tmp_path}/reports\n"
        f"history: {{path: {tmp_path}/history.sqlite}}\n")
    return {"HC_CONFIG": str(cfg), "HC_NODE_NAME": "node1", "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}


def set_mtu(tmp_path, mtu):
    (tmp_path / "fabrics" / "t.yaml").write_text(f"net:\n  interfaces:\n    lo: {{mtu: {mtu}}}\n")


def health(env, run=run_hc):
    """`hc health --dry-run`: a real process where the test's title promises real health runs."""
    r = run("health", "--dry-run", env=env, timeout=60)
    # 2 FAIL, 3 ERROR, 5 the guard refusing to drain 1 of 1 nodes: each run is recorded all the same
    assert r.returncode in (0, 2, 3, 5), r.stderr
    return r


def tickets(env, *args):
    r = run_hc_inproc("report", "tickets", "--format", "jsonl", *args, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_new_ongoing_fixed_and_reopened_across_real_health_runs(tmp_path):
    env = hook_setup(tmp_path, mtu=1500)  # lo is 65536: net.E001 FAIL
    health(env)
    (first,) = tickets(env)
    assert (first["state"], first["id"], first["nodes"], first["check"], first["times_seen"]) == (
        "new", "net.E001", "node1", "net.mtu", 1)
    assert first["first_seen"] == first["last_seen"] == first["run_started_at"]
    assert first["key"] == f"{first['fingerprint']}:new:{first['run_id']}" and first["opened_in"] == first["run_id"]
    assert first["suggested_action"] == "fix-config" and first["hint"] and first["title"]
    assert first["limit"]["key"] == "net.interfaces.lo.mtu" and first["status"] == "FAIL"

    health(env)
    (second,) = tickets(env)
    assert (second["state"], second["times_seen"], second["fingerprint"]) == ("ongoing", 2, first["fingerprint"])
    assert second["first_seen"] == first["first_seen"] and second["last_seen"] == second["run_started_at"]
    assert second["opened_in"] == first["run_id"] and second["key"] != first["key"]

    set_mtu(tmp_path, 65536)  # fixed: net.mtu runs again on node1 and passes
    health(env)
    (third,) = tickets(env)
    assert (third["state"], third["times_seen"], third["fingerprint"]) == ("fixed", 2, first["fingerprint"])
    assert third["last_seen"] == second["last_seen"] and third["run_started_at"] > second["last_seen"]
    assert third["key"] == f"{first['fingerprint']}:fixed:{first['run_id']}"

    health(env)  # still fixed: nothing to say
    assert tickets(env) == []

    set_mtu(tmp_path, 1500)  # broken again: a new episode, a new ticket
    health(env)
    (again,) = tickets(env)
    assert again["state"] == "new" and again["times_seen"] == 1 and again["key"] != first["key"]
    table = run_hc_inproc("report", "tickets", env=env)
    assert table.returncode == 0 and b"NEW" in table.stdout and b"1 new, 0 ongoing, 0 fixed" in table.stdout


def test_a_check_that_could_not_run_fixes_nothing(tmp_path):
    env = hook_setup(tmp_path, mtu=1500)
    health(env, run_hc_inproc)
    write_stub(tmp_path / "bin", "ip", "exec sleep 60\n")  # net.mtu cannot run now: ERROR, hc.E002
    set_mtu(tmp_path, 65536)
    health(env, run_hc_inproc)
    got = {(t["id"], t["state"]) for t in tickets(env)}
    assert got == {("hc.E002", "new")}  # net.E001 is neither fixed nor ongoing: not looked at
    assert {(t["id"], t["state"]) for t in tickets(env, "--min-status", "fail")} == set()


# ------------------------------------------------------------- reports built in process


def f(node, fid, status=Status.FAIL, component="mlx5_0/1", check="ib.port_state", message=None):
    found = Finding(id=fid, status=status, message=message or f"{component} {fid}", component=component)
    return stamp(found, check=check, node=node)


def n(name, *findings, error=None, checks=None):
    ran = checks if checks is not None else {c: Status.PASS for c in CHECKS}
    results = [CheckResult(c, s, 0.1) for c, s in ran.items()]
    status = Status.ERROR if error else worst([*(x.status for x in findings), *ran.values()], default=Status.PASS)
    return NodeResult(node=name, fabric="f1", status=status, checks=[] if error else results,
                      findings=list(findings), error=error)


def run(k, nodes, *, analyses=(), groups=(), command="sweep"):
    start = T0 + dt.timedelta(hours=k)
    report = make_report(command=command, tier="standard", config_digest="sha256:" + "0" * 64, config_path="/x",
                         started=start, finished=start + dt.timedelta(seconds=5), nodes=nodes, groups=groups)
    return msgspec.structs.replace(report, analyses=list(analyses))


def states(records):
    return sorted((t.state, t.nodes, t.id) for t in records)


def replay(*reports, min_status=Status.WARN):
    """The records for the last report after the others, each through the history's JSON."""
    *earlier, last = reports
    return build(last, [decode_run(encode(r), "test") for r in earlier], min_status=min_status)


def test_only_what_was_looked_at_again_is_fixed():
    reach = f("n4", "hc.E006", Status.ERROR, component="", check="hc.reach")
    before = run(0, [
        n("n1", f("n1", "ib.E002")),                    # checked again, passes: fixed
        n("n2", f("n2", "ib.E002")),                    # not in the next run: stays open, no record
        n("n3", f("n3", "ib.E002")),                    # unreachable next: not fixed
        n("n4", reach, error="ssh: timed out"),         # reached next: its hc.E006 is fixed
        n("n5", f("n5", "ib.E002")),                    # its check skipped next: not fixed
        n("n6", f("n6", "ib.E002")),                    # its check ERROR next: not fixed
        n("n7", f("n7", "ib.E002")),                    # still failing: ongoing
        n("n8", f("n8", "ib.E002")),                    # FAIL -> WARN: ongoing (min WARN), fixed (min FAIL)
    ])
    after = run(1, [
        n("n1"),
        n("n3", f("n3", "hc.E006", Status.ERROR, component="", check="hc.reach"), error="ssh: refused"),
        n("n4"),
        n("n5", checks={"ib.port_state": Status.SKIP, "net.mtu": Status.PASS}),
        n("n6", f("n6", "hc.E002", Status.ERROR, component="", check="ib.port_state"),
          checks={"ib.port_state": Status.ERROR}),
        n("n7", f("n7", "ib.E002")),
        n("n8", f("n8", "ib.E002", Status.WARN)),
    ])
    assert states(replay(before, after)) == [
        ("fixed", "n1", "ib.E002"), ("fixed", "n4", "hc.E006"),
        ("new", "n3", "hc.E006"), ("new", "n6", "hc.E002"),
        ("ongoing", "n7", "ib.E002"), ("ongoing", "n8", "ib.E002"),
    ]
    assert states(replay(before, after, min_status=Status.FAIL)) == [
        ("fixed", "n1", "ib.E002"), ("fixed", "n8", "ib.E002"), ("ongoing", "n7", "ib.E002")]
    # n2 was not checked by the run between: it is fixed only when a later run checks it
    later = run(2, [n("n2")])
    assert states(replay(before, after, later)) == [("fixed", "n2", "ib.E002")]


def test_an_analysis_finding_is_fixed_only_where_the_analysis_judged_the_node():
    drift = [f(x, "fleet.E001", Status.WARN, component="mlx5_0/1", check="fleet.drift") for x in ("a1", "a2")]
    before = run(0, [n("a1", drift[0]), n("a2", drift[1]), n("a3")],
                 analyses=[AnalysisRun(name="fleet.drift", scope="fleet", status=Status.WARN, nodes="a[1-3]")])
    judged_one = run(1, [n("a1"), n("a2"), n("a3")],
                     analyses=[AnalysisRun(name="fleet.drift", scope="fleet", status=Status.PASS, nodes="a[1,3]")])
    assert states(replay(before, judged_one)) == [("fixed", "a1", "fleet.E001")]
    skipped = run(1, [n("a1"), n("a2")],
                  analyses=[AnalysisRun(name="fleet.drift", scope="fleet", status=Status.SKIP, reason="too few")])
    assert replay(before, skipped) == []  # a one-node run: the analysis did not apply, nothing is fixed


def test_a_pair_finding_names_both_nodes_and_is_fixed_when_the_pair_is_tested_again():
    slow = stamp(Finding(id="bw.E102", status=Status.WARN, message="slow link", component="all_reduce/16G"),
                 check="bw.pairs", members=["gpu02", "gpu01"])
    pair = GroupResult(kind="pair", name="gpu01-gpu02", members=["gpu01", "gpu02"], status=Status.WARN,
                       findings=[slow])
    before = run(0, [n("gpu01"), n("gpu02")], groups=[pair])
    (opened,) = replay(before)
    assert (opened.state, opened.nodes, opened.group, opened.id) == ("new", "gpu[01-02]", "pair gpu01-gpu02", "bw.E102")
    untested = run(1, [n("gpu01"), n("gpu02")])
    assert replay(before, untested) == []
    tested = run(1, [n("gpu01"), n("gpu02")], groups=[msgspec.structs.replace(pair, status=Status.PASS, findings=[])])
    (closed,) = replay(before, tested)
    assert (closed.state, closed.fingerprint) == ("fixed", opened.fingerprint)


def test_same_input_same_records_and_the_run_itself_is_never_its_own_past(tmp_path):
    r0 = run(0, [n("n1", f("n1", "ib.E002")), n("n2", f("n2", "ib.E002"))])
    r1 = run(1, [n("n1", f("n1", "ib.E002")), n("n2")])
    r2 = run(2, [n("n1", f("n1", "ib.E002", message="mlx5_0/1 is Down again")), n("n2")])
    with History(tmp_path / "h.sqlite") as h:
        h.record(r0)
        h.record(r1)
        before_recording = to_jsonl(tickets_for(r1, h, lookback=10))
        h.record(r2)  # a later run never changes an earlier one's records
        assert to_jsonl(tickets_for(r1, h, lookback=10)) == before_recording
        assert tickets_for(r1, h, lookback=10) == tickets_for(r1, h, lookback=10)
        (ongoing,) = tickets_for(r2, h, lookback=10)
    assert ongoing.state == "ongoing" and ongoing.times_seen == 3 and ongoing.message == "mlx5_0/1 is Down again"
    assert [(t.state, t.nodes) for t in json_lines(before_recording)] == [("ongoing", "n1"), ("fixed", "n2")]
    assert states(replay(r0, r1)) == [("fixed", "n2", "ib.E002"), ("ongoing", "n1", "ib.E002")]


def json_lines(data):
    from healthcheck.report.tickets import Ticket

    return [msgspec.json.decode(line, type=Ticket) for line in data.splitlines()]


def test_lookback_bounds_the_history_read_and_other_nodes_runs_are_not_read(tmp_path):
    with History(tmp_path / "h.sqlite") as h:
        reports = [run(k, [n("n1", f("n1", "ib.E002"))]) for k in range(6)]
        for k, r in enumerate(reports):
            h.record(r)
            h.record(run(k, [n(f"other{k}", f(f"other{k}", "ib.E002"))]))  # another node's runs
        last = reports[-1]
        assert h.earlier(last, ["n1"], 3) == [r.run_id for r in reports[2:5]]
        assert h.earlier(last, ["n1"], 100) == [r.run_id for r in reports[:5]]
        assert h.earlier(last, ["nobody"], 100) == [] and h.earlier(last, ["n1"], 0) == []
        (full,) = tickets_for(last, h, lookback=100)
        (clipped,) = tickets_for(last, h, lookback=2)
    assert (full.times_seen, full.first_seen, full.opened_in) == (6, reports[0].started_at, reports[0].run_id)
    # an episode older than the lookback starts at the oldest run read
    assert (clipped.state, clipped.times_seen, clipped.first_seen) == ("ongoing", 3, reports[3].started_at)


def test_duplicates_in_a_run_fold_into_one_record_with_the_worst_status():
    r = run(0, [n("n1", f("n1", "ib.E002", Status.WARN), f("n1", "ib.E002", Status.FAIL))])
    (one,) = replay(r)
    assert one.status is Status.FAIL


def test_hostile_names_and_fingerprints_stay_inert():
    bad = "gpu[1-2],evil\n\x1b[31m"
    finding = msgspec.structs.replace(f("x", "ib.E002"), node=bad, fingerprint="abc\r\nX-Injected: 1")
    r = run(0, [NodeResult(node=bad, fabric="f1", status=Status.FAIL, findings=[finding],
                           checks=[CheckResult("ib.port_state", Status.FAIL, 0.1)])])
    (t,) = replay(r)
    assert t.nodes == bad  # listed as it is: NodeSet must not expand it into other nodes
    assert "\n" not in t.key and "\r" not in t.key and t.key.startswith("h")
    assert t.key == idempotency_key(t.fingerprint, "new", r.run_id, r.run_id)
    assert "\x1b" not in render([t]) and "\n" not in render([t]).splitlines()[2]


def test_evidence_is_bounded():
    long = msgspec.structs.replace(f("n1", "ib.E002"), evidence="x" * 100_000)
    (t,) = replay(run(0, [n("n1", long)]))
    assert t.evidence is not None and len(t.evidence) < 17_000 and t.evidence.endswith("more characters)")


# ---------------------------------------------------------------------------- commands


def config(tmp_path, history="history.sqlite"):
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text("{}\n")
    cfg = tmp_path / "hc.yaml"
    path = "null" if history is None else str(tmp_path / history)
    cfg.write_text(f"default_fabric: t\nhistory: {{path: {path}}}\nslurm: {{state_dir: {tmp_path}/state}}\n")
    return cfg


def test_a_report_from_a_file_against_the_history_and_the_newest_run(tmp_path):
    cfg = config(tmp_path)
    r0 = run(0, [n("n1", f("n1", "ib.E002")), n("n2", f("n2", "ib.E002"))])
    r1 = run(1, [n("n1", f("n1", "ib.E002")), n("n2")])
    with History(tmp_path / "history.sqlite") as h:
        h.record(r0)
        h.record(r1)
    newest = run_hc_inproc("report", "tickets", "--format", "jsonl", "--config", str(cfg))
    saved = tmp_path / "r1.json"
    saved.write_bytes(encode(r1))
    named = run_hc_inproc("report", "tickets", str(saved), "--format", "jsonl", "--config", str(cfg))
    piped = run_hc_inproc("report", "tickets", "-", "--format", "jsonl", "--config", str(cfg), input=encode(r1))
    assert newest.returncode == named.returncode == piped.returncode == 0, newest.stderr
    assert newest.stdout == named.stdout == piped.stdout  # idempotent: one input, one set of records
    assert [(d["state"], d["nodes"]) for d in map(json.loads, newest.stdout.splitlines())] == [
        ("ongoing", "n1"), ("fixed", "n2")]
    as_json = run_hc_inproc("report", "tickets", str(saved), "--format", "json", "--config", str(cfg))
    assert [d["key"] for d in json.loads(as_json.stdout)] == [json.loads(x)["key"] for x in named.stdout.splitlines()]


def test_an_empty_or_absent_history(tmp_path):
    cfg = config(tmp_path)
    saved = tmp_path / "r.json"
    saved.write_bytes(encode(run(0, [n("n1", f("n1", "ib.E002")), n("n2")])))
    r = run_hc_inproc("report", "tickets", "--config", str(cfg))
    assert r.returncode == 4 and b"no run history yet" in r.stderr
    r = run_hc_inproc("report", "tickets", str(saved), "--format", "jsonl", "--config", str(cfg))
    assert r.returncode == 0 and b"every finding is new" in r.stderr
    assert [json.loads(x)["state"] for x in r.stdout.splitlines()] == ["new"]
    assert not (tmp_path / "history.sqlite").exists()  # reading never creates a history
    History(tmp_path / "history.sqlite").db  # created, no run in it  # noqa: B018
    r = run_hc_inproc("report", "tickets", "--config", str(cfg))
    assert r.returncode == 4 and b"no run recorded in the history" in r.stderr
    r = run_hc_inproc("report", "tickets", str(saved), "--format", "jsonl", "--config", str(cfg))
    assert r.returncode == 0 and [json.loads(x)["state"] for x in r.stdout.splitlines()] == ["new"]
    off = config(tmp_path, history=None)
    r = run_hc_inproc("report", "tickets", str(saved), "--config", str(off))
    assert r.returncode == 0 and b"history.path is null" in r.stderr and b"1 new" in r.stdout
    empty = tmp_path / "clean.json"
    empty.write_bytes(encode(run(1, [n("n1")])))
    r = run_hc_inproc("report", "tickets", str(empty), "--config", str(cfg))
    assert r.returncode == 0 and b"no tickets" in r.stdout


@pytest.mark.parametrize("content, message", [
    (None, "unsupported report schema 'hc.report/3'"),
    (b'{"schema": "hc.report/0", "nodes": []}', "unsupported report schema 'hc.report/0'"),
    (b"{not json", "not a valid hc report"),
    (b"", "not a valid hc report"),
])
def test_a_report_hc_cannot_read_is_refused_with_exit_4(tmp_path, content, message):
    cfg = config(tmp_path)
    if content is None:  # a newer hc's report: same shape, another version
        doc = json.loads(encode(run(0, [n("n1", f("n1", "ib.E002"))])))
        doc["schema"] = "hc.report/3"
        content = json.dumps(doc).encode()
    (tmp_path / "x.json").write_bytes(content)
    r = run_hc_inproc("report", "tickets", str(tmp_path / "x.json"), "--format", "jsonl", "--config", str(cfg))
    err = r.stderr.decode()
    assert r.returncode == 4 and message in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and r.stdout == b""


def test_a_damaged_run_in_the_history_is_one_line_and_exit_4(tmp_path):
    import sqlite3

    cfg = config(tmp_path)
    with History(tmp_path / "history.sqlite") as h:
        h.record(run(0, [n("n1", f("n1", "ib.E002"))]))
        h.record(run(1, [n("n1")]))
    db = sqlite3.connect(tmp_path / "history.sqlite")
    with db:
        db.execute("UPDATE runs SET report = ? WHERE started_at = (SELECT min(started_at) FROM runs)", (b"garbage",))
    db.close()
    r = run_hc("report", "tickets", "--config", str(cfg))
    assert r.returncode == 4 and b"is damaged" in r.stderr and b"Traceback" not in r.stderr


def test_bad_options_exit_4(tmp_path):
    cfg = config(tmp_path)
    for args in (["--min-status", "pass"], ["--lookback", "0"], ["--token-file", "/nonexistent"]):
        r = run_hc_inproc("report", "tickets", "-", *args, "--config", str(cfg), input=b"{}")
        assert r.returncode == 4, (args, r.stderr)


def test_run_findings_are_not_tickets():
    from healthcheck.core import catalogue
    from healthcheck.report.build import run_finding, with_run_finding

    r = with_run_finding(run(0, [n("n1")]), run_finding(catalogue.NOT_WRITTEN, "audit log lost", scope="n1"))
    assert replay(r) == []


def test_report_of_version_1_reads_as_a_run_without_groups():
    doc = json.loads(encode(run(0, [n("n1", f("n1", "ib.E002"))])))
    doc["schema"] = "hc.report/1"
    for key in ("groups", "analyses"):
        doc.pop(key, None)
    old = decode_run(json.dumps(doc).encode(), "old")
    assert old.groups == [] and len(old.nodes) == 1
    assert states(build(run(1, [n("n1")]), [old])) == [("fixed", "n1", "ib.E002")]


def test_records_carry_the_runs_command_and_tier():
    r = run(0, [n("n1", f("n1", "ib.E002"))], command="health")
    (t,) = replay(r)
    assert (t.command, t.tier, t.run_id) == ("health", "standard", r.run_id)
