"""hc on a real NVIDIA GPU: NVML checks, the torch sweep on NCCL, and nccl-tests where a build
is at hand ($HC_NCCL_TESTS_BIN_DIR, else $PATH). Skipped cleanly on machines without a GPU (CI).

Run on a GPU node: `python -m pytest -m gpu tests/gpu`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import run_hc

pytestmark = pytest.mark.gpu


def _gpu_count() -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no library, no device: all mean "no GPU here"
        return 0


GPUS = _gpu_count()
if GPUS == 0:
    pytest.skip("no NVIDIA GPU visible through NVML", allow_module_level=True)


def _torch_cuda() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def _nccl_tests_dir() -> Path | None:
    where = os.environ.get("HC_NCCL_TESTS_BIN_DIR")
    if where:
        return Path(where)
    found = shutil.which("all_reduce_perf")
    return Path(found).parent if found else None


def _config(tmp_path: Path, bandwidth: str = "") -> Path:
    fabrics = tmp_path / "fabrics"
    fabrics.mkdir()
    (fabrics / "here.yaml").write_text(f"extends: generic\ngpu: {{count: {GPUS}}}\n" + bandwidth)
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"fabric_dirs: [{fabrics}]\ndefault_fabric: here\n"
                   f"slurm: {{state_dir: {tmp_path / 'state'}}}\nhistory: {{path: null}}\n")
    return cfg


def test_nvml_checks_judge_the_real_gpus(tmp_path):
    """Every GPU check reads real NVML: each passes or skips with a reason, none could not judge."""
    r = run_hc("node", "--local", "--tier", "standard", "--checks", "gpu", "--format", "json",
               "--config", str(_config(tmp_path)), timeout=120)
    report = json.loads(r.stdout)
    (node,) = report["nodes"]
    statuses = {c["name"]: c["status"] for c in node["checks"]}
    assert statuses.get("gpu.count") == "PASS", node
    assert "ERROR" not in statuses.values(), node
    assert r.returncode in (0, 2), r.stderr  # 2: a real fault on this GPU (then the findings say which)
    if r.returncode == 0:
        assert set(statuses.values()) <= {"PASS", "SKIP"}


@pytest.mark.skipif(not _torch_cuda(), reason="torch without CUDA")
def test_torch_sweep_on_nccl_checks_every_result(tmp_path):
    r = run_hc("bw", "allreduce", "--backend", "nccl", "--sizes", "1M,64M", "--collectives", "all",
               "--iters", "5", "--warmup", "2", "--format", "json", timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["backend"], doc["ranks"], doc["wrong"]) == ("nccl", 1, 0)
    assert doc["devices"][0].startswith("cuda:0 ")
    collectives = {s["collective"] for s in doc["samples"]}
    assert collectives == {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall"} - set(doc["unsupported"])
    assert all(s["algbw_gbytes_per_s"] > 0 and s["wrong"] == 0 for s in doc["samples"])


@pytest.mark.skipif(not _torch_cuda(), reason="torch without CUDA")
def test_torch_sweep_under_torchrun_one_rank_per_gpu(tmp_path):
    torchrun = Path(sys.executable).parent / "torchrun"
    argv = [str(torchrun) if torchrun.exists() else "torchrun", "--standalone", "--nproc-per-node", str(GPUS),
            "-m", "healthcheck", "bw", "allreduce", "--sizes", "64M", "--iters", "5", "--format", "json"]
    r = subprocess.run(argv, capture_output=True, timeout=300, env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    doc = json.loads(r.stdout)
    assert (doc["launcher"], doc["backend"], doc["ranks"], doc["wrong"]) == ("torchrun", "nccl", GPUS, 0)


@pytest.mark.skipif(_nccl_tests_dir() is None, reason="no nccl-tests build (set HC_NCCL_TESTS_BIN_DIR)")
def test_real_nccl_tests_output_parses(tmp_path):
    binary = _nccl_tests_dir() / "all_reduce_perf"
    r = subprocess.run([str(binary), "-b", "1M", "-e", "64M", "-f", "8", "-g", "1"], capture_output=True, timeout=300)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    out = tmp_path / "all_reduce.txt"
    out.write_bytes(r.stdout)
    p = run_hc("parse", "nccl-tests", str(out))
    assert p.returncode == 0, p.stderr
    facts = json.loads(p.stdout)["facts"]
    assert (facts["collective"], facts["completed"], facts["failures"]) == ("all_reduce", True, [])
    assert [s["size_bytes"] for s in facts["samples"] if s["placement"] == "out-of-place"] == [1 << 20, 8 << 20, 64 << 20]
    assert all(s["wrong"] == 0 for s in facts["samples"])


@pytest.mark.skipif(_nccl_tests_dir() is None, reason="no nccl-tests build (set HC_NCCL_TESTS_BIN_DIR)")
def test_deep_tier_runs_nccl_tests_on_the_real_gpus(tmp_path):
    """bw.nccl against a floor any working GPU set reaches; one GPU: SKIP (nothing moves)."""
    bandwidth = (f"bandwidth:\n  sizes: [64M]\n  collectives: [all_reduce]\n"
                 f"  all_reduce: {{single_node: {{busbw_min_gbytes_per_s: {{64M: 0.001}}}}}}\n"
                 f"  nccl_tests: {{bin_dir: {_nccl_tests_dir()}, ib_loopback: false}}\n"
                 f"  torch: {{enabled: false}}\n  ib_write_bw: {{enabled: false}}\n")
    r = run_hc("node", "--local", "--tier", "deep", "--checks", "bw.nccl", "--format", "json",
               "--config", str(_config(tmp_path, bandwidth)), timeout=600)
    (node,) = json.loads(r.stdout)["nodes"]
    (check,) = [c for c in node["checks"] if c["name"] == "bw.nccl"]
    if GPUS == 1:
        assert check["status"] == "SKIP" and "one GPU" in check["reason"], check
    else:
        assert check["status"] == "PASS", node
        assert r.returncode == 0, r.stderr
