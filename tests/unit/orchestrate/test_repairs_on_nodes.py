"""A repair put on record from a login node reaches the node's own history (issue 23 section 4):
`hc node NODES --repaired TEXT` records it here, sends it to each node over the transport `hc
node` uses (agent mode: the node's hc records it, `hc node --local --record-repair`), reports
per node where it reached, and audits that; a history both share holds it once.

The SSH connection is a stand-in that runs the command here, as the node would: the node's hc
is the real `hc` (a subprocess), with the node's own config at the path the login node's
config has (as /etc/hc/hc.yaml is on each node), whose history is the node's own file."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from support import run_hc_inproc

from healthcheck.actions.repairs import record_own_repair, record_repairs, repair_from_payload, repair_payload
from healthcheck.core.config import load_config
from healthcheck.core.errors import UsageError
from healthcheck.core.model import NodeResult
from healthcheck.core.status import Status
from healthcheck.orchestrate import remote
from healthcheck.report.history import History
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import LocalRunner
from healthcheck.runners.ssh import SshError, SshErrorKind


def write_config(path: Path, history: Path, audit: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.parent / "fabrics").mkdir(exist_ok=True)
    (path.parent / "fabrics" / "t.yaml").write_text("extends: generic\n")
    path.write_text(f"default_fabric: t\nhistory: {{path: {history}}}\nslurm: {{audit_log: {audit}}}\n"
                    "ssh: {connect_timeout_s: 2, command_timeout_s: 60, node_timeout_s: 60}\n")
    return path


class FakeNode:
    """SshConnection's surface for node `node`: `command -v hc` answers where HC_ON has the
    node, and hc runs here as the node's hc, reading NODE_CONFIG[node] where the login node's
    config is named."""

    HC_ON: set[str] = set()
    UNREACHABLE: set[str] = set()
    NODE_CONFIG: dict[str, Path] = {}
    LOGIN_CONFIG: Path = Path("/nonexistent")
    sent: list[tuple[str, tuple[str, ...]]] = []

    def __init__(self, node, settings) -> None:
        self.node = node

    def connect(self) -> None:
        if self.node in self.UNREACHABLE:
            raise SshError(SshErrorKind.REFUSED, f"{self.node} (127.0.0.1:22): connection refused")

    def run(self, argv, *, timeout_s, input=None, env=None, cwd=None) -> CommandResult:
        argv = tuple(argv)
        FakeNode.sent.append((self.node, argv))
        if argv[:2] == ("sh", "-c"):
            found = self.node in self.HC_ON
            return CommandResult(argv, 0 if found else 1, "/usr/bin/hc\n" if found else "", "", 0.01)
        assert argv[0] == "hc", argv
        own = tuple(str(self.NODE_CONFIG[self.node]) if a == str(self.LOGIN_CONFIG.resolve()) else a
                    for a in argv[1:])
        return LocalRunner().run((sys.executable, "-m", "healthcheck", *own), timeout_s=timeout_s, env=env)

    def close(self) -> None:
        pass


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    """A login node's config (its history and audit log) and nodes n1 (hc installed, its own
    history), n2 (no hc: agentless), n3 (unreachable); `hc node`'s checks are stand-ins."""
    login = write_config(tmp_path / "login/hc.yaml", tmp_path / "login/history.sqlite", tmp_path / "login/audit.jsonl")
    FakeNode.HC_ON, FakeNode.UNREACHABLE, FakeNode.sent = {"n1"}, {"n3"}, []
    FakeNode.LOGIN_CONFIG = login
    FakeNode.NODE_CONFIG = {"n1": write_config(tmp_path / "n1/hc.yaml", tmp_path / "n1/history.sqlite",
                                               tmp_path / "n1/audit.jsonl")}
    monkeypatch.setattr(remote, "SshConnection", FakeNode)

    def check_over_ssh(config, nodes, *, tier, only=(), mode="auto", params=None, on_done=None):
        return [NodeResult(node=n, fabric="t", status=Status.PASS) for n in nodes]

    monkeypatch.setattr(remote, "check_over_ssh", check_over_ssh)
    return login


def repairs_in(path: Path, node: str):
    with History(path) as h:
        return h.repairs(node, 10)


def audit(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_repair_from_the_login_node_reaches_the_nodes_own_history(cluster, tmp_path):
    r = run_hc_inproc("node", "n1", "n2", "n3", "--repaired", "replaced the cable of mlx5_0 port 1",
                      "--config", str(cluster), "--format", "json")
    assert r.returncode == 0, r.stderr.decode()
    here = {n: repairs_in(tmp_path / "login/history.sqlite", n) for n in ("n1", "n2", "n3")}
    assert all(len(rows) == 1 for rows in here.values())
    # n1's health runs read n1's own history: the repair is there, with the same time, words and user
    (own,) = repairs_in(tmp_path / "n1/history.sqlite", "n1")
    assert own == here["n1"][0]
    (node_audit,) = audit(tmp_path / "n1/audit.jsonl")
    assert node_audit["action"] == "repair" and node_audit["nodes"] == "n1" and "sent by hc on" in node_audit["command"]
    # the run on n1 was hc's own record, with the node's name; nothing else ran there
    (sent,) = [argv for node, argv in FakeNode.sent if node == "n1" and argv[0] == "hc"]
    assert sent[1:4] == ("node", "--local", "--record-repair")
    lines = {line.split(" ", 4)[3]: line for line in r.stderr.decode().splitlines() if "repair of" in line}
    assert f"on the node: recorded in the node's history ({tmp_path / 'n1/history.sqlite'})" in lines["n1"]
    assert "on the node: not reached: agentless (hc is not on the node's PATH)" in lines["n2"]
    assert "on the node: not reached: n3 (127.0.0.1:22): connection refused" in lines["n3"]
    on_node = {a["nodes"]: a["on_node"] for a in audit(tmp_path / "login/audit.jsonl")}
    assert on_node["n1"].startswith("recorded in the node's history")
    assert on_node["n2"].startswith("not reached: agentless") and on_node["n3"].startswith("not reached: n3")


def test_a_history_shared_with_the_node_holds_the_repair_once(cluster, tmp_path):
    FakeNode.NODE_CONFIG["n1"] = cluster  # the docs' recommendation: one history for all
    r = run_hc_inproc("node", "n1", "--repaired", "reseated GPU 3", "--config", str(cluster), "--format", "json")
    assert r.returncode == 0, r.stderr.decode()
    assert len(repairs_in(tmp_path / "login/history.sqlite", "n1")) == 1
    assert "on the node: already on record in the node's history" in r.stderr.decode()
    assert [a["action"] for a in audit(tmp_path / "login/audit.jsonl")] == ["repair"]  # one line, not two


def test_agentless_mode_says_the_repair_did_not_reach_the_node(cluster, tmp_path):
    r = run_hc_inproc("node", "n1", "--mode", "agentless", "--repaired", "reseated GPU 3", "--config", str(cluster),
                      "--format", "json")
    assert r.returncode == 0, r.stderr.decode()
    assert "on the node: not reached: --mode agentless" in r.stderr.decode()
    assert not (tmp_path / "n1/history.sqlite").exists() and not FakeNode.sent


def test_the_nodes_record_of_a_repair_sent_twice_is_one(tmp_path):
    main = load_config(write_config(tmp_path / "hc.yaml", tmp_path / "h.sqlite", tmp_path / "audit.jsonl")).main
    (repair,) = record_repairs(main, ["n1"], "replaced the HCA")
    payload = repair_payload(repair, "login1")
    assert record_own_repair(main, "n1", payload)["recorded"] is False  # the same file: on record already
    other = load_config(write_config(tmp_path / "n1/hc.yaml", tmp_path / "n1/h.sqlite", tmp_path / "n1/a.jsonl")).main
    assert record_own_repair(other, "n1", payload)["recorded"] is True
    assert record_own_repair(other, "n1", payload)["recorded"] is False
    assert repairs_in(tmp_path / "n1/h.sqlite", "n1") == [repair]
    assert len(audit(tmp_path / "n1/a.jsonl")) == 1 and len(audit(tmp_path / "audit.jsonl")) == 1


@pytest.mark.parametrize("payload", ["", "[]", '{"text": "x", "at": "yesterday", "by": "ops"}',
                                     '{"text": "x", "at": "2026-11-29T12:00:00.000Z"}',
                                     '{"text": "two\\nlines", "at": "2026-11-29T12:00:00.000Z", "by": "ops"}'])
def test_the_record_of_another_hc_takes_only_its_json(payload):
    with pytest.raises(UsageError):
        repair_from_payload("n1", payload)


def test_record_repair_is_only_for_a_nodes_own_hc(cluster):
    r = run_hc_inproc("node", "n1", "--record-repair", "{}", "--config", str(cluster))
    assert r.returncode == 4 and b"--record-repair" in r.stderr


def test_the_nodes_health_run_resumes_its_drain_once_the_repair_reached_it(cluster, tmp_path, monkeypatch):
    """n1 drained for ib.E006 by its own health runs (its own history): a repair put on record
    from the login node reaches that history, and n1's next health run resumes it."""
    import datetime as dt

    from support import write_stub
    from test_over_time import checked

    from healthcheck.orchestrate import hooks
    from healthcheck.report.build import make_report, utc_now

    bin_dir = tmp_path / "n1/bin"
    at = (dt.datetime.now() - dt.timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    write_stub(bin_dir, "sinfo", f"printf 'n1|drained|{at}|hc: ib.E006\\n" +
               "".join(f"n{i}|idle|Unknown|none\\n" for i in range(2, 10)) + "'\n")
    write_stub(bin_dir, "scontrol", f'echo "$@" >> {tmp_path}/n1/scontrol.log\n')
    own = tmp_path / "n1/hc.yaml"
    own.write_text(own.read_text().replace("slurm: {", f"slurm: {{sinfo: {bin_dir}/sinfo, scontrol: {bin_dir}/scontrol, "
                                                      f"state_dir: {tmp_path}/n1/state, report_dir: {tmp_path}/n1/r, "
                                                      "drain: {max_drain_fraction: 0.5}, "))

    def check_this_node(config, *, node, tier, command, **kwargs):
        now = utc_now()
        report = make_report(command=command, tier=tier, config_digest=config.digest, config_path=str(config.path),
                             started=now, finished=now, nodes=[checked(node=node, fabric="t", link_downed=2)])
        return report, False

    monkeypatch.setattr(hooks, "check_this_node", check_this_node)
    env = {"SLURMD_NODENAME": "n1"}
    hooks.run_hook("health", load_config(own), env, node="n1")  # a first reading
    quiet = hooks.run_hook("health", load_config(own), env, node="n1")
    assert "repair on record since the drain" in quiet.journal and not (tmp_path / "n1/scontrol.log").exists()
    # recorded on the login node only (agentless): n1's health run does not see it
    r = run_hc_inproc("node", "n1", "--mode", "agentless", "--repaired", "reseated the cable", "--config",
                      str(cluster), "--format", "json")
    assert r.returncode == 0 and b"not reached" in r.stderr, r.stderr.decode()
    kept = hooks.run_hook("health", load_config(own), env, node="n1")
    assert "repair on record since the drain" in kept.journal and not (tmp_path / "n1/scontrol.log").exists()
    r = run_hc_inproc("node", "n1", "--repaired", "replaced the transceiver", "--config", str(cluster),
                      "--format", "json")
    assert r.returncode == 0, r.stderr.decode()
    hooks.run_hook("health", load_config(own), env, node="n1")
    assert (tmp_path / "n1/scontrol.log").read_text().strip() == "update nodename=n1 state=resume"
