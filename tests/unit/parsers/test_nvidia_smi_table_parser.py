"""`nvidia-smi` default table parser: every capture (corpus and tests/fixtures/nvidia-smi),
ERR! cells, MIG devices, processes, the one-line failures, garbage, truncation, the CLI."""

from __future__ import annotations

import json
import re

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import CORPUS, FIXTURES, run_hc_inproc

from healthcheck.core.errors import ParseError
from healthcheck.parsers import parser_for
from healthcheck.parsers.gpu_common import LostGpu
from healthcheck.parsers.nvidia_smi_table import SmiTable, parse_nvidia_smi_table

DIR = FIXTURES / "nvidia-smi"
CAPTURES = sorted((CORPUS / "nvidia-smi").glob("*.txt")) + sorted(DIR.glob("*.txt"))
PCI = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
DRIVER_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n\n"
)


def table(name: str) -> SmiTable:
    path = DIR / name if (DIR / name).exists() else CORPUS / "nvidia-smi" / name
    return parse_nvidia_smi_table(path.read_text())


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_every_capture_parses_with_consistent_gpus(path):
    facts = parse_nvidia_smi_table(path.read_text())
    assert facts.gpus and facts.init_error is None and not facts.no_devices
    assert len({g.index for g in facts.gpus}) == len(facts.gpus)
    for g in facts.gpus:
        assert g.pci_bus_id is not None and PCI.match(g.pci_bus_id)
        assert g.name and g.memory_total_mib and g.memory_used_mib is not None
        assert g.memory_used_mib <= g.memory_total_mib
        assert g.temperature_c is not None and 0 < g.temperature_c < 120
        assert g.performance_state is not None and re.fullmatch(r"P\d+", g.performance_state)
        assert g.power_limit_w is None or g.power_draw_w is None or g.power_draw_w <= g.power_limit_w
        assert set(g.errors) <= {"fan", "power_draw"}  # the only ERR! cells in these captures
    # the driver version is in the file name, where the capture has a banner
    version = re.search(r"-(\d{3}\.\d+(?:\.\d+)?)\.txt$", path.name)
    if version:
        assert facts.driver_version == version.group(1)
    count = re.search(r"(\d+)gpu", path.name)
    if count:
        assert len(facts.gpus) == int(count.group(1))
    for p in facts.processes or []:
        assert p.gpu in {g.index for g in facts.gpus} and p.pid is not None and p.pid > 0
    assert msgspec.json.decode(msgspec.json.encode(facts), type=SmiTable) == facts


def test_h100_8gpu_idle():
    facts = table("h100-8gpu-550.90.07.txt")
    assert (facts.driver_version, facts.cuda_version, facts.timestamp) == ("550.90.07", "12.4", "Mon Jan 20 10:18:26 2025")
    assert [g.pci_bus_id for g in facts.gpus][:2] == ["0000:19:00.0", "0000:3b:00.0"]
    g = facts.gpus[0]
    assert (g.name, g.persistence_mode, g.display_active, g.ecc_volatile_uncorrected) == ("NVIDIA H100 80GB HBM3", True, False, 0)
    assert (g.fan_pct, g.temperature_c, g.power_draw_w, g.power_limit_w) == (None, 27, 72.0, 700.0)  # fan N/A
    assert (g.memory_used_mib, g.memory_total_mib, g.utilization_pct, g.compute_mode, g.mig_mode) == (1, 81559, 0, "Default", False)
    assert facts.processes == [] and facts.mig_devices == []


def test_err_cells_are_markers_never_numbers():
    (g,) = table("rtx-err-fan-525.125.06.txt").gpus
    assert g.errors == ["fan"] and g.fan_pct is None
    assert (g.temperature_c, g.power_draw_w, g.compute_mode) == (38, 49.0, "E. Process")
    (v100,) = table("fragment-v100-power-err-azure.txt").gpus  # a pasted fragment: no banner
    assert v100.errors == ["power_draw"] and v100.power_draw_w is None and v100.power_limit_w == 250.0
    assert (v100.index, v100.pci_bus_id, v100.name) == (1, "8ed0:00:00.0", "Tesla V100-PCIE...")
    # N/A is not an error: the same cell reads None with nothing in errors
    assert table("h100-8gpu-550.90.07.txt").gpus[0].errors == []
    # every cell of a GPU that fell off the bus
    lost = ("|   0  NVIDIA H100 80GB HBM3          On  |   00000000:19:00.0 Off |                 ERR! |\n"
            "|ERR!  ERR!   ERR!            ERR! / ERR! |   ERR! /  81559MiB |    ERR!      Default |\n"
            "|                                         |                        |                 ERR! |\n")
    (g,) = parse_nvidia_smi_table(lost).gpus
    assert set(g.errors) == {"ecc", "fan", "temperature", "performance_state", "power_draw", "power_limit",
                             "memory_used", "utilization", "mig_mode"}
    assert (g.fan_pct, g.temperature_c, g.power_draw_w, g.memory_used_mib, g.memory_total_mib) == (None, None, None, None, 81559)


def test_mig_devices_and_processes_with_gi_ci():
    facts = table("h100-mig-load-gi-ci-processes-590.48.01.txt")
    (g,) = facts.gpus
    assert (g.mig_mode, g.ecc_enabled, g.ecc_volatile_uncorrected, g.utilization_pct) == (True, True, None, None)
    assert [(m.gi, m.ci, m.mig_dev, m.sm_count) for m in facts.mig_devices] == [(2, 0, 0, 60), (3, 0, 1, 32), (9, 0, 2, 16), (10, 0, 3, 16)]
    m = facts.mig_devices[0]
    assert (m.memory_used_mib, m.memory_total_mib, m.bar1_used_mib, m.bar1_total_mib) == (11091, 40448, 0, 24739)
    assert (m.ce, m.enc, m.dec, m.ofa, m.jpg, m.ecc_volatile_uncorrected) == (3, 0, 3, 0, 3, 0)
    assert [(p.gi, p.ci, p.pid, p.type, p.name, p.used_memory_mib) for p in facts.processes or []] == [
        (2, 0, 21180, "C", "/root/tools/memhog", 2296), (2, 0, 21181, "C", "/root/tools/memhog", 1272),
        (2, 0, 21198, "C", "./gpu_burn", 7484)]
    corpus = table("h200-mig-590-default-table.txt")
    assert len(corpus.mig_devices) == 5 and corpus.mig_devices[1].ci == 1 and corpus.processes == []


def test_process_tables_across_driver_generations():
    old = table("gtx1080-3gpu-old-layout-no-cuda-version-390.77.txt")  # no GI/CI, no CUDA version
    assert (old.driver_version, old.cuda_version, len(old.gpus)) == ("390.77", None, 3)
    assert [(p.gpu, p.pid, p.gi, p.type, p.name, p.used_memory_mib) for p in old.processes or []] == [
        (i, 4910, None, "C", "/usr/bin/xmr-stak", 2203) for i in range(3)]
    assert old.gpus[0].mig_mode is None and old.gpus[0].fan_pct == 37  # two rows per GPU before 450
    p100 = table("p100-8gpu-one-process-per-gpu-384.81.txt")
    assert [p.gpu for p in p100.processes or []] == list(range(8)) and p100.gpus[0].utilization_pct == 97
    burn = table("h100-load-gpu-burn-processes-590.48.01.txt")
    assert [(p.gi, p.pid, p.name) for p in burn.processes or []][-1] == (None, 11345, "./gpu_burn")  # GI N/A
    kinds = {p.type for p in table("rtx4080-load-c+g-display-on-595.71.05.txt").processes or []}
    assert kinds == {"C", "G", "C+G"}
    assert table("rtx4080-load-c+g-display-on-595.71.05.txt").gpus[0].display_active is True


def test_610_and_windows():
    new = table("rtx2080-kmd-version-graphics-processes-610.57.04.txt")  # KMD / CUDA UMD Version
    assert (new.driver_version, new.cuda_version) == ("610.57.04", "13.3")
    assert new.gpus[0].name == "NVIDIA GeForce RTX 2080 ..."  # cut as printed
    win = table("windows-rtx2080-wddm-na-memory-610.62.txt")
    (g,) = win.gpus
    assert (g.driver_model, g.persistence_mode) == ("WDDM", None)
    procs = win.processes or []
    assert len(procs) == 21 and all(p.used_memory_mib is None for p in procs)  # N/A under WDDM
    assert "...IA App\\CEF\\NVIDIA Overlay.exe" in {p.name for p in procs}  # a name with a space


def test_one_line_failures_are_facts():
    assert parse_nvidia_smi_table(DRIVER_FAILED).init_error == "nvidia-smi: couldn't communicate with the NVIDIA driver"
    none = parse_nvidia_smi_table("No devices were found\n")
    assert none.no_devices and none.gpus == [] and none.init_error is None
    lost = parse_nvidia_smi_table("Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n")
    assert lost.lost == [LostGpu(pci_bus_id="0000:3b:00.0", error="Unknown Error")] and lost.gpus == []
    nvml = parse_nvidia_smi_table("Failed to initialize NVML: Driver/library version mismatch\n")
    assert nvml.init_error == "nvidia-smi: Failed to initialize NVML: Driver/library version mismatch"


def test_indented_paste_reads_the_same():
    text = (DIR / "p100-8gpu-one-process-per-gpu-384.81.txt").read_text()
    indented = "".join("    " + line for line in text.splitlines(keepends=True))
    assert parse_nvidia_smi_table(indented) == parse_nvidia_smi_table(text)


@pytest.mark.parametrize(
    "text",
    ["hello world\n", "| a | b | c |\n", "+----+\n|====|\n", "\x00\x01\x02\xff" * 50, bytes(range(256)).decode("latin-1") * 4],
    ids=["words", "cells", "borders", "binary", "all-bytes"],
)
def test_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_nvidia_smi_table(text)
    with pytest.raises(ParseError):
        parser_for("nvidia-smi")(" \n")


def test_a_banner_alone_gives_its_versions_and_says_the_table_was_cut():
    # no GPU read is not "no GPU" (field/issues-5 holds a real one: test_parsers_held_out_5.py)
    text = "+---+\n| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |\n+---+\n"
    table = parse_nvidia_smi_table(text)
    assert (table.driver_version, table.cut_before_gpus, table.gpus, table.no_devices) == ("550.90.07", True, [], False)


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_truncated_anywhere_gives_a_prefix_or_parse_error(path):
    text = path.read_text()
    full = [g.pci_bus_id for g in parse_nvidia_smi_table(text).gpus]
    step = max(1, len(text) // 120)
    for cut in range(0, len(text), step):
        try:
            facts = parse_nvidia_smi_table(text[:cut])
        except ParseError:
            continue
        got = [g.pci_bus_id for g in facts.gpus]
        assert got == full[: len(got)] or got[:-1] == full[: len(got) - 1], cut  # the last may be cut mid-row


_FRAGMENTS = st.sampled_from([
    "| NVIDIA-SMI 550.90.07   Driver Version: 550.90.07   CUDA Version: 12.4 |\n",
    "| GPU  Name   Persistence-M | Bus-Id   Disp.A | Volatile Uncorr. ECC |\n", "|====+====+====|\n",
    "|   0  NVIDIA H100  On  | 00000000:19:00.0 Off |  0 |\n", "| N/A 27C P0 72W / 700W | 1MiB / 81559MiB | 0% Default |\n",
    "|   |   |  Disabled |\n", "+----+----+----+\n", "| Processes: |\n", "|  GPU GI CI PID Type Process name GPU Memory |\n",
    "|    0   N/A  N/A  11327  C  /bin/x   2566MiB |\n", "| MIG devices: |\n", "|  0  2  0  0 | 1MiB / 2MiB | 16 0 | 3 0 3 0 3 |\n",
    "ERR!", "|", "\n", " / ", "No devices were found\n",
])
_TEXT = st.one_of(st.text(max_size=300), st.lists(_FRAGMENTS | st.text(max_size=12), max_size=30).map("".join))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT)
def test_fuzz_returns_facts_or_parse_error(text):
    try:
        facts = parse_nvidia_smi_table(text)
    except ParseError:
        return
    msgspec.json.decode(msgspec.json.encode(facts), type=SmiTable)


@pytest.mark.parametrize("fmt", [(), ("--format", "json")], ids=["default", "json"])
def test_hc_parse_nvidia_smi(fmt):
    r = run_hc_inproc("parse", "nvidia-smi", str(DIR / "h100-mig-load-gi-ci-processes-590.48.01.txt"), *fmt)
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["tool"] == "nvidia-smi" and data["facts"]["gpus"][0]["mig_mode"] is True
    assert len(data["facts"]["processes"]) == 3 and len(data["facts"]["mig_devices"]) == 4
    r = run_hc_inproc("parse", "nvidia-smi", "-", input=b"not a table\n")
    assert r.returncode == 4 and r.stderr.startswith(b"hc: error: nvidia-smi:") and r.stderr.count(b"\n") == 1


def test_every_fixture_has_its_source_listed():
    listed = (DIR / "SOURCES.md").read_text()
    assert [p.name for p in sorted(DIR.glob("*.txt")) if f"`{p.name}`" not in listed] == []


def test_lines_outside_the_tables_that_say_nothing_are_counted_as_evidence():
    # field/issues-3/nvidia-smi/prompts-kill-ps-then-410-...: a `ps | grep` line among the
    # prompts before the table; its prompts are the paste's, its table is read
    path = FIXTURES / "field" / "issues-3" / "nvidia-smi" / "prompts-kill-ps-then-410-v100-dgxs-processes-cut.txt"
    table = parse_nvidia_smi_table(path.read_text())
    assert table.unrecognized.count == 1 and "grep --color=auto" in table.unrecognized.sample[0].text
    # a clean table leaves nothing unread (and says nothing of it)
    clean = parse_nvidia_smi_table((FIXTURES / "corpus" / "nvidia-smi" / "h100-8gpu-550.90.07.txt").read_text())
    assert clean.unrecognized.count == 0 and "unrecognized" not in msgspec.to_builtins(clean)
