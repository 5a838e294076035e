"""Self-test of the integration-test rig (tests/rig/): proves that the fake hosts,
their sshd, the private Slurm cluster and the fake InfiniBand sysfs behave like the
real things hc's integration tests rely on. Needs root; skips with a reason otherwise.

    PYTHONPATH=tests python3 -m pytest -q tests/integration/test_rig_selftest.py -p rigfixtures

(``-p rigfixtures`` is optional: this module names the plugin itself.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).resolve().parents[1])
if _TESTS not in sys.path:  # so that the ``rigfixtures`` plugin below is importable
    sys.path.insert(0, _TESTS)

pytest_plugins = ["rigfixtures"]
pytestmark = pytest.mark.rig

from rig import NetnsRig, SlurmRig, rig_available, run  # noqa: E402 - after the sys.path line above

# ---------------------------------------------------------------------------------
# hosts
# ---------------------------------------------------------------------------------


def test_hosts_have_their_hostnames_and_mtus(fresh_netns_rig: NetnsRig) -> None:
    rig = fresh_netns_rig
    assert rig.names == ["node1", "node2", "node3", "node4"]
    rig.set_mtu("node3", "eth0", 1500)  # a mismatched node (reset() undoes it)
    for h in rig.hosts:
        r = rig.exec(h, ["sh", "-c", "hostname; ip -j link"], check=True)
        name, links = r.stdout.split("\n", 1)
        mtus = {link["ifname"]: link["mtu"] for link in json.loads(links)}
        assert name == h.name
        assert set(mtus) == {"lo", "eth0"}
        assert mtus["eth0"] == (1500 if h.name == "node3" else h.mtu)
    # jumbo frames pass between 9000-MTU hosts only (a real mismatch, not a label)
    assert rig.exec("node1", ["ping", "-c1", "-W1", "-M", "do", "-s", "8972", "node2"]).ok
    assert not rig.exec("node1", ["ping", "-c1", "-W1", "-M", "do", "-s", "8972", "node3"]).ok


def test_custom_rig_mtus_and_fabric_network() -> None:
    """A second, independent rig (own prefix/subnet/bridge) with per-host MTUs + ib0,
    up at the same time as the session rig."""
    ok, reason = rig_available()
    if not ok:
        pytest.skip(f"test rig unavailable: {reason}")
    rig = NetnsRig.up(
        hosts=2,
        mtus=[9000, 1500],
        ib_mtu=2044,
        rig_dir="/tmp/hc-test-rig/netns-x",
        prefix="hctx",
        subnet="10.98.2",
        bridge="hctxbr0",
    )
    try:
        assert [(h.name, h.addr, h.netns, h.mtu) for h in rig.hosts] == [
            ("node1", "10.98.2.11", "hctx1", 9000),
            ("node2", "10.98.2.12", "hctx2", 1500),
        ]
        links = rig.links("node2")
        assert links["eth0"]["mtu"] == 1500 and links["ib0"]["mtu"] == 2044
        assert rig.exec("node1", ["ping", "-c1", "-W2", "10.98.3.12"]).ok  # over ib0
    finally:
        rig.down(clean=True)
    assert "hctx" not in run(["ip", "netns", "list"]).stdout
    assert not run(["ip", "link", "show", "hctxbr0"]).ok


def test_local_bin_is_per_host(fresh_netns_rig: NetnsRig) -> None:
    rig = fresh_netns_rig
    path = rig.local_bin("node1", "nvidia-smi", "#!/bin/sh\necho stub-on-$(hostname)\nexit 3\n")
    r = rig.exec("node1", ["nvidia-smi"])
    assert (r.rc, r.stdout.strip()) == (3, "stub-on-node1")
    assert not rig.exec("node2", ["sh", "-c", "command -v nvidia-smi"]).ok
    assert not Path(path).exists()  # the root namespace sees only the empty mount point
    # SSH sessions get local/bin on PATH too (sshd SetEnv)
    with rig.ssh_client("node1") as c:
        _, out, _ = c.exec_command("nvidia-smi", timeout=10)
        assert out.channel.recv_exit_status() == 3
        assert out.read().decode().strip() == "stub-on-node1"


def test_paramiko_strict_host_keys(fresh_netns_rig: NetnsRig) -> None:
    paramiko = pytest.importorskip("paramiko")
    rig = fresh_netns_rig
    for h in rig.hosts:
        c = paramiko.SSHClient()
        c.load_host_keys(str(rig.known_hosts))
        c.set_missing_host_key_policy(paramiko.RejectPolicy())
        try:
            c.connect(
                h.addr,
                username="root",
                key_filename=str(rig.client_key),
                timeout=5,
                banner_timeout=5,
                auth_timeout=5,
                allow_agent=False,
                look_for_keys=False,
            )
            _, out, _ = c.exec_command("hostname; ip -j link show eth0", timeout=10)
            assert out.channel.recv_exit_status() == 0
            name, link = out.read().decode().split("\n", 1)
            assert name == h.name
            assert json.loads(link)[0]["mtu"] == h.mtu
        finally:
            c.close()
    # a host key not in known_hosts is rejected
    c = paramiko.SSHClient()
    c.set_missing_host_key_policy(paramiko.RejectPolicy())
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        c.connect(
            rig.hosts[0].addr,
            username="root",
            key_filename=str(rig.client_key),
            timeout=5,
            allow_agent=False,
            look_for_keys=False,
        )
    c.close()


def test_stopped_sshd_gives_connection_error(fresh_netns_rig: NetnsRig) -> None:
    paramiko = pytest.importorskip("paramiko")
    rig = fresh_netns_rig
    rig.stop_sshd("node4")
    try:
        assert rig.host("node4").sshd_pid is None
        with pytest.raises(paramiko.ssh_exception.NoValidConnectionsError):
            rig.ssh_client("node4", timeout=3)
        assert rig.exec("node4", ["hostname"]).stdout.strip() == "node4"  # host still there
    finally:
        rig.start_sshd("node4")
    rig.ssh_client("node4").close()


def test_fake_ib_seen_by_real_ibstat(fresh_netns_rig: NetnsRig) -> None:
    rig = fresh_netns_rig
    fake = rig.fake_ib("node2", ["mlx5_0", "mlx5_1:Down:Disabled"])
    r = rig.exec("node2", ["ibstat"], check=True)
    cas = {blk.split("'", 1)[0]: blk for blk in r.stdout.split("CA '")[1:]}
    assert set(cas) == {"mlx5_0", "mlx5_1"}
    assert "State: Active" in cas["mlx5_0"] and "Physical state: LinkUp" in cas["mlx5_0"]
    assert "State: Down" in cas["mlx5_1"] and "Physical state: Disabled" in cas["mlx5_1"]
    # a plain sysfs reader (like hc's probe) sees the same, and edits show through live
    (fake / "mlx5_0" / "ports" / "1" / "counters" / "symbol_error").write_text("12\n")
    read = (
        "import glob; print(sorted((p.split('/')[4], open(p).read().strip()) for p in "
        "glob.glob('/sys/class/infiniband/*/ports/*/state')), "
        "open('/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error').read().strip())"
    )
    out = rig.exec("node2", [sys.executable, "-c", read], check=True).stdout.strip()
    assert out == "[('mlx5_0', '4: ACTIVE'), ('mlx5_1', '1: DOWN')] 12"
    # other hosts have no HCA: ibstat prints nothing and exits 0
    r = rig.exec("node1", ["ibstat"])
    assert (r.rc, r.stdout) == (0, "")


# ---------------------------------------------------------------------------------
# Slurm (slurmd inside the hosts)
# ---------------------------------------------------------------------------------


def test_slurm_nodes_idle_and_srun_hostnames(fresh_slurm_rig: SlurmRig) -> None:
    s = fresh_slurm_rig
    assert s.sinfo_nodes() == {f"node{i}": ("idle", "none") for i in range(1, 5)}
    r = s.srun("-N4", "hostname", timeout=30, check=True)
    assert sorted(r.stdout.split()) == ["node1", "node2", "node3", "node4"]
    # the recording prolog ran on every node (PrologFlags=Alloc), with no PATH
    s.wait_for(
        lambda: len([e for e in s.hook_events() if e["kind"] == "epilog"]) == 4,
        what="epilog on 4 nodes",
    )
    prologs = sorted(e["node"] for e in s.hook_events() if e["kind"] == "prolog")
    assert prologs == ["node1", "node2", "node3", "node4"]
    job = next(e for e in s.hook_events() if e["kind"] == "prolog")["job"]
    env = s.hook_env("prolog", "node1", job)
    assert "PATH" not in env and env["SLURM_SCRIPT_CONTEXT"] == "prolog_slurmd"


def test_drain_with_reason_and_resume(fresh_slurm_rig: SlurmRig) -> None:
    s = fresh_slurm_rig
    s.drain("node3", "hc: test")
    assert s.wait_node_state("node3", "drained") == ("drained", "hc: test")
    assert s.sinfo_nodes()["node2"] == ("idle", "none")
    s.resume("node3")
    # right after a resume the node may show idle* for a moment: poll
    assert s.wait_node_state("node3", "idle") == ("idle", "none")


def test_failing_prolog_drains_node_and_requeues_job(
    fresh_slurm_rig: SlurmRig, tmp_path: Path
) -> None:
    s = fresh_slurm_rig
    log = tmp_path / "prolog.log"
    prolog = tmp_path / "prolog.sh"
    # Fails the first attempt of every job, wherever it lands (the node is unknown in
    # advance), and passes once the job was requeued. Hooks get no PATH: builtins only.
    prolog.write_text(
        "#!/bin/sh\n"
        f'echo "$SLURMD_NODENAME $SLURM_JOB_ID ${{SLURM_JOB_RESTART_COUNT:-0}}" >> {log}\n'
        '[ "${SLURM_JOB_RESTART_COUNT:-0}" -ge 1 ]\n'
    )
    prolog.chmod(0o755)
    s.reconfigure(prolog=str(prolog))
    jobid = s.sbatch("-N1", wrap="hostname")

    job = s.wait_for(
        lambda: (j := s.job(jobid)).get("Restarts") == "1" and j.get("JobState") == "PENDING" and j,
        what="job requeued",
    )
    assert "held" in job["Reason"].lower(), job["Reason"]
    first = log.read_text().split()[0]
    assert s.wait_node_state(first, "drained") == ("drained", "Prolog error")

    s.release_requeued(jobid)
    job = s.wait_job_state(jobid, "COMPLETED", timeout=30)
    assert job["NodeList"] != first
    assert (s.jobs_dir / f"{jobid}.out").read_text().strip() == job["NodeList"]
    assert [line.split() for line in log.read_text().splitlines()] == [
        [first, str(jobid), "0"],
        [job["NodeList"], str(jobid), "1"],
    ]
