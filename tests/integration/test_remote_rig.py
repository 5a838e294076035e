"""hc from a login node against the rig's hosts: real sshd per host, real host keys,
paramiko; sweeps over SSH and through Slurm; fleet drift; report diff; the sandbox."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from support import run_hc

pytestmark = pytest.mark.rig

HC = Path(sysconfig.get_path("scripts")) / "hc"


def hc_bin(tmp_path: Path) -> str:
    if HC.exists():
        return str(HC)
    shim = tmp_path / "hc"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m healthcheck \"$@\"\n")
    shim.chmod(0o755)
    return str(shim)


@pytest.fixture
def site(fresh_netns_rig, tmp_path):
    """An hc config for the rig hosts: strict host keys from the rig, a history, eth0 9000."""
    net = fresh_netns_rig
    known = tmp_path / "known_hosts"
    shutil.copy(net.known_hosts, known)
    # the rig's ssh_config names its own known_hosts; hc's list must be the only one here
    ssh_config = tmp_path / "ssh_config"
    ssh_config.write_text("".join(line for line in net.ssh_config.read_text().splitlines(keepends=True)
                                  if "UserKnownHostsFile" not in line))

    def write(fabric: str = "eth0: {mtu: 9000, count: 1}", extra: str = "", timeout: float = 5) -> Path:
        (tmp_path / "fabrics").mkdir(exist_ok=True)
        (tmp_path / "kern.log").write_text("[    0.000000] Linux version 6.1.0 (hc rig)\n")  # a kernel log is never empty
        interfaces = f"net:\n  interfaces:\n    {fabric}\n" if fabric else ""
        (tmp_path / "fabrics" / "rig.yaml").write_text(
            f"extends: generic\n{interfaces}gpu:\n  xid: {{source: file, file: {tmp_path}/kern.log}}\n")
        cfg = tmp_path / "hc.yaml"
        cfg.write_text(
            "nodes:\n  'node[1-4]': rig\n"
            f"ssh:\n  config_file: {ssh_config}\n  known_hosts: [{known}]\n  identity_files: [{net.client_key}]\n"
            f"  use_agent: false\n  connect_timeout_s: 3\n  command_timeout_s: {timeout}\n  node_timeout_s: 40\n"
            f"  remote_hc: {hc_bin(tmp_path)}\n"
            f"slurm:\n  remote_hc: {hc_bin(tmp_path)}\n  state_dir: {tmp_path}/state\n  audit_log: {tmp_path}/audit.jsonl\n"
            f"  report_dir: {tmp_path}/reports\n  drain: {{max_drain_fraction: 0.5}}\n"
            f"history:\n  path: {tmp_path}/history.sqlite\n" + extra)
        return cfg

    write()
    return type("Site", (), {"net": net, "dir": tmp_path, "write": staticmethod(write), "known": known,
                             "config": tmp_path / "hc.yaml"})


def hc(site, *args: str, env: dict | None = None, timeout: float = 120):
    r = run_hc(*args, "--config", str(site.config), "--format", "json", env=env, timeout=timeout)
    return r, (json.loads(r.stdout) if r.stdout.strip().startswith(b"{") else None)


def by_node(report) -> dict:
    return {n["node"]: n for n in report["nodes"]}


def ids(node) -> set[tuple[str, str]]:
    return {(f["id"], f["status"]) for f in node["findings"]}


def test_healthy_sweep_over_ssh_agentless(site, validate_report):
    r, report = hc(site, "sweep", "--nodes", "node[1-4]", "--mode", "agentless", "--tier", "quick")
    assert r.returncode == 0, r.stderr
    validate_report(report)
    assert {(n, v["status"], v["mode"]) for n, v in by_node(report).items()} == {
        (f"node{i}", "PASS", "agentless") for i in range(1, 5)}


def test_bad_mtu_host_over_ssh_in_both_modes(site):
    site.net.set_mtu("node3", "eth0", 1500)
    for mode in ("agentless", "agent", "auto"):
        r, report = hc(site, "node", "node[1-4]", "--mode", mode)
        nodes = by_node(report)
        assert r.returncode == 2, (mode, r.stderr)
        assert ids(nodes["node3"]) == {("net.E001", "FAIL")}, mode
        assert all(nodes[n]["status"] == "PASS" for n in ("node1", "node2", "node4")), mode
        expected_mode = "agentless" if mode == "agentless" else "agent"
        assert {v["mode"] for v in nodes.values()} == {expected_mode}
        (f,) = nodes["node3"]["findings"]
        assert f["subject"] == "node3:eth0" and f["value"] == 1500


def test_stopped_sshd_is_error_for_that_host_only(site):
    site.net.stop_sshd("node4")
    start = time.monotonic()
    r, report = hc(site, "node", "node[1-4]")
    assert time.monotonic() - start < 20
    nodes = by_node(report)
    assert r.returncode == 3
    (f,) = nodes["node4"]["findings"]
    assert (f["id"], f["status"], f["value"]) == ("hc.E006", "ERROR", "refused")
    assert all(nodes[n]["status"] == "PASS" for n in ("node1", "node2", "node3"))


def test_changed_host_key_is_error_and_never_connects(site, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()[:2]
    lines = []
    for line in site.known.read_text().splitlines():
        lines.append(line.split()[0] + " " + " ".join(other) if line.startswith("node2,") else line)
    site.known.write_text("\n".join(lines) + "\n")
    r, report = hc(site, "node", "node[1-4]", "--mode", "agentless")
    nodes = by_node(report)
    (f,) = nodes["node2"]["findings"]
    assert (f["id"], f["value"]) == ("hc.E006", "changed-host-key") and "node2" in f["message"]
    assert all(nodes[n]["status"] == "PASS" for n in ("node1", "node3", "node4"))


def test_unknown_host_key_unless_accepting_new_ones(site):
    site.known.write_text("")
    r, report = hc(site, "node", "node1", "--mode", "agentless")
    assert by_node(report)["node1"]["findings"][0]["value"] == "unknown-host-key"
    site.write(extra="")  # same config...
    text = site.config.read_text().replace("use_agent: false", "use_agent: false\n  accept_new_host_keys: true")
    site.config.write_text(text)
    r, report = hc(site, "node", "node1", "--mode", "agentless")
    assert r.returncode == 0 and "node1" in site.known.read_text()


def test_a_hanging_command_is_error_within_its_timeout(site):
    site.write(timeout=3)
    site.net.local_bin("node1", "ip", "#!/bin/sh\nexec sleep 3600\n")
    start = time.monotonic()
    r, report = hc(site, "node", "node[1-4]", "--mode", "agentless")
    assert time.monotonic() - start < 3 + 10
    nodes = by_node(report)
    assert ids(nodes["node1"]) == {("hc.E002", "ERROR")}
    assert all(nodes[n]["status"] == "PASS" for n in ("node2", "node3", "node4"))


def test_agentless_reads_the_real_ibstat_over_fake_sysfs(site):
    site.net.fake_ib("node2", ["mlx5_0", "mlx5_1:Down:Polling"])
    r, report = hc(site, "node", "node2", "--mode", "agentless", "--checks", "ib.port_state")
    (f,) = by_node(report)["node2"]["findings"]
    assert (f["id"], f["component"]) == ("ib.E002", "mlx5_1/1") and "Down/Polling" in f["message"]


def test_sweep_through_slurm_on_the_same_hosts(site, fresh_slurm_rig, validate_report):
    site.net.set_mtu("node3", "eth0", 1500)
    env = {"SLURM_CONF": str(fresh_slurm_rig.slurm_conf), "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
    r, report = hc(site, "sweep", "--via", "slurm", "--nodes", "node[1-4]", "--tier", "quick", env=env)
    validate_report(report)
    nodes = by_node(report)
    assert r.returncode == 2, r.stderr
    assert {v["mode"] for v in nodes.values()} == {"slurm"}
    assert ids(nodes["node3"]) == {("net.E001", "FAIL")}
    assert all(nodes[n]["status"] == "PASS" for n in ("node1", "node2", "node4"))


def test_drift_across_hosts_flags_the_odd_one_without_a_threshold(site):
    site.write(fabric="")  # no MTU expectation at all
    site.net.set_mtu("node2", "eth0", 8000)
    r, report = hc(site, "sweep", "--nodes", "node[1-4]", "--mode", "agentless", "--tier", "quick")
    nodes = by_node(report)
    assert r.returncode == 0  # drift is WARN
    (f,) = nodes["node2"]["findings"]
    assert (f["id"], f["status"], f["value"]) == ("fleet.E001", "WARN", 8000)
    assert "eth0" in f["component"] and "9000" in f["message"]
    assert all(nodes[n]["findings"] == [] for n in ("node1", "node3", "node4"))


def test_report_diff_between_runs(site):
    sweep = ("sweep", "--nodes", "node[1-4]", "--mode", "agentless", "--tier", "quick")
    assert hc(site, *sweep)[0].returncode == 0
    site.net.set_mtu("node3", "eth0", 1500)
    assert hc(site, *sweep)[0].returncode == 2
    r, diff = hc(site, "report", "diff")
    assert r.returncode == 2, r.stderr
    assert [(c["node"], c["id"]) for c in diff["new_failures"]] == [("node3", "net.E001")]
    site.net.set_mtu("node3", "eth0", 9000)
    assert hc(site, *sweep)[0].returncode == 0
    r, diff = hc(site, "report", "diff")
    assert r.returncode == 0 and [(c["node"], c["id"]) for c in diff["fixed"]] == [("node3", "net.E001")]


def test_sweep_act_drains_through_the_policy_and_dry_run_only_prints(site, fresh_slurm_rig):
    site.net.set_mtu("node3", "eth0", 1500)
    env = {"SLURM_CONF": str(fresh_slurm_rig.slurm_conf)}
    r, report = hc(site, "sweep", "--partition", "debug", "--mode", "agentless", "--tier", "quick", "--act", "--dry-run", env=env)
    assert b"would run: scontrol update nodename=node3 state=drain 'reason=hc: net.E001'" in r.stderr
    assert "drain" not in fresh_slurm_rig.sinfo_nodes()["node3"][0]
    r, report = hc(site, "sweep", "--partition", "debug", "--mode", "agentless", "--tier", "quick", "--act", env=env)
    assert r.returncode == 2
    assert fresh_slurm_rig.wait_node_state("node3", "drained") == ("drained", "hc: net.E001")
    assert [a["nodes"] for a in report["actions"]] == ["node3"]
    # an admin-drained node is skipped by a partition sweep
    fresh_slurm_rig.drain("node1", "ops: bios update")
    r, report = hc(site, "sweep", "--partition", "debug", "--mode", "agentless", "--tier", "quick", env=env)
    assert "node1" not in by_node(report) and b"skipped node1" in r.stderr


def test_xid_recurring_across_boots_escalates_until_a_repair(site):
    """Real runs over SSH (agent) against a node whose kernel log is the real Xid 79 capture
    (tests/fixtures/corpus/xid-dmesg/xid79-with-nvswitch-sxid-20034.txt). The rig's hosts share
    one kernel, so one boot id: two earlier boots are a scenario seeded into the history from
    the same capture, labelled as such; the runs after them are real."""
    import datetime as dt

    import msgspec
    from support import CORPUS

    from healthcheck.checks import gpu as g
    from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
    from healthcheck.core.model import CheckResult, Finding, Metric, NodeResult
    from healthcheck.core.stamp import stamp
    from healthcheck.parsers.xid import parse_kernel_log
    from healthcheck.report.build import make_report
    from healthcheck.report.history import History

    capture = (CORPUS / "xid-dmesg" / "xid79-with-nvswitch-sxid-20034.txt").read_text()
    (site.dir / "kern.log").write_text(capture)
    r, report = hc(site, "node", "node1", "--mode", "agent", "--checks", "gpu.xid")
    assert r.returncode == 2, r.stderr
    node = by_node(report)["node1"]
    boot = next(m["value"] for m in node["metrics"] if m["name"] == "boot_id")
    assert boot == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert ("gpu.E020", "FAIL") in ids(node) and ("gpu.E025", "FAIL") not in ids(node)

    # scenario: the same Xid on the same GPU in two earlier boots of node1
    log = parse_kernel_log(capture)
    for n, other in enumerate(("0badb007-0000-4000-8000-000000000001", "0badb007-0000-4000-8000-000000000002")):
        out = list(g.xid(kernel_gpu_log=msgspec.structs.replace(log, source="file", source_lines=9, boot_id=other),
                         gpus=None, limits=Config(EMBEDDED_DEFAULT).fabric("generic")))
        found = [stamp(f, check="gpu.xid", node="node1") for f in out if isinstance(f, Finding)]
        at = dt.datetime(2026, 1, 1 + n, tzinfo=dt.timezone.utc)
        with History(site.dir / "history.sqlite") as history:
            history.record(make_report(command="node", tier="quick", config_digest="d", config_path="c", started=at,
                                       finished=at, nodes=[NodeResult(
                                           node="node1", fabric="rig", status=found[0].status, findings=found,
                                           metrics=[m for m in out if isinstance(m, Metric)],
                                           checks=[CheckResult("gpu.xid", found[0].status, 0.1)])]))
    r, report = hc(site, "node", "node1", "--mode", "agent", "--checks", "gpu.xid")
    escalated = [f for f in by_node(report)["node1"]["findings"] if f["id"] == "gpu.E025"]
    assert r.returncode == 2 and len(escalated) == 1 and "hardware inspection" in escalated[0]["message"]

    r, report = hc(site, "node", "node1", "--mode", "agent", "--checks", "gpu.xid", "--repaired", "reseated GPU 0000:91:00.0")
    assert b"repair of node1 on record" in r.stderr
    # sent on to node1's hc over SSH (agent), which found it in the history the rig's runs share
    assert b"on the node: already on record in the node's history" in r.stderr, r.stderr
    assert ("gpu.E025", "FAIL") not in ids(by_node(report)["node1"])  # counted again from the repair
    audited = [json.loads(line) for line in (site.dir / "audit.jsonl").read_text().splitlines()]
    assert [(a["action"], a["nodes"]) for a in audited] == [("repair", "node1")]
    r, listing = hc(site, "report", "history", "--node", "node1")
    rows = json.loads(r.stdout)
    assert rows[0]["status"] == "FAIL" and rows[1]["status"] == "REPAIR"
