"""nvidia-smi -q and --query-gpu parsers: every corpus capture, failure outputs and garbage."""

from __future__ import annotations

import csv
import io
import re

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import CORPUS, FIXTURES, corpus_files

from healthcheck.core.errors import ParseError
from healthcheck.core.gpu_vocabulary import THROTTLE_REASONS
from healthcheck.parsers.gpu_common import GpuFacts, LostGpu
from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q
from healthcheck.parsers.nvidia_smi_query import (
    NEWER_QUERY_FIELDS,
    QUERY_FIELDS,
    parse_nvidia_smi_query,
)

Q_DIR = CORPUS / "nvidia-smi-q"
CSV_DIR = CORPUS / "nvidia-smi-query-gpu"
PCI = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
COUNTERS = (
    "ecc_volatile_corrected", "ecc_volatile_uncorrected", "ecc_aggregate_corrected", "ecc_aggregate_uncorrected",
    "retired_pages_sbe", "retired_pages_dbe", "remapped_rows_correctable", "remapped_rows_uncorrectable",
    "pcie_replays", "memory_total_mib", "memory_used_mib",
)
DRIVER_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)


def q_text(name: str) -> str:
    return (Q_DIR / name).read_text()


def csv_text(name: str) -> str:
    return (CSV_DIR / name).read_text()


def q(name: str) -> GpuFacts:
    return parse_nvidia_smi_q(q_text(name))


def qcsv(name: str) -> GpuFacts:
    return parse_nvidia_smi_query(csv_text(name))


def by_bus(facts: GpuFacts) -> dict:
    return {g.pci_bus_id: g for g in facts.gpus}


def check_invariants(facts: GpuFacts, source: str, file_name: str) -> None:
    """What must hold for any healthy capture, whatever the GPU or driver."""
    assert facts.source == source and facts.init_error is None and facts.lost == []
    assert facts.gpus
    assert [g.index for g in facts.gpus] == list(range(len(facts.gpus)))
    assert all(PCI.match(g.pci_bus_id) for g in facts.gpus)
    assert len({g.pci_bus_id for g in facts.gpus}) == len(facts.gpus)
    assert all(g.name for g in facts.gpus)
    for g in facts.gpus:
        for field in COUNTERS:
            assert getattr(g, field) is None or getattr(g, field) >= 0, field
        assert g.throttle_reasons is None or set(g.throttle_reasons) <= set(THROTTLE_REASONS.values())
        assert g.performance_state is None or re.fullmatch(r"P\d+", g.performance_state)
    # The file names carry the driver version and, where given, the GPU count.
    version = re.search(r"-(\d{3}(?:\.\d+)*)(?:-|\.txt$)", file_name)
    assert version and facts.driver_version and facts.driver_version.startswith(version.group(1))
    count = re.search(r"(\d+)gpu", file_name)
    if count:
        assert len(facts.gpus) == int(count.group(1))
    # The facts are valid for their msgspec types (what a report encodes).
    assert msgspec.json.decode(msgspec.json.encode(facts), type=GpuFacts) == facts


# ---------------------------------------------------------------------------
# nvidia-smi -q: every corpus file
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-q"), ids=lambda p: p.name)
def test_every_q_corpus_file_parses(path):
    check_invariants(parse_nvidia_smi_q(path.read_text()), "nvidia-smi -q", path.name)


def test_q_h100_8gpu_535_161_hw_slowdown_and_power_brake_on_every_gpu():
    facts = q("h100-8gpu-driver-535.161.08.txt")
    assert (facts.driver_version, facts.cuda_version) == ("535.161.08", "12.2")
    assert [g.pci_bus_id for g in facts.gpus] == [
        "0000:19:00.0", "0000:3b:00.0", "0000:4c:00.0", "0000:5d:00.0",
        "0000:9b:00.0", "0000:bb:00.0", "0000:cb:00.0", "0000:db:00.0",
    ]
    assert {g.name for g in facts.gpus} == {"NVIDIA H100 80GB HBM3"}
    assert all(g.throttle_reasons == ["hw_slowdown", "hw_power_brake_slowdown"] for g in facts.gpus)
    assert [g.pcie_replays for g in facts.gpus] == [67, 63, 52, 43, 49, 53, 82, 67]
    g0 = facts.gpus[0]
    assert (g0.pcie_gen_current, g0.pcie_gen_max, g0.pcie_width_current, g0.pcie_width_max) == (5, 5, 16, 16)
    assert (g0.uuid, g0.serial, g0.vbios_version) == ("GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa", "1650124031592", "96.00.74.00.0D")
    assert (g0.ecc_enabled, g0.ecc_volatile_uncorrected, g0.ecc_aggregate_corrected) == (True, 0, 0)
    assert (g0.remapped_rows_correctable, g0.remapped_rows_uncorrectable) == (0, 0)
    assert (g0.remapped_rows_pending, g0.remapped_rows_failure) == (False, False)
    # H100 has row remapping, not page retirement: N/A, not 0
    assert (g0.retired_pages_sbe, g0.retired_pages_dbe, g0.retired_pages_pending) == (None, None, None)
    assert (g0.mig_mode, g0.persistence_mode, g0.performance_state) == (False, True, "P0")
    assert (g0.memory_total_mib, g0.memory_used_mib, g0.temperature_c) == (81559, 0, 29.0)
    assert g0.processes == [] and g0.fabric_state == "Completed"


def test_q_h100_8gpu_535_183_one_gpu_power_braked_under_load():
    gpus = by_bus(q("h100-8gpu-driver-535.183.01.txt"))
    braked = [bus for bus, g in gpus.items() if g.throttle_reasons and "hw_power_brake_slowdown" in g.throttle_reasons]
    assert braked == ["0000:75:00.0"]
    g = gpus["0000:75:00.0"]
    assert g.index == 2
    # HW Power Brake is nested under HW Slowdown in the text, but read on its own line
    assert g.throttle_reasons == ["sw_power_cap", "sw_thermal_slowdown", "hw_power_brake_slowdown"]
    assert [(p.pid, p.name, p.used_memory_mib, p.type) for p in g.processes] == [(1002127, "/usr/bin/python", 9212, "C")]
    assert g.memory_used_mib == 9221
    assert all(o.throttle_reasons == ["gpu_idle"] for bus, o in gpus.items() if bus != "0000:75:00.0")
    assert gpus["0000:53:00.0"].pcie_replays == 120


def test_q_a10_pending_row_remap():
    (g,) = q("a10-1gpu-driver-535.129.03.txt").gpus
    assert (g.name, g.pci_bus_id) == ("NVIDIA A10", "0000:07:00.0")
    assert (g.remapped_rows_correctable, g.remapped_rows_uncorrectable) == (0, 4)
    assert (g.remapped_rows_pending, g.remapped_rows_failure) == (True, False)
    assert (g.ecc_enabled, g.ecc_volatile_corrected, g.ecc_volatile_uncorrected) == (True, 0, 0)
    assert g.mig_mode is None  # "MIG Mode/Current: N/A": no MIG on an A10, not "disabled"
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_max) == (4, 4, 16)
    assert g.fabric_state is None  # N/A


def test_q_h100_590_newer_layout_under_load_with_processes():
    facts = q("h100-1gpu-driver-590.48.01-load.txt")
    assert (facts.driver_version, facts.cuda_version) == ("590.48.01", "13.1")
    (g,) = facts.gpus
    assert [(p.pid, p.name, p.used_memory_mib, p.type) for p in g.processes] == [
        (11327, "/root/tools/memhog", 2566, "C"),
        (11328, "/root/tools/memhog", 1542, "C"),
        (11345, "./gpu_burn", 15690, "C"),
    ]
    assert (g.memory_total_mib, g.memory_used_mib, g.temperature_c) == (81559, 19818, 59.0)
    assert g.throttle_reasons == []  # all reasons read, none active
    # SRAM Parity + SEC-DED + DRAM lines, all 0
    assert (g.ecc_volatile_corrected, g.ecc_volatile_uncorrected, g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected) == (0, 0, 0, 0)
    assert (g.pcie_replays, g.pcie_gen_current, g.pcie_width_current) == (9, 5, 16)
    assert (g.mig_mode, g.fabric_state) == (False, "Completed")


def test_q_h200_mig_parent_fields_not_overwritten_by_mig_devices():
    facts = q("h200-mig-driver-590.48.01.txt")
    (g,) = facts.gpus  # the five MIG devices are not GPUs
    assert (g.name, g.pci_bus_id, g.mig_mode) == ("NVIDIA H200", "0000:83:00.0", True)
    # the MIG devices' "Shared FB Memory Usage" (71424/33280/16384 MiB) is not the GPU's
    assert (g.memory_total_mib, g.memory_used_mib) == (143771, 55)
    assert (g.ecc_enabled, g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected) == (True, 0, 0)
    # "Remapped Rows : N/A" in MIG mode: unknown, not 0
    assert (g.remapped_rows_correctable, g.remapped_rows_uncorrectable, g.remapped_rows_pending) == (None, None, None)
    assert g.processes == [] and g.throttle_reasons == ["gpu_idle"]


def test_q_h200_mig_device_ecc_does_not_leak_into_parent():
    text = q_text("h200-mig-driver-590.48.01.txt")
    # give every MIG device an uncorrectable SRAM error; the parent's own lines say 0
    text = text.replace("                SRAM Uncorrectable                     : 0", "                SRAM Uncorrectable                     : 7")
    assert ": 7" in text
    (g,) = parse_nvidia_smi_q(text).gpus
    assert (g.ecc_volatile_uncorrected, g.ecc_aggregate_uncorrected) == (0, 0)


def test_q_rtx4090_no_ecc_is_none_not_zero():
    facts = q("rtx4090-8gpu-driver-535.154.05.txt")
    assert {g.name for g in facts.gpus} == {"NVIDIA GeForce RTX 4090"}
    for g in facts.gpus:
        assert g.ecc_enabled is False
        assert (g.ecc_volatile_corrected, g.ecc_volatile_uncorrected) == (None, None)
        assert (g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected) == (None, None)
        assert g.mig_mode is None and g.serial is None and g.fabric_state is None
        assert (g.pcie_gen_current, g.pcie_gen_max) == (1, 4)  # idle link downshift, Gen4 card
        assert len(g.processes) == 1
    assert facts.gpus[4].processes[0].name.startswith("[celeryd: ")  # brackets kept in a process name


def test_q_h800_525_older_throttle_naming_and_ecc_disabled():
    facts = q("h800-1gpu-driver-525.105.17.txt")
    assert (facts.driver_version, facts.cuda_version) == ("525.105.17", "12.0")
    (g,) = facts.gpus  # -q -i 0 on an 8-GPU node: one block
    assert (g.name, g.pci_bus_id) == ("NVIDIA H800", "0000:18:00.0")
    assert g.throttle_reasons == ["gpu_idle"]  # "Clocks Throttle Reasons" section
    assert g.ecc_enabled is False  # "Ecc Mode" spelling
    assert g.ecc_volatile_uncorrected is None and g.ecc_aggregate_corrected is None
    assert (g.remapped_rows_correctable, g.remapped_rows_failure, g.fabric_state) == (0, False, "Completed")


def test_q_titan_v_volta_layout():
    (g,) = q("titanv-driver-560.35.03.txt").gpus
    assert (g.name, g.persistence_mode, g.performance_state) == ("NVIDIA TITAN V", False, "P8")
    assert g.ecc_enabled is None and g.ecc_volatile_corrected is None  # "Single Bit/Total: N/A"
    assert g.remapped_rows_correctable is None  # "Remapped Rows : N/A"
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (1, 3, 16, 16)
    assert [(p.pid, p.type) for p in g.processes] == [(100607, "G"), (100838, "G"), (101815, "G")]
    assert g.memory_total_mib == 12288


def test_q_truncated_capture_keeps_the_gpu_later_sections_unknown():
    facts = q("h100-truncated-invalid-535.183.01.txt")
    (g,) = facts.gpus
    assert (g.name, g.pci_bus_id, g.pcie_replays) == ("NVIDIA H100 80GB HBM3", "0000:53:00.0", 120)
    assert (g.pcie_gen_current, g.pcie_width_current) == (5, 16)
    # "Invalid HW Slowdown" lines: HW slowdown state unreadable -> the list is unknown
    assert g.throttle_reasons is None
    for field in ("memory_total_mib", "temperature_c", "ecc_enabled", "ecc_volatile_uncorrected",
                  "remapped_rows_uncorrectable", "processes", "fabric_state"):
        assert getattr(g, field) is None, field


def test_q_older_ecc_layout_single_double_bit_totals_and_retired_pages():
    text = q_text("titanv-driver-560.35.03.txt")
    text = text.replace("    ECC Mode\n        Current                           : N/A", "    ECC Mode\n        Current                           : Enabled")
    text = text.replace("                Total                     : N/A", "                Total                     : 3", 1)  # volatile SBE
    text = text.replace("                Total                     : N/A", "                Total                     : 1", 1)  # volatile DBE
    text = text.replace("        Single Bit ECC                    : N/A", "        Single Bit ECC                    : 2")
    text = text.replace("        Double Bit ECC                    : N/A", "        Double Bit ECC                    : 1")
    text = text.replace("        Pending Page Blacklist            : N/A", "        Pending Page Retirement           : Yes")
    (g,) = parse_nvidia_smi_q(text).gpus
    assert (g.ecc_enabled, g.ecc_volatile_corrected, g.ecc_volatile_uncorrected) == (True, 3, 1)
    assert (g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected) == (None, None)
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retired_pages_pending) == (2, 1, True)


def test_q_newer_ecc_layout_sums_sram_and_dram_variants():
    text = q_text("h100-1gpu-driver-590.48.01-load.txt")
    vol = text.index("        Volatile\n")
    agg = text.index("        Aggregate\n")
    section = text[vol:agg]
    for line, value in (("SRAM Correctable", 5), ("DRAM Correctable", 2), ("SRAM Uncorrectable Parity", 1),
                        ("SRAM Uncorrectable SEC-DED", 2), ("DRAM Uncorrectable", 4)):
        section = re.sub(rf"({line}\s+: )0", rf"\g<1>{value}", section)
    (g,) = parse_nvidia_smi_q(text[:vol] + section + text[agg:]).gpus
    assert (g.ecc_volatile_corrected, g.ecc_volatile_uncorrected) == (7, 7)
    assert (g.ecc_aggregate_corrected, g.ecc_aggregate_uncorrected) == (0, 0)  # Threshold Exceeded: not a count


def test_q_unknown_values_are_none_never_zero():
    text = q_text("a10-1gpu-driver-535.129.03.txt")
    text = text.replace("GPU Current Temp                  : 33 C", "GPU Current Temp                  : ERR!")
    text = text.replace("Replays Since Reset               : 0", "Replays Since Reset               : Unknown Error")
    text = text.replace("Used                              : 4 MiB", "Used                              : [Not Supported]")
    text = text.replace("Uncorrectable Error               : 4", "Uncorrectable Error               : Requested functionality has been deprecated")
    (g,) = parse_nvidia_smi_q(text).gpus
    assert (g.temperature_c, g.pcie_replays, g.memory_used_mib, g.remapped_rows_uncorrectable) == (None, None, None, None)
    assert g.memory_total_mib == 23028


def test_q_processes_older_flat_layout():
    text = q_text("a10-1gpu-driver-535.129.03.txt").replace(
        "    Processes                             : None\n",
        "    Processes\n"
        "        Process ID                        : 1234\n"
        "        Type                              : C\n"
        "        Name                              : python\n"
        "        Used GPU Memory                   : N/A\n",
    )
    (g,) = parse_nvidia_smi_q(text).gpus
    assert [(p.pid, p.type, p.name, p.used_memory_mib) for p in g.processes] == [(1234, "C", "python", None)]


def test_q_deeply_nested_lines_do_not_crash():
    text = ("GPU 00000000:19:00.0\n    Product Name : X\n    PCI\n        Bus Id : 00000000:19:00.0\n"
            "    Clocks Event Reasons\n" + "".join(" " * (8 + i) + "HW Slowdown : Active\n" for i in range(3000)))
    (g,) = parse_nvidia_smi_q(text).gpus
    assert g.throttle_reasons is None  # the other reasons were never read


def test_q_610_kmd_version_preferred_over_deprecated_driver_version():
    text = q_text("h200-mig-driver-590.48.01.txt").replace(
        "Driver Version                                         : 590.48.01\n"
        "CUDA Version                                           : 13.1\n",
        "Driver Version                                         : 610.43.02 [Deprecated; will be removed in CUDA 14.0. Use KMD Version instead]\n"
        "CUDA Version                                           : 13.3 [Deprecated; will be removed in CUDA 14.0. Use CUDA UMD Version instead]\n"
        "KMD Version                                            : 610.43.02\n"
        "CUDA UMD Version                                       : 13.3\n",
    )
    facts = parse_nvidia_smi_q(text)
    assert (facts.driver_version, facts.cuda_version) == ("610.43.02", "13.3")


# ---------------------------------------------------------------------------
# nvidia-smi -q: failures, lost GPUs, garbage
# ---------------------------------------------------------------------------


def without_block(text: str, bus: str) -> str:
    """The capture with one GPU's block removed, as if it had fallen off the bus."""
    start = text.index(f"GPU {bus}\n")
    end = text.find("\nGPU ", start + 1)
    return text[:start] + (text[end + 1:] if end != -1 else "")


@pytest.mark.parametrize(
    "line, where",
    [
        ("Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error", "top"),
        ("Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error", "middle"),
        ("Unable to determine the device handle for GPU1: 0000:3B:00.0: Unknown Error", "top"),
    ],
)
def test_q_lost_gpu_next_to_healthy_blocks(line, where):
    text = without_block(q_text("h100-8gpu-driver-535.161.08.txt"), "00000000:3B:00.0")
    if where == "top":
        text = line + "\n" + text
    else:
        at = text.index("GPU 00000000:9B:00.0")
        text = text[:at] + line + "\n" + text[at:]
    facts = parse_nvidia_smi_q(text)
    assert facts.lost == [LostGpu(pci_bus_id="0000:3b:00.0", index=1, error="Unknown Error")]
    assert len(facts.gpus) == 7 and "0000:3b:00.0" not in by_bus(facts)
    # the lost GPU keeps its NVML index: the ones after it are not renumbered
    assert [g.index for g in facts.gpus] == [0, 2, 3, 4, 5, 6, 7]
    assert by_bus(facts)["0000:4c:00.0"].index == 2


def test_q_lost_gpu_named_by_index_only():
    text = without_block(q_text("h100-8gpu-driver-535.161.08.txt"), "00000000:3B:00.0")
    facts = parse_nvidia_smi_q("Unable to determine the device handle for GPU 1: Unknown Error\n" + text)
    assert facts.lost == [LostGpu(pci_bus_id=None, index=1, error="Unknown Error")]
    assert [g.index for g in facts.gpus] == [0, 2, 3, 4, 5, 6, 7]


def test_q_every_gpu_lost():
    text = (
        "Unable to determine the device handle for GPU0000:19:00.0: Unknown Error\n"
        "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.  Reboot the system to recover this GPU\n"
        "No devices were found\n"
    )
    facts = parse_nvidia_smi_q(text)
    assert facts.gpus == [] and facts.init_error is None
    assert [(g.pci_bus_id, g.index) for g in facts.lost] == [("0000:19:00.0", 0), ("0000:3b:00.0", 1)]
    assert "Reboot" in facts.lost[1].error


def test_q_driver_not_loaded():
    facts = parse_nvidia_smi_q(DRIVER_FAILED)
    assert facts.init_error == "nvidia-smi: couldn't communicate with the NVIDIA driver"
    assert facts.gpus == [] and facts.source == "nvidia-smi -q"


def test_q_nvml_version_mismatch():
    facts = parse_nvidia_smi_q("Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 535.183\n")
    assert facts.init_error and "Driver/library version mismatch" in facts.init_error and facts.gpus == []


def test_q_no_devices():
    facts = parse_nvidia_smi_q("No devices were found\n")
    assert facts.gpus == [] and facts.lost == [] and facts.init_error is None


@pytest.mark.parametrize(
    "text",
    ["", "   \n\n", "hello world\n", "Timestamp : now\nDriver Version : 535.1\n", "\x00\x01\x02\xff" * 50,
     bytes(range(256)).decode("latin-1") * 4, "GPU 0000\n    Product Name : x\n", "==============NVSMI LOG==============\n"],
    ids=["empty", "blank", "words", "header-only", "binary", "all-bytes", "bad-gpu-line", "banner"],
)
def test_q_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_nvidia_smi_q(text)


def test_q_cut_before_first_product_name_is_a_parse_error():
    text = q_text("h100-8gpu-driver-535.161.08.txt")
    with pytest.raises(ParseError):
        parse_nvidia_smi_q(text[: text.index("    Product Name")])


def cut_points(text: str, n: int = 150) -> list[int]:
    step = max(1, len(text) // n)
    return sorted(set(range(0, len(text), step)) | {len(text) - 1})


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-q"), ids=lambda p: p.name)
def test_q_truncated_anywhere_gives_a_prefix_or_parse_error(path):
    text = path.read_text()
    full = [g.pci_bus_id for g in parse_nvidia_smi_q(text).gpus]
    for cut in cut_points(text):
        try:
            facts = parse_nvidia_smi_q(text[:cut])
        except ParseError:
            continue
        got = [g.pci_bus_id for g in facts.gpus]
        assert got == full[: len(got)], cut
        assert [g.index for g in facts.gpus] == list(range(len(got)))


# ---------------------------------------------------------------------------
# nvidia-smi --query-gpu: every corpus file
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-query-gpu"), ids=lambda p: p.name)
def test_every_query_corpus_file_parses(path):
    check_invariants(parse_nvidia_smi_query(path.read_text()), "nvidia-smi --query-gpu", path.name)


def test_query_h100_idle_and_load():
    idle = qcsv("h100-590-all-fields-idle.txt")
    (g,) = idle.gpus
    assert (idle.driver_version, idle.cuda_version) == ("590.48.01", None)  # no CUDA field in --query-gpu
    assert (g.name, g.pci_bus_id, g.index) == ("NVIDIA H100 80GB HBM3", "0000:00:09.0", 0)
    assert g.throttle_reasons == ["gpu_idle"]  # clocks_event_reasons.active 0x...01
    assert (g.temperature_c, g.memory_total_mib, g.memory_used_mib) == (41.0, 81559, 0)
    assert (g.retired_pages_sbe, g.retired_pages_dbe, g.retired_pages_pending) == (None, None, None)  # [N/A]
    assert (g.remapped_rows_correctable, g.remapped_rows_pending, g.remapped_rows_failure) == (0, False, False)
    assert (g.ecc_enabled, g.ecc_volatile_uncorrected, g.ecc_aggregate_corrected) == (True, 0, 0)
    assert (g.pcie_gen_current, g.pcie_gen_max, g.pcie_width_current, g.pcie_width_max) == (5, 5, 16, 16)
    assert (g.persistence_mode, g.mig_mode, g.performance_state, g.fabric_state) == (True, False, "P0", "Completed")
    assert g.processes is None and g.pcie_replays is None  # --query-gpu has neither
    (load,) = qcsv("h100-590-all-fields-load.txt").gpus
    assert (load.throttle_reasons, load.temperature_c, load.memory_used_mib) == ([], 59.0, 19818)


def test_query_h200_mig():
    (g,) = qcsv("h200-mig-590-all-fields-idle.txt").gpus
    assert (g.name, g.mig_mode, g.memory_total_mib) == ("NVIDIA H200", True, 143771)
    assert (g.remapped_rows_correctable, g.remapped_rows_pending) == (None, None)  # [N/A] in MIG mode


def test_query_l40s_595():
    facts = qcsv("l40s-595-all-fields-load.txt")
    (g,) = facts.gpus
    assert (facts.driver_version, g.name, g.pci_bus_id) == ("595.80", "NVIDIA L40S", "0000:01:00.0")
    assert (g.mig_mode, g.fabric_state, g.persistence_mode) == (None, None, False)  # [N/A], bare N/A
    assert (g.pcie_gen_max, g.pcie_width_max, g.memory_total_mib) == (4, 16, 46068)


def test_q_and_query_of_the_same_h100_agree():
    (a,) = q("h100-1gpu-driver-590.48.01-load.txt").gpus
    b_facts = qcsv("h100-590-all-fields-load.txt")
    (b,) = b_facts.gpus
    assert q("h100-1gpu-driver-590.48.01-load.txt").driver_version == b_facts.driver_version == "590.48.01"
    for field in ("index", "pci_bus_id", "name", "uuid", "serial", "vbios_version", "persistence_mode", "mig_mode",
                  "ecc_enabled", "ecc_volatile_corrected", "ecc_volatile_uncorrected", "ecc_aggregate_corrected",
                  "ecc_aggregate_uncorrected", "retired_pages_sbe", "retired_pages_dbe", "retired_pages_pending",
                  "remapped_rows_correctable", "remapped_rows_uncorrectable", "remapped_rows_pending",
                  "remapped_rows_failure", "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max",
                  "memory_total_mib", "fabric_state"):
        assert getattr(a, field) == getattr(b, field), field


# ---------------------------------------------------------------------------
# --query-gpu: columns by header, QUERY_FIELDS, noheader
# ---------------------------------------------------------------------------


def capture_columns(name: str) -> dict[str, str]:
    """A one-GPU capture as {field name without unit: value}."""
    header, row = list(csv.reader(io.StringIO(csv_text(name)), skipinitialspace=True))
    return {h.split(" [")[0]: v for h, v in zip(header, row, strict=True)}


def to_csv(header: list[str], rows: list[list[str]]) -> str:
    return "".join(", ".join(r) + "\n" for r in [header, *rows])


def test_query_any_subset_and_order_of_columns():
    cols = capture_columns("h100-590-all-fields-load.txt")
    pick = ["memory.used", "clocks_event_reasons.active", "name", "pci.bus_id", "ecc.mode.current", "temperature.gpu"]
    facts = parse_nvidia_smi_query(to_csv([f"{p} [MiB]" if p == "memory.used" else p for p in pick], [[cols[p] for p in pick]]))
    (g,) = facts.gpus
    assert (g.index, g.pci_bus_id, g.name, g.memory_used_mib, g.temperature_c, g.ecc_enabled) == (
        0, "0000:00:09.0", "NVIDIA H100 80GB HBM3", 19818, 59.0, True)
    assert g.throttle_reasons == [] and g.memory_total_mib is None and facts.driver_version is None


def test_query_fields_are_all_understood_and_reproduce_the_full_capture():
    cols = capture_columns("h100-590-all-fields-load.txt")
    # 590 answers the older throttle name with the same bitmask
    cols["clocks_throttle_reasons.active"] = cols["clocks_event_reasons.active"]
    assert len(set(QUERY_FIELDS)) == len(QUERY_FIELDS) and not set(QUERY_FIELDS) & set(NEWER_QUERY_FIELDS)
    assert all(f in cols for f in QUERY_FIELDS + NEWER_QUERY_FIELDS)
    mini = parse_nvidia_smi_query(to_csv(list(QUERY_FIELDS), [[cols[f] for f in QUERY_FIELDS]]))
    (full,) = qcsv("h100-590-all-fields-load.txt").gpus
    (g,) = mini.gpus
    assert mini.driver_version == "590.48.01"
    for field in ("index", "pci_bus_id", "name", "uuid", "serial", "vbios_version", "persistence_mode", "mig_mode",
                  "performance_state", "ecc_enabled", "ecc_volatile_corrected", "ecc_volatile_uncorrected",
                  "ecc_aggregate_corrected", "ecc_aggregate_uncorrected", "retired_pages_sbe", "retired_pages_dbe",
                  "retired_pages_pending", "temperature_c", "throttle_reasons", "pcie_gen_current", "pcie_gen_max",
                  "pcie_width_current", "pcie_width_max", "memory_total_mib", "memory_used_mib"):
        assert getattr(g, field) == getattr(full, field), field
        assert getattr(g, field) is not None or field.startswith("retired_pages"), field  # H100: [N/A]
    newer = parse_nvidia_smi_query(to_csv(["pci.bus_id", *NEWER_QUERY_FIELDS], [[cols[f] for f in ("pci.bus_id", *NEWER_QUERY_FIELDS)]]))
    assert (newer.gpus[0].remapped_rows_uncorrectable, newer.gpus[0].fabric_state) == (0, "Completed")


def test_query_noheader_needs_the_field_list():
    text = "0, 00000000:19:00.0, NVIDIA H100 80GB HBM3, 81559 MiB, 0x0000000000000088\n" \
           "1, 00000000:3B:00.0, NVIDIA H100 80GB HBM3, 81559 MiB, 0x0000000000000000\n"
    with pytest.raises(ParseError):
        parse_nvidia_smi_query(text)
    fields = ["index", "pci.bus_id", "name", "memory.total", "clocks_throttle_reasons.active"]
    facts = parse_nvidia_smi_query(text, fields=fields)
    assert [g.pci_bus_id for g in facts.gpus] == ["0000:19:00.0", "0000:3b:00.0"]
    assert facts.gpus[0].throttle_reasons == ["hw_slowdown", "hw_power_brake_slowdown"]  # 0x88
    assert facts.gpus[1].throttle_reasons == [] and facts.gpus[1].memory_total_mib == 81559
    # fields given but the header is there too: it is skipped, not read as a GPU
    with_header = "index, pci.bus_id, name, memory.total [MiB], clocks_throttle_reasons.active\n" + text
    assert parse_nvidia_smi_query(with_header, fields=fields) == facts
    # nounits values
    assert parse_nvidia_smi_query(text.replace(" MiB", ""), fields=fields) == facts


def test_query_per_reason_columns_when_no_bitmask():
    names = ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "hw_thermal_slowdown",
             "hw_power_brake_slowdown", "sw_thermal_slowdown", "sync_boost"]
    header = ["pci.bus_id"] + [f"clocks_throttle_reasons.{n}" for n in names]
    row = ["00000000:19:00.0"] + ["Active" if n in {"hw_slowdown", "hw_thermal_slowdown"} else "Not Active" for n in names]
    (g,) = parse_nvidia_smi_query(to_csv(header, [row])).gpus
    assert g.throttle_reasons == ["hw_slowdown", "hw_thermal_slowdown"]
    # one reason missing or unreadable: unknown, not "not active"
    (g,) = parse_nvidia_smi_query(to_csv(header[:-1], [row[:-1]])).gpus
    assert g.throttle_reasons is None
    (g,) = parse_nvidia_smi_query(to_csv(header, [row[:4] + ["[Unknown Error]"] + row[5:]])).gpus
    assert g.throttle_reasons is None


def test_query_unknown_cells_are_none():
    header = ["index", "pci.bus_id", "temperature.gpu", "ecc.errors.uncorrected.volatile.total", "memory.used [MiB]",
              "retired_pages.pending", "pcie.link.gen.max", "name"]
    row = ["0", "00000000:19:00.0", "ERR!", "[Unknown Error]", "[Not Supported]",
           "[Requested functionality has been deprecated]", "[N/A]", "[Unknown Error]"]
    (g,) = parse_nvidia_smi_query(to_csv(header, [row])).gpus
    assert (g.temperature_c, g.ecc_volatile_uncorrected, g.memory_used_mib, g.retired_pages_pending, g.pcie_gen_max, g.name) == (
        None, None, None, None, None, None)


def test_query_lost_gpu_and_failures():
    lost = "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n"
    name = "NVIDIA H100 80GB HBM3"
    facts = parse_nvidia_smi_query(lost + to_csv(["index", "pci.bus_id", "name"],
                                                 [["0", "00000000:19:00.0", name], ["2", "00000000:4C:00.0", name]]))
    assert [g.index for g in facts.gpus] == [0, 2]
    assert facts.lost == [LostGpu(pci_bus_id="0000:3b:00.0", index=1, error="Unknown Error")]
    # without an index column the rows are in NVML order, shifted past the lost GPU
    no_index = parse_nvidia_smi_query(lost + to_csv(["pci.bus_id", "name"], [["00000000:19:00.0", name], ["00000000:4C:00.0", name]]))
    assert [(g.index, g.pci_bus_id) for g in no_index.gpus] == [(0, "0000:19:00.0"), (2, "0000:4c:00.0")]
    assert parse_nvidia_smi_query(DRIVER_FAILED).init_error == "nvidia-smi: couldn't communicate with the NVIDIA driver"
    none = parse_nvidia_smi_query("No devices were found\n")
    assert none.gpus == [] and none.init_error is None and none.source == "nvidia-smi --query-gpu"


@pytest.mark.parametrize(
    "text",
    ["", " \n", "hello world\n", "index, name\n", "index, name\n0, A10\n", "pci.bus_id\nnot-a-bus\n",
     "index, pci.bus_id\n0, 00000000:19:00.0, extra\n", "\x00\x01\x02\xff" * 50, bytes(range(256)).decode("latin-1") * 4],
    ids=["empty", "blank", "words", "header-only", "no-bus-id-column", "bad-bus-id", "row-too-long", "binary", "all-bytes"],
)
def test_query_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_nvidia_smi_query(text)


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-query-gpu"), ids=lambda p: p.name)
def test_query_truncated_anywhere_never_crashes(path):
    text = path.read_text()
    (full,) = parse_nvidia_smi_query(text).gpus
    for cut in cut_points(text, 300):
        try:
            facts = parse_nvidia_smi_query(text[:cut])
        except ParseError:
            continue
        assert [g.pci_bus_id for g in facts.gpus] in ([], [full.pci_bus_id])


# ---------------------------------------------------------------------------
# Fuzz: text that looks a little like nvidia-smi output
# ---------------------------------------------------------------------------

_FRAGMENTS = st.sampled_from([
    "GPU 00000000:19:00.0\n", "    Product Name : NVIDIA H100\n", "    PCI\n", "        Bus Id : 00000000:19:00.0\n",
    "    ECC Errors\n", "        Volatile\n", "            SRAM Correctable : 3\n", "            Single Bit\n",
    "                Total : N/A\n", "    Clocks Event Reasons\n", "        HW Slowdown : Active\n",
    "    Processes\n", "        Process ID : 12\n", "            Used GPU Memory : 4 MiB\n", "    Processes : None\n",
    "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n", "No devices were found\n",
    "index, pci.bus_id, name, memory.total [MiB]\n", "0, 00000000:19:00.0, A, 8 MiB\n", "[N/A], ", "\x00", "\n", ":",
])
_TEXT = st.one_of(st.text(max_size=300), st.lists(_FRAGMENTS | st.text(max_size=12), max_size=30).map("".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT)
def test_fuzz_both_parsers_return_facts_or_parse_error(text):
    for parse in (parse_nvidia_smi_q, parse_nvidia_smi_query):
        try:
            facts = parse(text)
        except ParseError:
            continue
        assert isinstance(facts, GpuFacts)
        msgspec.json.decode(msgspec.json.encode(facts), type=GpuFacts)


# ---------------------------------------------------------------------------
# nvidia-smi -q -d SECTION[,SECTION]: blocks without a Product Name (issue 20)
# ---------------------------------------------------------------------------

FIELD_Q = FIXTURES / "field" / "issues" / "nvidia-smi-q"


def test_q_d_fragment_is_a_gpu_keyed_by_its_bus_id():
    # real: `nvidia-smi -q -d MEMORY,PERFORMANCE` on an RTX PRO 6000 VM, driver 580, with a
    # top-level "vGPU Driver Capability" block and "CUDA Version : Not Found"
    facts = parse_nvidia_smi_q((FIELD_Q / "rtx-pro-6000-q-d-memory-performance-580.txt").read_text())
    (g,) = facts.gpus
    assert (g.index, g.pci_bus_id, g.name) == (0, "0000:42:00.0", None)
    assert g.performance_state == "P8"
    assert g.throttle_reasons == []  # every reason listed, none active; the Counters section is not read as reasons
    assert (facts.driver_version, facts.cuda_version) == ("580.105.06", None)  # "Not Found" is no version


def _only_sections(text: str, sections: tuple[str, ...]) -> str:
    """A whole -q report cut down to what `-q -d` prints: the top lines, each GPU's header
    line and the named sections (a transformation of a real capture, not a capture)."""
    out, keep = [], True
    for line in text.splitlines():
        if not line.startswith(" "):
            keep = True
        elif not line.startswith("     "):  # a section's first line (4-space indent)
            keep = line.strip().split(" :")[0].strip() in sections
        if keep and not line.strip().startswith("Product Name"):
            out.append(line)
    return "\n".join(out) + "\n"


def test_q_d_ecc_and_row_remapper_fragments_keep_every_gpu_and_its_counters():
    full = q("h100-8gpu-driver-535.161.08.txt")
    fragment = parse_nvidia_smi_q(_only_sections(q_text("h100-8gpu-driver-535.161.08.txt"),
                                                 ("ECC Mode", "ECC Errors", "Remapped Rows")))
    assert [g.pci_bus_id for g in fragment.gpus] == [g.pci_bus_id for g in full.gpus]
    assert [g.index for g in fragment.gpus] == list(range(8))
    for whole, part in zip(full.gpus, fragment.gpus, strict=True):
        assert part.name is None and part.performance_state is None
        for field in ("ecc_enabled", "ecc_volatile_uncorrected", "ecc_aggregate_corrected",
                      "remapped_rows_correctable", "remapped_rows_pending", "remapped_rows_failure"):
            assert getattr(part, field) == getattr(whole, field) is not None, field


def test_q_block_cut_inside_its_first_line_is_still_refused():
    text = q_text("h100-8gpu-driver-535.161.08.txt")
    cut = text.index("    Product Name") + len("    Product Na")
    with pytest.raises(ParseError):
        parse_nvidia_smi_q(text[:cut])


def test_q_first_block_cut_before_its_pci_section_is_a_gpu_with_what_it_has():
    # a transformation of a real capture: cut where a paste ended, after the first GPU's
    # identity lines and before its PCI section (which repeats the bus id)
    text = q_text("h100-8gpu-driver-535.161.08.txt")
    facts = parse_nvidia_smi_q(text[: text.index("    PCI\n")])
    (g,) = facts.gpus
    whole = q("h100-8gpu-driver-535.161.08.txt").gpus[0]
    assert (g.pci_bus_id, g.name, g.uuid, g.persistence_mode) == (whole.pci_bus_id, whole.name, whole.uuid, True)
    assert g.pcie_gen_current is None and g.ecc_volatile_uncorrected is None  # not reached: unknown


def test_q_virtualization_mode():
    (g,) = q("a10-1gpu-driver-535.129.03.txt").gpus
    assert g.virtualization_mode == "Pass-Through"
    (t,) = q("titanv-driver-560.35.03.txt").gpus
    assert t.virtualization_mode == "None"  # bare metal, as printed


# ---- lines grep'd out of -q (issue 20; field corpus, tuning)

FIELD_ALL = FIXTURES / "field"


def test_lines_grepped_out_of_q_are_a_fragment_for_hc_parse_and_refused_by_the_probe():
    """`nvidia-smi -q | grep "GSP"` after a prompt and another command: no GPU block, so no
    GPU is made of it; `hc parse` keeps the lines by key. The probe's parse (whole
    reports only) still refuses it and falls back to --query-gpu."""
    from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q_pasted

    text = (FIELD_ALL / "repos/nvidia-smi-q/grep-gsp-firmware-version-na-after-modprobe-conf.txt").read_text()
    facts = parse_nvidia_smi_q_pasted(text)
    assert facts.gpus == [] and facts.fragment == {"gsp_firmware_version": ["N/A"]}
    with pytest.raises(ParseError, match="no 'GPU"):
        parse_nvidia_smi_q(text)


def test_a_grep_of_a_real_full_report_keeps_each_gpus_value_in_order():
    """The real H100 -q report grep'd here for its identity lines (as `grep -E` would)."""
    from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q_pasted

    full = (FIELD_ALL / "device/nvidia-smi-q/h100-q-full-580.159.04.txt").read_text().splitlines()
    kept = [line for line in full if re.search(r"Product Name|GSP Firmware Version", line)]
    facts = parse_nvidia_smi_q_pasted("\n".join(kept) + "\n")
    whole = parse_nvidia_smi_q("\n".join(full) + "\n")
    assert facts.fragment["product_name"] == [g.name for g in whole.gpus]
    assert len(facts.fragment["gsp_firmware_version"]) == len(whole.gpus)
