"""`nvidia-smi --query-gpu` keeps every field it is given (issue 12): every column of every
corpus capture is in Gpu.query_fields, and utilisation, clocks and power are typed."""

from __future__ import annotations

import csv
import io

import pytest
from support import CORPUS, corpus_files

from healthcheck.parsers.nvidia_smi_query import QUERY_FIELDS, parse_nvidia_smi_query

CSV_DIR = CORPUS / "nvidia-smi-query-gpu"


def header_and_row(text: str) -> tuple[list[str], list[str]]:
    header, row = list(csv.reader(io.StringIO(text), skipinitialspace=True))[:2]
    return [h.split(" [")[0].strip().lower() for h in header], [c.strip() for c in row]


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-query-gpu"), ids=lambda p: p.name)
def test_every_column_is_kept(path):
    text = path.read_text()
    names, cells = header_and_row(text)
    (g,) = parse_nvidia_smi_query(text).gpus
    assert g.query_fields is not None and list(g.query_fields) == list(dict.fromkeys(names))
    for name, cell in zip(names, cells, strict=True):
        value = g.query_fields[name]
        if cell.startswith("[") or cell in {"N/A", ""}:
            assert value is None, name
        elif isinstance(value, (int, float)):
            assert float(cell.split()[0]) == value, name  # "631.95 W" -> 631.95
        else:
            assert value == cell, name  # text as printed: "0x0000", "Enabled", "96.00.A5.00.01"
    # identifiers stay text even where they look like numbers
    assert isinstance(g.query_fields["serial"], str) and isinstance(g.query_fields["inforom.oem"], (str, type(None)))


def test_load_capture_typed_fields():
    (g,) = parse_nvidia_smi_query((CSV_DIR / "h100-590-all-fields-load.txt").read_text()).gpus
    assert (g.utilization_gpu_pct, g.utilization_memory_pct, g.fan_speed_pct) == (100.0, 11.0, None)  # H100: fan [N/A]
    assert (g.power_draw_w, g.power_limit_w) == (631.95, 700.0)
    assert (g.clocks_graphics_mhz, g.clocks_sm_mhz, g.clocks_memory_mhz, g.compute_mode) == (1980.0, 1980.0, 2619.0, "Default")
    assert g.query_fields is not None and g.query_fields["power.draw"] == g.power_draw_w
    (idle,) = parse_nvidia_smi_query((CSV_DIR / "h100-590-all-fields-idle.txt").read_text()).gpus
    assert idle.utilization_gpu_pct == 0.0 and idle.power_draw_w is not None and idle.power_draw_w < g.power_draw_w


def test_what_hc_asks_for_is_all_kept_and_aliases_are_read():
    text = "index, pci.bus_id, utilization.gpu [%], clocks.sm [MHz], power.limit [W], fan.speed [%]\n" \
           "0, 00000000:19:00.0, 37 %, 1410 MHz, 400.00 W, 55 %\n"
    (g,) = parse_nvidia_smi_query(text).gpus
    assert (g.utilization_gpu_pct, g.clocks_sm_mhz, g.power_limit_w, g.fan_speed_pct) == (37.0, 1410.0, 400.0, 55.0)
    assert g.query_fields == {"index": 0, "pci.bus_id": "00000000:19:00.0", "utilization.gpu": 37, "clocks.sm": 1410,
                              "power.limit": 400.0, "fan.speed": 55}
    # hc's own field list: every one of them lands in query_fields
    row = ", ".join(["0", "00000000:19:00.0"] + ["[N/A]"] * (len(QUERY_FIELDS) - 2))
    (mini,) = parse_nvidia_smi_query(", ".join(QUERY_FIELDS) + "\n" + row + "\n").gpus
    assert mini.query_fields is not None and set(mini.query_fields) == set(QUERY_FIELDS)


def test_a_huge_cell_is_cut():
    text = "pci.bus_id, name\n00000000:19:00.0, " + "x" * 100_000 + "\n"
    (g,) = parse_nvidia_smi_query(text).gpus
    assert g.query_fields is not None and len(str(g.query_fields["name"])) < 400
