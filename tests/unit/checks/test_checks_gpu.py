"""GPU checks from GPU facts and fabric limits, at the edges."""

from __future__ import annotations

import msgspec
import pytest
from support import CORPUS

from healthcheck.checks import gpu as g
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.config.schema import Fabric
from healthcheck.core.model import Finding, Metric
from healthcheck.core.registry import NotApplicable
from healthcheck.parsers.gpu_common import Gpu, GpuFacts, GpuProcess, LostGpu, NvLink
from healthcheck.parsers.xid import parse_kernel_log

CFG = Config(EMBEDDED_DEFAULT)
H100 = CFG.fabric("h100-ndr400")
GENERIC = CFG.fabric("generic")


def healthy_gpu(i: int, **kw) -> Gpu:
    base = dict(
        index=i, pci_bus_id=f"0000:{0x19 + i * 0x22:02x}:00.0", name="NVIDIA H100 80GB HBM3",
        vbios_version="96.00.74.00.0D", ecc_enabled=True, ecc_volatile_corrected=0, ecc_volatile_uncorrected=0,
        remapped_rows_correctable=0, remapped_rows_uncorrectable=0, remapped_rows_pending=False,
        remapped_rows_failure=False, temperature_c=29, throttle_reasons=[], pcie_gen_current=5, pcie_gen_max=5,
        pcie_width_current=16, pcie_width_max=16, memory_total_mib=81559, memory_used_mib=0, processes=[],
        nvlinks=[NvLink(link=n, active=True, crc_flit_errors=0, crc_data_errors=0, replay_errors=0, recovery_errors=0) for n in range(18)],
    )
    base.update(kw)
    return Gpu(**base)


def facts(*gpus: Gpu, **kw) -> GpuFacts:
    gpus = gpus or tuple(healthy_gpu(i) for i in range(8))
    return GpuFacts(source="test", gpus=list(gpus), driver_version="535.161.08", cuda_version="12.2", **kw)


def with_gpu(i: int, **kw) -> GpuFacts:
    return facts(*[healthy_gpu(n, **(kw if n == i else {})) for n in range(8)])


def found(out):
    return sorted((f.id, f.status.value, f.component) for f in out if isinstance(f, Finding))


def versions(gpus, limits, shared_libs=None):
    return g.versions(gpus=gpus, shared_libs=shared_libs, limits=limits)


ALL_CHECKS = (g.count, g.ecc, g.clocks, g.pcie, g.nvlink, versions, g.processes)


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_healthy_h100_node_passes_every_check(check):
    assert found(check(gpus=facts(), limits=H100)) == []


def test_nvml_unavailable_fails_count_on_a_gpu_fabric_and_skips_the_rest():
    f = GpuFacts(source="nvml", init_error="NVMLError_DriverNotLoaded")
    out = list(g.count(gpus=f, limits=H100))
    assert found(out) == [("gpu.E001", "FAIL", "")]
    assert "NVMLError_DriverNotLoaded" in out[0].message
    for check in ALL_CHECKS[1:]:
        with pytest.raises(NotApplicable, match="see gpu.count"):
            list(check(gpus=f, limits=H100))


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_no_gpu_on_a_fabric_without_gpus_skips(check):
    with pytest.raises(NotApplicable, match="NVMLError_LibraryNotFound"):
        list(check(gpus=GpuFacts(source="nvml", init_error="NVMLError_LibraryNotFound"), limits=GENERIC))


def test_count_edges_and_model_and_lost():
    assert found(g.count(gpus=facts(*[healthy_gpu(i) for i in range(7)]), limits=H100)) == [("gpu.E002", "FAIL", "")]
    f = GpuFacts(source="t", gpus=[healthy_gpu(i) for i in range(7)], lost=[LostGpu(pci_bus_id=None, index=7, error="NVMLError_GpuIsLost")])
    assert found(g.count(gpus=f, limits=H100)) == [("gpu.E004", "FAIL", "GPU7")]
    assert found(g.count(gpus=with_gpu(2, name="NVIDIA A100-SXM4-80GB"), limits=H100)) == [("gpu.E003", "FAIL", "GPU2")]
    assert found(g.count(gpus=facts(), limits=CFG.fabric("h200-ndr400"))) == [
        ("gpu.E003", "FAIL", f"GPU{i}") for i in range(8)]


def test_count_with_job_scope_only_needs_the_jobs_gpus():
    two = GpuFacts(source="t", gpus=[healthy_gpu(0), healthy_gpu(1)], scoped_to=[0, 1])
    assert found(g.count(gpus=two, limits=H100)) == []
    missing = GpuFacts(source="t", gpus=[healthy_gpu(0)], scoped_to=[0, 1])
    assert found(g.count(gpus=missing, limits=H100)) == [("gpu.E002", "FAIL", "GPU1")]


def test_ecc_edges():
    assert found(g.ecc(gpus=with_gpu(3, ecc_volatile_uncorrected=1), limits=H100)) == [("gpu.E010", "FAIL", "GPU3")]
    limit = H100.gpu.ecc_volatile_corrected_max
    assert found(g.ecc(gpus=with_gpu(3, ecc_volatile_corrected=limit), limits=H100)) == []
    assert found(g.ecc(gpus=with_gpu(3, ecc_volatile_corrected=limit + 1), limits=H100)) == [("gpu.E011", "WARN", "GPU3")]
    assert found(g.ecc(gpus=with_gpu(3, remapped_rows_pending=True), limits=H100)) == [("gpu.E013", "FAIL", "GPU3")]
    assert found(g.ecc(gpus=with_gpu(3, remapped_rows_failure=True), limits=H100)) == [("gpu.E014", "FAIL", "GPU3")]
    assert found(g.ecc(gpus=with_gpu(3, retired_pages_pending=True), limits=H100)) == [("gpu.E012", "FAIL", "GPU3")]


def test_pending_statuses_follow_config():
    lenient = msgspec.convert({"gpu": {"remapped_rows_pending": "WARN", "retired_pages_pending": "ignore"}}, Fabric)
    assert found(g.ecc(gpus=with_gpu(1, remapped_rows_pending=True), limits=lenient)) == [("gpu.E013", "WARN", "GPU1")]
    assert found(g.ecc(gpus=with_gpu(1, retired_pages_pending=True), limits=lenient)) == []


def test_unknown_ecc_values_are_not_judged_healthy():
    # ECC off (NVML: not supported) is not judged; ECC on with no count is not "no errors"
    assert found(g.ecc(gpus=with_gpu(0, ecc_enabled=False, ecc_volatile_uncorrected=None,
                                     remapped_rows_pending=None), limits=H100)) == []
    assert found(g.ecc(gpus=with_gpu(0, ecc_volatile_uncorrected=None, remapped_rows_pending=None), limits=H100)) == [
        ("hc.E001", "ERROR", "GPU0")]


def test_clocks_throttle_and_temperature():
    assert found(g.clocks(gpus=with_gpu(0, throttle_reasons=["hw_slowdown", "hw_power_brake_slowdown"]), limits=H100)) == [
        ("gpu.E030", "FAIL", "GPU0:hw_power_brake_slowdown"), ("gpu.E030", "FAIL", "GPU0:hw_slowdown")]
    assert found(g.clocks(gpus=with_gpu(0, throttle_reasons=["sw_thermal_slowdown"]), limits=H100)) == [
        ("gpu.E030", "WARN", "GPU0:sw_thermal_slowdown")]
    assert found(g.clocks(gpus=with_gpu(0, throttle_reasons=["gpu_idle", "sw_power_cap"]), limits=H100)) == []
    assert found(g.clocks(gpus=with_gpu(4, temperature_c=85), limits=H100)) == []
    assert found(g.clocks(gpus=with_gpu(4, temperature_c=86), limits=H100)) == [("gpu.E031", "FAIL", "GPU4")]


def test_pcie_width_and_generation():
    assert found(g.pcie(gpus=with_gpu(5, pcie_width_current=8), limits=H100)) == [("gpu.E040", "FAIL", "GPU5")]
    assert found(g.pcie(gpus=with_gpu(5, pcie_gen_current=4), limits=H100)) == [("gpu.E041", "FAIL", "GPU5")]
    # an idle GPU may lower its link generation; the width is still judged
    assert found(g.pcie(gpus=with_gpu(5, pcie_gen_current=1, throttle_reasons=["gpu_idle"]), limits=H100)) == []
    assert found(g.pcie(gpus=with_gpu(5, pcie_width_current=8, throttle_reasons=["gpu_idle"]), limits=H100)) == [
        ("gpu.E040", "FAIL", "GPU5")]
    # without fabric figures the GPU's own maximum is the reference
    assert found(g.pcie(gpus=with_gpu(5, pcie_width_current=8), limits=GENERIC)) == [("gpu.E040", "FAIL", "GPU5")]


def test_nvlink_down_and_counters():
    links = [NvLink(link=n, active=n != 7, crc_flit_errors=0) for n in range(18)]
    out = list(g.nvlink(gpus=with_gpu(2, nvlinks=links), limits=H100))
    assert found(out) == [("gpu.E050", "FAIL", "GPU2")] and "down: 7" in next(f.message for f in out if isinstance(f, Finding))
    noisy = [NvLink(link=n, active=True, crc_flit_errors=101 if n == 3 else 0, recovery_errors=11 if n == 4 else 0) for n in range(18)]
    assert found(g.nvlink(gpus=with_gpu(2, nvlinks=noisy), limits=H100)) == [
        ("gpu.E051", "FAIL", "GPU2:link4:recovery_errors"), ("gpu.E051", "WARN", "GPU2:link3:crc_flit_errors")]
    # unknown (MIG mode): the fabric says 18 links, so not knowing is an ERROR, never a PASS
    assert found(g.nvlink(gpus=with_gpu(2, nvlinks=None), limits=H100)) == [("hc.E001", "ERROR", "GPU2")]
    assert found(g.nvlink(gpus=with_gpu(2, nvlinks=None), limits=GENERIC)) == []  # not asked about: nothing to judge


def test_versions():
    strict = msgspec.convert({"gpu": {"driver_version": "550.90.07", "vbios_version": "96.00.74.00.0D"}}, Fabric)
    assert found(versions(gpus=facts(), limits=strict)) == [("gpu.E060", "FAIL", "driver")]
    assert found(versions(gpus=with_gpu(6, vbios_version="96.00.99.00.01"), limits=GENERIC)) == [
        ("gpu.E061", "WARN", "vbios")]


LDCONFIG = """/usr/local/nccl/lib: (from /etc/ld.so.conf.d/nccl.conf:1)
\tlibnccl.so.2 -> libnccl.so.2.18.3
/usr/lib/x86_64-linux-gnu: (from /etc/ld.so.conf.d/x86_64-linux-gnu.conf:3)
\tlibnccl.so.2 -> libnccl.so.2.14.3
\tlibicuuc.so.72 -> libicuuc.so.72.1
"""


def test_nccl_version_from_the_loaders_view():
    from healthcheck.parsers.ldconfig import parse_ldconfig

    libs = parse_ldconfig(LDCONFIG)
    assert libs.version_of("libnccl.so").version == "2.18.3"  # the first directory wins, as for the loader
    out = list(versions(gpus=facts(), limits=H100, shared_libs=libs))
    assert [m.value for m in out if isinstance(m, Metric) and m.name == "nccl_version"] == ["2.18.3"]
    pinned = msgspec.convert({"gpu": {"nccl_version": "2.21.5"}}, Fabric)
    assert found(versions(gpus=facts(), limits=pinned, shared_libs=libs)) == [("gpu.E060", "FAIL", "nccl")]
    # pinned, and the library list could not be read: ERROR, not a PASS
    assert found(versions(gpus=facts(), limits=pinned, shared_libs=None)) == [("hc.E001", "ERROR", "nccl")]
    assert found(versions(gpus=facts(), limits=H100, shared_libs=None)) == []  # not pinned: nothing to judge


def test_this_machines_ldconfig_parses():
    import subprocess

    from healthcheck.parsers.ldconfig import parse_ldconfig

    out = subprocess.run(["/sbin/ldconfig", "-N", "-X", "-v"], capture_output=True, text=True).stdout
    assert parse_ldconfig(out).libs


def test_leftover_processes_and_memory():
    proc = [GpuProcess(pid=4242, name="python3", used_memory_mib=30000)]
    out = list(g.processes(gpus=with_gpu(1, processes=proc, memory_used_mib=30000), limits=H100))
    assert found(out) == [("gpu.E070", "FAIL", "GPU1")] and "4242 (python3)" in out[-1].message
    limit = H100.gpu.leftover_memory_max_mib
    assert found(g.processes(gpus=with_gpu(1, memory_used_mib=limit), limits=H100)) == []
    assert found(g.processes(gpus=with_gpu(1, memory_used_mib=limit + 1), limits=H100)) == [("gpu.E071", "FAIL", "GPU1")]


def read_log(text: str, source: str = "dmesg"):
    """A parsed log as a provider hands it on: with the source it was read from."""
    return msgspec.structs.replace(parse_kernel_log(text), source=source,
                                   source_lines=max(1, len(text.splitlines())))


def xid_log(name: str):
    return read_log((CORPUS / "xid-dmesg" / name).read_text())


def test_xid_dbe_rowremap_contained_maps_pci_to_gpu_index():
    gpus = facts()  # GPU0 is at 0000:19:00.0
    out = list(g.xid(kernel_gpu_log=xid_log("xid48-63-94-dbe-rowremap-contained.txt"), gpus=gpus, limits=H100))
    assert found(out) == [("gpu.E020", "FAIL", "GPU0:xid48"), ("gpu.E020", "WARN", "GPU0:xid63"),
                          ("gpu.E020", "WARN", "GPU0:xid94")]
    dbe = next(f for f in out if isinstance(f, Finding) and f.component == "GPU0:xid48")
    assert "double-bit ECC" in dbe.message and "Xid (PCI:0000:19:00): 48" in dbe.evidence
    assert dbe.limit.key == "gpu.xid.severity[48]"


def test_xid_flood_is_one_finding_with_a_count():
    out = [f for f in g.xid(kernel_gpu_log=xid_log("xid13-43-sm-warp-exception-flood.txt"),
                            gpus=None, limits=H100) if isinstance(f, Finding)]
    assert [(f.id, f.status.value) for f in out] == [("gpu.E020", "WARN")]  # 13 WARN; 43 ignored
    assert out[0].value > 100 and f"{out[0].value} times" in out[0].message


def test_xid79_and_nvswitch_sxid():
    out = [f for f in g.xid(kernel_gpu_log=xid_log("xid79-with-nvswitch-sxid-20034.txt"),
                            gpus=None, limits=H100) if isinstance(f, Finding)]
    ids = sorted((f.id, f.status.value, f.component) for f in out)
    assert ("gpu.E020", "FAIL", "0000:91:00.0:xid79") in ids
    assert {c for i, s, c in ids if i == "gpu.E021"} == {"nvidia-nvswitch0:sxid20034", "nvidia-nvswitch1:sxid20034", "nvidia-nvswitch2:sxid20034"}
    assert all(s == "FAIL" for i, s, c in ids)


def test_xid_severity_table_from_config():
    quiet = msgspec.convert({"gpu": {"xid": {"severity": {79: "ignore"}, "sxid_fatal": "WARN"}}}, Fabric)
    out = [f for f in g.xid(kernel_gpu_log=xid_log("xid79-with-nvswitch-sxid-20034.txt"),
                            gpus=None, limits=quiet) if isinstance(f, Finding)]
    assert all(f.status.value == "WARN" for f in out) and not any("xid79" in f.component for f in out)


def test_xid_outside_the_jobs_gpus_is_ignored_in_a_prologue():
    scoped = GpuFacts(source="t", gpus=[healthy_gpu(0), healthy_gpu(1)], scoped_to=[1])
    assert found(g.xid(kernel_gpu_log=xid_log("xid48-63-94-dbe-rowremap-contained.txt"),
                       gpus=scoped, limits=H100)) == []


def test_clean_kernel_log_passes_and_records_a_metric():
    out = list(g.xid(kernel_gpu_log=read_log("[    0.000000] Linux version 6.1.0-18-amd64\n", "/dev/kmsg"),
                     gpus=facts(), limits=H100))
    assert found(out) == [] and any(isinstance(m, Metric) and m.name == "xid_events" for m in out)
    (what,) = [m.value for m in out if isinstance(m, Metric) and m.name == "kernel_log"]
    assert what == "since boot in /dev/kmsg (1 lines read)"
