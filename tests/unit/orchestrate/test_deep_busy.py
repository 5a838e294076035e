"""Deep tests never run under a user's job (orchestrate/busy.py): a deep sweep skips and
names the nodes Slurm shows busy, `hc node --local --tier deep` on a busy node skips its
deep-only checks, and `--via slurm` asks for its nodes whole. Slurm is a stand-in here
(sinfo and scontrol scripts named in the config), never the rig's."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import run_hc, write_stub

from healthcheck.core.config import load_config
from healthcheck.core.model import CheckResult, NodeResult
from healthcheck.core.registry import deep_only
from healthcheck.core.status import Status
from healthcheck.orchestrate import multirun, remote, srun
from healthcheck.orchestrate.busy import BUSY_REASON, guard_this_node
from healthcheck.orchestrate.multirun import RunRequest, run_many
from healthcheck.orchestrate.pairsweep import sweep

NODES = ["n1", "n2", "n3", "n4"]
SINFO = "n1|idle|Unknown|none\\nn2|allocated|Unknown|none\\nn3|idle|Unknown|none\\nn4|mixed|Unknown|none\\n"


def config_file(tmp_path: Path, sinfo: str | None = SINFO, *, sinfo_path: str | None = None,
                scontrol: str = "exit 1\n") -> Path:
    """A config whose Slurm commands are stand-ins: `sinfo` prints `sinfo` (a script body
    when it starts with "#"), each call logged to calls.log."""
    bin_dir = tmp_path / "bin"
    log = tmp_path / "calls.log"
    if sinfo is not None:
        body = sinfo[1:] if sinfo.startswith("#") else f"printf '{sinfo}'\n"
        write_stub(bin_dir, "sinfo", f'echo "sinfo $*" >> {log}\n{body}')
    write_stub(bin_dir, "scontrol", f'echo "scontrol $*" >> {log}\n{scontrol}')
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 65536}\n")
    path = tmp_path / "hc.yaml"
    path.write_text(
        f"default_fabric: t\nhistory: {{path: {tmp_path}/h.sqlite}}\n"
        f"slurm: {{sinfo: {sinfo_path or bin_dir / 'sinfo'}, scontrol: {bin_dir / 'scontrol'}, retries: 1}}\n")
    return path


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.fixture
def transport(monkeypatch):
    """The SSH transport and the pair tests, stubbed: which nodes reached each."""
    seen: dict[str, list[str]] = {"ssh": [], "pairs": []}

    def check_over_ssh(config, nodes, *, tier, only=(), mode="auto", params=None, on_done=None):
        seen["ssh"] += nodes
        return [NodeResult(node=n, fabric="t", status=Status.PASS, mode="agentless",
                           checks=[CheckResult("net.mtu", Status.PASS, 0.0)]) for n in nodes]

    def run_pairs(config, results, *, exhaustive=False, max_parallel=None, watch=None):
        seen["pairs"] += sweep.eligible(results)
        return sweep.PairRun(nodes=sweep.eligible(results))

    monkeypatch.setattr(remote, "check_over_ssh", check_over_ssh)
    monkeypatch.setattr(multirun, "run_pairs", run_pairs)
    return seen


def test_a_deep_sweep_skips_busy_nodes_names_their_state_and_pairs_only_idle_ones(tmp_path, transport):
    run = run_many(load_config(config_file(tmp_path)), RunRequest(NODES, command="sweep", tier="deep"))
    assert transport["ssh"] == ["n1", "n3"] and transport["pairs"] == ["n1", "n3"]
    nodes = {n.node: n for n in run.report.nodes}
    assert [n.node for n in run.report.nodes] == NODES
    assert nodes["n2"].status is Status.SKIP and nodes["n2"].error == f"not checked: {BUSY_REASON} (allocated)"
    assert nodes["n4"].status is Status.SKIP and nodes["n4"].error == f"not checked: {BUSY_REASON} (mixed)"
    assert f"skipped n2 ({BUSY_REASON} (allocated))" in run.warnings
    assert f"skipped n4 ({BUSY_REASON} (mixed))" in run.warnings
    assert run.report.status is Status.PASS and not run.report.run_findings
    assert calls(tmp_path) == ["sinfo -h -N -o %N|%T|%H|%E -n n[1-4]"]  # one sinfo for the whole sweep


def test_every_node_busy_is_nothing_checked_said_as_it_is(tmp_path, transport):
    cfg = config_file(tmp_path, "n1|allocated|Unknown|none\\nn2|draining|Unknown|none\\n")
    run = run_many(load_config(cfg), RunRequest(["n1", "n2"], command="sweep", tier="deep"))
    assert transport["ssh"] == [] and transport["pairs"] == []
    (finding,) = run.report.run_findings
    assert finding.id == "hc.E007" and "every node was skipped" in finding.message
    assert run.report.status is Status.ERROR


def test_no_sinfo_at_all_deep_sweep_proceeds_with_a_warning(tmp_path, transport):
    cfg = config_file(tmp_path, None, sinfo_path=str(tmp_path / "no-such-dir" / "sinfo"))
    run = run_many(load_config(cfg), RunRequest(NODES, command="sweep", tier="deep"))
    assert transport["ssh"] == NODES and transport["pairs"] == NODES
    assert any("not found (no Slurm here)" in w for w in run.warnings)
    # said in the report too (issue 18, C.10): the deep tests ran without asking about jobs
    (finding,) = run.report.run_findings
    assert (finding.id, finding.status, finding.subject) == ("act.E009", Status.WARN, "n[1-4]")
    assert "deep tests ran without that check" in finding.message
    assert run.report.status is Status.WARN


def test_slurm_unreachable_deep_tests_do_not_run_blind(tmp_path, transport):
    cfg = config_file(tmp_path, '#echo "sinfo: error: Unable to contact slurm controller (connect failure)" >&2\n'
                                "exit 1\n")
    run = run_many(load_config(cfg), RunRequest(NODES, command="sweep", tier="deep"))
    assert transport["ssh"] == [] and transport["pairs"] == []
    assert {n.status for n in run.report.nodes} == {Status.SKIP}  # never FAIL: nothing was judged
    assert all("Unable to contact slurm controller" in (n.error or "") for n in run.report.nodes)
    (finding,) = run.report.run_findings
    assert (finding.id, finding.status) == ("act.E003", Status.ERROR)
    assert "deep tests not run on n[1-4]" in finding.message and "Unable to contact" in finding.message
    assert run.report.status is Status.ERROR


def test_a_node_slurm_does_not_know_is_tested_with_a_warning(tmp_path, transport):
    run = run_many(load_config(config_file(tmp_path)), RunRequest(["n1", "x9"], command="sweep", tier="deep"))
    assert transport["ssh"] == ["n1", "x9"]
    assert any(w.startswith("x9: not a node Slurm knows") for w in run.warnings)


@pytest.mark.parametrize("tier", ["quick", "standard"])
def test_quick_and_standard_tiers_on_busy_nodes_are_unaffected(tmp_path, transport, tier):
    run = run_many(load_config(config_file(tmp_path)), RunRequest(NODES, command="sweep", tier=tier))
    assert transport["ssh"] == NODES and transport["pairs"] == []
    assert calls(tmp_path) == []  # Slurm is not even asked
    assert {n.status for n in run.report.nodes} == {Status.PASS}


def test_hc_node_local_deep_on_a_busy_node_skips_only_the_deep_only_checks(tmp_path, validate_report):
    cfg = config_file(tmp_path, "me|mixed|Unknown|none\\n")
    r = run_hc("node", "--local", "--tier", "deep", "--checks", "net,bw", "--config", str(cfg), "--format", "json",
               env={"HC_NODE_NAME": "me"})
    report = validate_report(r.stdout)
    checks = {c["name"]: c for c in report["nodes"][0]["checks"]}
    deep = [name for name in checks if name.startswith("bw.")]
    assert deep, checks
    for name in deep:
        assert checks[name]["status"] == "SKIP" and checks[name]["reason"] == f"{BUSY_REASON} (mixed)", checks[name]
    assert checks["net.mtu"]["status"] == "PASS"  # the other checks still run
    assert r.returncode == 0, r.stderr
    assert calls(tmp_path) == ["sinfo -h -N -o %N|%T|%H|%E -n me"]


def test_hc_node_local_deep_with_slurm_unreachable_is_error_not_blind(tmp_path, validate_report):
    cfg = config_file(tmp_path, '#echo "sinfo: error: Unable to contact slurm controller" >&2\nexit 1\n')
    r = run_hc("node", "--local", "--tier", "deep", "--checks", "net,bw", "--config", str(cfg), "--format", "json",
               env={"HC_NODE_NAME": "me"})
    report = validate_report(r.stdout)
    checks = {c["name"]: c for c in report["nodes"][0]["checks"]}
    assert all(c["status"] == "SKIP" and "Slurm cannot be asked" in c["reason"]
               for name, c in checks.items() if name.startswith("bw."))
    assert [f["id"] for f in report["run_findings"]] == ["act.E003"]
    assert r.returncode == 3 and report["status"] == "ERROR"


def test_inside_a_job_deep_tests_run_only_if_it_holds_the_node_alone(tmp_path):
    scontrol = ('case "$*" in *" 7"*) echo "JobId=7 JobName=hc OverSubscribe=NO Contiguous=0" ;;\n'
                '  *" 8"*) echo "JobId=8 JobName=x OverSubscribe=OK Contiguous=0" ;;\n'
                '  *) echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1 ;; esac\n')
    cfg = load_config(config_file(tmp_path, "me|allocated|Unknown|none\\n", scontrol=scontrol))
    assert guard_this_node(cfg, "me", {"SLURM_JOB_ID": "7"}).skip_reason is None  # hc's own, exclusive
    shared = guard_this_node(cfg, "me", {"SLURM_JOB_ID": "8"})
    assert shared.skip_reason is not None and shared.skip_reason.startswith(BUSY_REASON)
    unknown = guard_this_node(cfg, "me", {"SLURM_JOB_ID": "9"})
    assert unknown.skip_reason and [f.id for f in unknown.run_findings] == ["act.E003"]
    assert not any(c.startswith("sinfo") for c in calls(tmp_path))  # inside a job, the job decides
    busy = guard_this_node(cfg, "me", {})
    assert busy.skip_reason == f"{BUSY_REASON} (allocated)"


def test_deep_only_means_not_in_standard():
    from healthcheck.core.registry import select

    deep = {s.name for s in select("deep") if deep_only(s)}
    # the bandwidth tests, DCGM's deep level, and leftover processes (on a busy node they are the job's)
    assert deep and all(n.startswith("bw.") or n in ("gpu.dcgm_deep", "gpu.processes") for n in deep)
    assert not {s.name for s in select("standard")} & deep


def test_the_slurm_transport_asks_for_whole_nodes_for_the_deep_tier_only(tmp_path, monkeypatch):
    from healthcheck.runners.launch import LaunchResult

    cfg = load_config(config_file(tmp_path, "n1|idle|Unknown|none\\nn2|mixed|Unknown|none\\n"))
    seen: list[tuple[str, ...]] = []

    def launch(spec, *, timeout_s, env):
        seen.append(spec.argv)
        return LaunchResult(kind="srun", argv=spec.argv, ranks={}, rank_stderr={}, exit_codes={}, returncode=1,
                            stdout="", stderr="srun: error: stand-in", duration_s=0.0)

    monkeypatch.setattr(srun, "launch", launch)
    outside = {"PATH": "/usr/bin:/bin"}
    deep = srun.check_over_srun(cfg, ["n1", "n2"], tier="deep", env=outside)
    quick = srun.check_over_srun(cfg, ["n1", "n2"], tier="quick", env=outside)
    assert "--exclusive" in seen[0] and "--nodelist=n1" in seen[0]  # mixed n2 shares a job: skipped
    assert "skipped n2 (mixed: busy with a job)" in deep.notes
    assert "--exclusive" not in seen[1] and "--nodelist=n[1-2]" in seen[1]
    assert {r.node for r in quick.results} == {"n1", "n2"}
    # inside the caller's allocation hc submits nothing: that job decides (hc node --local checks it)
    inside = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "5", "SLURM_JOB_NODELIST": "n[1-2]"}
    srun.check_over_srun(cfg, ["n1", "n2"], tier="deep", env=inside)
    assert "--exclusive" not in seen[2]
    assert "--exclusive" in srun.srun_argv(cfg, ["n1"], tier="deep", only=(), since=None, exclusive=True)


# issue 18, C.10: a machine without Slurm said "ERROR: 1 node (1 PASS)" and left the reader to guess


@pytest.mark.parametrize("sinfo,status,fid,said", [
    ('#echo "sinfo: fatal: Could not establish a configuration source" >&2\nexit 1\n', "ERROR", "act.E003",
     "deep tests not run on me: Slurm cannot be asked whether a job runs there (sinfo: fatal: Could not "
     "establish a configuration source)"),
    (None, "WARN", "act.E009", "no Slurm here to ask whether a job runs on me; its deep tests ran without that "
                               "check"),
])
def test_hc_node_deep_without_slurm_says_slurm_cannot_be_asked_and_what_it_means(tmp_path, sinfo, status, fid,
                                                                                 said):
    cfg = config_file(tmp_path, sinfo, sinfo_path=None if sinfo else str(tmp_path / "no-such-dir" / "sinfo"))
    r = run_hc("node", "--local", "--tier", "deep", "--checks", "net,bw", "--config", str(cfg),
               env={"HC_NODE_NAME": "me"})
    lines = r.stdout.decode().splitlines()
    (row,) = [line for line in lines[:-1] if fid in line]
    assert row.split()[0] == status and said in row, row
    verdict = lines[-1]
    # the verdict says where it comes from, not only that the one node passed
    assert verdict.startswith(f"{status}: 1 node (1 PASS) + 1 run finding {status} ({fid}), tier deep"), verdict
