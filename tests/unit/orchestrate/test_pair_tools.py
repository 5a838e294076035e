"""The tool-based bandwidth tests between two nodes (orchestrate/pairsweep/tools.py), without a
network: nccl-tests through hc's real launch() and a fake `mpirun` that starts every rank
on this machine (the nccl-tests stand-in replays real captures, rank 0 printing as an
MPI build does), and ib_write_bw through a fake SSH connection that runs the perftest
stand-in here (server and client talk over 127.0.0.1) and answers ibstat from a template.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import pytest
from test_ib_write_bw_check import free_port_base

from healthcheck.core.config.loader import load_config
from healthcheck.orchestrate.pairsweep.tools import ib_write_bw_pair, nccl_tests_pair
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import LocalRunner
from healthcheck.runners.ssh import SshError, SshErrorKind

TESTS = Path(__file__).resolve().parents[2]
NCCL_STANDINS = TESTS / "standins" / "nccl-tests"
PERFTEST_STANDINS = TESTS / "standins" / "perftest"
MEMBERS = ("gpu001", "gpu002")
HDR_LOOPBACK_GBITS = 201.802394  # the ib_write_bw stand-in's healthy capture

# mpirun for one machine: `-np N` ranks of the program, each with OMPI_COMM_WORLD_RANK/_SIZE,
# their lines tagged as Open MPI's --tag-output tags them; a failed rank's exit code
# becomes mpirun's, after Open MPI's banner. Its argv is appended to $HC_FAKE_MPIRUN_LOG.
FAKE_MPIRUN = f"""#!{sys.executable}
import json, os, subprocess, sys, threading
args = sys.argv[1:]
with open(os.environ["HC_FAKE_MPIRUN_LOG"], "a") as f:
    f.write(json.dumps(args) + "\\n")
np, i = 1, 0
while i < len(args) and args[i].startswith("-"):
    if args[i] == "-np":
        np = int(args[i + 1])
    i += 1 if args[i] in ("--tag-output", "--allow-run-as-root", "--oversubscribe") else 3 if args[i] == "--mca" else 2
program = args[i:]
lock = threading.Lock()
def pump(rank, stream, name, out):
    for line in iter(stream.readline, b""):
        with lock:
            out.write(f"[1,{{rank}}]<{{name}}>:" + line.decode(errors="replace"))
            out.flush()
procs, threads = [], []
for rank in range(np):
    env = dict(os.environ, OMPI_COMM_WORLD_RANK=str(rank), OMPI_COMM_WORLD_SIZE=str(np))
    p = subprocess.Popen(program, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    procs.append(p)
    for stream, name, out in ((p.stdout, "stdout", sys.stdout), (p.stderr, "stderr", sys.stderr)):
        t = threading.Thread(target=pump, args=(rank, stream, name, out))
        t.start()
        threads.append(t)
codes = [p.wait() for p in procs]
for t in threads:
    t.join()
failed = [(r, c) for r, c in enumerate(codes) if c]
if failed:
    rank, code = failed[0]
    sys.stderr.write("-" * 74 + "\\nPrimary job  terminated normally, but 1 process returned\\n"
                     "a non-zero exit code. Per user-direction, the job has been aborted.\\n" + "-" * 74 + "\\n"
                     "-" * 74 + "\\nmpirun detected that one or more processes exited with non-zero status, thus "
                     "causing\\nthe job to be terminated. The first process to do so was:\\n\\n"
                     f"  Process name: [[4242,1],{{rank}}]\\n  Exit code:    {{code}}\\n" + "-" * 74 + "\\n")
    sys.exit(code)
"""


def ibstat(*specs: str) -> str:
    """ibstat's text for HCAs "ca[:state[:rate]]" (one port each, InfiniBand)."""
    out = []
    for n, spec in enumerate(specs):
        ca, state, rate = ([*spec.split(":"), "", ""])[:3]
        up = (state or "Active") == "Active"
        out.append(f"CA '{ca}'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tFirmware version: 20.31.1014\n"
                   f"\tHardware version: 0\n\tNode GUID: 0x0000000000000{n:03x}\n\tSystem image GUID: 0x0000000000000001\n"
                   f"\tPort 1:\n\t\tState: {state or 'Active'}\n\t\tPhysical state: {'LinkUp' if up else 'Disabled'}\n"
                   f"\t\tRate: {rate or 200}\n\t\tBase lid: {n + 1}\n\t\tLMC: 0\n\t\tSM lid: 1\n"
                   f"\t\tCapability mask: 0x2651e848\n\t\tPort GUID: 0x0000000000001{n:03x}\n\t\tLink layer: InfiniBand\n")
    return "".join(out)


class Site:
    """A config for two nodes under tmp_path; each tool's stand-in logs what it was run with."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.log = tmp_path / "calls.jsonl"
        self.mpirun_log = tmp_path / "mpirun.jsonl"
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        (bin_dir / "mpirun").write_text(FAKE_MPIRUN)
        (bin_dir / "mpirun").chmod(0o755)
        self.path = f"{bin_dir}:/usr/bin:/bin"
        (tmp_path / "ssh_config").write_text("Host gpu*\n  HostName 127.0.0.1\n")

    def config(self, *, scenario: str = "pair-healthy", bandwidth: str = "", ib_write_bw: str = "",
               timeout: float = 30, bin_dir: Path = NCCL_STANDINS):
        fabrics = self.tmp / "fabrics"
        fabrics.mkdir(exist_ok=True)
        envs = f"{{HC_STANDIN_SCENARIO: '{scenario}', HC_STANDIN_LOG: {self.log}, HC_STANDIN_STATE: {self.tmp}/state}}"
        (fabrics / "pair.yaml").write_text(
            "extends: generic\nbandwidth:\n"
            f"  nccl_tests: {{bin_dir: {bin_dir}, iters: 7, warmup: 3, timeout_s: {timeout}, env: {envs}}}\n"
            f"  ib_write_bw:\n    port_base: {free_port_base()}\n    timeout_s: {timeout}\n    env: {envs}\n"
            f"{ib_write_bw}{bandwidth}")
        cfg = self.tmp / "hc.yaml"
        cfg.write_text(f"fabric_dirs: [{fabrics}]\nnodes:\n  'gpu[001-009]': pair\n"
                       f"ssh:\n  config_file: {self.tmp / 'ssh_config'}\n")
        return load_config(cfg)

    def calls(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def mpiruns(self) -> list[list[str]]:
        text = self.mpirun_log.read_text() if self.mpirun_log.exists() else ""
        return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def site(tmp_path, monkeypatch) -> Site:
    s = Site(tmp_path)
    monkeypatch.setenv("PATH", s.path)
    monkeypatch.setenv("HC_FAKE_MPIRUN_LOG", str(s.mpirun_log))
    return s


def nccl(site: Site, scenario: str = "pair-healthy", *, gpus: int = 8, bandwidth: str = "", timeout: float = 30,
         sizes=("32M", "1G")):
    return nccl_tests_pair(site.config(scenario=scenario, bandwidth=bandwidth, timeout=timeout), MEMBERS,
                           collective="all_reduce", sizes=list(sizes), gpus=gpus, timeout_s=60)


# ------------------------------------------------------------------------------ nccl-tests


def test_nccl_tests_argv_one_rank_per_gpu_and_the_variables_go_with_x(site):
    m = nccl(site)
    (argv,) = site.mpiruns()
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    # hc's ssh view for mpirun's ssh (runners/ompi.py), unless Open MPI's own files set one
    mca = argv[argv.index("--mca"):argv.index("--map-by")] if "--mca" in argv else []
    assert mca[:2] in ([], ["--mca", "plm_rsh_args"]) and len(mca) in (0, 3)
    names = argv[argv.index("-x"):argv.index("--map-by") - len(mca)]
    assert argv[:5] == ["-np", "16", "--tag-output", "--host", "gpu001:8,gpu002:8"]
    assert argv[5:5 + len(root)] == root
    assert sorted(names[1::2]) == ["CUDA_DEVICE_ORDER", "HC_STANDIN_LOG", "HC_STANDIN_SCENARIO", "HC_STANDIN_STATE",
                                   "NCCL_ALGO"] and set(names[::2]) == {"-x"}
    assert argv[argv.index("--map-by"):] == [
        "--map-by", "ppr:8:node", "--bind-to", "none", f"{NCCL_STANDINS}/all_reduce_perf", "-g", "1",
        "-b", str(32 << 20), "-e", str(1 << 30), "-f", "32", "-w", "3", "-n", "7", "-c", "1"]
    assert m.argv == ("mpirun", *argv)
    assert m.env == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "NCCL_ALGO": "RING", "HC_STANDIN_SCENARIO": "pair-healthy",
                     "HC_STANDIN_LOG": str(site.log), "HC_STANDIN_STATE": f"{site.tmp}/state"}
    seen = site.calls()  # every rank got the values: RING from bandwidth.pairs.nccl_env
    assert len(seen) == 16 and all(c["env"]["NCCL_ALGO"] == "RING" for c in seen)


def test_nccl_tests_healthy_pair_passes_with_rank_zeros_samples(site):
    m = nccl(site)
    assert (m.tool, m.members, m.outcome, m.passed, m.hung, m.why) == ("nccl_tests", MEMBERS, "passed", True, False, "")
    assert [(s.size_bytes, s.placement) for s in m.samples][:2] == [(32 << 20, "out-of-place"), (32 << 20, "in-place")]
    assert len(m.samples) == 12 and {s.ranks for s in m.samples} == {16}
    assert (m.value, m.unit, m.threshold, m.kind) == (182.80, "GB/s", None, "all_reduce 1G")  # the better placement
    assert m.last_size_bytes == 1 << 30
    assert "Avg bus bandwidth" in m.evidence and m.evidence.startswith("$ ")


def test_nccl_tests_below_the_pair_floor_is_short_and_names_the_key(site):
    floor = "  all_reduce: {pair: {busbw_min_gbytes_per_s: {1G: 200}}}\n"
    m = nccl(site, bandwidth=floor, sizes=("32M",))  # the floor's size is measured even when not asked
    assert (m.outcome, m.passed, m.value, m.threshold) == ("short", False, 182.80, 200)
    assert m.limit_key == "bandwidth.all_reduce.pair.busbw_min_gbytes_per_s.1G"
    assert m.why.startswith("gpu001,gpu002: all_reduce busbw 182.8 GB/s at 1G, below the pair floor 200")
    m = nccl(site, bandwidth=floor.replace("200", "150"))
    assert (m.outcome, m.passed, m.threshold) == ("passed", True, 150)


def test_nccl_tests_hang_is_evidence_with_the_last_size_reached(site):
    start = time.monotonic()
    m = nccl(site, "pair-hang", timeout=3)
    assert time.monotonic() - start < 20
    assert (m.outcome, m.passed, m.hung) == ("hung", False, True)
    assert m.last_size_bytes == 128 << 20 and m.value is None
    assert m.why.startswith("gpu001,gpu002: all_reduce_perf hung: stopped after ") and m.why.endswith("128M")
    assert len(m.samples) == 6  # the rows it printed


def test_nccl_tests_lone_ranks_are_a_misconfiguration_not_evidence(site):
    m = nccl(site, "pair-lone-ranks", gpus=2)
    assert (m.outcome, m.passed, m.hung) == ("misconfigured", None, False)
    assert "every rank ran alone" in m.why and m.why.startswith("gpu001,gpu002: ")


def test_nccl_tests_a_rank_count_other_than_members_times_gpus_is_a_misconfiguration(site):
    m = nccl(site, gpus=4)  # the 16-rank capture, 8 ranks started
    assert (m.outcome, m.passed) == ("misconfigured", None)
    assert "16 ranks reported, 8 expected" in m.why


def test_nccl_tests_failure_printed_by_another_rank_fails_the_pair_naming_its_host(site):
    m = nccl(site, "pair-nccl-failure", gpus=2)
    assert (m.outcome, m.passed) == ("failed", False)
    assert "fengyun: nccl: " in m.why and "internal error" in m.why
    assert "Exit code:    1" in m.evidence


def test_nccl_tests_wrong_elements_fail_the_pair(site):
    # the 8-rank capture with #wrong on its largest rows, from rank 0 only (as an MPI build prints)
    rank0 = site.tmp / "rank0"
    rank0.mkdir()
    (rank0 / "all_reduce_perf").write_text(
        f"#!/bin/sh\n[ \"$OMPI_COMM_WORLD_RANK\" = 0 ] || exit 0\nexec {NCCL_STANDINS}/all_reduce_perf \"$@\"\n")
    (rank0 / "all_reduce_perf").chmod(0o755)
    m = nccl_tests_pair(site.config(scenario="wrong", bin_dir=rank0), MEMBERS, collective="all_reduce",
                        sizes=["1G"], gpus=4, timeout_s=60)
    assert (m.outcome, m.passed) == ("wrong", False), m.why
    assert m.why == "gpu001,gpu002: all_reduce_perf: 24 wrong or out-of-bounds values"


def test_nccl_tests_not_applicable_without_gpus_and_never_launched(site):
    m = nccl(site, gpus=0)
    assert (m.outcome, m.passed, m.why) == ("not-applicable", None, "gpu001,gpu002: no GPU to run nccl-tests on")
    assert site.mpiruns() == []


def test_nccl_tests_without_mpirun_or_the_binary_could_not_run(site, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    m = nccl(site)
    assert (m.outcome, m.passed) == ("not-run", None)
    assert m.why == "gpu001,gpu002: mpirun not found on this machine (Open MPI runs nccl-tests between nodes)"


def test_nccl_tests_binary_missing_on_a_member_names_that_member(site, monkeypatch):
    # what Open MPI 4.1's mpirun prints (captured here) when a rank's executable is not on the node
    banner = ("-" * 74 + "\nmpirun was unable to find the specified executable file, and therefore\n"
              "did not launch the job.  This error was first reported for process\n"
              "rank 8; it may have occurred for other processes as well.\n\n"
              "NOTE: A common cause for this error is misspelling a mpirun command\n"
              "      line parameter option (remember that mpirun interprets the first\n"
              "      unrecognized command line token as the executable).\n\n"
              "Node:       gpu002\nExecutable: all_reduce_perf\n" + "-" * 74 + "\n")
    (site.tmp / "bin" / "mpirun").write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{banner}EOF\nexit 134\n")
    m = nccl(site)
    assert (m.outcome, m.passed) == ("not-run", None)
    assert m.why.startswith(f"gpu002: all_reduce_perf (nccl-tests) not found in {NCCL_STANDINS}; set "
                            "bandwidth.nccl_tests.bin_dir")


def test_nccl_tests_never_raises(site, monkeypatch):
    def boom(*_a, **_k):
        raise RuntimeError("launcher exploded")

    monkeypatch.setattr("healthcheck.orchestrate.pairsweep.tools.launch", boom)
    m = nccl(site)
    assert (m.outcome, m.passed) == ("not-run", None)
    assert m.why == "gpu001,gpu002: nccl-tests: RuntimeError: launcher exploded"


# ------------------------------------------------------------------------------ ib_write_bw


class FakeConnection:
    """SshConnection's surface, running commands here (the perftest stand-in first on PATH);
    ibstat answers from IBSTAT[node]; sysfs reads fail (NUMA unknown) and numactl is missing."""

    IBSTAT: dict[str, str] = {}
    UNREACHABLE: set[str] = set()
    PATHS: dict[str, str] = {}  # node -> PATH, where it differs
    opened: list[FakeConnection] = []

    def __init__(self, node, settings) -> None:
        self.node = node
        self.runner = LocalRunner(env={"PATH": self.PATHS.get(node, f"{PERFTEST_STANDINS}:/usr/bin:/bin")})
        self.commands: list[tuple[str, ...]] = []
        self.closed = False
        FakeConnection.opened.append(self)

    def connect(self) -> None:
        if self.node in self.UNREACHABLE:
            raise SshError(SshErrorKind.REFUSED, f"{self.node} (127.0.0.1:22): connection refused")

    def run(self, argv, *, timeout_s, input=None, env=None, cwd=None) -> CommandResult:
        argv = tuple(argv)
        self.commands.append(argv)
        if argv[0] == "ibstat":
            return CommandResult(argv, 0, self.IBSTAT[self.node], "", 0.01)
        if argv[0] in ("cat", "ls"):
            return CommandResult(argv, 1, "", f"{argv[0]}: {argv[-1]}: No such file or directory\n", 0.01)
        if argv[0] == "numactl":
            return CommandResult(argv, 127, "", "", 0.0, not_found=True)
        return self.runner.run(argv, timeout_s=timeout_s, env=env)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def ssh(monkeypatch, tmp_path):
    monkeypatch.setattr("healthcheck.orchestrate.pairsweep.tools.SshConnection", FakeConnection)
    # the servers' pid files in this test's own directory, not /tmp: a test running beside
    # this one (an xdist worker, the rig's) has its own there, and each asserts it left none
    (tmp_path / "pids").mkdir()
    monkeypatch.setattr("healthcheck.orchestrate.pairsweep.tools._PID_DIR", str(tmp_path / "pids"))
    FakeConnection.IBSTAT = {n: ibstat("mlx5_0", "mlx5_1") for n in MEMBERS}
    FakeConnection.UNREACHABLE = set()
    FakeConnection.PATHS = {}
    FakeConnection.opened = []
    return FakeConnection


def ib(site: Site, scenario: str = "healthy", *, timeout: float = 30, ib_write_bw: str = "", test_timeout: float = 60,
       bandwidth: str = ""):
    return ib_write_bw_pair(site.config(scenario=scenario, ib_write_bw=ib_write_bw, timeout=timeout,
                                        bandwidth=bandwidth), MEMBERS, timeout_s=test_timeout)


def pid_files(site: Site) -> set[str]:
    return {p.name for p in (site.tmp / "pids").glob("hc-ib_write_bw-*.pid")}


def test_ib_write_bw_server_on_the_first_member_client_on_the_second_per_hca(site, ssh):
    before = pid_files(site)
    m = ib(site)
    assert (m.tool, m.members, m.outcome, m.passed, m.hung, m.why) == ("ib_write_bw", MEMBERS, "passed", True, False, "")
    assert [(h.hca, h.gbits, h.floor_gbps, h.outcome, h.failure) for h in m.hcas] == [
        ("mlx5_0/1", HDR_LOOPBACK_GBITS, 180.0, "passed", None), ("mlx5_1/1", HDR_LOOPBACK_GBITS, 180.0, "passed", None)]
    assert m.value == pytest.approx(HDR_LOOPBACK_GBITS / 180.0, abs=1e-6)
    assert (m.unit, m.threshold, m.kind) == ("x floor", 1.0, "ib_write_bw 8M")
    assert m.limit_key == "bandwidth.ib_write_bw.rate_fraction"
    server, client = ssh.opened
    assert (server.node, client.node) == MEMBERS and server.closed and client.closed
    calls = site.calls()
    servers = {c["argv"][2]: c["argv"] for c in calls if c["side"] == "server"}
    clients = {c["argv"][2]: c["argv"] for c in calls if c["side"] == "client"}
    base = int(servers["mlx5_0"][servers["mlx5_0"].index("-p") + 1])
    for i, device in enumerate(["mlx5_0", "mlx5_1"]):
        assert servers[device] == ["ib_write_bw", "-d", device, "-i", "1", "-p", str(base + i), "-F",
                                   "--report_gbits", "-s", "8388608", "-n", "5000"]
        assert clients[device] == servers[device] + ["127.0.0.1"]  # members[0]'s address from the ssh config
    # the servers ran on the first member's connection, the clients on the second's
    assert all(c[0] == "sh" and "ib_write_bw" in c for c in server.commands if "-d" in c)
    assert all(c[0] == "ib_write_bw" and c[-1] == "127.0.0.1" for c in client.commands if "-d" in c)
    assert any(c[:2] == ("sh", "-c") and "hc-stop" in c for c in server.commands)  # pid files cleaned up
    assert pid_files(site) == before
    assert any("unpinned: the HCA's NUMA node is unknown" in n for n in m.notes)


def test_ib_write_bw_options_from_the_fabric(site, ssh):
    m = ib(site, ib_write_bw="    qps: 4\n    bidirectional: true\n    gid_index: 3\n    size: 1M\n    iters: 100\n")
    server = next(c["argv"] for c in site.calls() if c["side"] == "server")
    assert server[-9:] == ["-s", str(1 << 20), "-n", "100", "-q", "4", "-b", "-x", "3"]
    assert m.kind == "ib_write_bw 1M"
    # the stand-in's capture is at 8M: nothing at 1M is no verdict
    assert (m.outcome, m.passed) == ("not-run", None)
    assert {h.floor_gbps for h in m.hcas} == {360.0}  # 0.9 x 200 x2 bidirectional


def test_ib_write_bw_slow_port_is_short_and_named(site, ssh):
    m = ib(site, "mlx5_1:slow,healthy")
    assert (m.outcome, m.passed) == ("short", False)
    assert [h.outcome for h in m.hcas] == ["passed", "short"]
    assert m.value == pytest.approx(m.hcas[1].gbits / 180.0, abs=1e-6) and m.value < 1
    assert m.why.startswith("mlx5_1/1: gpu001,gpu002: ") and "floor 180 Gb/s" in m.why


def test_ib_write_bw_floor_from_the_slower_port_or_per_hca_min(site, ssh):
    ssh.IBSTAT["gpu002"] = ibstat("mlx5_0:Active:400", "mlx5_1:Active:100")
    m = ib(site)
    assert [(h.hca, h.floor_gbps) for h in m.hcas] == [("mlx5_0/1", 180.0), ("mlx5_1/1", 90.0)]
    m = ib(site, ib_write_bw="    per_hca_min_gbps: 250\n")
    assert {h.floor_gbps for h in m.hcas} == {250} and m.outcome == "short"
    assert m.limit_key == "bandwidth.ib_write_bw.per_hca_min_gbps"


def test_ib_write_bw_client_is_started_again_until_the_server_listens(site, ssh):
    m = ib(site, "connect-retry")
    assert (m.outcome, m.passed) == ("passed", True)
    assert re.search(r"--- client on gpu002 \(start [2-9]\d*\): ", m.evidence), m.evidence


def test_ib_write_bw_hang_is_evidence(site, ssh):
    before = pid_files(site)
    start = time.monotonic()
    m = ib(site, "hang", timeout=3)
    assert time.monotonic() - start < 25
    assert (m.outcome, m.passed, m.hung) == ("hung", False, True)
    assert "ib_write_bw hung: stopped after" in m.why
    assert pid_files(site) == before


def test_ib_write_bw_completion_error_fails_the_pair_naming_the_client(site, ssh):
    m = ib(site, "completion-error")
    assert (m.outcome, m.passed) == ("failed", False)
    assert m.why.startswith("mlx5_0/1: gpu002: ib_write_bw failed: ") and "(completion-error)" in m.why


def test_ib_write_bw_server_that_cannot_listen_is_no_verdict_naming_the_server(site, ssh, monkeypatch):
    monkeypatch.setattr("healthcheck.probes.ib_write_bw.CONNECT_WINDOW_S", 1.0)
    m = ib(site, "port-taken")
    assert (m.outcome, m.passed) == ("not-run", None)
    assert m.why.startswith("mlx5_0/1: gpu001: ib_write_bw could not run: Couldn't listen to port")


def test_ib_write_bw_server_whose_client_never_connects_is_killed_by_pid(site, ssh, monkeypatch):
    monkeypatch.setattr("healthcheck.probes.ib_write_bw.CONNECT_WINDOW_S", 1.0)
    refusing = site.tmp / "refusing"
    refusing.mkdir()
    (refusing / "ib_write_bw").write_text(
        "#!/bin/sh\ncase \"$*\" in *--version*) echo 'Version: 6.06'; exit 1;; esac\n"
        "for last; do :; done\necho \"Couldn't connect to $last:1\" >&2\necho ' Unable to init the socket connection' >&2\n"
        "exit 1\n")
    (refusing / "ib_write_bw").chmod(0o755)
    ssh.PATHS["gpu002"] = f"{refusing}:/usr/bin:/bin"
    before = pid_files(site)
    start = time.monotonic()
    m = ib(site, timeout=40)
    took = time.monotonic() - start
    assert took < 20, took  # not the servers' 40 s timeout: stopped by pid once the clients gave up
    assert (m.outcome, m.passed) == ("not-run", None)
    assert "Couldn't connect to 127.0.0.1" in m.why and "client starts" in m.why
    # each server was stopped by SIGTERM from hc (here, with no SSH wrapper, the signal itself)
    assert m.evidence.count("--- server on gpu001: $ sh -c") == 2 and m.evidence.count("(exit -15)") == 2
    assert pid_files(site) == before


def test_ib_write_bw_ports_active_on_one_member_only_are_noted_not_tested(site, ssh):
    ssh.IBSTAT["gpu002"] = ibstat("mlx5_0", "mlx5_1:Down")
    m = ib(site)
    assert [h.hca for h in m.hcas] == ["mlx5_0/1"] and m.outcome == "passed"
    assert "gpu001: mlx5_1/1 is Active here only, not tested" in m.notes


def test_ib_write_bw_no_compute_hca_is_not_applicable_none_in_common_not_run(site, ssh):
    ssh.IBSTAT = {n: "" for n in MEMBERS}
    m = ib(site)
    assert (m.outcome, m.passed, m.why) == ("not-applicable", None,
                                            "gpu001,gpu002: no compute HCA port on either member")
    ssh.IBSTAT = {"gpu001": ibstat("mlx5_0"), "gpu002": ibstat("mlx5_0:Down")}
    m = ib(site)
    assert (m.outcome, m.passed) == ("not-run", None)
    assert m.why == "gpu001,gpu002: no compute HCA port is Active on both members"


def test_ib_write_bw_unreachable_member_or_missing_perftest_is_named(site, ssh):
    ssh.UNREACHABLE = {"gpu002"}
    m = ib(site)
    assert (m.outcome, m.passed, m.why) == ("not-run", None, "gpu002: gpu002 (127.0.0.1:22): connection refused")
    assert all(c.closed for c in ssh.opened)
    ssh.UNREACHABLE = set()
    ssh.PATHS["gpu002"] = "/usr/bin/nonexistent"
    m = ib(site)
    assert (m.outcome, m.passed) == ("not-run", None)
    assert m.why.startswith("gpu002: ib_write_bw (perftest) not found in the PATH of an SSH session on the node")
    assert site.calls() == []  # nothing started


def test_ib_write_bw_needs_two_members_and_never_raises(site, ssh, monkeypatch):
    m = ib_write_bw_pair(site.config(), ("gpu001",), timeout_s=10)
    assert (m.outcome, m.passed) == ("not-run", None) and "exactly two nodes" in m.why

    def boom(*_a, **_k):
        raise RuntimeError("no address")

    monkeypatch.setattr("healthcheck.orchestrate.pairsweep.tools.resolve_target", boom)
    m = ib(site)
    assert (m.outcome, m.why) == ("not-run", "gpu001,gpu002: ib_write_bw: RuntimeError: no address")


def counters_of(readings):
    """`_Node.counters` answering from readings[node]: one dict per call (before, then after) for
    every port, or a str (why the counters could not be read)."""
    seen: dict[str, int] = {}

    def counters(self, ports):
        node = self.ctx.runner.node
        n = seen.get(node, 0)
        seen[node] = n + 1
        return {p.name: readings[node][min(n, len(readings[node]) - 1)] for p in ports}

    return counters


def test_ib_write_bw_counter_rise_above_the_limit_fails_naming_member_port_counter(site, ssh, monkeypatch):
    monkeypatch.setattr("healthcheck.probes.ib_write_bw.HcaNode.counters", counters_of({
        "gpu001": [{"symbol_error": 3, "link_downed": 0}] * 2,
        "gpu002": [{"symbol_error": 3, "link_downed": 0}, {"symbol_error": 15, "link_downed": 0}]}))
    m = ib(site, bandwidth="  counters_max_rise: {symbol_error: 10}\n")
    assert (m.outcome, m.passed) == ("failed", False)
    assert [(h.outcome, h.counter_rises, h.counters_unknown) for h in m.hcas] == [
        ("failed", {"gpu002": {"symbol_error": 12}}, None)] * 2
    assert m.hcas[0].failure == ("gpu002: mlx5_0/1 symbol_error rose by 12 during the ib_write_bw test, more than "
                                 "10 (bandwidth.counters_max_rise.symbol_error)")
    assert m.why.startswith("mlx5_0/1: gpu002: mlx5_0/1 symbol_error rose by 12") and "(and 1 more ports)" in m.why
    assert m.hcas[0].gbits == HDR_LOOPBACK_GBITS  # measured all the same


def test_ib_write_bw_counter_rise_within_the_limit_passes_and_is_recorded(site, ssh, monkeypatch):
    monkeypatch.setattr("healthcheck.probes.ib_write_bw.HcaNode.counters", counters_of({
        "gpu001": [{"port_rcv_errors": 1}, {"port_rcv_errors": 3}],
        "gpu002": [{"port_rcv_errors": 5}, {"port_rcv_errors": 0}]}))  # went down: reset meanwhile, no rise
    m = ib(site, bandwidth="  counters_max_rise: {port_rcv_errors: 2}\n")
    assert (m.outcome, m.passed, m.why) == ("passed", True, "")
    assert [(h.outcome, h.counter_rises, h.counters_unknown) for h in m.hcas] == [
        ("passed", {"gpu001": {"port_rcv_errors": 2}}, None)] * 2
    assert not any("counters" in n for n in m.notes)


def test_ib_write_bw_unreadable_counters_are_noted_never_a_failure(site, ssh, monkeypatch):
    monkeypatch.setattr("healthcheck.probes.ib_write_bw.HcaNode.counters", counters_of({
        "gpu001": [{"symbol_error": 0}] * 2,
        "gpu002": [{"symbol_error": 0}, "no counters for mlx5_0/1: /sys unreadable"]}))
    m = ib(site, bandwidth="  counters_max_rise: {symbol_error: 0}\n")
    assert (m.outcome, m.passed) == ("passed", True)
    assert [(h.outcome, h.counter_rises, h.counters_unknown) for h in m.hcas] == [
        ("passed", {}, "gpu002: after the test: no counters for mlx5_0/1: /sys unreadable")] * 2
    assert "mlx5_0/1: error counters unknown, bandwidth.counters_max_rise not judged: gpu002: after the test: " \
           "no counters for mlx5_0/1: /sys unreadable" in m.notes

    def boom(self, ports):
        raise OSError("connection reset")

    monkeypatch.setattr("healthcheck.probes.ib_write_bw.HcaNode.counters", boom)
    m = ib(site)
    assert (m.outcome, m.passed) == ("passed", True)
    assert m.hcas[0].counters_unknown == ("gpu001: before the test: OSError: connection reset; "
                                          "gpu002: before the test: OSError: connection reset")
