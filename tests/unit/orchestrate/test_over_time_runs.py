"""Counter rates and trends end to end: `hc sweep --act` runs (run_many) over nodes whose
results come from a real perfquery capture with changed counter values (SCENARIOS: see
tests/unit/analyses/test_over_time.py), the history written by the runs themselves."""

from __future__ import annotations

import datetime as dt

from support import write_stub
from test_over_time import checked, record

from healthcheck.core.config import load_config
from healthcheck.core.status import Status
from healthcheck.orchestrate import remote
from healthcheck.orchestrate.multirun import RunRequest, run_many
from healthcheck.report.history import History


def setup(tmp_path, monkeypatch, values: dict[str, int]):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "sinfo", "printf '" + "".join(f"n{i}|idle|Unknown|none\\n" for i in range(1, 10)) + "'\n")
    write_stub(bin_dir, "scontrol", f'echo "$@" >> {tmp_path}/scontrol.log\n')
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text("extends: generic\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nhistory: {{path: {tmp_path}/h.sqlite}}\n"
                   f"slurm: {{sinfo: {bin_dir}/sinfo, scontrol: {bin_dir}/scontrol, retries: 1, "
                   f"audit_log: {tmp_path}/audit.jsonl, drain: {{max_drain_fraction: 0.5}}}}\n")

    def check_over_ssh(config, nodes, *, tier, only=(), mode="auto", params=None, on_done=None):
        return [checked(node=n, fabric="t", **values) for n in nodes]

    monkeypatch.setattr(remote, "check_over_ssh", check_over_ssh)
    return load_config(cfg)


def sweep(config):
    return run_many(config, RunRequest(["n1"], command="sweep", tier="quick", act=True))


def test_a_rate_between_two_recorded_sweeps_fails_and_drains_the_node(tmp_path, monkeypatch):
    first = sweep(setup(tmp_path, monkeypatch, {"symbol_error": 3}))
    node = first.report.nodes[0]
    assert [(f.id, f.status) for f in node.findings if f.check == "ib.rates"] == [("ib.E007", Status.PASS)]
    assert not (tmp_path / "scontrol.log").exists()
    second = sweep(setup(tmp_path, monkeypatch, {"symbol_error": 503}))  # the history the first one wrote
    node = second.report.nodes[0]
    assert [(f.id, f.status) for f in node.findings if f.check == "ib.rates"] == [("ib.E006", Status.FAIL)]
    assert node.status is Status.FAIL and node.action is not None and node.action.kind == "drain"
    assert "ib.E006" in (tmp_path / "scontrol.log").read_text()
    runs = {a.name: a for a in second.report.analyses}
    assert runs["ib.rates"].scope == "history" and runs["ib.rates"].nodes == "n1"


def test_a_trend_warns_and_never_drains(tmp_path, monkeypatch):
    config = setup(tmp_path, monkeypatch, {"symbol_error": 900})
    now = dt.datetime.now(dt.timezone.utc)
    with History(tmp_path / "h.sqlite") as history:  # ten days of runs, 30 errors a day (a scenario)
        for i in range(40):
            record(history, now - dt.timedelta(hours=6 * (40 - i)), checked(node="n1", fabric="t",
                                                                             symbol_error=600 + int(7.5 * i)))
    run = sweep(config)
    node = run.report.nodes[0]
    trend = [f for f in node.findings if f.id == "trend.W001"]
    assert [f.status for f in trend] == [Status.WARN] and "reached in ~" in trend[0].message
    assert node.status is Status.WARN
    assert not (tmp_path / "scontrol.log").exists()


def test_health_hook_judges_rates_against_the_history_health_runs_wrote(tmp_path, monkeypatch):
    from healthcheck.orchestrate import hooks
    from healthcheck.report.build import make_report, utc_now

    config = setup(tmp_path, monkeypatch, {})
    (tmp_path / "hc.yaml").write_text((tmp_path / "hc.yaml").read_text().replace(
        "drain: {", f"state_dir: {tmp_path}/state, report_dir: {tmp_path}/reports, drain: {{"))
    config = load_config(tmp_path / "hc.yaml")
    values = {"symbol_error": 3}

    def check_this_node(config, *, node, tier, command, **kwargs):
        now = utc_now()
        report = make_report(command=command, tier=tier, config_digest=config.digest, config_path=str(config.path),
                             started=now, finished=now, nodes=[checked(node=node, fabric="t", **values)])
        return report, False

    monkeypatch.setattr(hooks, "check_this_node", check_this_node)
    env = {"SLURMD_NODENAME": "n1"}
    first = hooks.run_hook("health", config, env, dry_run=True, node="n1", resume=False)
    assert [f.id for f in first.report.nodes[0].findings if f.check == "ib.rates"] == ["ib.E007"]
    values["symbol_error"] = 503
    second = hooks.run_hook("health", config, env, dry_run=True, node="n1", resume=False)
    node = second.report.nodes[0]
    assert [(f.id, f.status) for f in node.findings if f.check == "ib.rates"] == [("ib.E006", Status.FAIL)]
    assert second.report.status is Status.FAIL and second.report.summary["FAIL"] == 1
    assert second.exit_code == 2
    # a prologue neither reads nor writes the history: its start-up stays lean
    prologue = hooks.run_hook("prologue", config, env, dry_run=True, node="n1")
    assert not any(f.check == "ib.rates" for f in prologue.report.nodes[0].findings)


def test_a_rate_fail_drain_stays_until_a_repair_is_on_record(tmp_path, monkeypatch):
    """ib.E006 is in slurm.drain.resume_after_repair_only: a counter that stopped rising does
    not show the cable was fixed; the repair put on record since the drain does."""
    from healthcheck.actions.repairs import record_repairs

    sweep(setup(tmp_path, monkeypatch, {"link_downed": 1}))
    drained = sweep(setup(tmp_path, monkeypatch, {"link_downed": 2}))  # the link went down: any rise FAILs
    assert drained.report.nodes[0].action.kind == "drain"
    assert "reason=hc: ib.E006" in (tmp_path / "scontrol.log").read_text()
    # Slurm now shows n1 drained by hc a minute ago (the controller's local time)
    at = (dt.datetime.now() - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")

    def drained_in_slurm(config):
        write_stub(tmp_path / "bin", "sinfo", f"printf 'n1|drained|{at}|hc: ib.E006\\n" +
                   "".join(f"n{i}|idle|Unknown|none\\n" for i in range(2, 10)) + "'\n")
        return config

    quiet = sweep(drained_in_slurm(setup(tmp_path, monkeypatch, {"link_downed": 2})))  # no rise: ib.rates passes
    node = quiet.report.nodes[0]
    assert [(f.id, f.status) for f in node.findings if f.check == "ib.rates"] == []
    assert "state=resume" not in (tmp_path / "scontrol.log").read_text()
    (stays,) = [f for f in quiet.report.run_findings if f.id == "act.E008"]
    assert "ib.E006 clears only with a repair on record since the drain" in stays.message
    config = drained_in_slurm(setup(tmp_path, monkeypatch, {"link_downed": 2}))
    record_repairs(config.main, ["n1"], "reseated the cable of mlx5_0 port 1")
    sweep(config)
    assert "update nodename=n1 state=resume" in (tmp_path / "scontrol.log").read_text()


def test_a_health_run_resumes_an_ib_e006_drain_only_after_a_repair(tmp_path, monkeypatch):
    from healthcheck.actions.repairs import record_repairs
    from healthcheck.orchestrate import hooks
    from healthcheck.report.build import make_report, utc_now

    setup(tmp_path, monkeypatch, {})
    (tmp_path / "hc.yaml").write_text((tmp_path / "hc.yaml").read_text().replace(
        "drain: {", f"state_dir: {tmp_path}/state, report_dir: {tmp_path}/reports, drain: {{"))
    config = load_config(tmp_path / "hc.yaml")
    at = (dt.datetime.now() - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    write_stub(tmp_path / "bin", "sinfo", f"printf 'n1|drained|{at}|hc: ib.E006\\n" +
               "".join(f"n{i}|idle|Unknown|none\\n" for i in range(2, 10)) + "'\n")

    def check_this_node(config, *, node, tier, command, **kwargs):
        now = utc_now()
        report = make_report(command=command, tier=tier, config_digest=config.digest, config_path=str(config.path),
                             started=now, finished=now, nodes=[checked(node=node, fabric="t", link_downed=2)])
        return report, False

    monkeypatch.setattr(hooks, "check_this_node", check_this_node)
    env = {"SLURMD_NODENAME": "n1"}
    hooks.run_hook("health", config, env, node="n1")  # a first reading: no rate yet
    quiet = hooks.run_hook("health", config, env, node="n1")  # no rise: ib.rates passes
    assert [f.id for f in quiet.report.nodes[0].findings if f.check == "ib.rates"] == []
    assert "repair on record since the drain" in quiet.journal
    assert not (tmp_path / "scontrol.log").exists()
    record_repairs(config.main, ["n1"], "replaced the transceiver")
    hooks.run_hook("health", config, env, node="n1")
    assert (tmp_path / "scontrol.log").read_text().strip() == "update nodename=n1 state=resume"


def test_the_sweep_after_a_repair_resumes_the_node_whatever_the_old_cable_logged(tmp_path, monkeypatch):
    """The link flapped once more before the cable was replaced (link_downed 1 -> 2 across
    the repair): that rise is the old cable's, so the sweep after the repair takes no rate across
    it (an ib.E007 note) and resumes the node; the sweep after that judges the new cable."""
    from healthcheck.actions.repairs import record_repairs

    sweep(setup(tmp_path, monkeypatch, {"link_downed": 0}))
    assert sweep(setup(tmp_path, monkeypatch, {"link_downed": 1})).report.nodes[0].action.kind == "drain"
    at = (dt.datetime.now() - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")

    def drained_in_slurm(config):
        write_stub(tmp_path / "bin", "sinfo", f"printf 'n1|drained|{at}|hc: ib.E006\\n" +
                   "".join(f"n{i}|idle|Unknown|none\\n" for i in range(2, 10)) + "'\n")
        return config

    config = drained_in_slurm(setup(tmp_path, monkeypatch, {"link_downed": 2}))
    record_repairs(config.main, ["n1"], "replaced the cable of mlx5_0 port 1")
    after = sweep(config).report.nodes[0]
    assert [(f.id, f.status) for f in after.findings if f.check == "ib.rates"] == [("ib.E007", Status.PASS)]
    assert after.status is not Status.FAIL and after.action is not None and after.action.kind == "resume"
    assert "update nodename=n1 state=resume" in (tmp_path / "scontrol.log").read_text()
    # the new cable flaps too: judged from the reading after the repair
    again = sweep(setup(tmp_path, monkeypatch, {"link_downed": 3})).report.nodes[0]
    assert [(f.id, f.status) for f in again.findings if f.check == "ib.rates"] == [("ib.E006", Status.FAIL)]
