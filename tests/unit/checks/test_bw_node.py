"""The deep tier on one node: nccl-tests (through a stand-in replaying real captures) and
hc's torch sweep (real, on gloo), judged per collective, scope and size, with repeats,
hang -> FAIL, wrong results -> FAIL and misconfiguration -> ERROR."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from healthcheck.core.config.loader import load_config
from healthcheck.core.facts import ProbeContext
from healthcheck.core.registry import select
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.runners.local import LocalRunner

STANDINS = Path(__file__).resolve().parents[2] / "standins" / "nccl-tests"


def node_root(tmp_path: Path, gpus: int) -> Path:
    root = tmp_path / "root"
    for i in range(gpus):
        (root / "proc/driver/nvidia/gpus" / f"0000:{i + 1:02x}:00.0").mkdir(parents=True)
    return root


def config(tmp_path: Path, bandwidth: str) -> Path:
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir(exist_ok=True)
    (fabrics / "node.yaml").write_text("extends: generic\nbandwidth:\n" + bandwidth)
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"fabric_dirs: [{fabrics}]\nnodes:\n  'gpu[001-009]': node\n")
    return cfg


def nccl_fabric(tmp_path: Path, scenario: str, floor: float = 228, repeats: int = 2, timeout: float = 30) -> str:
    return (f"  sizes: [8G]\n  repeats: {repeats}\n"
            f"  all_reduce:\n    single_node: {{busbw_min_gbytes_per_s: {{8G: {floor}}}}}\n"
            f"    ib_loopback: {{busbw_min_gbytes_per_s: {{8G: 18}}}}\n"
            f"  nccl_tests:\n    bin_dir: {STANDINS}\n    timeout_s: {timeout}\n"
            f"    env: {{HC_STANDIN_SCENARIO: {scenario}, HC_STANDIN_LOG: {tmp_path}/calls.jsonl,"
            f" HC_STANDIN_STATE: {tmp_path}/state, NCCL_IB_HCA: '=mlx5_0'}}\n"
            f"  torch: {{enabled: false}}\n")


def deep(tmp_path: Path, bandwidth: str, gpus: int = 8, only: str = "bw"):
    cfg = load_config(config(tmp_path, bandwidth))
    ctx = ProbeContext(runner=LocalRunner(), root=node_root(tmp_path, gpus), timeout_s=120)
    result, _ = run_checks(cfg.for_node("gpu001"), select("deep", [only]), ctx)
    return result


def findings(result, check: str) -> list[tuple[str, Status, str]]:
    return [(f.id, f.status, f.component) for f in result.findings if f.check == check]


def status(result, check: str) -> Status:
    return next(c.status for c in result.checks if c.name == check)


def calls(tmp_path: Path, *, help: bool = False) -> list[dict]:
    """The stand-in's runs (or, with help, its `-h` calls: hc asking whether it supports -J)."""
    path = tmp_path / "calls.jsonl"
    made = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [c for c in made if ("-h" in c["argv"]) == help]


@pytest.fixture(autouse=True)
def _forget_json_support():
    """Whether a binary supports -J is asked once per process: each test asks afresh."""
    from healthcheck.probes import bw

    bw._JSON_SUPPORT.clear()
    yield
    bw._JSON_SUPPORT.clear()


def test_healthy_node_passes_both_scopes_with_the_flags_and_env_hc_promises(tmp_path):
    result = deep(tmp_path, nccl_fabric(tmp_path, "healthy"))
    assert status(result, "bw.nccl") == Status.PASS, result.findings
    made = calls(tmp_path)
    assert len(made) == 2  # single node, then IB loopback; no repeat when the floor is met
    for call in made:
        argv = call["argv"]
        assert argv[0] == "all_reduce_perf"
        for flag, value in (("-g", "8"), ("-c", "1"), ("-a", "3"), ("-w", "5"), ("-n", "20"), ("-b", str(8 << 30))):
            assert argv[argv.index(flag) + 1] == value
        assert call["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and call["env"]["NCCL_IB_HCA"] == "=mlx5_0"
    assert [c["argv"] for c in calls(tmp_path, help=True)] == [["all_reduce_perf", "-h"]]  # asked once
    assert all("-J" not in c["argv"] for c in made)  # its usage lacks --output_file: the text table
    assert "NCCL_P2P_DISABLE" not in made[0]["env"]
    assert made[1]["env"]["NCCL_P2P_DISABLE"] == "1" and made[1]["env"]["NCCL_SHM_DISABLE"] == "1"
    busbw = {m.component: m.value for m in result.metrics if m.name == "busbw_gbytes_per_s"}
    assert busbw["all_reduce/single_node/8G"] == 235.26


def test_slow_node_fails_only_after_every_repeat_fell_short(tmp_path):
    result = deep(tmp_path, nccl_fabric(tmp_path, "slow", repeats=3))
    assert ("bw.E001", Status.FAIL, "all_reduce/single_node/8G") in findings(result, "bw.nccl")
    f = next(f for f in result.findings if f.id == "bw.E001" and "single_node" in f.component)
    assert f.value == 117.63 and f.limit.key == "bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s.8G"
    assert f.limit.source and "node.yaml" in f.limit.source
    assert len([c for c in calls(tmp_path) if "NCCL_P2P_DISABLE" not in c["env"]]) == 3


def test_a_shortfall_that_does_not_repeat_passes(tmp_path):
    result = deep(tmp_path, nccl_fabric(tmp_path, "slow-then-healthy", repeats=2))
    assert status(result, "bw.nccl") == Status.PASS, result.findings
    assert len(calls(tmp_path)) == 3  # slow, healthy again, then the IB loopback run


def test_wrong_results_fail_as_corruption(tmp_path):
    result = deep(tmp_path, nccl_fabric(tmp_path, "wrong"))
    assert ("bw.E002", Status.FAIL, "all_reduce/single_node") in findings(result, "bw.nccl")


def test_nccl_failure_fails_with_the_failure_line(tmp_path):
    result = deep(tmp_path, nccl_fabric(tmp_path, "nccl-failure"))
    (f,) = [f for f in result.findings if f.component == "all_reduce/single_node"]
    assert (f.id, f.status) == ("bw.E004", Status.FAIL)
    assert "common.cu" in f.message or "common.cu" in (f.evidence or "")


def test_hang_is_evidence_with_the_last_size_reached(tmp_path):
    result = deep(tmp_path, nccl_fabric(tmp_path, "hang", timeout=3))
    (f,) = [f for f in result.findings if f.component == "all_reduce/single_node"]
    assert (f.id, f.status) == ("bw.E003", Status.FAIL)
    assert "last size reached" in f.message and f.value and "all_reduce_perf" in (f.evidence or "")
    assert len(calls(tmp_path)) == 2  # a hang is not re-run; the loopback run still runs


def test_wrong_rank_count_is_error_never_fail(tmp_path):
    result = deep(tmp_path, nccl_fabric(tmp_path, "missing-ranks"))
    assert status(result, "bw.nccl") == Status.ERROR
    assert {i for i, s, _ in findings(result, "bw.nccl")} == {"bw.E005"}


def test_missing_binary_is_error_naming_where_hc_looked(tmp_path):
    fabric = nccl_fabric(tmp_path, "healthy").replace(str(STANDINS), str(tmp_path / "nowhere"))
    result = deep(tmp_path, fabric)
    assert status(result, "bw.nccl") == Status.ERROR
    (f,) = [f for f in result.findings if f.check == "bw.nccl"]
    assert f.id == "hc.E001" and str(tmp_path / "nowhere") in f.message


def test_a_floor_at_a_size_the_run_never_reached_is_error_not_pass(tmp_path):
    """The capture stops at 8G; a floor at 16G cannot be judged from it (bw.E006, ERROR), and
    the sizes it did measure still pass their own floors."""
    fabric = nccl_fabric(tmp_path, "healthy").replace("{8G: 228}", "{8G: 1, 16G: 228}")
    result = deep(tmp_path, fabric, gpus=8)
    assert ("bw.E006", Status.ERROR, "all_reduce/single_node/16G") in findings(result, "bw.nccl")
    assert not [f for f in findings(result, "bw.nccl") if f[1] is Status.FAIL]
    assert status(result, "bw.nccl") == Status.ERROR


def test_node_without_gpus_skips(tmp_path):
    result = deep(tmp_path, nccl_fabric(tmp_path, "healthy"), gpus=0)
    assert status(result, "bw.nccl") == Status.SKIP and calls(tmp_path) == []


def test_node_with_one_gpu_skips_what_would_measure_nothing(tmp_path):
    """On an H100 with one GPU, nccl-tests printed busbw 0 and in-place algbw of 1e+06 GB/s:
    a collective of one rank moves nothing, so neither single-node test gives a verdict."""
    fabric = nccl_fabric(tmp_path, "healthy").replace("torch: {enabled: false}", "torch: {backend: gloo}")
    result = deep(tmp_path, fabric, gpus=1)
    for check in ("bw.nccl", "bw.torch"):
        assert status(result, check) == Status.SKIP
        (c,) = [c for c in result.checks if c.name == check]
        assert "one GPU" in (c.reason or ""), c
    assert calls(tmp_path) == []


def torch_fabric(floor: float, env: str = "{}") -> str:
    return ("  sizes: [64K, 1M]\n  repeats: 1\n"
            f"  all_reduce:\n    single_node: {{busbw_min_gbytes_per_s: {{1M: {floor}}}}}\n"
            "  nccl_tests: {enabled: false}\n"
            f"  torch: {{backend: gloo, iters: 3, warmup: 1, timeout_s: 120, env: {env}}}\n")


@pytest.mark.slow
def test_torch_sweep_on_two_gloo_ranks_is_judged_like_nccl_tests(tmp_path):
    result = deep(tmp_path, torch_fabric(0.0001), gpus=2)
    assert status(result, "bw.torch") == Status.PASS, (result.findings, result.checks)
    comps = {m.component for m in result.metrics if m.name == "busbw_gbytes_per_s"}
    assert comps == {"all_reduce/single_node/64K", "all_reduce/single_node/1M"}
    # a floor no CPU reaches: FAIL at the judged size only
    (tmp_path / "slow").mkdir()
    slow = deep(tmp_path / "slow", torch_fabric(100000), gpus=2)
    assert [(i, s, c) for i, s, c in findings(slow, "bw.torch")] == [
        ("bw.E001", Status.FAIL, "all_reduce/single_node/1M")]


@pytest.mark.slow
def test_torch_sweep_wrong_results_fail(tmp_path):
    result = deep(tmp_path, torch_fabric(0.0001, env="{HC_BW_TEST_CORRUPT_RANK: '1'}"), gpus=2)
    assert ("bw.E002", Status.FAIL, "all_reduce/single_node") in findings(result, "bw.torch"), result.findings


def test_hc_node_local_deep_on_this_machine_exits_cleanly():
    """No GPU here: the deep tier's bandwidth checks skip, nothing hangs or errors."""
    from support import run_hc

    r = run_hc("node", "--local", "--tier", "deep", "--checks", "bw", "--format", "json", timeout=60)
    assert r.returncode in (0, 3), r.stderr
    report = json.loads(r.stdout)
    checks = {c["name"]: c["status"] for c in report["nodes"][0]["checks"]}
    assert checks["bw.nccl"] in ("SKIP", "ERROR") and checks["bw.torch"] in ("SKIP", "ERROR")
    assert sys.executable


# ------------------------------------------------------------------ -J (nccl-tests >= 2.17.3)

JSON_CAPTURE = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-tests" / "broadcast-h100-1gpu-2.19.6-J.json"
ONE_G = 1 << 30


def broadcast_fabric(tmp_path: Path) -> str:
    """The stand-in as broadcast_perf (a link of hc's test to it), scenario broadcast-1gpu."""
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "broadcast_perf").symlink_to(STANDINS / "replay.py")
    return nccl_fabric(tmp_path, "broadcast-1gpu").replace(str(STANDINS), str(bin_dir))


def broadcast_attempt(tmp_path: Path, json_mode: str | None):
    """One `_nccl_attempt` of the stand-in's 1-GPU broadcast on an H100 (text, and its -J file
    where HC_STANDIN_JSON says the binary has -J)."""
    from healthcheck.probes.bw import _nccl_attempt

    fabric = broadcast_fabric(tmp_path)
    if json_mode:
        fabric = fabric.replace("NCCL_IB_HCA:", f"HC_STANDIN_JSON: '{json_mode}', NCCL_IB_HCA:")
    cfg = load_config(config(tmp_path, fabric))
    ctx = ProbeContext(runner=LocalRunner(), timeout_s=60, limits=cfg.for_node("gpu001").limits)
    return _nccl_attempt(ctx, "broadcast", "single_node", 1, (1 << 20, ONE_G, 4), 30)


def placement(attempt, size: int, where: str):
    return next(s for s in attempt.samples if s.size_bytes == size and s.placement == where)


def test_nccl_tests_with_json_support_reads_the_exact_values_from_its_file(tmp_path):
    attempt = broadcast_attempt(tmp_path, "1")
    doc = json.loads(JSON_CAPTURE.read_text())
    # every sample is the JSON's, exactly: the table prints the 1G in-place algbw as 1e+06
    assert [(s.size_bytes, s.placement, s.algbw_gbytes_per_s, s.busbw_gbytes_per_s, s.time_us)
            for s in attempt.samples] == [
        (r["size"], p, r[k]["alg_bw"], r[k]["bus_bw"], r[k]["time"])
        for r in doc["results"] for p, k in (("out-of-place", "out_of_place"), ("in-place", "in_place"))]
    assert placement(attempt, ONE_G, "in-place").algbw_gbytes_per_s == 1320066.171625
    assert placement(attempt, 1 << 20, "out-of-place").busbw_gbytes_per_s == 184.08504  # text: 184.09
    assert (attempt.last_size_bytes, attempt.wrong, attempt.out_of_bounds, attempt.misconfigured) == (ONE_G, 0, 0, None)
    assert "Avg bus bandwidth" in attempt.output_tail  # the text stays the evidence
    (run,) = calls(tmp_path)
    argv = run["argv"]
    out = argv[argv.index("-J") + 1]
    assert attempt.argv[-2:] == ("-J", out) and Path(out).name.startswith("hc-nccl-tests-")
    assert not Path(out).exists()  # hc's temp file is gone
    # asked once per binary: a second run does not ask again
    broadcast_attempt(tmp_path, "1")
    assert len(calls(tmp_path, help=True)) == 1 and len(calls(tmp_path)) == 2


def test_nccl_tests_without_json_support_passes_no_J_and_reads_the_table(tmp_path):
    attempt = broadcast_attempt(tmp_path, None)
    assert [c["argv"] for c in calls(tmp_path, help=True)] == [["broadcast_perf", "-h"]]
    (run,) = calls(tmp_path)
    assert "-J" not in run["argv"] and "-J" not in attempt.argv
    assert placement(attempt, ONE_G, "in-place").algbw_gbytes_per_s == 1e6  # as the table rounds it
    assert placement(attempt, 1 << 20, "out-of-place").busbw_gbytes_per_s == 184.09


def test_nccl_tests_json_left_unclosed_falls_back_to_the_table(tmp_path):
    attempt = broadcast_attempt(tmp_path, "cut")
    (run,) = calls(tmp_path)
    out = run["argv"][run["argv"].index("-J") + 1]
    assert not Path(out).exists()
    assert placement(attempt, ONE_G, "in-place").algbw_gbytes_per_s == 1e6  # the table's value
    assert len(attempt.samples) == 12 and attempt.misconfigured is None


def test_nccl_tests_json_over_ssh_is_a_unique_tmp_file_read_back_and_removed(tmp_path):
    """Over SSH (here a runner that runs locally but says ssh): -J /tmp/hc-nccl-tests-<uuid>.json,
    read back with head -c and removed by the same command."""
    from healthcheck.probes.bw import _nccl_attempt

    fabric = broadcast_fabric(tmp_path).replace("NCCL_IB_HCA:", "HC_STANDIN_JSON: '1', NCCL_IB_HCA:")
    cfg = load_config(config(tmp_path, fabric))
    seen = []

    class Remote(LocalRunner):
        node = "gpu001"

        def run(self, argv, **kw):
            seen.append(tuple(argv))
            return super().run(argv, **kw)

    ctx = ProbeContext(runner=Remote(), transport="ssh", timeout_s=60, limits=cfg.for_node("gpu001").limits)
    attempt = _nccl_attempt(ctx, "broadcast", "single_node", 1, (1 << 20, ONE_G, 4), 30)
    out = attempt.argv[-1]
    assert out.startswith("/tmp/hc-nccl-tests-") and out.endswith(".json") and not Path(out).exists()
    assert seen[-1][:2] == ("sh", "-c") and seen[-1][-2] == out and 'rm -f "$0"' in seen[-1][2]
    assert placement(attempt, ONE_G, "in-place").algbw_gbytes_per_s == 1320066.171625
