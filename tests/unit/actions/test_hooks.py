"""The hooks' own logic through the real `hc prologue` / `hc health` commands, with
sinfo/scontrol stand-ins that record what hc asks of Slurm (real Slurm: the rig tests)."""

from __future__ import annotations

import json

from support import run_hc, run_hc_inproc, write_stub


def setup(tmp_path, *, escalation="drain", mtu=65536):
    bin_dir = tmp_path / "bin"
    log = tmp_path / "scontrol.log"
    nodes = "\\n".join(f"node{i}|idle|Unknown|none" for i in range(1, 11))
    write_stub(bin_dir, "sinfo", f'printf "{nodes}\\n"\n')
    write_stub(bin_dir, "scontrol", f'echo "$@" >> {log}\n')
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text(f"net:\n  interfaces:\n    lo: {{mtu: {mtu}}}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(
        "default_fabric: t\n"
        f"slurm:\n  state_dir: {tmp_path}/state\n  audit_log: {tmp_path}/audit.jsonl\n  report_dir: {tmp_path}/reports\n"
        f"  error_escalation: {escalation}\n  error_escalation_runs: 3\n  prologue: {{deadline_s: 1.5}}\n"
        f"history: {{path: {tmp_path}/history.sqlite}}\n")
    env = {"HC_CONFIG": str(cfg), "HC_NODE_NAME": "node1", "SLURM_JOB_ID": "7",
           "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}
    return bin_dir, log, env


def test_repeated_error_escalates_to_a_drain_only_when_configured(tmp_path):
    bin_dir, log, env = setup(tmp_path)
    write_stub(bin_dir, "ip", "exec sleep 60\n")  # net.mtu cannot run: ERROR, job runs
    codes = [run_hc_inproc("prologue", env=env, timeout=30).returncode for _ in range(3)]
    assert codes == [0, 0, 0]
    assert log.read_text().splitlines() == ["update nodename=node1 state=drain reason=hc: ERROR x3 hc.E002"]
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(a["node"], a["action"], a["reason"]) for a in audit] == [("node1", "drain", "hc: ERROR x3 hc.E002")]


def test_repeated_error_is_reported_not_drained_by_default(tmp_path):
    bin_dir, log, env = setup(tmp_path, escalation="report")
    write_stub(bin_dir, "ip", "exec sleep 60\n")
    for _ in range(3):
        r = run_hc_inproc("prologue", "--format", "json", env=env, timeout=30)
    assert r.returncode == 0 and not log.exists()
    report = json.loads(r.stdout)
    assert [f["id"] for f in report["run_findings"]] == ["act.E002"]


def test_a_passing_run_resets_the_error_count(tmp_path):
    bin_dir, log, env = setup(tmp_path)
    hang = write_stub(bin_dir, "ip", "exec sleep 60\n")
    run_hc_inproc("prologue", env=env, timeout=30)
    run_hc_inproc("prologue", env=env, timeout=30)
    hang.unlink()
    assert run_hc_inproc("prologue", env=env, timeout=30).returncode == 0
    write_stub(bin_dir, "ip", "exec sleep 60\n")
    run_hc_inproc("prologue", env=env, timeout=30)
    assert not log.exists()


def test_prologue_fail_drains_and_exits_2_dry_run_prints_the_command(tmp_path):
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    r = run_hc("prologue", "--dry-run", env=env, timeout=30)
    assert r.returncode == 2 and not log.exists()
    assert b"would run: scontrol update nodename=node1 state=drain 'reason=hc: net.E001'" in r.stdout
    r = run_hc("prologue", env=env, timeout=30)
    assert r.returncode == 2 and log.read_text().strip() == "update nodename=node1 state=drain reason=hc: net.E001"


def test_epilogue_never_changes_the_job_and_health_exits_with_the_status(tmp_path):
    bin_dir, log, env = setup(tmp_path, mtu=1500)
    assert run_hc("epilogue", env=env, timeout=30).returncode == 0
    assert run_hc("health", "--dry-run", env=env, timeout=30).returncode == 2


def test_a_broken_config_never_blocks_a_job(tmp_path):
    env = {"HC_CONFIG": str(tmp_path / "missing.yaml"), "HC_NODE_NAME": "node1"}
    r = run_hc("prologue", env=env)
    assert r.returncode == 0 and b"config file not found" in r.stderr and b"job not affected" in r.stderr
    assert run_hc("epilogue", env=env).returncode == 0
    assert run_hc("health", env=env).returncode == 4


def test_a_busy_node_lock_means_no_action_this_run(tmp_path):
    from healthcheck.actions.nodestate import NodeState

    bin_dir, log, env = setup(tmp_path, mtu=1500)
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(cfg.read_text().replace("  error_escalation:", "  lock_timeout_s: 0.3\n  error_escalation:"))
    with NodeState(tmp_path / "state", "node1").lock(1.0):  # an epilogue acting right now
        r = run_hc_inproc("health", "--format", "json", env=env, timeout=30)
    report = json.loads(r.stdout)
    assert r.returncode == 2 and not log.exists()
    assert [f["id"] for f in report["run_findings"]] == ["act.E004"]
    assert run_hc_inproc("health", env=env, timeout=30).returncode == 2 and log.exists()  # the next run acts


def test_a_health_run_opens_the_history_once_for_escalation_rates_and_the_record(tmp_path, monkeypatch):
    # the real Xid 79 capture as the node's kernel log: gpu.xid judges it, so escalation reads
    # the history's Xids, the rates read its counters, and the run is recorded
    from support import CORPUS

    from healthcheck.report.history import History

    bin_dir, log, env = setup(tmp_path)
    xid = CORPUS / "xid-dmesg" / "xid79-with-nvswitch-sxid-20034.txt"
    (tmp_path / "fabrics" / "t.yaml").write_text(
        f"net:\n  interfaces:\n    lo: {{mtu: 65536}}\ngpu:\n  xid: {{source: file, file: {xid}}}\n")
    opened: list[str] = []
    real_open = History._open

    def counting_open(self):
        opened.append(str(self.path))
        return real_open(self)

    monkeypatch.setattr(History, "_open", counting_open)
    for n in (1, 2):
        r = run_hc_inproc("health", "--dry-run", "--format", "json", env=env, timeout=30)
        report = json.loads(r.stdout)
        assert {c["name"]: c["status"] for c in report["nodes"][0]["checks"]}["gpu.xid"] == "FAIL"
        assert {a["name"] for a in report["analyses"]} >= {"ib.rates", "trend.counters"}
        assert opened == [str(tmp_path / "history.sqlite")] * n, opened  # once per run, not once per step
    with History(tmp_path / "history.sqlite") as h:
        assert [run.command for run in h.runs(10)] == ["health", "health"]
