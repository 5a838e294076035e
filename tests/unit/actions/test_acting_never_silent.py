"""Acting in Slurm is never silent (issue 18, B.4 and B.5): a node hc drained is resumed
when the checks named in its reason ran and passed, whatever an unrelated check says, and
every action hc would take and does not is a run finding naming the node and why
(act.E007: a FAIL not drained; act.E008: a node that stays drained); sinfo that answers
garbage is act.E003, never "the node is absent"."""

from __future__ import annotations

import json

import pytest
from support import run_hc, write_stub

from healthcheck.actions.apply import act, with_outcome
from healthcheck.actions.audit import AuditLog
from healthcheck.actions.policy import decide
from healthcheck.actions.slurm import SlurmClient, SlurmNode
from healthcheck.core.config.schema import DrainPolicy, SlurmSettings
from healthcheck.core.model import AnalysisRun, CheckResult, Finding, NodeResult
from healthcheck.core.status import Status
from healthcheck.runners.base import CommandResult

POLICY = DrainPolicy(max_drain_fraction=0.3)
CLUSTER = {f"n{i}": SlurmNode(f"n{i}", "idle") for i in range(10)}


def node(name, checks, *, fails=(), errors=(), error=None):
    """A node's result: `checks` name -> status; findings FAIL/ERROR by ID on check "c"."""
    findings = [Finding(id=i, status=Status.FAIL, message="x", node=name, check="c", subject=name) for i in fails]
    findings += [Finding(id=i, status=Status.ERROR, message="x", node=name, check="c", subject=name) for i in errors]
    statuses = [*checks.values(), *(f.status for f in findings)]
    status = max(statuses, key=lambda s: s.rank) if statuses else Status.ERROR
    return NodeResult(node=name, fabric="f", status=status, findings=findings, error=error,
                      checks=[CheckResult(n, s, 0.0) for n, s in checks.items()])


# ----------------------------------------------------------------- B.4: resume on the named checks


REPAIRED = {"net.mtu": Status.PASS, "bw.ib_write_bw": Status.ERROR}  # a loopback that cannot run there


def pairs_judged(*nodes, status=Status.PASS):
    return [AnalysisRun(name="bw.pairs", scope="pairs", status=status, nodes=",".join(nodes))]


def test_a_repaired_node_is_resumed_although_an_unrelated_check_errors():
    """The issue's case: drained for bw.E101 (slow with every partner), repaired, its pair
    tests pass; its status is ERROR from an ib_write_bw loopback that cannot run there."""
    states = dict(CLUSTER, n3=SlurmNode("n3", "drained", "hc: bw.E101"))
    repaired = node("n3", REPAIRED, errors=["hc.E003"])
    assert repaired.status is Status.ERROR
    plan = decide([repaired, node("n2", {"net.mtu": Status.PASS})], states, POLICY, cluster_size=10, resume=True,
                  analyses=pairs_judged("n2", "n3"))
    assert plan.resume == ["n3"] and not plan.stays_drained


def test_a_node_whose_named_check_could_not_run_stays_drained_and_says_which():
    states = dict(CLUSTER, n3=SlurmNode("n3", "drained", "hc: bw.E101,net.E001"))
    plan = decide([node("n3", REPAIRED)], states, POLICY, cluster_size=10, resume=True)
    # net.E001's check passed; bw.E101's analysis never judged n3 (a one-node run): named
    assert plan.resume == []
    assert plan.stays_drained == {"n3": "bw.E101: bw.pairs did not run and pass in this run"}
    errored = decide([node("n3", {"net.mtu": Status.ERROR})], dict(CLUSTER, n3=SlurmNode("n3", "drained",
                                                                                         "hc: net.E001")),
                     POLICY, cluster_size=10, resume=True)
    assert errored.stays_drained == {"n3": "net.E001: net.mtu could not run (ERROR)"}
    skipped = decide([node("n3", {"net.mtu": Status.SKIP, "sys.disk": Status.PASS})],
                     dict(CLUSTER, n3=SlurmNode("n3", "drained", "hc: net.E001")), POLICY, cluster_size=10,
                     resume=True)
    assert skipped.stays_drained == {"n3": "net.E001: net.mtu was skipped"}


def test_a_node_failing_again_for_its_reason_stays_drained_and_says_so():
    states = dict(CLUSTER, n3=SlurmNode("n3", "drained", "hc: net.E001"))
    plan = decide([node("n3", {"net.mtu": Status.FAIL}, fails=["net.E001"])], states, POLICY, cluster_size=10,
                  resume=True)
    assert plan.drain == {} and plan.resume == []
    assert plan.stays_drained == {"n3": "net.E001 found again"}


def test_an_error_escalation_resumes_only_on_a_clean_run_and_never_an_unchecked_node():
    states = dict(CLUSTER, n3=SlurmNode("n3", "drained", "hc: ERROR x3 hc.E002"))
    unreachable = node("n3", {}, errors=["hc.E006"], error="ssh: connection refused")
    plan = decide([unreachable], states, POLICY, cluster_size=10, resume=True)
    assert plan.resume == [] and "not checked in this run (ssh: connection refused)" in plan.stays_drained["n3"]
    still = decide([node("n3", {"net.mtu": Status.PASS, "gpu.count": Status.ERROR})], states, POLICY,
                   cluster_size=10, resume=True)
    assert still.resume == [] and "gpu.count could not run (ERROR)" in still.stays_drained["n3"]
    clean = decide([node("n3", {"net.mtu": Status.PASS})], states, POLICY, cluster_size=10, resume=True)
    assert clean.resume == ["n3"]


# ---------------------------------------------------------------- B.5: no silent non-action


@pytest.mark.parametrize("state,words", [
    (SlurmNode("n1", "idle", responding=False), "is not responding (idle*)"),
    (SlurmNode("n1", "unknown"), "is unknown in Slurm"),
    (SlurmNode("n1", "down", "admin: psu swap"), "is down in Slurm, reason 'admin: psu swap'"),
    (SlurmNode("n1", "drained", "ops: cable swap"), "is drained by someone else (ops: cable swap)"),
    (None, "is not among the nodes sinfo lists"),
])
def test_a_fail_hc_may_not_drain_is_said_with_the_node_and_why(state, words):
    states = dict(CLUSTER)
    if state is None:
        states.pop("n1")
    else:
        states["n1"] = state
    plan = decide([node("n1", {"net.mtu": Status.FAIL}, fails=["net.E001"])], states, POLICY, cluster_size=10,
                  resume=True)
    assert plan.drain == {} and words in plan.not_drained["n1"]


class Slurm:
    """sinfo and scontrol stand-ins for act(): sinfo prints `sinfo`; scontrol is recorded."""

    def __init__(self, sinfo: str, rc: int = 0) -> None:
        self.sinfo, self.rc = sinfo, rc
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv, timeout_s, env=None):
        self.calls.append(tuple(argv))
        if argv[0] == "sinfo":
            return CommandResult(tuple(argv), self.rc, self.sinfo, "", 0.01)
        return CommandResult(tuple(argv), 0, "", "", 0.01)


def act_on(results, slurm: Slurm, tmp_path, *, resume=True, analyses=()):
    from healthcheck.report.build import make_report, utc_now

    now = utc_now()
    report = make_report(command="health", tier="quick", config_digest="x", config_path="x", started=now,
                         finished=now, nodes=results)
    report = report.__class__(**{**{f: getattr(report, f) for f in report.__struct_fields__},
                                 "analyses": list(analyses)})
    settings = SlurmSettings(retries=1, drain=POLICY)
    client = SlurmClient(settings, run=slurm, sleep=lambda s: None)
    out = act(report, settings=settings, client=client, audit=AuditLog(tmp_path / "audit.jsonl"), resume=resume)
    return out, with_outcome(report, out)


def sinfo_of(**states: str) -> str:
    return "".join(f"{n}|{s}|Unknown|none\n" for n, s in states.items())


def test_a_fail_on_a_node_not_responding_is_a_run_finding_and_a_line_of_output(tmp_path):
    slurm = Slurm(sinfo_of(n1="idle*", n2="idle", n3="idle", n4="unknown", **{f"n{i}": "idle" for i in range(5, 10)}))
    failing = [node(n, {"net.mtu": Status.FAIL}, fails=["net.E001"]) for n in ("n1", "n4")]
    out, report = act_on([*failing, node("n2", {"net.mtu": Status.PASS})], slurm, tmp_path)
    assert not any("state=drain" in " ".join(c) for c in slurm.calls)
    found = {f.subject: f for f in out.run_findings}
    assert set(found) == {"n1", "n4"} and {f.id for f in found.values()} == {"act.E007"}
    assert found["n1"].message.startswith("not drained: n1 is not responding (idle*)")
    assert found["n4"].message.startswith("not drained: n4 is unknown in Slurm")
    assert found["n1"].status is Status.ERROR  # hc could not do what the FAIL asked
    assert "hc: not drained: n1 is not responding (idle*): hc does not touch such a node" in out.messages
    # in the report: its run findings, and the rows the table prints
    assert {f["id"] for f in report.findings_summary if f["nodes"] in ("n1", "n4")} >= {"act.E007"}


def test_nodes_that_stay_drained_say_why_in_one_finding_per_reason(tmp_path):
    slurm = Slurm("n1|drained|2026-11-22T07:55:31|hc: bw.E101\nn2|drained|2026-11-22T07:55:31|hc: bw.E101\n"
                  + sinfo_of(**{f"n{i}": "idle" for i in range(3, 10)}))
    results = [node(n, {"net.mtu": Status.PASS}) for n in ("n1", "n2")]
    out, report = act_on(results, slurm, tmp_path)
    (finding,) = out.run_findings
    assert (finding.id, finding.status, finding.subject) == ("act.E008", Status.WARN, "n[1-2]")
    assert finding.message == ("n[1-2] stays drained (hc: bw.E101): bw.E101: bw.pairs did not run and pass in "
                               "this run")
    assert {n.node: n.action.message for n in report.nodes} == {
        "n1": "stays drained: bw.E101: bw.pairs did not run and pass in this run",
        "n2": "stays drained: bw.E101: bw.pairs did not run and pass in this run"}


GARBAGE = {
    "binary": "\x00\x01\ufffd\ufffd|\x7fELF\x02\x01\n" * 3,
    "another format": "NODELIST   NODES PARTITION STATE\nn1         1     debug*    idle\n",
    "spaces, no pipes": "n1 idle Unknown none\n",
    "an error on stdout": "sinfo: error: slurm_load_node: Unable to contact slurm controller\n",
    "a state that is no word": "n1|12345|Unknown|none\n",
}


@pytest.mark.parametrize("case", list(GARBAGE))
def test_sinfo_garbage_is_act_e003_never_an_absent_node(tmp_path, case):
    from healthcheck.actions.slurm import read_sinfo

    nodes, why = read_sinfo(GARBAGE[case])
    assert nodes == {} and why and why.startswith("line 1 of ")
    out, report = act_on([node("n1", {"net.mtu": Status.FAIL}, fails=["net.E001"])], Slurm(GARBAGE[case]), tmp_path)
    (finding,) = out.run_findings
    assert finding.id == "act.E003" and "cannot read node states" in finding.message
    assert "not node states" in finding.message
    assert out.plan is None  # nothing was decided on garbage, so no node reads as "not known to Slurm"


def test_sinfo_that_prints_nothing_is_an_answer_naming_no_node(tmp_path):
    from healthcheck.actions.slurm import read_sinfo

    assert read_sinfo("") == ({}, None) and read_sinfo("\n\n") == ({}, None)
    out, _ = act_on([node("n1", {"net.mtu": Status.FAIL}, fails=["net.E001"])], Slurm(""), tmp_path)
    (finding,) = out.run_findings
    assert finding.id == "act.E007" and "n1 is not among the nodes sinfo lists" in finding.message


def test_sinfo_as_slurm_prints_it_is_read_whole():
    from healthcheck.actions.slurm import read_sinfo

    text = ("node1|mixed|Unknown|none\nnode2|drained|2026-11-23T13:28:24|hc: gpu.E020 | x\n"
            "node3|draining|2026-11-23T13:28:24|ib cable reseat\nnode4|down*|2026-11-23T13:29:05|Not responding\n"
            "node5|idle~|Unknown|none\nnode6|mixed+planned|Unknown|none\nnode_7|allocated+drain|Unknown|none\n")
    nodes, why = read_sinfo(text)
    assert why is None and len(nodes) == 7 and nodes["node2"].reason == "hc: gpu.E020 | x"
    assert not nodes["node4"].responding


# ------------------------------------------------------ through the real hooks (sinfo a stand-in)


def hook_setup(tmp_path, sinfo_body: str):
    bin_dir = tmp_path / "bin"
    log = tmp_path / "scontrol.log"
    write_stub(bin_dir, "sinfo", sinfo_body)
    write_stub(bin_dir, "scontrol", f'echo "$@" >> {log}\n')
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 1500}\n")  # lo is 65536: FAIL
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: t\n"
                   f"slurm:\n  state_dir: {tmp_path}/state\n  audit_log: {tmp_path}/audit.jsonl\n"
                   f"  report_dir: {tmp_path}/reports\n  retries: 1\n  drain: {{max_drain_fraction: 0.5}}\n"
                   f"history: {{path: {tmp_path}/history.sqlite}}\n")
    env = {"HC_CONFIG": str(cfg), "HC_NODE_NAME": "node1", "SLURM_JOB_ID": "7",
           "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
    return log, env


OTHERS = "".join(f"node{i}|idle|Unknown|none\\n" for i in range(2, 5))


@pytest.mark.parametrize("case,sinfo,expect", [
    ("binary garbage", "printf '\\001\\002\\377\\376|\\000ELF\\n'\n", "act.E003"),
    ("node not listed", f"printf '{OTHERS}'\n", "act.E007"),
    ("node not responding", f"printf 'node1|idle*|Unknown|none\\n{OTHERS}'\n", "act.E007"),
])
@pytest.mark.parametrize("hook", ["health", "prologue"])
def test_a_failing_node_hc_cannot_drain_says_so_from_every_hook(tmp_path, case, sinfo, expect, hook):
    log, env = hook_setup(tmp_path, sinfo)
    r = run_hc(hook, "--format", "json", env=env, timeout=60)
    assert r.returncode == 2, r.stderr  # the FAIL's verdict (the prologue keeps the job off the node)
    assert not log.exists()  # nothing drained
    report = json.loads(r.stdout)
    ids = [f["id"] for f in report["run_findings"]]
    assert ids == [expect], report["run_findings"]
    (finding,) = report["run_findings"]
    assert "node1" in finding["message"]
    if expect == "act.E003":
        assert "cannot read node states" in finding["message"] and "not among" not in finding["message"]
    summary = r.stderr.decode(errors="replace").strip().splitlines()[-1]  # the line slurmd logs
    assert expect in summary and "node1" in summary


def test_a_sweep_over_nodes_says_which_fail_it_did_not_drain_and_why(tmp_path, monkeypatch):
    """`hc sweep --nodes ... --act`: the lines `hc sweep` prints on stderr (run.messages), and
    the run findings in its report."""
    from healthcheck.core.config import load_config
    from healthcheck.orchestrate import remote
    from healthcheck.orchestrate.multirun import RunRequest, run_many

    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "sinfo", "printf 'n1|idle|Unknown|none\\nn2|idle*|Unknown|none\\nn3|down|Unknown|psu\\n"
                                 + "".join(f"n{i}|idle|Unknown|none\\n" for i in range(4, 10)) + "'\n")
    write_stub(bin_dir, "scontrol", f'echo "$@" >> {tmp_path}/scontrol.log\n')
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 65536}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nhistory: {{path: {tmp_path}/h.sqlite}}\n"
                   f"slurm: {{sinfo: {bin_dir}/sinfo, scontrol: {bin_dir}/scontrol, retries: 1, "
                   f"audit_log: {tmp_path}/audit.jsonl, drain: {{max_drain_fraction: 0.5}}}}\n")

    def check_over_ssh(config, nodes, *, tier, only=(), mode="auto", params=None, on_done=None):
        return [node(n, {"net.mtu": Status.FAIL}, fails=["net.E001"]) for n in nodes]

    monkeypatch.setattr(remote, "check_over_ssh", check_over_ssh)
    run = run_many(load_config(cfg), RunRequest(["n1", "n2", "n3"], command="sweep", tier="quick", act=True))
    assert (tmp_path / "scontrol.log").read_text().split() == ["update", "nodename=n1", "state=drain",
                                                               "reason=hc:", "net.E001"]
    assert "hc: not drained: n2 is not responding (idle*): hc does not touch such a node" in run.messages
    assert "hc: not drained: n3 is down in Slurm, reason 'psu': hc does not touch such a node" in run.messages
    assert sorted((f.id, f.subject) for f in run.report.run_findings) == [("act.E007", "n2"), ("act.E007", "n3")]
    actions = {n.node: n.action.kind for n in run.report.nodes}
    assert actions == {"n1": "drain", "n2": "keep", "n3": "keep"}
