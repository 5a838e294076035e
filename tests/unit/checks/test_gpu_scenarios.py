"""One recorded node per scenario, replayed through the real NVML probe and the real
`hc node` command: each failure shows as its finding ID, and only that."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support import FIXTURES, run_hc

NVML = FIXTURES / "nvml"
CLEAN_KERN_LOG = ("[    0.000000] Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)\n"
                  "[    0.000000] Command line: BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 ro quiet\n")


@pytest.fixture
def h100_config(tmp_path) -> Path:
    (tmp_path / "fabrics").mkdir()
    # a kernel log with no NVIDIA line: an empty one would be a log that was not read
    (tmp_path / "kern.log").write_text(CLEAN_KERN_LOG)
    (tmp_path / "fabrics" / "rig-h100.yaml").write_text(
        f"extends: h100-ndr400\ngpu:\n  xid: {{source: file, file: {tmp_path}/kern.log}}\n"
    )
    path = tmp_path / "hc.yaml"
    path.write_text("default_fabric: rig-h100\n")
    return path


def hc_gpu(config: Path, scenario: str, *args: str, env=None) -> tuple[int, dict]:
    r = run_hc("node", "--local", "--config", str(config), "--checks", "gpu", "--format", "json", *args,
               env={"HC_NODE_NAME": "gpu017", "HC_NVML_REPLAY": str(NVML / f"{scenario}.json"), **(env or {})})
    assert r.returncode in (0, 1, 2, 3), r.stderr
    return r.returncode, json.loads(r.stdout)


def ids(report) -> list[tuple[str, str, str]]:
    return sorted({(f["id"], f["status"], f.get("component", "")) for n in report["nodes"] for f in n["findings"]})


def test_healthy_node_passes_every_gpu_check(h100_config, validate_report):
    code, report = hc_gpu(h100_config, "healthy-8xh100", "--tier", "standard")
    validate_report(report)
    assert (code, ids(report)) == (0, [])
    statuses = {c["name"]: c["status"] for c in report["nodes"][0]["checks"]}
    assert statuses == {"gpu.clocks": "PASS", "gpu.count": "PASS", "gpu.ecc": "PASS", "gpu.nvlink": "PASS",
                        "gpu.pcie": "PASS", "gpu.versions": "PASS", "gpu.xid": "PASS",
                        "gpu.dcgm": "SKIP"}  # DCGM is off unless the fabric turns it on


@pytest.mark.parametrize("scenario, tier, expected", [
    ("throttled-8xh100", "quick", {("gpu.E030", "FAIL", f"GPU{i}:{r}") for i in range(8)
                                   for r in ("hw_slowdown", "hw_power_brake_slowdown")}),
    ("gpu-missing-7xh100", "quick", {("gpu.E002", "FAIL", "")}),
    ("ecc-errors", "quick", {("gpu.E010", "FAIL", "GPU3"), ("gpu.E011", "WARN", "GPU3")}),
    ("row-remap-pending", "quick", {("gpu.E013", "FAIL", "GPU3")}),
    ("pcie-downtrained", "quick", {("gpu.E040", "FAIL", "GPU5")}),
    ("nvlink-down", "standard", {("gpu.E050", "FAIL", "GPU2")}),
    ("gpu-lost", "quick", {("gpu.E004", "FAIL", "GPU6")}),
    ("driver-not-loaded", "quick", {("gpu.E001", "FAIL", "")}),
])
def test_each_scenario_shows_its_finding(h100_config, scenario, tier, expected):
    code, report = hc_gpu(h100_config, scenario, "--tier", tier)
    assert set(ids(report)) == expected
    assert code == 2


def test_nvlink_down_is_not_a_quick_tier_concern(h100_config):
    code, report = hc_gpu(h100_config, "nvlink-down", "--tier", "quick")
    assert (code, ids(report)) == (0, [])


def test_job_scope_ignores_a_bad_gpu_the_job_does_not_have(h100_config):
    code, report = hc_gpu(h100_config, "pcie-downtrained", env={"SLURM_JOB_GPUS": "0,1"})
    assert (code, ids(report)) == (0, [])
    code, report = hc_gpu(h100_config, "pcie-downtrained", env={"SLURM_JOB_GPUS": "4,5"})
    assert ids(report) == [("gpu.E040", "FAIL", "GPU5")]


def test_driver_not_loaded_skips_gpu_checks_on_a_fabric_without_gpus(tmp_path):
    cfg = tmp_path / "hc.yaml"
    cfg.write_text("default_fabric: generic\n")
    _, report = hc_gpu(cfg, "driver-not-loaded")
    # (the exit code of a run where every check skipped is the report's business: hc.E007)
    assert {c["status"] for c in report["nodes"][0]["checks"]} == {"SKIP"}
    assert {f["id"] for f in report["nodes"][0]["findings"]} <= {"hc.E007"}
    reasons = {c["reason"] for c in report["nodes"][0]["checks"]}
    assert any("NVMLError_DriverNotLoaded" in r for r in reasons)


def test_hung_nvml_returns_within_budget_as_error(h100_config):
    start = time.monotonic()
    code, report = hc_gpu(h100_config, "nvml-hang", "--checks", "gpu.count")
    assert time.monotonic() - start < 5.0 + 3.0  # gpu.count's budget, plus interpreter start
    assert code == 3 and ids(report) == [("hc.E002", "ERROR", "")]


def test_leftover_process_in_epilogue_context(h100_config):
    from healthcheck.core.config.loader import Config
    from healthcheck.core.facts import ProbeContext
    from healthcheck.core.registry import select
    from healthcheck.orchestrate.engine import run_checks
    from healthcheck.runners.local import LocalRunner

    cfg = Config(h100_config)
    ctx = ProbeContext(runner=LocalRunner(), env={"HC_NVML_REPLAY": str(NVML / "leftover-process.json")})
    result, _ = run_checks(cfg.for_node("gpu017"), select("epilogue"), ctx)
    assert {(f.id, f.component) for f in result.findings} == {("gpu.E070", "GPU1")}
    assert "4242 (python3)" in result.findings[0].message


def test_committed_recordings_match_their_generator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_recordings", NVML / "make_recordings.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for name, (_, rec) in mod.scenarios().items():
        assert (NVML / f"{name}.json").read_text() == mod.render(rec), f"{name}.json is stale: rerun make_recordings.py"
