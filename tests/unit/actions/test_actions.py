"""Drain/resume policy, the blast-radius guard, the Slurm client's retries, node state, audit log."""

from __future__ import annotations

import threading
import time

import pytest

from healthcheck.actions.audit import AuditLog
from healthcheck.actions.nodestate import LockTimeout, NodeState
from healthcheck.actions.policy import can_resume, decide, rollback_needed
from healthcheck.actions.reasons import drain_reason, reason_ids
from healthcheck.actions.slurm import SlurmClient, SlurmNode, parse_sinfo, shell_line
from healthcheck.core.config.schema import DrainPolicy, SlurmSettings
from healthcheck.core.model import CheckResult, Finding, NodeResult
from healthcheck.core.status import Status
from healthcheck.runners.base import CommandResult

POLICY = DrainPolicy(max_drain_fraction=0.3)


def result(node, *fails, checks=None, status=None, errors=()):
    findings = [Finding(id=i, status=Status.FAIL, message="x", node=node, check="c", subject=node) for i in fails]
    findings += [Finding(id=i, status=Status.ERROR, message="x", node=node, check="c", subject=node) for i in errors]
    checks = checks or {"net.mtu": Status.FAIL if fails else Status.PASS, "ib.port_state": Status.PASS}
    st = status or (Status.FAIL if fails else Status.ERROR if errors else Status.PASS)
    return NodeResult(node=node, fabric="f", status=st, findings=findings,
                      checks=[CheckResult(n, s, 0.0) for n, s in checks.items()])


def idle(*names):
    return {n: SlurmNode(n, "idle") for n in names}


CLUSTER = idle(*[f"n{i}" for i in range(10)])


def test_drain_reason_format_and_truncation():
    assert drain_reason(["net.E001", "ib.E002", "net.E001"], 64) == "hc: ib.E002,net.E001"
    many = [f"gpu.E0{i:02d}" for i in range(20)]
    text = drain_reason(many, 40)
    assert len(text) <= 40 and text.startswith("hc: gpu.E000,") and text.endswith("+17")
    assert reason_ids(text) == ({"gpu.E000", "gpu.E001", "gpu.E002"}, True)
    assert drain_reason(["hc.E002"], 64, prefix="ERROR x3 ") == "hc: ERROR x3 hc.E002"


def test_fail_drains_with_ids_error_never_drains():
    plan = decide([result("n1", "net.E001"), result("n2", errors=["hc.E002"]), result("n3")], CLUSTER, POLICY,
                  cluster_size=10, resume=True)
    assert plan.drain == {"hc: net.E001": ["n1"]} and plan.resume == [] and plan.guard is None


def test_admin_drained_nodes_are_never_touched():
    states = dict(CLUSTER, n1=SlurmNode("n1", "drained", "cable swap by ops"), n2=SlurmNode("n2", "draining", "maint"))
    plan = decide([result("n1", "net.E001"), result("n2")], states, POLICY, cluster_size=10, resume=True)
    assert plan.drain == {} and plan.resume == []
    assert "someone else" in plan.keep["n1"] and "someone else" in plan.keep["n2"]


def test_resume_only_when_the_named_checks_pass_again():
    states = dict(CLUSTER, n1=SlurmNode("n1", "drained", "hc: net.E001"))
    plan = decide([result("n1")], states, POLICY, cluster_size=10, resume=True)
    assert plan.resume == ["n1"]
    still = decide([result("n1", "net.E001")], states, POLICY, cluster_size=10, resume=True)
    assert still.resume == [] and still.drain == {}  # same reason: no new drain
    assert "already drained by hc" in still.keep["n1"]
    not_run = decide([result("n1", checks={"ib.port_state": Status.PASS})], states, POLICY, cluster_size=10, resume=True)
    assert not_run.resume == [] and "did not run and pass" in not_run.keep["n1"]
    errored = decide([result("n1", checks={"net.mtu": Status.ERROR}, status=Status.ERROR)], states, POLICY,
                     cluster_size=10, resume=True)
    # the named check itself could not run: not judged again, so not resumed, and said so
    assert errored.resume == [] and "net.mtu could not run (ERROR)" in errored.keep["n1"]
    assert errored.stays_drained == {"n1": "net.E001: net.mtu could not run (ERROR)"}
    no_resume = decide([result("n1")], states, POLICY, cluster_size=10, resume=False)
    assert no_resume.resume == []


def test_xid_drains_resume_only_after_a_reboot():
    r = result("n1", checks={"gpu.xid": Status.PASS})
    assert can_resume(r, "hc: gpu.E020", reboot_only=["gpu.E020"], rebooted_since_drain=False)[0] is False
    assert can_resume(r, "hc: gpu.E020", reboot_only=["gpu.E020"], rebooted_since_drain=True)[0] is True
    states = dict(CLUSTER, n1=SlurmNode("n1", "drained", "hc: gpu.E020", "2026-11-22T10:00:00"))
    import datetime as dt

    drained_at = dt.datetime.fromisoformat("2026-11-22T10:00:00").timestamp()
    assert decide([r], states, POLICY, cluster_size=10, resume=True, boot_times={"n1": drained_at - 60}).resume == []
    assert decide([r], states, POLICY, cluster_size=10, resume=True, boot_times={"n1": drained_at + 60}).resume == ["n1"]


def test_error_escalation_drain_and_its_resume():
    plan = decide([result("n1", errors=["hc.E002"])], CLUSTER, POLICY, cluster_size=10, resume=True,
                  extra_drains={"n1": "hc: ERROR x3 hc.E002"})
    assert plan.drain == {"hc: ERROR x3 hc.E002": ["n1"]}
    states = dict(CLUSTER, n1=SlurmNode("n1", "drained", "hc: ERROR x3 hc.E002"))
    assert decide([result("n1")], states, POLICY, cluster_size=10, resume=True).resume == ["n1"]


def test_guard_run_level_fraction():
    nodes = {f"n{i}": SlurmNode(f"n{i}", "idle") for i in range(100)}
    results = [result(f"n{i}", "net.E001") for i in range(12)] + [result(f"n{i}") for i in range(12, 100)]
    plan = decide(results, nodes, DrainPolicy(), cluster_size=100, resume=False)
    assert plan.drain == {} and plan.guard is not None
    assert "12 of the 100 nodes checked" in plan.guard.message and len(plan.guard.would_drain) == 12
    # 9 of 97 checked: floor(0.1 * 97) = 9 may go
    ok = decide(results[:9] + results[12:], nodes, DrainPolicy(), cluster_size=100, resume=False)
    assert ok.guard is None and len(ok.to_drain) == 9


def test_guard_absolute_limit():
    nodes = {f"n{i}": SlurmNode(f"n{i}", "idle") for i in range(1000)}
    results = [result(f"n{i}", "net.E001") for i in range(60)] + [result(f"n{i}") for i in range(60, 1000)]
    plan = decide(results, nodes, DrainPolicy(max_drain_nodes=50), cluster_size=1000, resume=False)
    assert plan.guard is not None and "max_drain_nodes 50" in plan.guard.message


def test_guard_cluster_level_counts_nodes_hc_already_drained():
    states = dict(CLUSTER, n1=SlurmNode("n1", "drained", "hc: ib.E002"), n2=SlurmNode("n2", "drained", "hc: net.E001"),
                  n3=SlurmNode("n3", "drained", "admin"))
    plan = decide([result("n4", "net.E001")], states, POLICY, cluster_size=10, resume=False)
    assert plan.guard is None  # 2 + 1 = 3 <= floor(0.3 * 10)
    states["n5"] = SlurmNode("n5", "draining", "hc: gpu.E010")
    plan = decide([result("n4", "net.E001")], states, POLICY, cluster_size=10, resume=False)
    assert plan.drain == {} and "3 already" in plan.guard.message and plan.guard.would_drain == ["n4"]


def test_guard_does_not_stop_resumes_and_default_blocks_small_clusters():
    states = {**idle("a", "b", "c"), "d": SlurmNode("d", "drained", "hc: net.E001")}
    plan = decide([result("a", "net.E001"), result("d")], states, DrainPolicy(), cluster_size=4, resume=True)
    assert plan.guard is not None and plan.resume == ["d"]


def test_disabled_draining():
    plan = decide([result("n1", "net.E001")], CLUSTER, DrainPolicy(enabled=False), cluster_size=10, resume=False)
    assert plan.drain == {} and "disabled" in plan.guard.message


def test_rollback_order_is_by_reason_time_then_name():
    states = {"a": SlurmNode("a", "drained", "hc: x.E001", "2026-11-22T10:00:01"),
              "b": SlurmNode("b", "drained", "hc: x.E001", "2026-11-22T10:00:00"),
              "c": SlurmNode("c", "drained", "hc: x.E001", "2026-11-22T10:00:01"),
              "d": SlurmNode("d", "idle")}
    policy = DrainPolicy(max_drain_fraction=0.5)  # 2 of 4
    assert [n for n in "abc" if rollback_needed(n, states, policy, 4)] == ["c"]


def test_unknown_node_is_kept():
    plan = decide([result("zz", "net.E001")], CLUSTER, POLICY, cluster_size=10, resume=False)
    assert plan.drain == {} and plan.keep["zz"] == "not known to Slurm"


def test_parse_sinfo():
    text = "node1|idle|Unknown|none\nnode2|drained|2026-11-22T07:55:31|hc: test | pipes|ok\nnode3|idle*|Unknown|none\nnode2|drained|2026-11-22T07:55:31|hc: test | pipes|ok\n"
    nodes = parse_sinfo(text)
    assert set(nodes) == {"node1", "node2", "node3"}
    # parsed whole despite the pipes; not hc's format, so not hc's to touch (issue 8, A5)
    assert nodes["node2"].reason == "hc: test | pipes|ok" and not nodes["node2"].drained_by_hc
    assert not nodes["node3"].responding and nodes["node3"].state == "idle"


class FakeRun:
    def __init__(self, *results):
        self.results = list(results)
        self.calls = []

    def __call__(self, argv, timeout_s, env=None):
        self.calls.append(argv)
        return self.results.pop(0)


def cr(rc=0, out="", err="", timed_out=False, not_found=False):
    return CommandResult(("x",), None if timed_out else rc, out, err, 0.01, timed_out=timed_out, not_found=not_found)


def client(*results):
    run = FakeRun(*results)
    slept = []
    return SlurmClient(SlurmSettings(retries=3, retry_backoff_s=0.5), run=run, sleep=slept.append), run, slept


def test_transient_failures_are_retried_with_backoff():
    c, run, slept = client(cr(1, err="slurm_update error: Unable to contact slurm controller (connect failure)"),
                           cr(1, err="Unable to contact slurm controller (connect failure)"), cr(0))
    r = c.drain("node[1-2]", "hc: net.E001")
    assert r.ok and r.attempts == 3 and slept == [0.5, 1.0]
    assert run.calls[0] == ("scontrol", "update", "nodename=node[1-2]", "state=drain", "reason=hc: net.E001")


def test_permanent_failures_are_not_retried_and_keep_slurms_message():
    c, run, slept = client(cr(1, err="slurm_update error: Invalid node name specified"))
    r = c.drain("nodeX", "hc: net.E001")
    assert not r.ok and r.message == "slurm_update error: Invalid node name specified" and slept == []


def test_retries_give_up_with_the_last_message_and_timeouts_count():
    c, run, slept = client(cr(timed_out=True), cr(timed_out=True), cr(timed_out=True))
    r = c.resume("n1")
    assert not r.ok and r.attempts == 3 and "timed out" in r.message


def test_missing_scontrol_and_dry_run():
    c, run, _ = client(cr(not_found=True))
    assert c.resume("n1").message == "scontrol not found"
    c, run, _ = client()
    r = c.drain("n1", "hc: net.E001", dry_run=True)
    assert r.ok and run.calls == [] and shell_line(r.argv) == "scontrol update nodename=n1 state=drain 'reason=hc: net.E001'"


def test_node_lock_excludes_a_second_holder(tmp_path):
    state = NodeState(tmp_path, "n1")
    with state.lock(1.0):
        t0 = time.monotonic()
        with pytest.raises(LockTimeout):
            with NodeState(tmp_path, "n1").lock(0.2):
                pass
        assert time.monotonic() - t0 >= 0.2
        with NodeState(tmp_path, "n2").lock(0.1):  # other nodes are independent
            pass
    with state.lock(0.1):
        pass


def test_consecutive_error_count_and_job_marks(tmp_path):
    state = NodeState(tmp_path, "n1")
    assert [state.record_run(False, ["hc.E002"]) for _ in range(3)] == [1, 2, 3]
    assert state.record_run(True, []) == 0 and state.record_run(False, []) == 1
    state.mark_job_start("42", 1000.0)
    assert state.job_start("42") == 1000.0
    assert state.job_start("42", remove=True) == 1000.0 and state.job_start("42") is None
    assert state.kernel_log_cursor() is None
    state.set_kernel_log_cursor(1234.5)
    assert state.kernel_log_cursor() == 1234.5


def test_audit_log_lines_stay_whole_under_concurrency(tmp_path):
    log = AuditLog(tmp_path / "sub" / "audit.jsonl")
    threads = [threading.Thread(target=lambda i=i: [log.append({"node": f"n{i}", "k": j, "pad": "x" * 5000}) for j in range(20)])
               for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    records = log.read()
    assert len(records) == 100 and all(len(r["pad"]) == 5000 for r in records)


# hc owns only the reasons it wrote; DOWN and unresponsive nodes are never touched (issue 8, A5)


@pytest.mark.parametrize("reason", ["hc:maint - jdoe replacing DIMM", "hc: net.E001 per jdoe", "hc:net.E001",
                                    "hc: see ticket 4411", "HC: net.E001"])
def test_a_reason_that_merely_starts_like_hcs_is_an_admins(reason):
    states = dict(CLUSTER, n1=SlurmNode("n1", "drained", reason))
    failing = decide([result("n1", "net.E001")], states, POLICY, cluster_size=10, resume=True)
    assert failing.drain == {} and "someone else" in failing.keep["n1"]
    passing = decide([result("n1")], states, POLICY, cluster_size=10, resume=True)
    assert passing.resume == [] and "someone else" in passing.keep["n1"]


@pytest.mark.parametrize("reason", ["hc: net.E001", "hc: ib.E002,net.E001", "hc: ERROR x3 hc.E002", "hc: gpu.E001 +2"])
def test_every_reason_hc_writes_is_recognised_as_hcs(reason):
    from healthcheck.actions.reasons import is_hc_reason

    assert is_hc_reason(reason) and SlurmNode("n1", "drained", reason).drained_by_hc


@pytest.mark.parametrize("state,responding,reason", [
    ("down", True, "admin: psu swap"), ("down", True, ""), ("down", False, "Not responding"),
    ("idle", False, ""), ("drained", False, "hc: net.E001"), ("fail", True, "admin"),
    ("powered_down", True, ""), ("maint", True, ""),
])
def test_down_and_unresponsive_nodes_are_neither_drained_nor_resumed(state, responding, reason):
    states = dict(CLUSTER, n1=SlurmNode("n1", state, reason, responding=responding))
    for r in (result("n1", "net.E001"), result("n1")):
        plan = decide([r], states, POLICY, cluster_size=10, resume=True)
        assert plan.drain == {} and plan.resume == [] and plan.guard is None
        assert "not touched" in plan.keep["n1"]


def test_sinfo_states_of_down_and_unresponsive_nodes_parse_as_hands_off():
    nodes = parse_sinfo("n1|down*|2026-11-22T07:55:31|Not responding\n"
                        "n2|down|2026-11-22T07:55:31|admin: psu swap\n"
                        "n3|drained*|2026-11-22T07:55:31|hc: net.E001\n"
                        "n4|idle|Unknown|none\n")
    assert [n for n, s in sorted(nodes.items()) if s.hands_off] == ["n1", "n2", "n3"]


# ------------------------------------------------------------------------ job start (scontrol)


def test_job_start_parses_scontrol_one_liner():
    import datetime as dt

    line = ("JobId=42 JobName=train UserId=u(1) JobState=RUNNING RunTime=00:01:00 "
            "SubmitTime=2026-11-22T07:50:00 EligibleTime=2026-11-22T07:50:00 StartTime=2026-11-22T07:55:31 "
            "EndTime=Unknown NodeList=n1")
    c, run, _ = client(cr(0, out=line))
    start, error = c.job_start("42")
    assert error is None and start == dt.datetime(2026, 11, 22, 7, 55, 31).timestamp()
    assert run.calls == [("scontrol", "-o", "show", "job", "42")]


def test_job_start_failures_are_messages_not_exceptions():
    from healthcheck.actions.slurm import parse_job_start

    assert parse_job_start("JobId=1 StartTime=Unknown")[0] is None
    assert "no start time" in parse_job_start("JobId=1 StartTime=Unknown")[1]
    assert "unreadable" in parse_job_start("JobId=1 StartTime=garbage")[1]
    assert "no StartTime" in parse_job_start("JobId=1 EligibleTime=2026-01-01T00:00:00")[1]
    # an unknown job is permanent: one call, Slurm's message kept
    c, run, slept = client(cr(1, err="slurm_load_jobs error: Invalid job id specified"))
    assert c.job_start("9") == (None, "slurm_load_jobs error: Invalid job id specified") and slept == []
    # a controller that does not answer is retried, then given up on
    c, run, slept = client(cr(timed_out=True), cr(timed_out=True), cr(timed_out=True))
    start, error = c.job_start("9")
    assert start is None and "timed out" in error and len(run.calls) == 3
    c, _, _ = client(cr(not_found=True))
    assert c.job_start("9") == (None, "scontrol not found")


def test_job_start_respects_the_clients_deadline():
    import time as _time

    c, run, _ = client(cr(0, out="StartTime=2026-11-22T07:55:31"))
    c.deadline = _time.monotonic() - 1
    start, error = c.job_start("42")
    assert start is None and "deadline" in error and run.calls == []


def test_epilogue_window_asks_slurm_through_the_client(monkeypatch):
    from healthcheck.orchestrate import hooks

    seen = {}

    def fake_job_start(self, job_id):
        seen["job"], seen["deadline"] = job_id, self.deadline
        return 1000.0, None

    monkeypatch.setattr(SlurmClient, "job_start", fake_job_start)

    class NoMark:
        def job_start(self, job, remove=False):
            return None

        def kernel_log_cursor(self):
            return None

    assert hooks._window("epilogue", NoMark(), SlurmSettings(), "42", {}) == 999.0
    assert seen["job"] == "42" and seen["deadline"] is not None  # bounded like the hook's actions


# ------------------------------------------------------- resume after an analysis


def _swept(*names):
    """Nodes checked together, all with the same MTU: fleet drift judges them and finds nothing."""
    from healthcheck.core.analysis import analyse_fleet
    from healthcheck.core.config.schema import FleetSettings
    from healthcheck.core.model import Metric

    nodes = [NodeResult(node=n, fabric="f", status=Status.PASS, metrics=[Metric("mtu", 4092, component="ib0")],
                        checks=[CheckResult("net.mtu", Status.PASS, 0.0)]) for n in names]
    return analyse_fleet(nodes, FleetSettings())


def test_fleet_drained_node_is_resumed_when_drift_judged_it_again_and_found_nothing():
    states = dict(CLUSTER, n1=SlurmNode("n1", "drained", "hc: fleet.E001"))
    results, runs = _swept("n0", "n1", "n2")
    assert [(r.status, r.nodes) for r in runs if r.name == "fleet.drift"] == [(Status.PASS, "n[0-2]")]
    plan = decide(results, states, POLICY, cluster_size=10, resume=True, analyses=runs)
    assert plan.resume == ["n1"]


def test_fleet_drained_node_stays_drained_when_drift_did_not_run_over_it():
    states = dict(CLUSTER, n1=SlurmNode("n1", "drained", "hc: fleet.E001"))
    results, runs = _swept("n1")  # one node: no peers, drift does not apply
    assert [r.status for r in runs if r.name == "fleet.drift"] == [Status.SKIP]
    plan = decide(results, states, POLICY, cluster_size=10, resume=True, analyses=runs)
    assert plan.resume == [] and "fleet.drift did not run and pass" in plan.keep["n1"]
    # a report without analyses (a hook's) keeps it too
    plan = decide(results, states, POLICY, cluster_size=10, resume=True)
    assert plan.resume == []


def test_pair_drained_node_is_resumed_only_when_the_pair_analysis_judged_it():
    from healthcheck.core.catalogue import EMITTERS
    from healthcheck.core.model import AnalysisRun

    EMITTERS.setdefault("pairtest.E001", set()).add("pairtest.bw")  # as @analysis(findings=) records it
    try:
        states = dict(CLUSTER, n3=SlurmNode("n3", "drained", "hc: pairtest.E001"))
        ran = AnalysisRun(name="pairtest.bw", scope="pairs", status=Status.PASS, nodes="n[2-3]")
        assert decide([result("n3")], states, POLICY, cluster_size=10, resume=True, analyses=[ran]).resume == ["n3"]
        other = AnalysisRun(name="pairtest.bw", scope="pairs", status=Status.PASS, nodes="n[4-5]")
        kept = decide([result("n3")], states, POLICY, cluster_size=10, resume=True, analyses=[other])
        assert kept.resume == [] and "pairtest.bw did not run and pass" in kept.keep["n3"]
    finally:
        EMITTERS.pop("pairtest.E001", None)
