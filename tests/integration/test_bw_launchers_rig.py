"""`hc bw allreduce` (the real torch sweep, gloo) across the rig's 4 network-namespace hosts,
one rank per host, started each way hc supports, through healthcheck.runners.launch:

- torchrun with a c10d rendezvous at node1, one torchrun inside every host at once;
- Open MPI's mpirun from the login side (the root namespace) with a hostfile, its daemons
  started over the rig's sshd (ssh -F the rig's ssh_config), --master-addr/--master-port;
- srun on the rig's real Slurm (the worker finds node1 and a port from the step's variables).

Rank 0's JSON must name 4 ranks on node1..node4 (hostnames inside the namespaces, in rank
order) and no wrong element. A negative test throttles node3's link (tc tbf) and sees the
allreduce's bus bandwidth fall, compared with an unthrottled run in the same test (no
absolute figures: the rig's speed depends on the machine).
"""

from __future__ import annotations

import importlib.util
import ipaddress
import itertools
import json
import os
import random
import sys
import threading
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from support import open_mpi_mpirun

from healthcheck.runners.launch import Launch, LaunchResult, launch, mpirun_launch, srun_launch, torchrun_launch

pytestmark = pytest.mark.rig

NODES = ["node1", "node2", "node3", "node4"]
BIN = Path(sys.executable).parent  # the venv's scripts: hc, torchrun
TORCHRUN = BIN / "torchrun"
SWEEP_TIMEOUT_S = 60  # hc's --timeout: the rendezvous and every collective
LAUNCH_TIMEOUT_S = 180  # launch() kills every rank after this
# ports in node1's namespace below Linux's ephemeral range (32768-) and outside the ports
# the worker derives from Slurm job ids (20000-29999); a new one per launch
_PORTS = itertools.count(random.randrange(30000, 32000, 50))
# gloo's interface in every host (each has only lo and eth0)
GLOO_ENV = {"GLOO_SOCKET_IFNAME": "eth0"}


def port() -> int:
    return next(_PORTS)


def hc_program(tmp_path: Path) -> str:
    """The venv's `hc` (a shim running the package where it is not installed as a script)."""
    hc = BIN / "hc"
    if hc.exists():
        return str(hc)
    shim = tmp_path / "hc"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m healthcheck \"$@\"\n")
    shim.chmod(0o755)
    return str(shim)


def sweep(tmp_path: Path, sizes: str = "64K,1M", *extra: str) -> list[str]:
    return [hc_program(tmp_path), "bw", "allreduce", "--backend", "gloo", "--format", "json", "--sizes", sizes,
            "--iters", "5", "--warmup", "2", "--timeout", str(SWEEP_TIMEOUT_S), *extra]


def clean_env() -> dict[str, str]:
    """This process's environment without a launcher's variables of its own: mpirun inside a
    Slurm allocation would launch through Slurm, and a worker would read the wrong ranks."""
    prefixes = ("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "OMPI_", "PMIX_", "PMI_")
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "HC_FORMAT", "HC_BW_TEST_CORRUPT_RANK")
    return {k: v for k, v in os.environ.items() if not k.startswith(prefixes) and k not in names}


def rank0_report(result: LaunchResult) -> dict:
    """Rank 0's JSON document from the labelled output."""
    text = "\n".join(result.ranks.get(0, []))
    assert text.strip().startswith("{"), f"rank 0 printed no JSON\n{result.stdout[-3000:]}\n{result.stderr_tail}"
    return json.loads(text)


def assert_healthy(report: dict, launcher: str, sizes: tuple[int, ...] = (64 << 10, 1 << 20)) -> None:
    assert report["launcher"] == launcher
    assert report["backend"] == "gloo"
    assert report["ranks"] == 4
    assert report["hosts"] == NODES  # rank i on node i+1: one rank per host
    assert report["wrong"] == 0
    assert [s["size_bytes"] for s in report["samples"]] == list(sizes)
    for s in report["samples"]:
        assert s["collective"] == "all_reduce" and s["ranks"] == 4
        assert s["wrong"] == 0, s
        assert len(s["rank_times_us"]) == 4 and all(t > 0 for t in s["rank_times_us"])
        assert s["busbw_gbytes_per_s"] > 0


def explain(results: dict[str, LaunchResult]) -> str:
    return "\n".join(f"--- {host}: rc {r.returncode} timed out {r.timed_out} error {r.error}\n"
                     f"{r.stdout[-1500:]}\n{r.stderr_tail[-2500:]}" for host, r in results.items())


@pytest.fixture
def net(fresh_netns_rig):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed in this environment (hc[bandwidth])")
    return fresh_netns_rig


# ------------------------------------------------------------------------------ torchrun


def torchrun_everywhere(net, tmp_path: Path, program: list[str]) -> dict[str, LaunchResult]:
    """One torchrun in every host at once (a c10d rendezvous at node1), each through launch()."""
    if not TORCHRUN.exists():
        pytest.skip(f"no torchrun next to {sys.executable}")
    endpoint = f"{net.host('node1').addr}:{port()}"
    rdzv_id = f"hc-rig-{uuid.uuid4().hex[:12]}"
    results: dict[str, LaunchResult] = {}
    errors: dict[str, BaseException] = {}

    def one(host: str) -> None:
        spec: Launch = torchrun_launch(
            program, nproc_per_node=1, nnodes=len(NODES), rdzv_endpoint=endpoint, rdzv_id=rdzv_id,
            torchrun=str(TORCHRUN), no_python=True, log_dir=str(tmp_path / f"torchrun-{host}-{rdzv_id}"),
            shutdown_timeout_s=5, extra=[f"--rdzv-conf=join_timeout={SWEEP_TIMEOUT_S}"], env=GLOO_ENV)
        spec = replace(spec, argv=(*net.nsenter_argv(host), *spec.argv))  # run inside the host
        try:
            results[host] = launch(spec, timeout_s=LAUNCH_TIMEOUT_S, env=clean_env())
        except BaseException as exc:  # reported below, not lost in the thread
            errors[host] = exc

    threads = [threading.Thread(target=one, args=(host,), daemon=True, name=f"torchrun-{host}") for host in NODES]
    for t in threads:
        t.start()
    for t in threads:
        t.join(LAUNCH_TIMEOUT_S + 30)  # launch() is bounded by its own timeout and kill
    assert not errors, errors
    assert not [t.name for t in threads if t.is_alive()], "a torchrun thread outlived its launch timeout"
    return results


def test_torchrun_c10d_rendezvous_across_four_hosts_and_a_throttled_host_slows_it(net, tmp_path):
    """torchrun's c10d rendezvous across the four hosts gives a healthy sweep; then node3's
    link is throttled and the same 1M allreduce is slower on every rank. The healthy run is
    both the launcher's test and the throttled run's baseline (four torch starts, not eight)."""
    free = torchrun_everywhere(net, tmp_path, sweep(tmp_path))
    assert all(r.ok for r in free.values()), explain(free)
    # the rendezvous sorts its participants by hostname: node1's worker is global rank 0,
    # the only one that prints; each torchrun labels its one worker [default0]
    assert [h for h, r in free.items() if r.ranks.get(0)] == ["node1"], explain(free)
    before = rank0_report(free["node1"])
    assert_healthy(before, "torchrun")
    net.throttle("node3", "100mbit")
    slow = torchrun_everywhere(net, tmp_path, sweep(tmp_path, "1M"))
    assert all(r.ok for r in slow.values()), explain(slow)
    after = rank0_report(slow["node1"])
    assert_healthy(after, "torchrun", (1 << 20,))  # slow, yet exact
    (b,) = [s for s in before["samples"] if s["size_bytes"] == 1 << 20]
    (a,) = after["samples"]
    assert a["busbw_gbytes_per_s"] * 5 <= b["busbw_gbytes_per_s"], (b, a)
    # an allreduce waits for its slowest link: every rank is slowed, not only node3's
    assert min(a["rank_times_us"]) > max(b["rank_times_us"]), (b["rank_times_us"], a["rank_times_us"])


# ------------------------------------------------------------------------------ mpirun


def test_mpirun_with_a_hostfile_over_the_rigs_sshd(net, tmp_path):
    mpirun = open_mpi_mpirun()
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("".join(f"{host} slots=1\n" for host in NODES))
    subnet = str(ipaddress.ip_network(f"{net.host('node1').addr}/24", strict=False))
    master = ["--master-addr", net.host("node1").addr, "--master-port", str(port())]
    spec = mpirun_launch(
        sweep(tmp_path, "64K,1M", *master), np=len(NODES), hostfile=str(hostfile), mpirun=mpirun,
        allow_run_as_root=True, env=GLOO_ENV,  # -x GLOO_SOCKET_IFNAME
        extra=["--mca", "plm_rsh_agent", f"ssh -F {net.ssh_config}",  # the rig's hosts, key, known_hosts
               "--mca", "btl_tcp_if_include", subnet, "--mca", "oob_tcp_if_include", subnet])
    r = launch(spec, timeout_s=LAUNCH_TIMEOUT_S, env=clean_env(), cwd=str(tmp_path))
    assert r.ok, explain({"mpirun": r})
    assert r.exit_codes == {0: 0, 1: 0, 2: 0, 3: 0}
    assert list(r.ranks) == [0], explain({"mpirun": r})  # only rank 0 prints
    assert_healthy(rank0_report(r), "mpirun")


# ------------------------------------------------------------------------------ srun


def test_srun_on_the_rigs_slurm(fresh_slurm_rig, net, tmp_path):
    slurm = fresh_slurm_rig
    # no --master-addr/--master-port: node1 from SLURM_STEP_NODELIST, the port from the job id
    spec = srun_launch(sweep(tmp_path), nodes=len(NODES), ntasks=len(NODES), ntasks_per_node=1,
                       job_name="hc-bw-rig", immediate_s=30, env=GLOO_ENV)
    env = {**clean_env(), **slurm.env}  # SLURM_CONF and a PATH with the Slurm tools
    r = launch(spec, timeout_s=LAUNCH_TIMEOUT_S, env=env, cwd=str(slurm.jobs_dir))
    assert r.ok, explain({"srun": r})
    assert r.exit_codes == {0: 0, 1: 0, 2: 0, 3: 0}
    assert list(r.ranks) == [0], explain({"srun": r})  # only rank 0 prints
    assert_healthy(rank0_report(r), "srun")
