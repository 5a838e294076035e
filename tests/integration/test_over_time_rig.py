"""Health over time on the rig's node2 (issue 23, sections 1, 2 and 4): counter rates, the
repair gate of an ib.E006 drain, and trends, judged on a history written by real runs.

Each run is Slurm's HealthCheckProgram (slurm/healthcheck.sh -> `hc health`) inside node2,
as slurmd runs it: it reads the fake HCA's sysfs counters (tests/rig/fake-ib.sh), judges them
against the node's earlier runs in the history, records the run and drains or resumes node2
in the real Slurm. The repair is put on record the way an operator does it, with
`hc node node2 --repaired TEXT` from this machine (over the rig's sshd)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from support import run_hc

pytestmark = pytest.mark.rig

NODE = "node2"


@pytest.fixture
def rig(hc, tmp_path):
    """hc in the rig's Slurm (the `hc` fixture) with an SSH section for `hc node`, and one fake
    HCA (mlx5_0, port 1, every counter 0) in node2; returns (hc, the port's counters dir)."""
    net = hc.net
    known = tmp_path / "known_hosts"
    shutil.copy(net.known_hosts, known)
    ssh_config = tmp_path / "ssh_config"  # hc's known_hosts list must be the only one
    ssh_config.write_text("".join(line for line in net.ssh_config.read_text().splitlines(keepends=True)
                                  if "UserKnownHostsFile" not in line))
    hc.write_config(extra=f"ssh:\n  config_file: {ssh_config}\n  known_hosts: [{known}]\n"
                          f"  identity_files: [{net.client_key}]\n  use_agent: false\n  connect_timeout_s: 3\n"
                          "  command_timeout_s: 10\n  node_timeout_s: 40\n")
    ib = net.fake_ib(NODE, ["mlx5_0"])
    return hc, ib / "mlx5_0" / "ports" / "1" / "counters"


def health(hc, counters: Path, **values: int) -> tuple[int, dict]:
    """Set the fake HCA's counters, run Slurm's health check in node2; its rc and its report."""
    for name, value in values.items():
        (counters / name).write_text(f"{value}\n")
    r = hc.health(NODE)
    assert r.rc in (0, 1, 2), r.stdout + r.stderr
    return r.rc, hc.report(NODE, "health")["nodes"][0]


def found(node: dict, check: str) -> list[dict]:
    return [f for f in node["findings"] if f["check"] == check]


def test_link_downed_rising_between_runs_fails_and_drains_a_reset_is_a_note(rig):
    hc, counters = rig
    rc, node = health(hc, counters, port_rcv_errors=7)
    assert rc == 0
    (first,) = found(node, "ib.rates")
    assert (first["id"], first["status"]) == ("ib.E007", "PASS") and "no earlier reading" in first["message"]

    # port_rcv_errors went down (perfquery -R): a reset, never a negative rate
    rc, node = health(hc, counters, port_rcv_errors=0)
    assert rc == 0
    (reset,) = found(node, "ib.rates")
    assert (reset["id"], reset["status"]) == ("ib.E007", "PASS") and "went down" in reset["message"]
    assert "mlx5_0/1 port_rcv_errors 7 -> 0" in reset["evidence"]
    assert hc.node(NODE)[0] == "idle"

    # the link went down once between two runs: any increase of link_downed FAILs
    rc, node = health(hc, counters, link_downed=1)
    assert rc == 2
    (rate,) = found(node, "ib.rates")
    assert (rate["id"], rate["status"], rate["component"]) == ("ib.E006", "FAIL", "mlx5_0/1:link_downed")
    assert node["action"]["kind"] == "drain"
    assert hc.slurm.wait_node_state(NODE, "drained") == ("drained", "hc: ib.E006")
    assert [(e["node"], e["action"], e["reason"]) for e in hc.audit()] == [(NODE, "drain", "hc: ib.E006")]


def test_an_ib_e006_drain_is_resumed_only_after_a_repair_on_record(rig):
    hc, counters = rig
    health(hc, counters)
    assert health(hc, counters, link_downed=1)[0] == 2
    hc.slurm.wait_node_state(NODE, "drained")

    # the counter stopped rising: ib.rates passes, but a quiet hour shows no fixed cable
    rc, node = health(hc, counters)
    assert rc == 0 and found(node, "ib.rates") == []
    assert node["action"]["kind"] == "keep"
    assert "ib.E006 clears only with a repair on record since the drain" in node["action"]["message"]
    assert hc.node(NODE) == ("drained", "hc: ib.E006")

    r = run_hc("node", NODE, "--mode", "agentless", "--repaired", "reseated cable", "--config", str(hc.config),
               "--format", "json", timeout=120)
    assert r.returncode == 0, r.stderr.decode()
    assert b"repair of node2 on record" in r.stderr
    # agentless: nothing here writes node2's own history, and hc says so (the rig's runs share one file)
    assert b"on the node: not reached: --mode agentless" in r.stderr
    checked = json.loads(r.stdout)  # over SSH, judged against the readings the health runs recorded
    assert {a["name"]: (a["status"], a.get("nodes")) for a in checked["analyses"]}["ib.rates"] == ("PASS", NODE)
    (note,) = found(checked["nodes"][0], "ib.rates")  # no rate across the repair: the cable was reseated
    assert note["id"] == "ib.E007" and "repair of node2 was put on record" in note["message"]
    assert checked["nodes"][0]["status"] == "PASS"
    assert hc.node(NODE) == ("drained", "hc: ib.E006")  # hc node records and checks; it does not act

    rc, node = health(hc, counters)
    assert rc == 0 and node["action"]["kind"] == "resume", node["action"]
    hc.slurm.wait_node_state(NODE, "idle")
    assert [(e["action"], e["reason"]) for e in hc.audit()] == [
        ("drain", "hc: ib.E006"), ("repair", "reseated cable"), ("resume", None)]


def shift_history(path: Path, hours: float) -> None:
    """Move every recorded run `hours` into the past, in the history's index of runs (what
    rates and trends read a run's time from; the reports inside keep their own times)."""
    shift = (f"-{hours} hours",)
    with sqlite3.connect(path) as db:
        for table, columns in (("runs", ("started_at", "finished_at")), ("run_nodes", ("started_at",))):
            for column in columns:
                db.execute(f"UPDATE {table} SET {column} = strftime('%Y-%m-%dT%H:%M:%fZ', {column}, ?)", shift)
    db.close()


def test_a_steady_symbol_error_rise_warns_with_the_days_left_and_never_drains(rig):
    """symbol_error rising 30 every 6 hours (120/day) on a generic fabric (counters_fail
    symbol_error 1000). The runs are real and seconds apart; after each, the history's
    recorded times are moved 6 hours back (shift_history), so the runs span hours as they
    would in the field and the trend settings and rates stay the defaults (trends.min_runs 4,
    min_span_h 6, warn_within_days 7). min_span_h set to 0 instead would let runs seconds apart
    trend, but the same rise seconds apart is an ib.E006 rate FAIL (symbol_error above
    120/hour) and a drain: not the slow rise a trend is for."""
    hc, counters = rig
    history = hc.root / "history.sqlite"
    for value in (600, 630, 660):  # fewer than trends.min_runs readings: no trend yet
        rc, node = health(hc, counters, symbol_error=value)
        assert rc == 0 and found(node, "trend.counters") == [], node["findings"]
        shift_history(history, 6)
    rc, node = health(hc, counters, symbol_error=690)
    assert rc == 0 and node["status"] == "WARN"  # a WARN is no failed health check
    (trend,) = found(node, "trend.counters")
    assert (trend["id"], trend["status"], trend["component"]) == ("trend.W001", "WARN", "mlx5_0/1:symbol_error")
    assert trend["unit"] == "days" and 2 < trend["value"] < 3, trend  # 310 left at 120/day
    assert "rising 120/day over 4 runs" in trend["message"]
    assert "ib.counters_fail.symbol_error (1000), reached in ~2.6 days" in trend["message"]
    assert found(node, "ib.rates") == []  # 30 in 6 hours is far below 120/hour
    # besides the trend, only ib.counters' absolute WARN (ib.E005: symbol_error above 10)
    assert {(f["id"], f["status"]) for f in node["findings"] if f["status"] != "PASS"} == {
        ("trend.W001", "WARN"), ("ib.E005", "WARN")}
    assert node.get("action") is None or node["action"]["kind"] != "drain"
    assert hc.node(NODE)[0] == "idle" and hc.audit() == []
