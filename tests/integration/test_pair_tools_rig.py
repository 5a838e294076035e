"""The tool-based tests between two nodes (orchestrate/pairsweep/tools.py) across two rig hosts:

- nccl-tests: Open MPI's real mpirun from the login side (the root namespace), its daemons
  started over the rig's sshd (OMPI_MCA_plm_rsh_agent: ssh -F the rig's ssh_config), one
  rank per "GPU" on node1 and node2 running the nccl-tests stand-in, which replays a real
  2-node capture from rank 0 (a hang, and a program missing on the hosts, too);
- ib_write_bw: hc's SSH runner starting the perftest stand-in as the server on node1 and
  the client on node2 (each host's local/bin), over each host's fake IB sysfs (the real
  ibstat reads it), the client connecting to node1's address across the rig's bridge.

Functional assertions only: outcomes, samples parsed, members named; no figure or time
of the rig's own (the stand-ins replay captured figures).
"""

from __future__ import annotations

import ipaddress
import os
import sys
import time
import uuid
from pathlib import Path

import pytest
from support import open_mpi_mpirun
from test_remote_rig import site as site

from healthcheck.core.config.loader import load_config
from healthcheck.orchestrate.pairsweep.tools import ib_write_bw_pair, nccl_tests_pair

pytestmark = pytest.mark.rig

TESTS = Path(__file__).resolve().parents[1]
NCCL_STANDINS = TESTS / "standins" / "nccl-tests"
PERFTEST_STANDIN = TESTS / "standins" / "perftest" / "ib_write_bw"
MEMBERS = ("node1", "node2")


def running_with(token: str) -> list[int]:
    """Pids of live processes whose environment holds token (the hosts share this pid namespace)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in environ and state not in ("Z", "X"):
            pids.append(int(entry))
    return pids


def fabric(site, text: str) -> object:
    """The site's rig fabric with `text` added (a bandwidth section); the loaded config."""
    path = site.dir / "fabrics" / "rig.yaml"
    base = path.read_text().split("bandwidth:\n")[0]
    path.write_text(base + text)
    return load_config(site.config)


# ------------------------------------------------------------------------------ nccl-tests


@pytest.fixture
def mpi(site, monkeypatch):
    """Open MPI reaching the rig's hosts: ssh -F the rig's config, TCP on the rig's subnet."""
    open_mpi_mpirun()
    for name in list(os.environ):  # a launcher's own variables (an enclosing job) would steer mpirun
        if name.startswith(("SLURM_", "OMPI_", "PMIX_", "PMI_")):
            monkeypatch.delenv(name)
    subnet = str(ipaddress.ip_network(f"{site.net.host('node1').addr}/24", strict=False))
    monkeypatch.setenv("OMPI_MCA_plm_rsh_agent", f"ssh -F {site.net.ssh_config}")
    monkeypatch.setenv("OMPI_MCA_btl_tcp_if_include", subnet)
    monkeypatch.setenv("OMPI_MCA_oob_tcp_if_include", subnet)
    return site


def nccl_fabric(site, scenario: str, token: str, *, bin_dir: Path = NCCL_STANDINS, timeout: float = 120):
    return fabric(site, f"bandwidth:\n  nccl_tests:\n    bin_dir: {bin_dir}\n    timeout_s: {timeout}\n"
                        f"    env: {{HC_STANDIN_SCENARIO: {scenario}, HC_STANDIN_PEER: node2, HC_TEST_TOKEN: {token}}}\n")


def test_nccl_tests_across_two_hosts_under_real_mpirun(mpi):
    token = uuid.uuid4().hex
    config = nccl_fabric(mpi, "pair-healthy", token)
    m = nccl_tests_pair(config, MEMBERS, collective="all_reduce", sizes=["32M", "1G"], gpus=8, timeout_s=180)
    assert (m.tool, m.members, m.outcome, m.passed, m.hung, m.why) == (
        "nccl_tests", MEMBERS, "passed", True, False, ""), m.evidence
    assert m.argv[:6] == ("mpirun", "-np", "16", "--tag-output", "--host", "node1:8,node2:8")
    assert m.env["NCCL_ALGO"] == "RING"  # bandwidth.pairs.nccl_env's default, handed to every rank with -x
    assert len(m.samples) == 12 and {s.ranks for s in m.samples} == {16}
    assert {s.collective for s in m.samples} == {"all_reduce"} and m.value is not None and m.unit == "GB/s"
    # rank 0 ran on the first member: the stand-in names the host it runs on as the capture's first
    assert " on node1 device " in m.evidence and "Rank  0" in m.evidence
    assert running_with(token) == []


def test_nccl_tests_hang_across_two_hosts_is_stopped_and_evidence(mpi):
    token = uuid.uuid4().hex
    config = nccl_fabric(mpi, "pair-hang", token, timeout=8)  # the hang is the whole timeout: mpirun's start and it
    m = nccl_tests_pair(config, MEMBERS, collective="all_reduce", sizes=["32M", "1G"], gpus=2, timeout_s=180)
    assert (m.outcome, m.passed, m.hung) == ("hung", False, True), m.evidence
    assert m.last_size_bytes == 128 << 20 and "last size reached: 128M" in m.why
    assert m.why.startswith("node1,node2: all_reduce_perf hung")
    deadline = time.monotonic() + 10  # every rank on both hosts was killed with mpirun
    while running_with(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running_with(token) == []


def test_nccl_tests_program_missing_on_the_hosts_is_not_run_naming_a_member(mpi):
    token = uuid.uuid4().hex
    config = nccl_fabric(mpi, "pair-healthy", token, bin_dir=Path("/nonexistent/nccl-tests"))
    m = nccl_tests_pair(config, MEMBERS, collective="all_reduce", sizes=["1G"], gpus=1, timeout_s=120)
    assert (m.outcome, m.passed) == ("not-run", None), m.evidence
    assert m.why.split(":")[0] in MEMBERS, m.why
    assert "all_reduce_perf (nccl-tests) not found in /nonexistent/nccl-tests" in m.why


# ------------------------------------------------------------------------------ ib_write_bw


def perftest(site, tmp_path: Path, scenario: str, *, client: str | None = None, timeout: float = 30):
    """Fake HCAs on both hosts, the stand-in on each one's PATH (logging the host it ran on)."""
    log = tmp_path / "ib_write_bw.log"
    for host in MEMBERS:
        site.net.fake_ib(host, ["mlx5_0:Active:LinkUp:200", "mlx5_1:Active:LinkUp:200"])
        program = client if (client and host == "node2") else f"exec {sys.executable} {PERFTEST_STANDIN} \"$@\""
        site.net.local_bin(host, "ib_write_bw", f"#!/bin/sh\necho \"$(hostname) $*\" >> {log}\n{program}\n")
    token = uuid.uuid4().hex
    config = fabric(site, f"bandwidth:\n  ib_write_bw:\n    timeout_s: {timeout}\n"
                          f"    env: {{HC_STANDIN_SCENARIO: '{scenario}', HC_TEST_TOKEN: {token}}}\n")
    return config, log, token


def started(log: Path) -> list[tuple[str, list[str]]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [(line.split()[0], line.split()[1:]) for line in lines if "--version" not in line]


def test_ib_write_bw_server_on_node1_client_on_node2_per_hca(site, tmp_path):
    config, log, token = perftest(site, tmp_path, "healthy")
    m = ib_write_bw_pair(config, MEMBERS, timeout_s=120)
    assert (m.tool, m.members, m.outcome, m.passed, m.hung, m.why) == (
        "ib_write_bw", MEMBERS, "passed", True, False, ""), m.evidence
    assert [(h.hca, h.outcome, h.floor_gbps) for h in m.hcas] == [("mlx5_0/1", "passed", 180.0),
                                                                  ("mlx5_1/1", "passed", 180.0)]
    assert all(h.gbits for h in m.hcas) and m.value is not None and m.value >= 1
    runs = started(log)
    servers = sorted((host, argv[1]) for host, argv in runs if argv[-1] != site.net.host("node1").addr)
    clients = sorted((host, argv[1]) for host, argv in runs if argv[-1] == site.net.host("node1").addr)
    assert servers == [("node1", "mlx5_0"), ("node1", "mlx5_1")]  # the server on members[0] ...
    assert clients[0] == ("node2", "mlx5_0") and {c for c in clients} == {("node2", "mlx5_0"), ("node2", "mlx5_1")}
    assert running_with(token) == []
    assert site.net.exec("node1", "ls /tmp | grep -c '^hc-ib_write_bw-' || true").stdout.strip() == "0"


def test_ib_write_bw_hang_between_hosts_is_evidence(site, tmp_path):
    config, log, token = perftest(site, tmp_path, "hang", timeout=5)
    m = ib_write_bw_pair(config, MEMBERS, timeout_s=120)
    assert (m.outcome, m.passed, m.hung) == ("hung", False, True), m.evidence
    assert {h.outcome for h in m.hcas} == {"hung"} and "node1,node2: ib_write_bw hung" in m.why
    deadline = time.monotonic() + 10
    while running_with(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert running_with(token) == []


def test_ib_write_bw_servers_are_stopped_by_pid_when_no_client_comes(site, tmp_path, monkeypatch):
    monkeypatch.setattr("healthcheck.probes.ib_write_bw.CONNECT_WINDOW_S", 2.0)
    refuse = "for last; do :; done\necho \"Couldn't connect to $last:1\" >&2\nexit 1"
    config, log, token = perftest(site, tmp_path, "healthy", client=refuse, timeout=60)
    start = time.monotonic()
    m = ib_write_bw_pair(config, MEMBERS, timeout_s=120)
    assert time.monotonic() - start < 45  # not the servers' 60 s: hc stopped them
    assert (m.outcome, m.passed) == ("not-run", None), m.evidence
    assert m.why.startswith("mlx5_") and ": node2: ib_write_bw could not run: Couldn't connect to " in m.why
    assert running_with(token) == []  # no server left on node1
    assert site.net.exec("node1", "ls /tmp | grep -c '^hc-ib_write_bw-' || true").stdout.strip() == "0"


def test_ib_write_bw_perftest_missing_on_a_member_is_named(site, tmp_path):
    config, _log, _token = perftest(site, tmp_path, "healthy")
    site.net.local_bin("node2", "ib_write_bw", "#!/bin/sh\nexit 127\n")
    m = ib_write_bw_pair(config, MEMBERS, timeout_s=60)
    assert (m.outcome, m.passed) == ("not-run", None)
    assert m.why.startswith("node2: ib_write_bw (perftest) not found")


# ------------------------------------------------------------------------------ the sweep's pair tests


def test_sweep_pairs_four_hosts_with_nccl_tests_and_ib_write_bw(mpi, tmp_path):
    """run_pairs over node1-node4 with both tools listed (bandwidth.pairs.tests): real
    mpirun across each pair for nccl-tests, real SSH for ib_write_bw HCA i <-> HCA i; every
    pair of the circle is tested by both and judged, and nothing is named."""
    from healthcheck.core.model import CheckResult, NodeResult
    from healthcheck.core.status import Status
    from healthcheck.orchestrate.pairsweep.sweep import judge_pairs, run_pairs

    nodes = ["node1", "node2", "node3", "node4"]
    for host in nodes:
        mpi.net.fake_ib(host, ["mlx5_0:Active:LinkUp:200"])
        mpi.net.local_bin(host, "ib_write_bw", f"#!/bin/sh\nexec {sys.executable} {PERFTEST_STANDIN} \"$@\"\n")
    token = uuid.uuid4().hex
    rig_fabric = mpi.dir / "fabrics" / "rig.yaml"  # no GPU on the rig: the fabric says 8 (the capture has 16 ranks)
    rig_fabric.write_text(rig_fabric.read_text().replace("gpu:\n", "gpu:\n  count: 8\n", 1))
    config = fabric(mpi, "bandwidth:\n  sizes: [32M, 1G]\n  repeats: 1\n"
                         f"  nccl_tests: {{bin_dir: {NCCL_STANDINS}, timeout_s: 120,"
                         f" env: {{HC_STANDIN_SCENARIO: pair-healthy, HC_STANDIN_PEER: node2, HC_TEST_TOKEN: {token}}}}}\n"
                         "  ib_write_bw: {timeout_s: 60, env: {HC_STANDIN_SCENARIO: healthy}}\n"
                         "  pairs: {tests: [nccl_tests, ib_write_bw], timeout_s: 180}\n")
    results = [NodeResult(node=n, fabric="rig", status=Status.PASS, mode="agentless",
                          checks=[CheckResult("bw.nccl", Status.PASS, 0.0)]) for n in nodes]
    run = run_pairs(config, results)
    pairs_seen = sorted(tuple(sorted(g.members)) for g in run.groups)
    assert pairs_seen == sorted(tuple(sorted(p)) for p in [(a, b) for i, a in enumerate(nodes) for b in nodes[i + 1:]])
    for g in run.groups:
        assert (g.status, g.findings) == (Status.PASS, []), g
        names = {(m.name, m.component) for m in g.metrics}
        assert ("busbw", "1G") in names and ("ib_write_bw_gbits", "mlx5_0/1") in names, names
    assert len(run.results) == 6 and all(r.passed for r in run.results)
    verdict, *_ = judge_pairs(results, run)
    assert all(n.status is Status.PASS and not n.findings for n in verdict)
    assert running_with(token) == []
