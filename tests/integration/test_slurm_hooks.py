"""hc in a real Slurm cluster: slurmctld plus one slurmd per network-namespace host,
with slurm/prolog.sh, epilog.sh and healthcheck.sh installed as Slurm runs them (no
PATH; the health check without SLURM_CONF). GPUs are replayed NVML recordings; the
network, Slurm, the hooks and hc are real."""

from __future__ import annotations

import json
import shutil
import sys
import sysconfig
import threading
import time
from pathlib import Path

import pytest
from support import FIXTURES, REPO

pytestmark = pytest.mark.rig

NODES = ["node1", "node2", "node3", "node4"]


class HcCluster:
    """hc installed into the rig: config, wrappers, settings file, per-node GPU stand-ins."""

    def __init__(self, root: Path, net, slurm) -> None:
        self.root, self.net, self.slurm = root, net, slurm
        self.hooks = root / "slurm-hooks"
        self.state = root / "state"
        self.audit_path = root / "audit.jsonl"
        self.reports = root / "reports"
        self.config = root / "etc" / "hc.yaml"

    def write_config(self, *, mtu: int = 9000, fraction: float = 0.3, extra: str = "") -> None:
        (self.root / "etc" / "fabrics").mkdir(parents=True, exist_ok=True)
        (self.root / "kern.log").write_text("[    0.000000] Linux version 6.1.0 (hc rig)\n")  # a kernel log is never empty
        (self.root / "etc" / "fabrics" / "rig.yaml").write_text(
            "extends: generic\n"
            f"net:\n  interfaces:\n    eth0: {{mtu: {mtu}, count: 1}}\n"
            f"gpu:\n  xid: {{source: file, file: {self.root}/kern.log}}\n"
        )
        self.config.write_text(
            "nodes:\n  'node[1-4]': rig\n"
            "slurm:\n"
            f"  state_dir: {self.state}\n  audit_log: {self.audit_path}\n  report_dir: {self.reports}\n"
            "  retries: 2\n  retry_backoff_s: 0.2\n"
            f"  drain: {{max_drain_fraction: {fraction}}}\n"
            "  prologue: {deadline_s: 3}\n"
            f"history: {{path: {self.root}/history.sqlite}}\n"
            + extra
        )

    def install_hooks(self) -> None:
        self.hooks.mkdir(parents=True, exist_ok=True)
        for name in ("hc-env.sh", "prolog.sh", "epilog.sh", "healthcheck.sh"):
            shutil.copy(REPO / "slurm" / name, self.hooks / name)
        hc = Path(sysconfig.get_path("scripts")) / "hc"
        if not hc.exists():  # hc not installed as a console script: run the package
            hc = self.hooks / "hc"
            hc.write_text(f"#!/bin/sh\nexec {sys.executable} -m healthcheck \"$@\"\n")
            hc.chmod(0o755)
        local = self.net.local_dir
        (self.hooks / "hc-slurm.env").write_text(
            f"HC_BIN={hc}\n"
            f"HC_CONFIG={self.config}\n"
            f"SLURM_CONF={self.slurm.slurm_conf}\n"
            f"PATH={local}/bin:{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin\n"
            f"[ -r {local}/nvml.json ] && HC_NVML_REPLAY={local}/nvml.json\n"
        )

    def use_hooks(self, **knobs) -> None:
        self.slurm.reconfigure(prolog=str(self.hooks / "prolog.sh"), epilog=str(self.hooks / "epilog.sh"),
                               extra_conf=["SchedulerParameters=nohold_on_prolog_fail"], **knobs)

    def health(self, node: str, *args: str):
        """Run healthcheck.sh in `node` with exactly what slurmd gives it: SLURMD_NODENAME."""
        return self.net.exec(node, [str(self.hooks / "healthcheck.sh"), *args], env={"SLURMD_NODENAME": node},
                             inherit_env=False, timeout=60)

    def gpu_scenario(self, node: str, scenario: str) -> None:
        self.net.write_file(node, self.net.local_dir / "nvml.json", (FIXTURES / "nvml" / f"{scenario}.json").read_text())

    def audit(self) -> list[dict]:
        if not self.audit_path.exists():
            return []
        return [json.loads(line) for line in self.audit_path.read_text().splitlines() if line.strip()]

    def report(self, node: str, kind: str) -> dict:
        return json.loads((self.reports / node / f"{kind}-latest.json").read_text())

    def node(self, name: str) -> tuple[str, str]:
        return self.slurm.sinfo_nodes()[name]


def drained(state: tuple[str, str]) -> bool:
    return "drain" in state[0]


# 1 -------------------------------------------------------------------------------


def test_healthy_nodes_run_a_batch_job_and_nothing_is_drained(hc, validate_report):
    job = hc.slurm.sbatch("-N4", wrap="srun hostname")
    info = hc.slurm.wait_job_state(job, "COMPLETED", timeout=40)
    assert info["ExitCode"] == "0:0"
    assert not any(drained(s) for s in hc.slurm.sinfo_nodes().values())
    assert hc.audit() == []
    for node in NODES:
        report = validate_report(hc.report(node, "prologue"))
        assert report["status"] == "PASS" and report["nodes"][0]["node"] == node
        assert hc.report(node, "epilogue")["status"] in ("PASS", "SKIP")


# 2 -------------------------------------------------------------------------------


def test_wrong_mtu_prologue_drains_and_job_completes_elsewhere(hc, validate_report):
    hc.net.set_mtu("node3", "eth0", 1500)
    # node3 comes before node4 in Slurm's order, so the job lands there first
    job = hc.slurm.sbatch("-N1", "-x", "node1,node2", wrap="hostname")
    state = hc.slurm.wait_node_state("node3", "drained", timeout=30)
    assert state == ("drained", "hc: net.E001")
    hc.slurm.wait_for(lambda: hc.slurm.job(job).get("Restarts") == "1", timeout=30)
    hc.slurm.release_requeued(job)
    info = hc.slurm.wait_job_state(job, "COMPLETED", timeout=40)
    assert info["NodeList"] == "node4"
    report = validate_report(hc.report("node3", "prologue"))
    (finding,) = [f for f in report["nodes"][0]["findings"] if f["status"] == "FAIL"]
    assert (finding["id"], finding["subject"], finding["value"]) == ("net.E001", "node3:eth0", 1500)
    assert report["nodes"][0]["action"]["kind"] == "drain"
    (entry,) = hc.audit()
    assert (entry["node"], entry["action"], entry["reason"], entry["ok"]) == ("node3", "drain", "hc: net.E001", True)
    assert entry["report_id"] == report["run_id"]


# 3 -------------------------------------------------------------------------------


def test_admin_drained_node_is_never_resumed_or_overwritten(hc):
    hc.slurm.drain("node2", "ops: cable swap")
    hc.slurm.wait_node_state("node2", "drained")
    r = hc.health("node2")  # healthy: hc must still not resume it
    assert r.rc == 0, r.stderr
    assert hc.node("node2") == ("drained", "ops: cable swap")
    hc.net.set_mtu("node2", "eth0", 1500)
    r = hc.health("node2")  # failing: hc must not overwrite the admin's reason
    assert r.rc == 2
    assert hc.node("node2") == ("drained", "ops: cable swap")
    assert hc.audit() == []
    action = hc.report("node2", "health")["nodes"][0]["action"]
    assert action["kind"] == "keep" and "someone else" in action["message"]


# 4 -------------------------------------------------------------------------------


def test_health_resumes_a_fixed_node_and_keeps_a_broken_one_drained(hc):
    hc.net.set_mtu("node3", "eth0", 1500)
    assert hc.health("node3").rc == 2
    assert hc.node("node3") == ("drained", "hc: net.E001")
    hc.net.set_mtu("node3", "eth0", 9000)
    r = hc.health("node3")
    assert r.rc == 0, r.stderr
    hc.slurm.wait_node_state("node3", "idle", timeout=20)

    hc.net.set_mtu("node4", "eth0", 1500)
    assert hc.health("node4").rc == 2
    assert hc.health("node4").rc == 2  # still broken: stays drained, no second drain
    assert hc.node("node4") == ("drained", "hc: net.E001")
    assert [(e["node"], e["action"]) for e in hc.audit()] == [("node3", "drain"), ("node3", "resume"), ("node4", "drain")]
    keep = hc.report("node4", "health")["nodes"][0]["action"]
    assert keep["kind"] == "keep" and "already drained" in keep["message"]


# 5 -------------------------------------------------------------------------------


def _health_everywhere(hc) -> dict[str, int]:
    codes: dict[str, int] = {}

    def one(node: str) -> None:
        codes[node] = hc.health(node).rc

    threads = [threading.Thread(target=one, args=(n,)) for n in NODES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    return codes


def test_a_config_that_fails_every_node_drains_none(hc, validate_report):
    hc.write_config(mtu=1234, fraction=0.1)
    codes = _health_everywhere(hc)
    assert codes == {n: 5 for n in NODES}
    assert not any(drained(s) for s in hc.slurm.sinfo_nodes().values())
    assert hc.audit() == []
    for node in NODES:
        report = validate_report(hc.report(node, "health"))
        (guard,) = report["run_findings"]
        assert guard["id"] == "act.E001" and guard["value"] == [node] and node in guard["message"]
        assert report["nodes"][0]["action"]["kind"] == "guarded"


def test_concurrent_failing_runs_never_drain_past_the_guard(hc):
    hc.write_config(mtu=1234, fraction=0.3)  # 1 of 4 nodes may be drained
    _health_everywhere(hc)
    hc.slurm.wait_for(lambda: not any("draining" in s[0] for s in hc.slurm.sinfo_nodes().values()), timeout=10)
    now_drained = [n for n, s in hc.slurm.sinfo_nodes().items() if drained(s)]
    assert len(now_drained) == 1
    guarded = [n for n in NODES if any(f["id"] == "act.E001" for f in hc.report(n, "health")["run_findings"])]
    assert sorted(guarded) == sorted(set(NODES) - set(now_drained))


# 6 -------------------------------------------------------------------------------


def test_slurmctld_down_is_reported_and_the_report_is_complete(hc, validate_report):
    pid = int((hc.slurm.dir / "run" / "slurmctld.pid").read_text())
    assert Path(f"/proc/{pid}/exe").resolve().name.startswith("slurmctld")
    import os
    import signal

    os.kill(pid, signal.SIGTERM)
    hc.slurm.wait_for(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3],
                      timeout=20)
    hc.net.set_mtu("node3", "eth0", 1500)
    # one attempt: what a run says when Slurm cannot be asked does not depend on how often it asked
    hc.config.write_text(hc.config.read_text().replace("  retries: 2\n", "  retries: 1\n"))
    start = time.monotonic()
    r = hc.health("node3")
    assert time.monotonic() - start < 30  # sinfo itself takes ~9 s to give up
    assert r.rc == 2 and "Traceback" not in r.stderr
    report = validate_report(hc.report("node3", "health"))
    assert [f["id"] for f in report["nodes"][0]["findings"]] == ["net.E001"]
    (slurm_error,) = report["run_findings"]
    assert slurm_error["id"] == "act.E003" and "cannot read node states" in slurm_error["message"]
    assert "Unable to contact slurm controller" in slurm_error["evidence"]
    assert hc.audit() == []


# 7 -------------------------------------------------------------------------------


def test_hanging_probe_prologue_returns_within_its_deadline_and_the_job_runs(hc):
    # the job completes once its epilogue ran, which meets the same hangs: a short deadline for it too
    hc.config.write_text(hc.config.read_text().replace("  prologue: {deadline_s: 3}\n",
                                                       "  prologue: {deadline_s: 3}\n  epilogue: {deadline_s: 3}\n"))
    hc.net.local_bin("node1", "ip", "#!/bin/sh\nexec sleep 3600\n")
    hc.gpu_scenario("node1", "nvml-hang")
    job = hc.slurm.sbatch("-N1", "-w", "node1", wrap="hostname")
    info = hc.slurm.wait_job_state(job, "COMPLETED", timeout=40)
    assert info["ExitCode"] == "0:0"
    assert not drained(hc.node("node1"))
    report = hc.report("node1", "prologue")
    node = report["nodes"][0]
    assert node["status"] == "ERROR" and report["duration_s"] <= 3.0 + 1.0
    assert {c["name"] for c in node["checks"] if c["status"] == "ERROR"} >= {"net.mtu", "gpu.count"}
    assert {f["id"] for f in node["findings"]} == {"hc.E002"}


# 8 -------------------------------------------------------------------------------


def test_epilogue_drains_a_node_with_a_leftover_gpu_process(hc):
    hc.gpu_scenario("node2", "leftover-process")
    job = hc.slurm.sbatch("-N1", "-w", "node2", wrap="true")
    info = hc.slurm.wait_job_state(job, "COMPLETED", timeout=40)
    assert info["ExitCode"] == "0:0"  # the epilogue never changes the job's state
    assert hc.slurm.wait_node_state("node2", "drained", timeout=30) == ("drained", "hc: gpu.E070")
    report = hc.report("node2", "epilogue")
    ids = {f["id"] for f in report["nodes"][0]["findings"] if f["status"] == "FAIL"}
    assert ids == {"gpu.E070"}
    assert hc.report("node2", "prologue")["status"] == "PASS"  # quick checks saw a healthy node


# HealthCheckProgram, as slurmd runs it ----------------------------------------------


def test_health_check_program_drains_and_resumes_through_slurmd(hc):
    hc.net.set_mtu("node3", "eth0", 1500)
    hc.use_hooks(healthcheck=str(hc.hooks / "healthcheck.sh"), hc_interval=2)
    assert hc.slurm.wait_node_state("node3", "drained", timeout=30) == ("drained", "hc: net.E001")
    hc.net.set_mtu("node3", "eth0", 9000)
    hc.slurm.wait_node_state("node3", "idle", timeout=30)
    actions = [(e["node"], e["action"]) for e in hc.audit()]
    assert actions[:2] == [("node3", "drain"), ("node3", "resume")]
    assert not any(drained(hc.node(n)) for n in ("node1", "node2", "node4"))
