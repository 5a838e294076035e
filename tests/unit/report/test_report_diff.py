"""Report diffs, and the `hc report` commands (show, diff, history) as operators run them."""

from __future__ import annotations

import datetime as dt
import json

import msgspec
import pytest
from support import run_hc, run_hc_inproc

from healthcheck.core.model import CheckResult, Finding, NodeResult, Report, fingerprint
from healthcheck.core.status import Status, worst
from healthcheck.report.diff import diff, headline, render_diff, to_json
from healthcheck.report.history import History
from healthcheck.report.jsonio import encode

T0 = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)
CHECKS = ("ib.ports", "gpu.ecc", "net.mtu")


def f(node, fid, status, component="mlx5_0/1", check="ib.ports"):
    subject = f"{node}:{component}" if component else node
    return Finding(id=fid, status=status, message=f"{component} {fid}", component=component, node=node, check=check,
                   subject=subject, fingerprint=fingerprint(node, check, subject, fid))


def n(name, *findings, error=None, checks=None):
    ran = checks if checks is not None else {c: Status.PASS for c in CHECKS}
    results = [CheckResult(c, s, 0.1) for c, s in ran.items()]
    status = Status.ERROR if error else worst([*(x.status for x in findings), *ran.values()], default=Status.PASS)
    return NodeResult(node=name, fabric="f1", status=status, checks=results, findings=list(findings), error=error)


def rep(k, nodes, command="sweep", tier="quick"):
    start = T0 + dt.timedelta(hours=k)
    stamp = start.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    summary = {s.value: sum(x.status is s for x in nodes) for s in Status}
    return Report(run_id=start.strftime("%Y%m%dT%H%M%SZ") + f"-{k:06x}", hc_version="0.1", command=command, tier=tier,
                  config_digest="sha256:" + "0" * 64, config_path="/x", started_at=stamp, finished_at=stamp,
                  duration_s=1.0, host="mgmt1", status=worst((x.status for x in nodes), default=Status.SKIP),
                  nodes=nodes, summary=summary)


def nodes_of(changes):
    return sorted((c.node, c.id) for c in changes)


OLD = rep(0, [
    n("gpu01", f("gpu01", "ib.E002", Status.FAIL)),                     # fixed
    n("gpu02", f("gpu02", "ib.E002", Status.FAIL)),                     # still failing
    n("gpu03"),                                                         # breaks
    n("gpu04", f("gpu04", "ib.E002", Status.FAIL)),                     # unreachable now: not rechecked
    n("gpu05", f("gpu05", "ib.E002", Status.FAIL)),                     # check skipped now: not rechecked
    n("gpu06", f("gpu06", "gpu.E003", Status.WARN, "GPU1", "gpu.ecc")),  # WARN -> FAIL: a new failure
    n("gpu07", f("gpu07", "gpu.E003", Status.WARN, "GPU1", "gpu.ecc")),  # warning cleared
    n("gpu08", f("gpu08", "ib.E002", Status.FAIL)),                     # gone from the newer report
])
NEW = rep(1, [
    n("gpu01"),
    n("gpu02", f("gpu02", "ib.E002", Status.FAIL)),
    n("gpu03", f("gpu03", "ib.E002", Status.FAIL), f("gpu03", "net.E001", Status.WARN, "ib0", "net.mtu")),
    n("gpu04", f("gpu04", "hc.E006", Status.ERROR, "", "hc.reach"), error="ssh: timed out", checks={}),
    n("gpu05", checks={"ib.ports": Status.SKIP, "gpu.ecc": Status.PASS}),
    n("gpu06", f("gpu06", "gpu.E003", Status.FAIL, "GPU1", "gpu.ecc")),
    n("gpu07"),
    n("gpu09", f("gpu09", "ib.E002", Status.FAIL)),                     # new node, failing
])


def test_diff_buckets():
    d = diff(OLD, NEW)
    assert nodes_of(d.new_failures) == [("gpu03", "ib.E002"), ("gpu06", "gpu.E003"), ("gpu09", "ib.E002")]
    assert nodes_of(d.still_failing) == [("gpu02", "ib.E002")]
    assert nodes_of(d.fixed) == [("gpu01", "ib.E002")]
    assert nodes_of(d.unverified) == [("gpu04", "ib.E002"), ("gpu05", "ib.E002"), ("gpu08", "ib.E002")]
    assert nodes_of(d.new_errors) == [("gpu04", "hc.E006")]
    assert nodes_of(d.new_warnings) == [("gpu03", "net.E001")]
    assert nodes_of(d.cleared_warnings) == [("gpu07", "gpu.E003")]
    assert d.nodes_added == ["gpu09"] and d.nodes_removed == ["gpu08"]
    (fixed,) = d.fixed
    assert (fixed.before, fixed.after) == (Status.FAIL, None)
    (worse,) = [c for c in d.new_failures if c.node == "gpu06"]
    assert (worse.before, worse.after) == (Status.WARN, Status.FAIL)


def test_diff_of_a_report_with_itself_is_quiet():
    d = diff(NEW, NEW)
    c = d.counts()
    assert c["new_failures"] == c["fixed"] == c["unverified"] == c["new_warnings"] == 0
    assert c["still_failing"] == 4
    assert headline(d).startswith("0 new failures, 0 fixed, 4 still failing")


def test_fail_to_warn_same_fingerprint_is_fixed():
    old = rep(0, [n("a1", f("a1", "ib.E005", Status.FAIL))])
    new = rep(1, [n("a1", f("a1", "ib.E005", Status.WARN))])
    d = diff(old, new)
    assert nodes_of(d.fixed) == [("a1", "ib.E005")] and d.fixed[0].after is Status.WARN
    assert d.new_warnings == []  # it was worse before: not news


def test_render_and_json():
    d = diff(OLD, NEW)
    text = render_diff(d)
    lines = text.splitlines()
    assert lines[1].startswith("3 new failures, 1 fixed, 1 still failing, 3 not rechecked")
    row = next(line for line in lines if line.startswith("NEW FAIL") and "ib.E002" in line)
    assert "gpu[03,09]" in row
    assert any(line.startswith("nodes only in the newer report: gpu09") for line in lines)
    doc = json.loads(to_json(d))
    assert doc["counts"]["new_failures"] == 3
    assert {c["node"] for c in doc["new_failures"]} == {"gpu03", "gpu06", "gpu09"}
    assert doc["new"]["run_id"] == NEW.run_id and doc["old"]["run_id"] == OLD.run_id


# ------------------------------------------------------------------------- commands


def write(tmp_path, name, report):
    path = tmp_path / name
    path.write_bytes(encode(report))
    return path


def config_with_history(tmp_path):
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 65536}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nhistory:\n  path: {tmp_path}/state/history.sqlite\n")
    return cfg, tmp_path / "state" / "history.sqlite"


def test_show_a_report_written_by_hc_node(tmp_path, validate_report):
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 1500}\n")
    (tmp_path / "hc.yaml").write_text("default_fabric: t\n")
    r = run_hc("node", "--local", "--config", str(tmp_path / "hc.yaml"), "--format", "json",
               env={"HC_NODE_NAME": "gpu017"})
    assert r.returncode == 2, r.stderr
    saved = tmp_path / "r.json"
    saved.write_bytes(r.stdout)
    shown = run_hc("report", "show", str(saved), "--format", "json")
    assert shown.returncode == 0, shown.stderr
    doc = validate_report(shown.stdout)
    assert doc == json.loads(r.stdout)
    table = run_hc("report", "show", str(saved))
    assert table.returncode == 0 and b"net.E001" in table.stdout and b"gpu017" not in table.stderr
    piped = run_hc("report", "show", "-", "--format", "json", input=r.stdout)
    assert piped.returncode == 0 and json.loads(piped.stdout) == doc


@pytest.mark.parametrize("args, content, message", [
    (["report", "show", "{tmp}/x.json"], b"{not json", "not a valid hc report"),
    (["report", "show", "{tmp}/x.json"], b'{"schema": "other/1"}', "not a valid hc report"),
    (["report", "show", "{tmp}/missing.json"], None, "cannot read"),
    (["report", "diff", "{tmp}/x.json", "{tmp}/x.json"], b"[]", "not a valid hc report"),
    (["report", "history", "--node", "bad;name"], None, "is not a valid node name"),
    (["report", "history", "--limit", "0"], None, "Invalid value for '--limit'"),
])
def test_bad_input_is_one_line_and_exit_4(tmp_path, args, content, message):
    if content is not None:
        (tmp_path / "x.json").write_bytes(content)
    r = run_hc_inproc(*[a.format(tmp=tmp_path) for a in args])
    assert r.returncode == 4, (r.returncode, r.stderr)
    err = r.stderr.decode()
    assert message in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("hc: error:")]) == 1


def test_diff_two_files_exit_codes(tmp_path):
    old, new = write(tmp_path, "old.json", OLD), write(tmp_path, "new.json", NEW)
    r = run_hc("report", "diff", str(old), str(new))
    assert r.returncode == 2, r.stderr
    assert b"3 new failures" in r.stdout
    r = run_hc("report", "diff", str(new), str(new), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["counts"]["new_failures"] == 0


def test_diff_against_the_history(tmp_path):
    cfg, db = config_with_history(tmp_path)
    r = run_hc_inproc("report", "diff", "--config", str(cfg))
    assert r.returncode == 4 and b"no run history yet" in r.stderr
    with History(db) as h:
        h.record(rep(0, OLD.nodes))
        h.record(rep(1, OLD.nodes, command="node"))  # another command: never compared with a sweep
        h.record(rep(2, NEW.nodes))
    r = run_hc_inproc("report", "diff", "--config", str(cfg), "--format", "json")
    assert r.returncode == 2, r.stderr
    doc = json.loads(r.stdout)
    assert doc["old"]["run_id"] == rep(0, []).run_id and doc["new"]["run_id"] == rep(2, []).run_id
    assert doc["counts"]["new_failures"] == 3
    # one file: against the run before it in the history
    newer = write(tmp_path, "newer.json", rep(3, NEW.nodes))
    r = run_hc_inproc("report", "diff", str(newer), "--config", str(cfg), "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["old"]["run_id"] == rep(2, []).run_id
    # nothing earlier to compare with
    r = run_hc_inproc("report", "diff", "--command", "node", "--config", str(cfg))
    assert r.returncode == 4 and b"no earlier run of 'node'" in r.stderr


def test_history_listing(tmp_path):
    cfg, db = config_with_history(tmp_path)
    r = run_hc_inproc("report", "history", "--config", str(cfg))
    assert r.returncode == 0 and b"no runs recorded" in r.stdout
    with History(db) as h:
        h.record(rep(0, OLD.nodes))
        h.record(rep(1, NEW.nodes))
    r = run_hc_inproc("report", "history", "--config", str(cfg), "--format", "json")
    assert r.returncode == 0, r.stderr
    runs = json.loads(r.stdout)
    assert [x["run_id"] for x in runs] == [rep(1, []).run_id, rep(0, []).run_id]
    assert runs[0]["node_count"] == 8 and runs[0]["status"] == "FAIL"
    r = run_hc_inproc("report", "history", "--node", "gpu01", "--config", str(cfg), "--format", "json")
    assert [x["status"] for x in json.loads(r.stdout)] == ["PASS", "FAIL"]
    r = run_hc_inproc("report", "history", "--node", "gpu01", "--limit", "1", "--config", str(cfg))
    assert r.returncode == 0 and r.stdout.count(b"sweep") == 1
    r = run_hc_inproc("report", "history", "--config", str(cfg))
    assert r.returncode == 0 and b"STARTED" in r.stdout


def test_history_disabled(tmp_path):
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("{}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: t\nhistory:\n  path: null\n")
    r = run_hc_inproc("report", "history", "--config", str(cfg))
    assert r.returncode == 4 and b"history.path is null" in r.stderr


def test_round_trip_through_msgspec_keeps_diff_types():
    d = diff(OLD, NEW)
    again = msgspec.json.decode(msgspec.json.encode(d), type=type(d))
    assert again == d


# ---------------------------------------------------- order and config (issue 8, 19)


def test_swapped_arguments_are_compared_in_time_order_and_said():
    d = diff(NEW, OLD)  # newest first: without reordering, every fix would be a new failure
    assert d.swapped and d.old.run_id == OLD.run_id and d.new.run_id == NEW.run_id
    assert nodes_of(d.new_failures) == nodes_of(diff(OLD, NEW).new_failures)
    assert nodes_of(d.fixed) == [("gpu01", "ib.E002")]
    assert any("newest first" in note for note in d.notes)
    text = render_diff(d)
    assert "warning: the reports were given newest first" in text
    assert not diff(OLD, NEW).swapped and diff(OLD, NEW).notes == []


def test_diff_says_when_the_configs_differ():
    import msgspec

    other = msgspec.structs.replace(NEW, config_digest="sha256:" + "1" * 64)
    d = diff(OLD, other)
    assert d.config_changed and any("different configs" in note for note in d.notes)
    assert json.loads(to_json(d))["config_changed"] is True


def test_diff_rows_fold_messages_that_name_their_node_and_sort_naturally():
    def down(name):
        return n(name, Finding(id="hc.E006", status=Status.ERROR, message=f"no report from srun for {name}",
                               node=name, check="hc.reach", subject=name,
                               fingerprint=fingerprint(name, "hc.reach", name, "hc.E006")), checks={})

    names = ["gpu10", "gpu2", "gpu1", "gpu11"]
    d = diff(rep(0, [n(x) for x in names]), rep(1, [down(x) for x in names] + [n("gpu3")]))
    assert [c.node for c in d.new_errors] == ["gpu1", "gpu2", "gpu10", "gpu11"]
    rows = [line for line in render_diff(d).splitlines() if line.startswith("NEW ERROR")]
    assert len(rows) == 1 and "gpu[1-2,10-11]" in rows[0] and "no report from srun for <node>" in rows[0]
    assert d.nodes_added == ["gpu3"]


def test_diff_cli_warns_on_stderr_when_old_is_newer(tmp_path):
    old, new = write(tmp_path, "old.json", OLD), write(tmp_path, "new.json", NEW)
    r = run_hc_inproc("report", "diff", str(new), str(old))
    assert r.returncode == 2 and b"3 new failures, 1 fixed" in r.stdout
    assert b"hc: warning: the reports were given newest first" in r.stderr
