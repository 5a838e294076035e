"""The mechanisms behind the field files of issue 20's fourth held-out set (`issues-4/`,
retired as a measure when its misses were fixed; each shape fixed here on the real file
and, where one exists, on a transformation of another real fixture, which says so): a
topology matrix whose rows were cut under a header naming every device.
"""

from __future__ import annotations

from support import CORPUS, FIXTURES

from healthcheck.parsers.nvidia_topo import parse_nvidia_topo

FIELD4 = FIXTURES / "field" / "issues-4"
TOPO_DGX = FIELD4 / "nvidia-smi-topo" / "dgx-a100-12-nics-nv12-pxb-rows-cut.txt"
TOPO_18_NICS = FIELD4 / "nvidia-smi-topo" / "root-prompt-18-nics-irregular-spacing-gpu0-3.txt"
TOPO_H100 = CORPUS / "nvidia-smi-topo" / "h100-8gpu-nv18.txt"

GPUS8 = [f"GPU{i}" for i in range(8)]


# --- nvidia-smi topo -m: a header names devices whose rows were cut ------------------------

def test_topo_rows_cut_under_a_header_keep_every_device_it_names():
    # field/issues-4: a DGX A100's matrix cut after GPU3's row; the header names 8 GPUs, 12 NICs
    topo = parse_nvidia_topo(TOPO_DGX.read_text())
    nics = [f"NIC{i}" for i in range(12)]
    assert topo.devices == GPUS8 + nics
    assert topo.devices_without_row == GPUS8[4:] + nics
    assert sorted(topo.links) == GPUS8[:4]  # links only where a row was pasted
    assert topo.links["GPU0"]["NIC11"] == "SYS" and topo.links["GPU2"]["NIC2"] == "PXB"
    assert "GPU4" not in topo.cpu_affinity


def test_topo_header_with_18_nics_one_column_wider_keeps_every_nic():
    topo = parse_nvidia_topo(TOPO_18_NICS.read_text())
    assert topo.devices[-1] == "NIC17" and len(topo.devices) == 8 + 18
    assert topo.links["GPU3"]["NIC8"] == "PXB" and topo.links["GPU3"]["NIC17"] == "SYS"


def test_topo_real_capture_with_its_last_rows_cut_lists_them_without_links():
    # a transformation of a real capture: the h100 matrix's header and its first three rows
    text = "".join(TOPO_H100.read_text().splitlines(True)[:4])
    topo = parse_nvidia_topo(text)
    assert topo.devices == GPUS8 and topo.devices_without_row == GPUS8[3:]
    assert set(topo.links) == set(GPUS8[:3]) and topo.links["GPU2"]["GPU7"] == "NV18"


def test_topo_whole_capture_has_no_device_without_a_row():
    topo = parse_nvidia_topo(TOPO_H100.read_text())
    assert topo.devices == GPUS8 and topo.devices_without_row == []
