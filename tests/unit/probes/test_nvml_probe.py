"""The NVML probe through a replay: the same code that runs on a GPU node, fed recorded answers."""

from __future__ import annotations

import json
import time

import msgspec
import pynvml
import pytest
from test_checks_gpu import facts, healthy_gpu

from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.facts import ProbeContext
from healthcheck.core.registry import select
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.parsers.gpu_common import GpuFacts, GpuProcess, LostGpu
from healthcheck.probes.gpu import job_gpu_indexes
from healthcheck.probes.nvml import NvmlProbe, RecordingNvml, ReplayNvml, recording_from_facts
from healthcheck.runners.local import LocalRunner

CFG = Config(EMBEDDED_DEFAULT)


def replay(f: GpuFacts) -> GpuFacts:
    return NvmlProbe(ReplayNvml(recording_from_facts(f)), source="test").facts()


def strip(f: GpuFacts) -> GpuFacts:
    return msgspec.structs.replace(f, source="test", scoped_to=None)


def test_round_trip_facts_through_nvml_calls():
    original = facts(
        *[healthy_gpu(i) for i in range(6)],
        healthy_gpu(6, throttle_reasons=["hw_slowdown", "hw_power_brake_slowdown"], remapped_rows_pending=True,
                    processes=[GpuProcess(pid=77, name="python3", used_memory_mib=1024, type="C")], memory_used_mib=1500,
                    retired_pages_sbe=2, retired_pages_dbe=1, retired_pages_pending=True, pcie_width_current=8,
                    persistence_mode=True, mig_mode=False, performance_state="P0", serial="1650124031592",
                    uuid="GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa"),
        healthy_gpu(7),
    )
    assert strip(replay(original)) == strip(original)


def test_lost_gpu_and_missing_queries():
    f = GpuFacts(source="test", gpus=[healthy_gpu(0, temperature_c=None, nvlinks=[])],
                 lost=[LostGpu(pci_bus_id=None, index=1, error="NVMLError_GpuIsLost")], driver_version="535.161.08")
    out = replay(f)
    assert [lost.index for lost in out.lost] == [1] and out.lost[0].error == "NVMLError_GpuIsLost"
    assert out.gpus[0].temperature_c is None and out.gpus[0].nvlinks == []


@pytest.mark.parametrize("code, name", [(9, "NVMLError_DriverNotLoaded"), (12, "NVMLError_LibraryNotFound"),
                                        (18, "NVMLError_LibRmVersionMismatch")])
def test_init_errors_become_facts_not_exceptions(code, name):
    rec = {"format": "hc.nvml-recording/1", "calls": {"nvmlInit()": {"error": code}}}
    assert NvmlProbe(ReplayNvml(rec)).facts().init_error == name


def test_a_gpu_lost_in_the_middle_of_queries():
    rec = recording_from_facts(facts())
    rec["calls"]["nvmlDeviceGetTemperature(gpu4,0)"] = {"error": 15}  # GPU_IS_LOST
    out = NvmlProbe(ReplayNvml(rec)).facts()
    assert [g.index for g in out.gpus] == [0, 1, 2, 3, 5, 6, 7]
    assert [(lost.index, lost.error) for lost in out.lost] == [(4, "NVMLError_GpuIsLost")]


def test_job_scope_queries_only_the_jobs_gpus():
    rec = recording_from_facts(facts())
    out = NvmlProbe(ReplayNvml(rec)).facts([2, 5])
    assert [g.index for g in out.gpus] == [2, 5] and out.scoped_to == [2, 5]


@pytest.mark.parametrize("env, expected", [
    ({}, None), ({"SLURM_JOB_GPUS": "0,1"}, [0, 1]), ({"SLURM_JOB_GPUS": "3", "CUDA_VISIBLE_DEVICES": "0"}, [3]),
    ({"CUDA_VISIBLE_DEVICES": "2,0"}, [0, 2]), ({"CUDA_VISIBLE_DEVICES": "GPU-ee79-..."}, None),
    ({"CUDA_VISIBLE_DEVICES": ""}, []), ({"CUDA_VISIBLE_DEVICES": "NoDevFiles"}, []),
])
def test_job_gpu_indexes_from_environment(env, expected):
    assert job_gpu_indexes(env) == expected


def test_recording_a_replay_reproduces_the_calls():
    rec = recording_from_facts(facts())
    recorder = RecordingNvml(ReplayNvml(rec))
    first = NvmlProbe(recorder).facts()
    again = NvmlProbe(ReplayNvml(recorder.recording("re-recorded"))).facts()
    assert strip(first) == strip(again) == strip(replay(facts()))


def test_real_pynvml_without_a_gpu_reports_library_not_found():
    assert NvmlProbe(pynvml).facts().init_error == "NVMLError_LibraryNotFound"


def write(tmp_path, rec) -> str:
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(rec))
    return str(path)


def node(fabric="h100-ndr400"):
    from healthcheck.core.config.loader import NodeConfig, _convert
    from healthcheck.core.config.schema import Fabric

    data, prov = CFG.fabric_raw(fabric)
    return NodeConfig(node="gpu017", fabric_name=fabric, limits=_convert(data, Fabric, prov, None), provenance=prov)


def test_hung_nvml_call_is_abandoned_at_the_budget(tmp_path):
    rec = recording_from_facts(facts())
    rec["hangs"] = {"nvmlDeviceGetHandleByIndex(3)": 60}
    ctx = ProbeContext(runner=LocalRunner(), env={"HC_NVML_REPLAY": write(tmp_path, rec)})
    start = time.monotonic()
    result, abandoned = run_checks(node(), select("quick", ["gpu.count", "gpu.ecc"]), ctx, deadline=time.monotonic() + 1.0)
    assert abandoned and time.monotonic() - start < 2.0
    assert {c.name: c.status for c in result.checks} == {"gpu.count": Status.ERROR, "gpu.ecc": Status.ERROR}
    assert {f.id for f in result.findings} == {"hc.E002"}


def test_replay_through_the_engine_with_job_scope(tmp_path):
    rec = recording_from_facts(facts(*[healthy_gpu(i, pcie_width_current=8 if i == 5 else 16) for i in range(8)]))
    path = write(tmp_path, rec)
    everything, _ = run_checks(node(), select("quick", ["gpu.pcie"]), ProbeContext(runner=LocalRunner(), env={"HC_NVML_REPLAY": path}))
    assert [(f.id, f.component) for f in everything.findings] == [("gpu.E040", "GPU5")]
    job, _ = run_checks(node(), select("quick", ["gpu.pcie"]),
                        ProbeContext(runner=LocalRunner(), env={"HC_NVML_REPLAY": path, "SLURM_JOB_GPUS": "0,1"}))
    assert job.findings == [] and job.status is Status.PASS


def test_unreadable_replay_file_is_an_error(tmp_path):
    ctx = ProbeContext(runner=LocalRunner(), env={"HC_NVML_REPLAY": str(tmp_path / "missing.json")})
    result, _ = run_checks(node(), select("quick", ["gpu.count"]), ctx)
    assert result.status is Status.ERROR and result.findings[0].id == "hc.E003"


def test_remap_histogram_and_utilization_read_through_nvml_from_a_real_capture():
    # the real 8-GPU H100 `nvidia-smi -q` (Bank Remap Availability Histogram: 2560 banks at
    # Max, Utilization Gpu 0 %), GPU3's banks moved down the levels (a scenario), through the
    # NVML calls the probe makes on a node (nvmlDeviceGetRowRemapperHistogram, ...UtilizationRates)
    from pathlib import Path

    from healthcheck.parsers.gpu_common import RemapHistogram
    from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q

    text = (Path(__file__).resolve().parents[2] / "fixtures/corpus/nvidia-smi-q/h100-8gpu-driver-535.183.01.txt")
    real = parse_nvidia_smi_q(text.read_text())
    assert {g.remap_histogram for g in real.gpus} == {RemapHistogram(max=2560, high=0, partial=0, low=0, none=0)}
    assert {g.utilization_gpu_pct for g in real.gpus} == {0.0}
    worn = RemapHistogram(max=2550, high=4, partial=3, low=2, none=1)
    gpus = [msgspec.structs.replace(g, remap_histogram=worn, utilization_gpu_pct=37.0) if g.index == 3 else g
            for g in real.gpus]
    got = replay(msgspec.structs.replace(real, gpus=gpus))
    assert [(g.remap_histogram, g.utilization_gpu_pct) for g in got.gpus if g.index == 3] == [(worn, 37.0)]
    assert got.gpus[3].remap_histogram is not None and got.gpus[3].remap_histogram.low_or_none == 3
    # a driver without the call (pre-Ampere, MIG): no histogram, never a made-up 0
    assert NvmlProbe(ReplayNvml(recording_from_facts(facts(healthy_gpu(0)))), source="t").facts().gpus[0] \
        .remap_histogram is None
