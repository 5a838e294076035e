"""A deep sweep's pair tests started by mpirun and by srun (bandwidth.pairs.launcher) on the
rig: `hc sweep --tier deep` over node1..node4 (sshd hosts in network namespaces, the rig's
real Slurm), hc's real torch sweep (gloo) in every pair.

- mpirun (Open MPI) runs on the login side (the root namespace) and starts its daemons
  over the rig's sshd: ssh -F the rig's ssh_config and the rig's subnet for its own
  traffic, given as OMPI_MCA_* variables in hc's environment (mpirun reads them there);
- srun asks the rig's Slurm for an allocation of its own (whole nodes, a bounded wait):
  per test, or, with persistent workers (the default), one per node held for the sweep.

Each way runs twice: with persistent workers (one `hc bw serve` per node, started by the
launcher once for the sweep: pairsweep/workers.py) and without (`hc bw allreduce` launched
per test: pairsweep/launched.py).

The worker on the nodes is a wrapper that notes which launcher's variables it got, so
the tests know the pairs ran through the launcher and not over SSH. Where the point is not
torch (a job landing mid-sweep, what a stopped or killed hc leaves), the wrapper runs hc
with its torch sweep stood in for (tests/standins/torch-free/hc, torch_free_rig): the
launchers, addresses and worker protocol are hc's own, and no rank imports torch. Functional
assertions only: every pair ran and gave busbw, none could not run (bw.E107); never a
bandwidth or a time. The smallest mesh that shows each point: persistent workers sweep
node[1-4] (one worker serving three tests, two tests at once on different workers);
srun's per-test launches node[1-3] (every node in two tests, each test an allocation of
its own: 6 torch starts where four nodes' six pairs are 12), mpirun's per-test node[1-4]
(two per-test launches at once); the tests of how mpirun reaches the nodes (hc's own ssh
settings, a site's ssh that cannot) node[1-2]: one pair is what they need.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import open_mpi_mpirun
from test_remote_rig import hc, hc_bin
from test_remote_rig import site as site

pytestmark = pytest.mark.rig

NODES = ["node1", "node2", "node3", "node4"]
PAIRS = {f"{a}-{b}" for a, b in itertools.combinations(NODES, 2)}


def fabric(launcher: str, persistent: bool = True) -> str:
    """A deep sweep's bandwidth section: 1M only, gloo on each host's eth0 (exported by the
    launcher), tests started by `launcher`, on persistent workers or per test. One attempt
    per test: these tests judge how the pairs were started, never a figure (a pair short by
    noise is a WARN they accept), and a second attempt per test (per test: a second torch
    start of both ranks) only made them slower, most where two tests share the two cores."""
    return f"""bandwidth:
  sizes: [1M]
  repeats: 1
  peer_fraction: 0.7
  torch: {{backend: gloo, iters: 5, warmup: 2, env: {{GLOO_SOCKET_IFNAME: eth0}}}}
  pairs: {{launcher: {launcher}, timeout_s: 90, persistent_workers: {str(persistent).lower()}}}
"""


# hc with its torch sweep stood in for by a TCP exchange between the ranks (its docstring)
TORCH_FREE_HC = Path(__file__).resolve().parents[1] / "standins" / "torch-free" / "hc"


@pytest.fixture
def rig(site, fresh_slurm_rig):
    """The site with its deep-sweep worker wrapped: each start appends the launcher's
    variables it got (Open MPI's rank, Slurm's task and job) to workers.log."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed in this environment (hc[bandwidth])")
    return wrapped(site, fresh_slurm_rig, hc_bin(site.dir))


@pytest.fixture
def torch_free_rig(site, fresh_slurm_rig):
    """`rig` with hc's torch sweep on the nodes stood in for (tests/standins/torch-free/hc):
    for the tests whose point is not torch (a job landing mid-sweep, what a stopped hc
    leaves), whose ranks would otherwise each import torch, seconds of CPU on two cores."""
    return wrapped(site, fresh_slurm_rig, f"{sys.executable} {TORCH_FREE_HC}")


def wrapped(site, slurm, hc_command: str):
    log = site.dir / "workers.log"
    worker = site.dir / "hc-worker"
    worker.write_text("#!/bin/sh\n"
                      f'echo "ompi=${{OMPI_COMM_WORLD_RANK:-}} slurm=${{SLURM_PROCID:-}} job=${{SLURM_JOB_ID:-}} '
                      f'torchrun=${{RANK:-}} $(hostname)" >> {log}\n'
                      f'exec {hc_command} "$@"\n')
    worker.chmod(0o755)
    site.config.write_text(site.config.read_text().replace(f"remote_hc: {hc_bin(site.dir)}",
                                                           f"remote_hc: {worker}"))
    site.log = log
    site.slurm = slurm
    return site


# Two nodes, one pair: for the tests whose point is how mpirun reaches the nodes (hc's own
# ssh settings, a site's ssh that cannot), not how a sweep of four spreads its pairs (the
# tests above); per test that is two torch starts where the four nodes' six pairs are twelve
TWO_NODES = NODES[:2]  # node[1-2]


# srun per test: node[1-3] (see the docstring)
THREE_NODES = NODES[:3]


def deep_sweep(site, launcher: str, env: dict[str, str], persistent: bool, nodes: str = "node[1-4]"):
    rig_yaml = site.dir / "fabrics" / "rig.yaml"
    rig_yaml.write_text(rig_yaml.read_text() + fabric(launcher, persistent))
    env = {"SLURM_CONF": str(site.slurm.slurm_conf), **env}  # deep tests run only on nodes Slurm says are idle
    return hc(site, "sweep", "--nodes", nodes, "--mode", "agentless", "--tier", "deep", env=env,
              timeout=600)


def assert_pairs_ran(report: dict, nodes: list[str] = NODES) -> None:
    groups = [g for g in report.get("groups", []) if g["kind"] == "pair"]
    not_run = [(g["name"], f["message"]) for g in report.get("groups", []) for f in g["findings"]
               if f["id"] == "bw.E107"]
    assert not not_run, not_run
    assert {"-".join(sorted(g["members"])) for g in groups} == {f"{a}-{b}" for a, b in itertools.combinations(
        nodes, 2)}, groups
    for g in groups:
        assert g["status"] in ("PASS", "WARN"), g
        busbw = [m for m in g["metrics"] if m["name"] == "busbw"]
        assert busbw and all(m["value"] > 0 for m in busbw), g
    assert any(a["name"] == "bw.pairs" for a in report["analyses"])


def workers(site) -> list[dict[str, str]]:
    """What each worker start noted: the launcher's variables and the host."""
    out = []
    for line in site.log.read_text().splitlines():
        *fields, host = line.split(" ")
        out.append({**dict(f.split("=", 1) for f in fields), "host": host})
    return out


def one_start_per_node(started: list[dict[str, str]]) -> bool:
    """Every node's worker started, about once for the sweep (a restart after a failed test
    is allowed, not a start per test: 2 x 6 pairs x repeats)."""
    return {w["host"] for w in started} == set(NODES) and len(started) <= len(NODES) + 2


def pairs_of(nodes: list[str]) -> set[str]:
    return {f"{a}-{b}" for a, b in itertools.combinations(nodes, 2)}


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "per-test"])
def test_deep_sweep_pairs_through_mpirun(rig, persistent):
    r, report = deep_sweep(rig, "mpirun", mpirun_env(rig), persistent)
    assert report is not None, r.stderr.decode(errors="replace")[-3000:]
    assert_pairs_ran(report)
    started = workers(rig)
    assert all(not w["slurm"] and not w["torchrun"] for w in started), started
    if persistent:  # one mpirun per node, one rank each
        assert one_start_per_node(started) and all(w["ompi"] == "0" for w in started), started
    else:
        assert len(started) >= 2 * len(PAIRS)  # two ranks a test, reruns besides
        assert all(w["ompi"] in ("0", "1") for w in started) and {w["host"] for w in started} == set(NODES)


def open_mpi(rig) -> str:
    """The rig's subnet, for Open MPI's own traffic; skips where mpirun is not Open MPI's."""
    open_mpi_mpirun()
    return str(ipaddress.ip_network(f"{rig.net.host('node1').addr}/24", strict=False))


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "per-test"])
def test_deep_sweep_pairs_through_mpirun_with_hcs_own_ssh_settings(rig, persistent, monkeypatch):
    """Issue 18 D.18: no OMPI_MCA_ setting from the site at all; hc hands mpirun's ssh its
    own view of the nodes (the ssh config, key and known hosts of its `ssh` section), which
    is all the rig needs (its hosts share one network with this machine)."""
    open_mpi(rig)
    for name in [n for n in os.environ if n.startswith("OMPI_MCA_")]:
        monkeypatch.delenv(name)
    r, report = deep_sweep(rig, "mpirun", {}, persistent, "node[1-2]")
    assert report is not None, r.stderr.decode(errors="replace")[-3000:]
    assert_pairs_ran(report, TWO_NODES)
    assert {w["host"] for w in workers(rig)} == set(TWO_NODES) and all(w["ompi"] for w in workers(rig))


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "per-test"])
def test_an_mpirun_that_cannot_reach_the_nodes_keeps_open_mpis_whole_message(rig, persistent):
    """The site's own ssh for mpirun (kept as it is), one that cannot resolve the rig's
    names: every pair is ERROR (bw.E107, no node judged), its line ssh's complaint, its
    evidence Open MPI's whole banner -- not only the banner's last line."""
    open_mpi(rig)
    env = {"OMPI_MCA_plm_rsh_agent": "ssh -o BatchMode=yes -o ConnectTimeout=3"}  # no -F: no rig names
    r, report = deep_sweep(rig, "mpirun", env, persistent, "node[1-2]")
    assert report is not None, r.stderr.decode(errors="replace")[-3000:]
    groups = [g for g in report["groups"] if g["kind"] == "pair"]
    assert len(groups) == 1 and all(g["status"] == "ERROR" for g in groups), groups
    for g in groups:
        (finding,) = [f for f in g["findings"] if f["id"] == "bw.E107"]
        assert "Could not resolve hostname node" in finding["message"], finding["message"]
        assert "ORTE was unable to reliably start one or more daemons" in finding["evidence"], finding["evidence"]
        assert "mpirun -np " in finding["evidence"]  # the command line, as run
    assert all(n["status"] != "FAIL" for n in report["nodes"])


@pytest.mark.parametrize("persistent", [True, False], ids=["persistent", "per-test"])
def test_deep_sweep_pairs_through_srun(rig, persistent):
    nodes = NODES if persistent else THREE_NODES
    r, report = deep_sweep(rig, "srun", {}, persistent, "node[1-4]" if persistent else "node[1-3]")
    assert report is not None, r.stderr.decode(errors="replace")[-3000:]
    assert_pairs_ran(report, nodes)
    started = workers(rig)
    assert all(w["job"] and not w["ompi"] and not w["torchrun"] for w in started), started
    if persistent:  # one task per node, each in a one-node allocation of its own held for the sweep
        assert one_start_per_node(started) and all(w["slurm"] == "0" for w in started), started
        assert len({w["job"] for w in started}) == len(started)
    else:
        pairs = pairs_of(nodes)
        assert len(started) >= 2 * len(pairs)
        assert all(w["slurm"] in ("0", "1") for w in started) and {w["host"] for w in started} == set(nodes)
        assert len({w["job"] for w in started}) >= len(pairs)  # an allocation of its own per test
    # every test's allocation ended with it: the nodes are idle again
    for node in nodes:
        rig.slurm.wait_node_state(node, "idle")


def pair_test_beside_a_job_on_node2(rig, monkeypatch, *, persistent: bool):
    """One srun test of node1 and node2 while a job holds node2 (it took the job after the
    sweep's idle check); what the test returned: (samples, why)."""
    from healthcheck.core.config.loader import load_config
    from healthcheck.orchestrate.pairsweep.choose import open_transport
    from healthcheck.orchestrate.pairsweep.plan import PairPlan

    rig_yaml = rig.dir / "fabrics" / "rig.yaml"
    rig_yaml.write_text(rig_yaml.read_text() + fabric("srun", persistent).replace("timeout_s: 90", "timeout_s: 30"))
    # srun's bounded wait for node2 (--immediate), 3 s where it would be a third of the test's 30 s
    rig.config.write_text(rig.config.read_text().replace("slurm:\n", "slurm:\n  sweep_wait_s: 3\n", 1))
    config = load_config(rig.config)
    plan = PairPlan.from_config(config, "node1")
    transport = open_transport(config, plan, 2)
    monkeypatch.setenv("SLURM_CONF", str(rig.slurm.slurm_conf))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    job = rig.slurm.sbatch("-N1", "-w", "node2", "--exclusive", wrap="sleep 300")
    try:
        rig.slurm.wait_node_state("node2", ("allocated", "mixed"), timeout=30)
        got = transport.run(["node1", "node2"])
        return got.samples, got.why
    finally:
        transport.close()
        rig.slurm.scancel(job)


def test_srun_pair_test_meeting_a_job_fails_fast_as_a_test_that_could_not_run(rig, monkeypatch):
    """srun's bounded wait ends, and the test is (None, why) naming its members, within the
    test's timeout."""
    samples, why = pair_test_beside_a_job_on_node2(rig, monkeypatch, persistent=False)
    assert samples is None
    assert why.startswith("node1,node2: srun exited "), why
    assert not rig.log.exists()  # no worker started


def test_a_persistent_srun_worker_meeting_a_job_is_the_tests_error_naming_the_node(rig, monkeypatch):
    """node2's worker's allocation is not granted within srun's bounded wait, and the test
    is (None, why) naming that node; node1's worker started and is ended with the sweep,
    its allocation with it."""
    samples, why = pair_test_beside_a_job_on_node2(rig, monkeypatch, persistent=True)
    assert samples is None
    assert why.startswith("node2: `") and "bw serve` did not start: " in why, why
    assert [w["host"] for w in workers(rig)] == ["node1"]  # node2's never started
    rig.slurm.wait_node_state("node1", "idle")  # node1's allocation ended with its worker


# issue 18, B.6: a job that lands on a node after the sweep's idle check ---------------------


def mpirun_env(rig) -> dict[str, str]:
    """How Open MPI's mpirun reaches the rig's hosts: the rig's ssh (hosts, key, known_hosts), its subnet."""
    subnet = open_mpi(rig)
    return {"OMPI_MCA_plm_rsh_agent": f"ssh -F {rig.net.ssh_config}", "OMPI_MCA_btl_tcp_if_include": subnet,
            "OMPI_MCA_oob_tcp_if_include": subnet}


# Slurm is asked whether a job took a member in the sweep (pairsweep/sweep.py, busy.JobWatch),
# above the transport: what differs by transport is whether a worker starts on the node
# (persistent: ssh, srun, mpirun) and whether hc's own allocations are taken for a job (srun,
# both ways). Per test over SSH adds nothing to those (the test is held before any launch,
# as srun's per-test shows), so it is not run: a deep sweep's six torch starts
@pytest.mark.parametrize("launcher,persistent", [("ssh", True), ("srun", True), ("srun", False),
                                                 ("mpirun", True)],
                         ids=["ssh-persistent", "srun-persistent", "srun-per-test", "mpirun-persistent"])
def test_a_job_landing_after_the_idle_check_stops_that_nodes_tests_and_is_named(torch_free_rig, monkeypatch,
                                                                                 launcher, persistent):
    """`hc sweep --tier deep` (run_many, in this process): node[1-4] idle at the sweep's
    start; a user's job takes node2 before the tests between nodes begin. node2's tests are
    not run, each ERROR naming the job (squeue's id); no worker starts there; the other
    pairs run; the pairs analysis does not vouch for node2. hc's own worker allocations
    (srun) are not mistaken for a job. Before the fix node2 was tested beside the job
    (ssh, mpirun) or its test failed naming no job (srun). The nodes' torch sweep is the
    stand-in (torch_free_rig): what is asked is where tests start, not what torch measures."""
    rig = torch_free_rig
    from healthcheck.core.config.loader import load_config
    from healthcheck.core.nodes import parse_hostlist
    from healthcheck.orchestrate import multirun
    from healthcheck.orchestrate.multirun import RunRequest, run_many
    from healthcheck.orchestrate.pairsweep import sweep

    for name, value in (mpirun_env(rig) if launcher == "mpirun" else {}).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("SLURM_CONF", str(rig.slurm.slurm_conf))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    rig_yaml = rig.dir / "fabrics" / "rig.yaml"
    rig_yaml.write_text(rig_yaml.read_text() + fabric(launcher, persistent).replace("timeout_s: 90", "timeout_s: 60"))
    real_run_pairs = sweep.run_pairs
    landed: list[str] = []

    def a_job_lands_first(config, results, **kw):
        landed.append(rig.slurm.sbatch("-N1", "-w", "node2", "--exclusive", wrap="sleep 300"))
        rig.slurm.wait_node_state("node2", ("allocated", "mixed"), timeout=30)
        return real_run_pairs(config, results, **kw)

    monkeypatch.setattr(multirun, "run_pairs", a_job_lands_first)
    try:
        run = run_many(load_config(rig.config), RunRequest(NODES, command="sweep", tier="deep", only=["net"],
                                                           mode="agentless"))
    finally:
        for job in landed:
            rig.slurm.scancel(job)
    (job,) = landed
    groups = [g for g in run.report.groups if g.kind == "pair"]
    with_node2 = [g for g in groups if "node2" in g.members]
    assert with_node2 and all(g.status.value == "ERROR" for g in with_node2), with_node2
    for g in with_node2:
        assert any(f.id == "bw.E107" and f"job {job} took node2 during the sweep" in f.message for f in g.findings), g
    others = {"-".join(sorted(g.members)) for g in groups if g.status.value in ("PASS", "WARN")}
    assert others == {"node1-node3", "node1-node4", "node3-node4"}, [(g.name, g.status, g.findings) for g in groups]
    assert all("node2" != w["host"] for w in workers(rig)), workers(rig)  # nothing of hc's ran beside the job
    (judged,) = [a for a in run.report.analyses if a.name == "bw.pairs"]
    assert "node2" not in parse_hostlist(judged.nodes)
    assert any(f"job {job} took node2" in w for w in run.warnings), run.warnings
    for node in ("node1", "node3", "node4"):  # hc's own allocations ended with the sweep
        rig.slurm.wait_node_state(node, "idle")


# A stopped or killed hc leaves no allocation (issue 18, A2) ---------------------------------


def start_deep_sweep(site) -> subprocess.Popen:
    """`hc sweep --tier deep` through srun workers (one-node allocations of their own), started
    in a session of its own (as a terminal's job is), not waited for."""
    rig_yaml = site.dir / "fabrics" / "rig.yaml"
    rig_yaml.write_text(rig_yaml.read_text() + fabric("srun"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HC_", "SLURM"))}
    env["SLURM_CONF"] = str(site.slurm.slurm_conf)
    return subprocess.Popen([sys.executable, "-m", "healthcheck", "sweep", "--nodes", "node[1-4]", "--mode",
                             "agentless", "--tier", "deep", "--config", str(site.config), "--format", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)


def hcs_jobs(site, *, running: bool = False) -> list[dict[str, str]]:
    """The jobs of hc's name in the queue (granted ones only, where `running`)."""
    return [j for j in site.slurm.squeue() if j["name"].startswith("hc-") and (not running or j["state"] == "RUNNING")]


def first_hcs_jobs(site, sweep: subprocess.Popen, *, running: bool) -> list[dict[str, str]]:
    """hc's own jobs as soon as Slurm shows one (granted, where `running`)."""
    until = time.monotonic() + 180  # the nodes' own deep checks come first
    while time.monotonic() < until and sweep.poll() is None:
        jobs = hcs_jobs(site, running=running)
        if jobs:
            return jobs
        time.sleep(0.1)
    sweep.kill()
    _, err = sweep.communicate()
    pytest.fail(f"hc asked Slurm for no job of its own: {err.decode(errors='replace')[-3000:]}")


def _end(sweep: subprocess.Popen) -> None:
    if sweep.poll() is None:
        sweep.kill()
        sweep.wait()


def test_sigterm_right_after_a_deep_sweep_asks_for_worker_allocations_leaves_no_job(torch_free_rig):
    """SIGTERM as soon as Slurm shows the first worker's job: hc exits 143, and no job of its
    name is left (pending, granted, or granted while it was being cancelled). The workers'
    torch is the stand-in (torch_free_rig): the point is hc's allocations, not torch."""
    rig = torch_free_rig
    sweep = start_deep_sweep(rig)
    try:
        first_hcs_jobs(rig, sweep, running=False)
        os.kill(sweep.pid, signal.SIGTERM)
        _, err = sweep.communicate(timeout=60)
    finally:
        _end(sweep)
    assert sweep.returncode == 143, err.decode(errors="replace")[-3000:]
    assert b"hc: stopped by SIGTERM" in err and b"Traceback" not in err
    rig.slurm.wait_for(lambda: not hcs_jobs(rig), timeout=30, what="hc's jobs to leave the queue")
    for node in NODES:
        rig.slurm.wait_node_state(node, "idle")


def planted_leftover(rig, node: str) -> dict[str, str]:
    """A running job named as hc names its own, asked for by an hc that is gone (a process
    that ran here and ended): what a SIGKILLed hc leaves where Slurm does not end the job
    itself. Whether it does after srun dies with hc is a race (seen both ways on the rig)."""
    from healthcheck.orchestrate.allocations import start_ticks, this_host

    gone = subprocess.Popen(["sleep", "60"])
    ticks = start_ticks(gone.pid)
    gone.kill()
    gone.wait()
    name = f"hc-pair-0123abcd.{gone.pid}.{ticks}.{int(time.time()) + 3600}@{this_host()}"
    jobid = str(rig.slurm.sbatch("-N1", "-w", node, f"--job-name={name}", wrap="sleep 600"))
    # it runs, or pends behind what the killed hc left on the node: a leftover either way
    return next(j for j in hcs_jobs(rig) if j["jobid"] == jobid)


def test_a_job_a_sigkilled_hc_left_is_cancelled_by_the_next_sweep(torch_free_rig, validate_report):
    """SIGKILL cannot be handled: a worker's granted job may stay with nobody to end it (or
    Slurm ends it once srun dies with hc: a race). Its own time limit bounds it; the next sweep
    cancels what is left of it and a job planted as such a leftover (its name says which hc
    asked, and that hc is gone), names them in act.E010 and writes them to the audit log.
    The workers' torch is the stand-in (torch_free_rig), as in the SIGTERM test."""
    rig = torch_free_rig
    sweep = start_deep_sweep(rig)
    try:
        killed = first_hcs_jobs(rig, sweep, running=True)[0]
        # the partition has no MaxTime: the job's own limit (the sweep's bound) ends it at the latest
        assert rig.slurm.job(killed["jobid"])["TimeLimit"] not in ("UNLIMITED", "Partition_Limit")
        os.kill(sweep.pid, signal.SIGKILL)
        sweep.wait(30)
    finally:
        _end(sweep)
    time.sleep(3)  # whatever Slurm does by itself when srun dies with hc, it has done by now
    # what the killed hc left, where Slurm did not end it (a completing job is ending by itself)
    left = [j for j in hcs_jobs(rig) if j["state"] in ("RUNNING", "PENDING", "CONFIGURING")]
    job = planted_leftover(rig, next(n for n in NODES if n != killed["nodes"]))
    env = {"SLURM_CONF": str(rig.slurm.slurm_conf),
           "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin"}
    r, report = hc(rig, "sweep", "--via", "slurm", "--nodes", "node[1-4]", "--tier", "quick", env=env, timeout=180)
    assert report is not None, r.stderr.decode(errors="replace")[-3000:]
    validate_report(report)
    (finding,) = [f for f in report["run_findings"] if f["id"] == "act.E010"]
    for j in [job, *left]:
        assert j["jobid"] in finding["value"] and j["name"] in finding["message"], (j, finding)
        if j["state"] == "RUNNING":  # cancelled before the sweep sorted its nodes: checked, not skipped as busy
            held = next(n for n in report["nodes"] if n["node"] == j["nodes"])
            assert held["status"] != "SKIP" and held["mode"] == "slurm", held
        rig.slurm.wait_for(lambda j=j: j["jobid"] not in {x["jobid"] for x in hcs_jobs(rig)}, timeout=30,
                           what="the leftover job to leave the queue")
    audit = [json.loads(line) for line in (rig.dir / "audit.jsonl").read_text().splitlines()]
    assert any(a["action"] == "cancel-leftover" and a["job"] == job["jobid"] and a["ok"] for a in audit), audit
