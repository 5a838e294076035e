"""The deep tier's ib_write_bw loopback per compute HCA port (bw.ib_write_bw): a fake
/sys/class/infiniband tree, and perftest through a stand-in that replays real captures
and speaks perftest's TCP side channel (tests/standins/perftest/ib_write_bw), found on
PATH by hc's real runner; and Debian's real ib_write_bw, which finds no device here."""

from __future__ import annotations

import json
import random
import shutil
import socket
from pathlib import Path

import pytest
from support import make_fake_sysfs_ib, write_stub

from healthcheck.core.config.loader import load_config
from healthcheck.core.facts import ProbeContext
from healthcheck.core.registry import select
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.runners.local import LocalRunner

STANDINS = Path(__file__).resolve().parents[2] / "standins" / "perftest"
CORPUS_IBSTAT = Path(__file__).resolve().parents[2] / "fixtures" / "corpus" / "ibstat"
CHECK = "bw.ib_write_bw"
HDR_LOOPBACK_GBITS = 201.802394  # 24056.72 MiB/s in the real HDR loopback capture
# perftest and python3 (the stand-ins' interpreter); the stand-ins come first
PATH = f"{STANDINS}:/usr/bin:/bin"


def free_port_base(count: int = 8) -> int:
    """A side-channel port base with `count` ports free now (tests may run beside each other),
    below Linux's ephemeral range (32768-): a port from there could be any connection's source
    port by the time the stand-in binds it (the rig's ssh, other workers' tests)."""
    for _ in range(50):
        base = random.randrange(10_000, 18_000)  # nor the default port_base 18515, nor torch's 20000-
        ok = True
        for port in range(base, base + count):
            with socket.socket() as s:
                try:
                    s.bind(("0.0.0.0", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free ports")


class Node:
    """A node under tmp_path: its root (fake sysfs), its fabric, and what the stand-ins logged."""

    def __init__(self, tmp_path: Path, hcas: list[str] | None = None, rate: int = 200) -> None:
        self.tmp = tmp_path
        self.root = tmp_path / "root"
        self.root.mkdir(parents=True)
        if hcas is None:
            hcas = ["mlx5_0", "mlx5_1"]
        if hcas:
            make_fake_sysfs_ib(self.root, [h if ":" in h else f"{h}:Active:LinkUp:{rate}" for h in hcas])
        self.sysfs = self.root / "sys/class/infiniband"
        self.log = tmp_path / "calls.jsonl"

    def fabric(self, scenario: str = "healthy", *, repeats: int = 2, timeout: float = 20, ib_write_bw: str = "",
               bandwidth: str = "", ib: str = "", env: str = "") -> str:
        envs = (f"{{HC_STANDIN_SCENARIO: '{scenario}', HC_STANDIN_LOG: {self.log}, HC_STANDIN_STATE: "
                f"{self.tmp}/state, HC_STANDIN_SYSFS: {self.sysfs}{', ' + env if env else ''}}}")
        text = "extends: generic\n"
        if ib:
            text += f"ib: {ib}\n"
        text += (f"bandwidth:\n  repeats: {repeats}\n{bandwidth}"
                 f"  nccl_tests: {{enabled: false}}\n  torch: {{enabled: false}}\n"
                 f"  ib_write_bw:\n    port_base: {free_port_base()}\n    timeout_s: {timeout}\n"
                 f"    env: {envs}\n{ib_write_bw}")
        return text

    def config(self, fabric: str):
        fabrics = self.tmp / "fabrics"
        fabrics.mkdir(exist_ok=True)
        (fabrics / "node.yaml").write_text(fabric)
        cfg = self.tmp / "hc.yaml"
        cfg.write_text(f"fabric_dirs: [{fabrics}]\nnodes:\n  'gpu[001-009]': node\n")
        return load_config(cfg).for_node("gpu001")

    def ctx(self, path: str = PATH, transport: str = "local", fabric: str | None = None) -> ProbeContext:
        limits = self.config(fabric).limits if fabric is not None else None
        return ProbeContext(runner=LocalRunner(env={"PATH": path}), root=self.root, timeout_s=120,
                            transport=transport, limits=limits)

    def run(self, fabric: str, path: str = PATH, transport: str = "local"):
        result, abandoned = run_checks(self.config(fabric), select("deep", [CHECK]), self.ctx(path, transport))
        assert not abandoned
        return result

    def calls(self, side: str | None = None) -> list[dict]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [c for c in map(json.loads, lines) if side is None or c["side"] == side]


def status(result) -> Status:
    return next(c.status for c in result.checks if c.name == CHECK)


def found(result) -> list[tuple[str, Status, str]]:
    return sorted((f.id, f.status, f.component) for f in result.findings if f.check == CHECK)


def loopback(node: Node, fabric: str, path: str = PATH):
    """The fact itself, from the provider (for what the check does not show)."""
    from healthcheck.probes.ib_write_bw import ib_write_bw_loopback

    return ib_write_bw_loopback(node.ctx(path, fabric=fabric))


# ------------------------------------------------------------------ verdicts


def test_healthy_ports_pass_with_a_metric_each_and_the_command_lines_hc_promises(tmp_path):
    node = Node(tmp_path)
    fabric = node.fabric()
    result = node.run(fabric)
    assert status(result) is Status.PASS, result.findings
    metrics = {m.component: (m.value, m.unit) for m in result.metrics if m.name == "bw_gbps"}
    assert metrics == {"mlx5_0/1": (HDR_LOOPBACK_GBITS, "Gb/s"), "mlx5_1/1": (HDR_LOOPBACK_GBITS, "Gb/s")}
    servers = {c["argv"][2]: c["argv"] for c in node.calls("server")}
    assert sorted(servers) == ["mlx5_0", "mlx5_1"]  # one attempt each: the floor was met
    base = int(servers["mlx5_0"][servers["mlx5_0"].index("-p") + 1])
    for i, device in enumerate(["mlx5_0", "mlx5_1"]):
        argv = servers[device]
        assert argv[:13] == ["ib_write_bw", "-d", device, "-i", "1", "-p", str(base + i), "-F", "--report_gbits",
                             "-s", "8388608", "-n", "5000"]
        assert "-b" not in argv and not any(a.startswith("--use_cuda") for a in argv)
    for call in node.calls("client"):  # the same options, then the host
        device = call["argv"][2]
        assert call["argv"] == servers[device] + ["localhost"]


def test_below_the_floor_fails_only_after_every_repeat_fell_short(tmp_path):
    node = Node(tmp_path)
    result = node.run(node.fabric("slow", repeats=3))
    assert found(result) == [("bw.E010", Status.FAIL, "mlx5_0/1"), ("bw.E010", Status.FAIL, "mlx5_1/1")]
    f = next(f for f in result.findings if f.component == "mlx5_0/1")
    assert f.value == pytest.approx(HDR_LOOPBACK_GBITS / 2, abs=0.01) and f.unit == "Gb/s"
    # no per_hca_min_gbps: NVIDIA's rule, 0.9 x the port's sysfs rate (200 Gb/s)
    assert (f.limit.op, f.limit.value, f.limit.key) == (">=", 180.0, "bandwidth.ib_write_bw.rate_fraction")
    assert "0.9 x 200 Gb/s port rate" in f.message and f.subject == "gpu001:mlx5_0/1"
    assert [c["argv"][2] for c in node.calls("server")].count("mlx5_0") == 3


def test_a_shortfall_that_does_not_repeat_passes(tmp_path):
    node = Node(tmp_path)
    result = node.run(node.fabric("slow-then-healthy", repeats=2))
    assert status(result) is Status.PASS, result.findings
    assert [c["argv"][2] for c in node.calls("server")].count("mlx5_0") == 2
    again = Node(tmp_path / "again", hcas=["mlx5_0"])
    (hca,) = loopback(again, again.fabric("slow-then-healthy")).hcas
    assert [a.avg_gbits for a in hca.attempts] == [pytest.approx(HDR_LOOPBACK_GBITS / 2, abs=0.01),
                                                    HDR_LOOPBACK_GBITS]
    assert (hca.floor_gbps, hca.floor_setting, hca.rate_gbps) == (180.0, "rate_fraction", 200.0)


def test_the_floor_is_per_hca_min_gbps_when_set_and_doubles_from_the_rate_when_bidirectional(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0"])
    result = node.run(node.fabric(ib_write_bw="    per_hca_min_gbps: 250\n"))
    (f,) = [f for f in result.findings if f.check == CHECK]
    assert (f.id, f.status, f.limit.key, f.limit.value) == (
        "bw.E010", Status.FAIL, "bandwidth.ib_write_bw.per_hca_min_gbps", 250.0)
    assert f.limit.source and "node.yaml" in f.limit.source
    # -b sums both directions: the rate-derived floor doubles (0.9 x 200 x 2 = 360)
    other = Node(tmp_path / "bidir", hcas=["mlx5_0"])
    result = other.run(other.fabric(ib_write_bw="    bidirectional: true\n"))
    (f,) = [f for f in result.findings if f.check == CHECK]
    assert (f.id, f.limit.value, f.limit.key) == ("bw.E010", 360.0, "bandwidth.ib_write_bw.rate_fraction")
    assert "x2 bidirectional" in f.message
    assert all("-b" in c["argv"] for c in other.calls("server"))


def test_the_client_is_started_again_while_its_server_is_not_listening_yet(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0"])
    fabric = node.fabric("connect-retry")
    result = node.run(fabric)
    assert status(result) is Status.PASS, result.findings
    assert len(node.calls("client")) >= 2 and len(node.calls("server")) == 1
    fact = loopback(node, fabric)
    (attempt,) = fact.hcas[0].attempts
    assert attempt.connect_tries >= 2 and attempt.avg_gbits == HDR_LOOPBACK_GBITS and not attempt.failures


def test_a_server_that_cannot_listen_is_error_after_the_client_gave_up(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0"])
    result = node.run(node.fabric("port-taken"))
    (f,) = [f for f in result.findings if f.check == CHECK]
    assert (f.id, f.status, f.component) == ("bw.E012", Status.ERROR, "mlx5_0/1")
    assert "Couldn't listen to port" in f.evidence and "Couldn't connect to localhost" in f.evidence
    assert status(result) is Status.ERROR


def test_modify_qp_to_rtr_fails_the_port_with_perftests_lines(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0"])
    result = node.run(node.fabric("rtr", repeats=3))
    (f,) = [f for f in result.findings if f.check == CHECK]
    assert (f.id, f.status, f.component) == ("bw.E011", Status.FAIL, "mlx5_0/1")
    assert "Failed to modify QP 122273 to RTR" in f.message and f.value == "modify-qp"
    assert "Unable to Connect the HCA's through the link" in f.evidence
    assert len(node.calls("server")) == 1  # a failure is not re-run


def test_a_completion_error_fails_the_port(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0"])
    result = node.run(node.fabric("completion-error"))
    (f,) = [f for f in result.findings if f.check == CHECK]
    assert (f.id, f.status, f.value) == ("bw.E011", Status.FAIL, "completion-error")
    assert "Failed status 4: wr_id 0 syndrom 0x51" in f.evidence


def test_perftest_missing_is_error_naming_where_hc_looked(tmp_path):
    node = Node(tmp_path)
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = node.run(node.fabric(), path=str(empty))
    assert status(result) is Status.ERROR
    (f,) = [f for f in result.findings if f.check == CHECK]
    assert (f.id, f.status) == ("bw.E012", Status.ERROR)
    assert "ib_write_bw (perftest) not found" in f.message and str(empty) in f.message


def test_a_hang_fails_with_what_it_printed_and_is_not_run_again(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0"])
    result = node.run(node.fabric("hang", timeout=2, repeats=3))
    (f,) = [f for f in result.findings if f.check == CHECK]
    assert (f.id, f.status, f.component) == ("bw.E014", Status.FAIL, "mlx5_0/1")
    assert "hung" in f.message and "killed at its timeout" in f.evidence
    assert "RDMA_Write BW Test" in f.evidence and "Waiting for client to connect" in f.evidence
    assert len(node.calls("server")) == 1


def test_error_counters_rising_during_the_test_fail_the_port_and_are_told_with_other_findings(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0", "mlx5_1"])
    limits = "  counters_max_rise: {symbol_error: 2, link_downed: 0}\n"
    result = node.run(node.fabric("mlx5_1:slow,healthy", bandwidth=limits,
                                  env="HC_STANDIN_COUNTERS: 'symbol_error=5,port_rcv_errors=1'"))
    assert found(result) == [("bw.E010", Status.FAIL, "mlx5_1/1"),
                             ("bw.E013", Status.FAIL, "mlx5_0/1:symbol_error"),
                             ("bw.E013", Status.FAIL, "mlx5_1/1:symbol_error")]
    rose = next(f for f in result.findings if f.component == "mlx5_0/1:symbol_error")
    assert rose.value == 5 and (rose.limit.key, rose.limit.value) == ("bandwidth.counters_max_rise.symbol_error", 2)
    assert rose.limit.source and "node.yaml" in rose.limit.source
    slow = next(f for f in result.findings if f.id == "bw.E010")
    # the slow port ran twice (repeats: 2): every rise over both attempts is told with its shortfall
    assert "symbol_error +10" in slow.message and "port_rcv_errors +2" in slow.message
    # a rise without a limit (port_rcv_errors) fails nothing by itself
    assert not [f for f in result.findings if "port_rcv_errors" in f.component]


def test_a_node_without_compute_hcas_or_with_the_test_off_skips(tmp_path):
    node = Node(tmp_path, hcas=[])
    result = node.run(node.fabric())
    assert status(result) is Status.SKIP and node.calls() == []
    assert "no compute HCA" in next(c.reason for c in result.checks if c.name == CHECK)
    # HCAs, but none of them compute ones (the fabric wants MT4129, these are MT4125)
    other = Node(tmp_path / "frontend", hcas=["mlx5_0:Active:LinkUp:100:Ethernet:MT4125"])
    assert status(other.run(other.fabric(ib="{hca_types: [MT4129]}"))) is Status.SKIP
    off = Node(tmp_path / "off")
    result = off.run(off.fabric(ib_write_bw="    enabled: false\n"))
    assert status(result) is Status.SKIP and off.calls() == []


def test_ports_not_active_are_recorded_not_tested(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0:Active:LinkUp:200", "mlx5_1:Down:Polling:200"])
    fabric = node.fabric()
    result = node.run(fabric)
    assert status(result) is Status.PASS and [c["argv"][2] for c in node.calls("server")] == ["mlx5_0"]
    assert loopback(node, fabric).skipped == ("mlx5_1/1: Down/Polling",)
    down = Node(tmp_path / "down", hcas=["mlx5_1:Down:Polling:200"])
    result = down.run(down.fabric())
    assert status(result) is Status.SKIP
    assert "mlx5_1/1: Down/Polling" in next(c.reason for c in result.checks if c.name == CHECK)


# ------------------------------------------------------- how it runs the tool


def _numa(node: Node, hca_nodes: dict[str, int], gpus: dict[str, int]) -> None:
    for hca, numa in hca_nodes.items():
        (node.sysfs / hca / "device").mkdir(parents=True, exist_ok=True)
        (node.sysfs / hca / "device" / "numa_node").write_text(f"{numa}\n")
    for bus_id, numa in gpus.items():
        (node.root / "proc/driver/nvidia/gpus" / bus_id).mkdir(parents=True)
        pci = node.root / "sys/bus/pci/devices" / bus_id
        pci.mkdir(parents=True)
        (pci / "numa_node").write_text(f"{numa}\n")


def test_both_sides_are_pinned_to_the_hcas_numa_node_and_use_a_gpu_of_that_node(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0", "mlx5_1", "mlx5_2"])
    # GPUs in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID): 0 and 1 on node 0, 2 and 3 on node 1
    _numa(node, {"mlx5_0": 1, "mlx5_1": 0, "mlx5_2": -1},
          {"0000:18:00.0": 0, "0000:2a:00.0": 0, "0000:9a:00.0": 1, "0000:ab:00.0": 1})
    fabric = node.fabric(ib_write_bw="    use_cuda: true\n")
    fact = loopback(node, fabric)
    by = {h.device: h for h in fact.hcas}
    assert (by["mlx5_0"].gpu, by["mlx5_0"].numa_node, by["mlx5_0"].pinned) == (2, 1, True)
    assert (by["mlx5_1"].gpu, by["mlx5_1"].numa_node, by["mlx5_1"].pinned) == (0, 0, True)
    # NUMA node unknown: unpinned, and the GPU is the HCA's index, both said
    assert (by["mlx5_2"].gpu, by["mlx5_2"].numa_node, by["mlx5_2"].pinned) == (2, None, False)
    assert any("chosen by the HCA's index" in n for n in by["mlx5_2"].notes)
    assert any("unpinned" in n for n in by["mlx5_2"].notes)
    attempt = by["mlx5_0"].attempts[0]
    assert attempt.server_argv[:5] == ("numactl", "-N", "1", "-m", "1") and "--use_cuda=2" in attempt.server_argv
    assert attempt.client_argv == (*attempt.server_argv, "localhost")
    assert attempt.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert {c["env"].get("CUDA_DEVICE_ORDER") for c in node.calls("server")} == {"PCI_BUS_ID"}
    assert all(h.attempts[0].avg_gbits == HDR_LOOPBACK_GBITS for h in fact.hcas)


def test_numactl_refusing_the_node_runs_unpinned_and_says_why(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0"])
    _numa(node, {"mlx5_0": 3}, {})
    fact = loopback(node, node.fabric(env="HC_STANDIN_NUMACTL: fail"))
    (hca,) = fact.hcas
    assert not hca.pinned and hca.attempts[0].server_argv[0] == "ib_write_bw"
    assert any("numactl -N 3 -m 3 true` failed: libnuma: Warning: node argument 3 is out of range" in n
               for n in hca.notes)


def test_use_cuda_without_a_gpu_is_error_not_a_verdict(tmp_path):
    node = Node(tmp_path, hcas=["mlx5_0"])
    result = node.run(node.fabric(ib_write_bw="    use_cuda: true\n"))
    (f,) = [f for f in result.findings if f.check == CHECK]
    assert (f.id, f.status) == ("bw.E012", Status.ERROR) and "no GPU" in f.message
    assert node.calls("server") == []


def test_agentless_runs_every_command_through_the_runner(tmp_path):
    """Over SSH the ports come from ibstat and files are read with cat/ls; here the "SSH"
    runner is a local one, so the node's files are this machine's (no NUMA, no counters)."""
    node = Node(tmp_path, hcas=[])
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "ibstat", f"cat {CORPUS_IBSTAT / 'a100-ib-hdr200-all-active.txt'}\n")
    fabric = node.fabric(ib="{hcas: [mlx5_1, mlx5_2], link_layer: InfiniBand}")
    result = node.run(fabric, path=f"{bin_dir}:{PATH}", transport="ssh")
    assert status(result) is Status.PASS, result.findings
    assert {m.component for m in result.metrics if m.name == "bw_gbps"} == {"mlx5_1/1", "mlx5_2/1"}
    # a fabric that limits counter rises cannot be judged without the counters: ERROR, not PASS
    limited = node.fabric(ib="{hcas: [mlx5_1], link_layer: InfiniBand}",
                          bandwidth="  counters_max_rise: {symbol_error: 0}\n")
    result = node.run(limited, path=f"{bin_dir}:{PATH}", transport="ssh")
    assert [(f.id, f.status, f.component) for f in result.findings] == [
        ("hc.E001", Status.ERROR, "mlx5_1/1:counters")]


# -------------------------------------------------------------- the real tool


@pytest.mark.skipif(not Path("/usr/bin/ib_write_bw").exists(), reason="Debian's perftest is not installed")
def test_the_real_ib_write_bw_finding_no_device_is_error_never_a_verdict(tmp_path):
    """Debian's perftest on a machine without an HCA, asked to test the fake sysfs's
    mlx5_0: both sides print 'Did not detect devices' and exit 1. That says nothing about
    the node: ERROR (bw.E012), never FAIL, never PASS."""
    assert shutil.which("ib_write_bw", path="/usr/bin")
    node = Node(tmp_path, hcas=["mlx5_0"])
    result = node.run(node.fabric(), path="/usr/bin:/bin")
    assert status(result) is Status.ERROR
    (f,) = [f for f in result.findings if f.check == CHECK]
    assert (f.id, f.status, f.component) == ("bw.E012", Status.ERROR, "mlx5_0/1")
    assert "Did not detect devices" in f.message and "Unable to find the Infiniband/RoCE device" in f.evidence
    assert not [m for m in result.metrics if m.name == "bw_gbps"]
