"""The promises hc makes to Slurm, on a real cluster through the real wrappers (issue 8,
A1-A6): whatever is wrong with hc's config, state or controller, a job still runs and
Slurm never drains a healthy node; hc never takes over a node an admin owns; a sweep
through Slurm checks drained nodes instead of waiting for them, and leaves no job behind.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from support import REPO, run_hc
from test_slurm_hooks import HcCluster, drained

pytestmark = pytest.mark.rig


def _job_runs_and_nothing_is_drained(hc: HcCluster, node: str = "node1") -> None:
    job = hc.slurm.sbatch("-N1", "-w", node, wrap="hostname")
    info = hc.slurm.wait_job_state(job, "COMPLETED", timeout=40)
    assert info["ExitCode"] == "0:0" and info.get("Restarts", "0") == "0", info
    assert not any(drained(s) for s in hc.slurm.sinfo_nodes().values()), hc.slurm.sinfo_nodes()


# A1, A2, 13, 18: broken config or state never drains through Slurm ------------------------


def _break(hc: HcCluster, case: str) -> None:
    fabric = hc.root / "etc" / "fabrics" / "rig.yaml"
    if case == "fabric type error":
        fabric.write_text(fabric.read_text().replace("mtu: 9000", "mtu: lots"))
    elif case == "empty hc.yaml":
        hc.config.write_text("")
    elif case == "node matches no pattern":
        hc.config.write_text(hc.config.read_text().replace("'node[1-4]': rig", "'gpu[1-4]': rig"))
    elif case == "billion laughs":
        lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 10)]
        hc.config.write_text("\n".join(lines) + "\n")
    elif case == "config is a FIFO":
        hc.config.unlink()
        os.mkfifo(hc.config)
    elif case == "state_dir unusable":
        (hc.root / "a-file").write_text("")
        hc.config.write_text(hc.config.read_text().replace(f"state_dir: {hc.state}", f"state_dir: {hc.root}/a-file/s"))
    else:
        raise AssertionError(case)


@pytest.mark.parametrize("case", ["fabric type error", "empty hc.yaml", "node matches no pattern", "billion laughs",
                                  "config is a FIFO", "state_dir unusable"])
def test_a_broken_config_or_state_never_drains_a_node_through_slurm(hc, case):
    _break(hc, case)
    _job_runs_and_nothing_is_drained(hc)
    r = hc.health("node1")
    assert r.rc in (0, 4) and "Traceback" not in r.stderr, r.stderr
    assert not drained(hc.node("node1"))
    assert hc.audit() == []


def test_an_invalid_node_name_from_slurm_never_drains_or_writes_outside_state(hc):
    env = hc.hooks / "hc-slurm.env"
    env.write_text(env.read_text() + "HC_NODE_NAME=../../escaped\nexport HC_NODE_NAME\n")
    _job_runs_and_nothing_is_drained(hc)
    assert not (hc.root.parent / "escaped").exists() and not (hc.state.parent / "escaped").exists()


# A3: concurrent runs on one node ------------------------------------------------------------


def test_concurrent_health_runs_and_jobs_on_one_node_never_crash(hc):
    codes: list[int] = []

    def one() -> None:
        codes.append(hc.health("node1").rc)

    for _ in range(3):
        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
    assert codes == [0] * 12
    _job_runs_and_nothing_is_drained(hc)


# A4: a slow controller: health ends by its deadline, leaves its report, no orphan acts ------


def _stray_slurm_commands(conf: Path) -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            env = (proc / "environ").read_bytes()
        except OSError:
            continue
        if cmd.split(" ", 1)[0].rsplit("/", 1)[-1] in ("sinfo", "scontrol") and str(conf).encode() in env:
            out.append(cmd)
    return out


def test_health_with_a_stopped_controller_ends_by_its_deadline(hc, validate_report):
    hc.write_config(extra="")
    hc.config.write_text(hc.config.read_text().replace("  prologue: {deadline_s: 3}",
                                                       "  prologue: {deadline_s: 3}\n  health: {deadline_s: 4}"))
    hc.net.set_mtu("node3", "eth0", 1500)
    pid = int((hc.slurm.dir / "run" / "slurmctld.pid").read_text())
    os.kill(pid, signal.SIGSTOP)  # answers nothing: sinfo waits for its MessageTimeout
    try:
        start = time.monotonic()
        r = hc.health("node3")
        took = time.monotonic() - start
        strays = _stray_slurm_commands(hc.slurm.slurm_conf)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert r.rc == 2, r.stderr
    assert took < 4 + 3 + 3, took  # deadline_s + hard margin + interpreter and nsenter
    assert strays == []  # nothing hc started outlives it to drain later
    report = validate_report(hc.report("node3", "health"))
    assert [f["id"] for f in report["run_findings"]] == ["act.E003"]
    assert not drained(hc.node("node3")) and hc.audit() == []


# A5: nodes hc does not own -------------------------------------------------------------------


def test_an_admin_reason_that_starts_with_hc_is_never_taken_over(hc):
    hc.slurm.drain("node2", "hc:maint - jdoe replacing DIMM")
    hc.slurm.wait_node_state("node2", "drained")
    assert hc.health("node2").rc == 0  # healthy: still not resumed
    hc.net.set_mtu("node2", "eth0", 1500)
    assert hc.health("node2").rc == 2  # failing: the admin's reason stays
    assert hc.node("node2") == ("drained", "hc:maint - jdoe replacing DIMM")
    assert hc.audit() == []


def test_a_down_node_is_neither_drained_nor_resumed(hc):
    hc.slurm.scontrol("update", "nodename=node2", "state=down", "reason=admin: psu swap")
    hc.slurm.wait_node_state("node2", "down")
    hc.net.set_mtu("node2", "eth0", 1500)
    r = hc.health("node2")
    assert r.rc == 2
    assert hc.node("node2") == ("down", "admin: psu swap")
    # not silently (issue 18, B.5): the run says it did not drain the FAIL, and why
    (said,) = hc.report("node2", "health")["run_findings"]
    assert said["id"] == "act.E007" and said["message"].startswith("not drained: node2 is down in Slurm")
    assert "act.E007: not drained: node2 is down" in r.stderr
    hc.net.set_mtu("node2", "eth0", 9000)
    assert hc.health("node2").rc == 0
    assert hc.node("node2") == ("down", "admin: psu swap")
    assert hc.audit() == []
    action = hc.report("node2", "health")["nodes"][0]["action"]
    assert action["kind"] == "keep" and "not touched" in action["message"]


def test_a_fail_on_a_node_that_does_not_respond_is_said_and_not_drained(hc):
    """issue 18, B.5: node2's slurmd stops answering (SIGSTOP), so Slurm shows it idle*;
    its health run FAILs: exit 2 (the verdict), no drain (hc does not touch such a node),
    and the run says so, naming the node and why, in its report and in slurmd's log line."""
    # slurmctld pings a node every third of SlurmdTimeout and marks it not responding when a
    # ping goes unanswered for MessageTimeout: at the rig's 30 s and 10 s that is 20-30 s of
    # waiting. At 18 s and 3 s it is 9-15 s; the node goes DOWN no sooner than 24 s after its
    # last answer, so the health run below still meets it idle* (9 s or more to spare)
    hc.use_hooks(slurmd_timeout=18, message_timeout=3)  # a restart: the old pids are gone
    pid = int((hc.slurm.dir / "run" / "slurmd-node2.pid").read_text())
    assert Path(f"/proc/{pid}/exe").resolve().name.startswith("slurmd")
    os.kill(pid, signal.SIGSTOP)
    try:
        hc.slurm.wait_node_state("node2", "idle*", timeout=90)
        hc.net.set_mtu("node2", "eth0", 1500)
        r = hc.health("node2")
        assert r.rc == 2, r.stderr
        assert hc.node("node2")[0] == "idle*"  # not drained
        report = hc.report("node2", "health")
        (said,) = report["run_findings"]
        assert said["id"] == "act.E007" and said["subject"] == "node2"
        assert said["message"].startswith("not drained: node2 is not responding (idle*)"), said
        assert "act.E007: not drained: node2 is not responding" in r.stderr
        assert hc.audit() == []
    finally:
        os.kill(pid, signal.SIGCONT)
    hc.slurm.wait_node_state("node2", "idle", timeout=90)


# A6: a sweep through Slurm checks drained nodes, bounds its wait, leaves nothing behind -----


def _with_ssh(hc: HcCluster) -> None:
    net = hc.net
    known = hc.root / "known_hosts"
    shutil.copy(net.known_hosts, known)
    ssh_config = hc.root / "ssh_config"
    ssh_config.write_text("".join(line for line in net.ssh_config.read_text().splitlines(keepends=True)
                                  if "UserKnownHostsFile" not in line))
    shim = hc.root / "hc-shim"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m healthcheck \"$@\"\n")
    shim.chmod(0o755)
    text = hc.config.read_text().replace("slurm:\n", f"slurm:\n  remote_hc: {shim}\n  sweep_wait_s: 5\n", 1)
    hc.config.write_text(
        text + f"ssh:\n  config_file: {ssh_config}\n  known_hosts: [{known}]\n  identity_files: [{net.client_key}]\n"
        f"  use_agent: false\n  connect_timeout_s: 3\n  remote_hc: {shim}\n")


def _sweep(hc: HcCluster, *args: str, timeout: float = 120):
    env = {"SLURM_CONF": str(hc.slurm.slurm_conf),
           "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
    r = run_hc("sweep", "--via", "slurm", "--tier", "quick", "--config", str(hc.config), "--format", "json",
               *args, env=env, timeout=timeout)
    return r, (json.loads(r.stdout) if r.stdout.strip().startswith(b"{") else None)


def test_sweep_via_slurm_checks_hc_drained_nodes_over_ssh_and_resumes_fixed_ones(hc):
    _with_ssh(hc)
    hc.slurm.drain("node3", "hc: net.E001")  # drained by an earlier --act; fixed since
    hc.slurm.drain("node2", "ops: bios update")
    hc.slurm.wait_node_state("node3", "drained")
    start = time.monotonic()
    r, report = _sweep(hc, "--nodes", "node[1-4]", "--act")
    assert time.monotonic() - start < 60, "the sweep waited for nodes Slurm cannot place"
    assert r.returncode == 0, r.stderr
    nodes = {n["node"]: n for n in report["nodes"]}
    assert nodes["node3"]["status"] == "PASS" and nodes["node3"]["mode"] in ("agent", "agentless")
    assert nodes["node2"]["status"] == "SKIP" and "ops: bios update" in nodes["node2"]["error"]
    assert {nodes[n]["mode"] for n in ("node1", "node4")} == {"slurm"}
    hc.slurm.wait_node_state("node3", "idle", timeout=20)
    assert hc.node("node2") == ("drained", "ops: bios update")
    assert b"skipped node2" in r.stderr
    assert hc.slurm.squeue() == []


def test_a_sweep_whose_nodes_slurm_cannot_give_ends_bounded_and_cancels_its_job(hc):
    _with_ssh(hc)
    # a reservation for another user holds node4: srun can only pend for it
    hc.slurm.scontrol("create", "reservation", "reservationname=maint", "nodes=node4", "starttime=now",
                      "duration=60", "users=nobody", "flags=ignore_jobs")
    try:
        start = time.monotonic()
        r, report = _sweep(hc, "--nodes", "node4")
        took = time.monotonic() - start
    finally:
        hc.slurm.scontrol("delete", "reservationname=maint", check=False)
    assert took < 5 + 30, took  # sweep_wait_s, not sweep_timeout_s
    assert report is not None and r.returncode in (3, 0), r.stderr
    if report["nodes"] and report["nodes"][0]["status"] == "ERROR":
        assert "act.E006" in [f["id"] for f in report["run_findings"]]
    assert [j for j in hc.slurm.squeue() if j["name"].startswith("hc-sweep")] == []


@pytest.mark.parametrize("crash", ["kill -SEGV $$", "exit 137", "exec /nonexistent/hc"])
def test_an_hc_that_dies_outside_its_guard_still_never_drains(hc, crash):
    """The wrappers' own contract: a segfault (libyaml), the OOM killer, a missing HC_BIN."""
    broken = hc.root / "broken-hc"
    broken.write_text(f"#!/bin/sh\n{crash}\n")
    broken.chmod(0o755)
    env = hc.hooks / "hc-slurm.env"
    env.write_text(env.read_text() + f"HC_BIN={broken}\n")
    _job_runs_and_nothing_is_drained(hc)


# Issue 18 C.8 and C.10: the wrappers and the nightly script installed as people do ------------


def _wrappers_installed(hc: HcCluster, how: str) -> Path:
    """prolog.sh, epilog.sh and healthcheck.sh in a directory of their own, copied there
    without hc-env.sh or linked from the checkout, the rig's settings file beside them;
    Slurm then runs those."""
    hooks = hc.root / ("copied" if how == "copied alone" else "linked")
    hooks.mkdir()
    for name in ("prolog.sh", "epilog.sh", "healthcheck.sh"):
        if how == "copied alone":
            shutil.copy(REPO / "slurm" / name, hooks / name)
        else:
            (hooks / name).symlink_to(REPO / "slurm" / name)
    shutil.copy(hc.hooks / "hc-slurm.env", hooks / "hc-slurm.env")
    hc.slurm.reconfigure(prolog=str(hooks / "prolog.sh"), epilog=str(hooks / "epilog.sh"),
                         extra_conf=["SchedulerParameters=nohold_on_prolog_fail"])
    return hooks


@pytest.mark.parametrize("how", ["copied alone", "linked from the checkout"])
def test_wrappers_copied_alone_or_linked_from_the_checkout_run_hc_and_keep_the_contract(hc, how):
    """Either way used to exit 2 (`.: cannot open hc-env.sh`): Slurm drained every node."""
    hooks = _wrappers_installed(hc, how)
    _job_runs_and_nothing_is_drained(hc)
    assert hc.report("node1", "prologue")["status"] == "PASS"  # hc ran, through these wrappers
    r = hc.net.exec("node2", [str(hooks / "healthcheck.sh")], env={"SLURMD_NODENAME": "node2"},
                    inherit_env=False, timeout=60)
    assert r.rc == 0 and hc.report("node2", "health")["status"] == "PASS", r.stderr
    hc.net.set_mtu("node3", "eth0", 1500)  # a FAIL still drains, with hc's reason: its exit 2 goes through
    job = hc.slurm.sbatch("-N1", "-w", "node3", wrap="hostname")
    assert hc.slurm.wait_node_state("node3", "drained", timeout=30) == ("drained", "hc: net.E001")
    hc.slurm.scancel(job)


def test_an_hc_bin_that_is_not_there_checks_nothing_loudly_and_never_drains(hc):
    """The example settings named /usr/local/bin/hc where bin/install puts /opt/hc/bin/hc:
    as is, no node was ever checked and nothing said so."""
    env = hc.hooks / "hc-slurm.env"
    env.write_text(env.read_text() + "HC_BIN=/usr/local/bin/not-hc\n")
    hc.use_hooks(healthcheck=str(hc.hooks / "healthcheck.sh"), hc_interval=2)
    _job_runs_and_nothing_is_drained(hc)
    # health exits 3, which slurmd logs with what it said, every HealthCheckInterval (slurmd logs
    # nothing of a prolog or epilog that exits 0: theirs go to stderr and syslog, unit-tested)
    hc.slurm.wait_for(lambda: "hc health: HC_BIN=/usr/local/bin/not-hc is not an executable file: "
                      "this node is NOT checked" in hc.slurm.log("slurmd-node1"), timeout=30)
    assert not any(drained(s) for s in hc.slurm.sinfo_nodes().values())


def test_the_nightly_sweep_script_runs_on_real_slurm_and_logs_where_it_was_submitted(hc):
    """Its --output named /var/log/hc/sweeps/, which sbatch opens before the script runs
    and never makes: a first submission failed, unseen."""
    stub = hc.root / "hc-stub"  # notes its argv; as `sweep`, writes the report it was asked for
    stub.write_text(f'#!/bin/sh\necho "$@" >> {hc.root}/stub.log\n'
                    'while [ $# -gt 1 ]; do [ "$1" = --output ] && echo {{}} > "$2"; shift; done\n')
    stub.chmod(0o755)
    settings = hc.root / "nightly.env"
    settings.write_text(f"HC_BIN={stub}\nHC_SWEEP_DIR={hc.root}/sweeps\n")
    # last night's report, in the shared sweep directory: what tonight's is compared with,
    # whichever node the job runs on (a node's own history holds only its own sweeps)
    (hc.root / "sweeps").mkdir()
    last_night = hc.root / "sweeps" / "sweep-20261127T020000Z.json"
    last_night.write_text("{}\n")
    submit = hc.root / "submit"
    submit.mkdir()
    r = hc.slurm.run(["sbatch", "--parsable", "--partition=debug", f"--chdir={submit}",
                      f"--export=ALL,HC_SETTINGS={settings}", str(REPO / "slurm" / "nightly-sweep.sbatch")],
                     timeout=30, check=True)
    job = int(r.stdout.strip().split(";")[0])
    info = hc.slurm.wait_job_state(job, "COMPLETED", timeout=60)
    assert info["ExitCode"] == "0:0", info
    assert (submit / f"hc-nightly-{job}.out").exists(), sorted(p.name for p in submit.iterdir())
    sweep, diff = (hc.root / "stub.log").read_text().splitlines()
    assert sweep.startswith("sweep --via slurm --partition debug --tier standard --act --output "
                            f"{hc.root}/sweeps/sweep-")
    tonight = sweep.split("--output ", 1)[1].split()[0]
    assert diff == f"report diff {last_night} {tonight}"
