"""`nvidia-smi topo -m` and `nvidia-smi nvlink -s` parsers on every corpus capture,
damaged copies, truncations and garbage."""

from __future__ import annotations

import random
import re
import time

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import CORPUS, FIXTURES, corpus_files

from healthcheck.core.errors import ParseError
from healthcheck.parsers.nvidia_topo import Topology, parse_nvidia_topo
from healthcheck.parsers.nvlink_status import NvLinkStatus, parse_nvlink_status

GPUS8 = [f"GPU{i}" for i in range(8)]

# --- nvidia-smi topo -m ------------------------------------------------------------------

# file -> (devices, the one link type between GPUs, CPU affinity of GPU0 and GPU7, NUMA of GPU0/GPU7, nics)
TOPO_FACTS = {
    "a100-8gpu-nv12.txt": (GPUS8, "NV12", ("0-23", "24-47"), ("0", "1"), {}),
    "h100-1gpu-vm-ansi-underline.txt": (["GPU0"], None, ("0-19", None), ("0", None), {}),
    "h100-8gpu-nv18.txt": (GPUS8, "NV18", ("0-51", "52-103"), ("0", "1"), {}),
    "h800-8gpu-nv8-4nic-truncated-copy.txt": (
        GPUS8 + ["NIC0", "NIC1", "NIC2", "NIC3"],
        "NV8",
        ("-31,64-95", "2-63,96-127"),  # the damaged copy's values, as printed
        ("0", "1"),
        {f"NIC{i}": f"mlx5_{i}" for i in range(4)},
    ),
}


def test_every_topo_file_has_its_facts_listed():
    assert sorted(p.name for p in corpus_files("nvidia-smi-topo")) == sorted(TOPO_FACTS)


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-topo"), ids=lambda p: p.name)
def test_every_topo_capture(path):
    devices, link, cpus, numas, nics = TOPO_FACTS[path.name]
    topo = parse_nvidia_topo(path.read_text())
    assert topo.devices == devices
    gpus = [d for d in devices if d.startswith("GPU")]
    gpu_links = {topo.links[a][b] for a in gpus for b in gpus if a != b}
    assert gpu_links == ({link} if link else set())
    assert all(a not in topo.links[a] for a in devices)  # no self ("X") entries
    assert (topo.cpu_affinity.get("GPU0"), topo.cpu_affinity.get("GPU7")) == cpus
    assert (topo.numa_affinity.get("GPU0"), topo.numa_affinity.get("GPU7")) == numas
    assert topo.nics == nics
    assert msgspec.json.decode(msgspec.json.encode(topo), type=Topology) == topo


def test_topo_nv18_example():
    topo = parse_nvidia_topo((CORPUS / "nvidia-smi-topo/h100-8gpu-nv18.txt").read_text())
    assert topo.links["GPU0"]["GPU1"] == "NV18"
    assert len(topo.links["GPU3"]) == 7


def test_topo_nic_rows_give_gpu_affinity():
    topo = parse_nvidia_topo((CORPUS / "nvidia-smi-topo/h800-8gpu-nv8-4nic-truncated-copy.txt").read_text())
    pix = {nic: [g for g, v in topo.links[nic].items() if v == "PIX"] for nic in ("NIC0", "NIC1", "NIC2", "NIC3")}
    assert pix == {"NIC0": ["GPU1"], "NIC1": ["GPU3"], "NIC2": ["GPU7"], "NIC3": ["GPU7"]}
    assert topo.links["NIC0"]["GPU4"] == "SYS" and topo.links["NIC2"]["GPU4"] == "NODE"
    assert "NIC0" not in topo.cpu_affinity  # NIC rows have no affinity columns


def test_topo_ansi_tab_capture_is_one_gpu():
    text = (CORPUS / "nvidia-smi-topo/h100-1gpu-vm-ansi-underline.txt").read_text()
    assert "\x1b[4m" in text and "\t" in text
    topo = parse_nvidia_topo(text)
    assert topo.links == {"GPU0": {}}


def test_topo_header_without_indentation_and_old_mlx_labels():
    text = (
        "GPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
        "GPU0\t X \tNV12\tPXB\t0-23\n"
        "GPU1\tNV12\t X \tSYS\t24-47\n"
        "mlx5_0\tPXB\tSYS\t X \n"
    )
    topo = parse_nvidia_topo(text)
    assert topo.devices == ["GPU0", "GPU1", "mlx5_0"]
    assert topo.links["GPU0"] == {"GPU1": "NV12", "mlx5_0": "PXB"}
    assert topo.links["mlx5_0"] == {"GPU0": "PXB", "GPU1": "SYS"}
    assert topo.cpu_affinity == {"GPU0": "0-23", "GPU1": "24-47"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "garbage",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "Legend:\n\n  X    = Self\n",
        "\x00\x1b[4m\xff",
    ],
)
def test_topo_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_nvidia_topo(text)
    assert "\n" not in str(info.value)


def test_topo_header_with_nothing_under_it_names_its_devices():
    """Pinned as garbage before: a header names the node's devices (what `devices_without_row`
    already kept from a paste cut after a few rows), so it is read, no link, `incomplete` saying so."""
    topo = parse_nvidia_topo("      GPU0  GPU1  CPU Affinity\n")
    assert (topo.devices, topo.links, topo.devices_without_row) == (["GPU0", "GPU1"], {}, ["GPU0", "GPU1"])
    assert topo.incomplete


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-topo"), ids=lambda p: p.name)
def test_topo_truncated_captures(path):
    text = path.read_text()
    full = parse_nvidia_topo(text)
    for cut in range(len(text)):
        try:
            topo = parse_nvidia_topo(text[:cut])
        except ParseError:
            continue
        assert set(topo.devices) <= set(full.devices)
        assert set(topo.nics) <= set(full.nics)


def _without_header(text: str, indent: str = "") -> str:
    """A transformation of a real capture: the matrix pasted without its header row (the
    first line naming GPU0 that has no "X"), each line behind `indent`."""
    lines = text.splitlines()
    header = next(i for i, line in enumerate(lines) if "GPU0" in line and " X " not in f" {line} ")
    return "".join(indent + line + "\n" for i, line in enumerate(lines) if i != header)


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-topo"), ids=lambda p: p.name)
@pytest.mark.parametrize("indent", ["", "    "])
def test_topo_matrix_pasted_without_its_header_row(path, indent):
    full = parse_nvidia_topo(path.read_text())
    topo = parse_nvidia_topo(_without_header(path.read_text(), indent))
    assert topo.devices == full.devices
    assert topo.links == full.links  # the diagonal names each column: GPU-to-GPU links under the same keys
    assert (topo.cpu_affinity, topo.numa_affinity, topo.nics) == (full.cpu_affinity, full.numa_affinity, full.nics)


def test_topo_without_header_and_with_rows_cut_names_only_what_the_rows_tell():
    # the last three GPU rows cut too: columns 5-7 hold NV18 in the rows left, and NVLink joins
    # GPUs only, so they are GPU5-7's (nvidia-smi lists GPUs first); no row of theirs: no device
    text = "".join(_without_header((CORPUS / "nvidia-smi-topo/h100-8gpu-nv18.txt").read_text()).splitlines(True)[:5])
    topo = parse_nvidia_topo(text)
    assert topo.devices == GPUS8[:5]
    assert topo.links["GPU0"] == {f"GPU{i}": "NV18" for i in range(1, 8)}
    assert topo.cpu_affinity["GPU4"] == "52-103"


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-topo"), ids=lambda p: p.name)
def test_topo_whose_whitespace_a_paste_squeezed_to_one_space(path):
    # a transformation of a real capture: every run of tabs and spaces made one space, so
    # "CPU Affinity NUMA Affinity GPU NUMA ID" is no longer split by its whitespace
    text = path.read_text()
    squeezed = "".join(" " + " ".join(line.split()) + "\n" for line in text.splitlines())
    full, topo = parse_nvidia_topo(text), parse_nvidia_topo(squeezed)
    assert (topo.devices, topo.links, topo.cpu_affinity, topo.numa_affinity, topo.nics) == (
        full.devices, full.links, full.cpu_affinity, full.numa_affinity, full.nics)


def _with_nic_columns(text: str) -> str:
    """SYNTHETIC, built from the real h800 capture: its GPU rows given the NIC columns the
    terminal copy cut (each GPU-NIC value taken from the NIC's own row, the matrix being
    symmetric) and its NIC rows their NIC columns; the NIC-to-NIC values are not in the
    capture and are set to SYS, the diagonal to X. No header row."""
    lines = text.splitlines()
    rows = {line.split()[0]: line.split() for line in lines if re.match(r"(?:GPU|NIC)[0-9]+\s", line)}
    nics = [n for n in rows if n.startswith("NIC")]
    out = []
    for label, cells in rows.items():
        links = cells[1:9]
        rest = cells[9:]
        if label.startswith("GPU"):
            links += [rows[n][1 + int(label[3:])] for n in nics]
        else:
            links += ["X" if n == label else "SYS" for n in nics]
        out.append("\t".join([label, *links, *rest]))
    legend = lines[lines.index("NIC Legend:"):]
    return "\n".join(out + ["", *legend]) + "\n"


def test_topo_without_header_with_nic_columns_and_their_diagonal():
    text = _with_nic_columns((CORPUS / "nvidia-smi-topo/h800-8gpu-nv8-4nic-truncated-copy.txt").read_text())
    topo = parse_nvidia_topo(text)
    assert topo.devices == GPUS8 + ["NIC0", "NIC1", "NIC2", "NIC3"]
    assert topo.links["GPU0"]["GPU7"] == "NV8" and topo.links["GPU1"]["NIC0"] == "PIX"
    assert topo.links["GPU7"]["NIC3"] == "PIX" and topo.links["NIC3"]["GPU7"] == "PIX"
    assert topo.cpu_affinity["GPU7"] == "2-63,96-127" and topo.numa_affinity["GPU4"] == "1"
    # the NIC rows cut as well: the legend's four NICs name the last four columns
    gpu_rows_only = "\n".join(line for line in text.splitlines() if not line.startswith("NIC") or ":" in line)
    topo = parse_nvidia_topo(gpu_rows_only)
    assert topo.devices == GPUS8 and topo.links["GPU3"]["NIC1"] == "PIX" and topo.links["GPU3"]["GPU0"] == "NV8"
    assert topo.cpu_affinity["GPU0"] == "-31,64-95"


def test_topo_rows_without_an_x_and_without_a_header_are_refused():
    text = "GPU0 NV8 NV8\nGPU1 NV8 NV8\n"
    with pytest.raises(ParseError) as info:
        parse_nvidia_topo(text)
    assert "diagonal" in str(info.value)


# --- nvidia-smi nvlink -s -----------------------------------------------------------------

# file -> (GPU indexes, links per GPU, GB/s per link, unsupported message contains)
NVLINK_FACTS = {
    "a100-8gpu-nvlink-status.txt": (list(range(8)), 12, 25.0, None),
    "h100-18links-590.txt": ([0], 18, 26.562, None),
    "h200-mig-not-supported.txt": ([0], 0, None, "MIG mode"),
    "h800-nvlink-status-8links-elided.txt": ([0, 1, 7], 8, 26.562, None),  # GPUs 2-6 elided with "..."
    "l40s-no-nvlink.txt": ([0], 0, None, "does not have or support"),
}
NVLINK_COUNTERS = {"h800-nvlink-gt-d-throughput-during-training.txt"}  # counters, not status


def test_every_nvlink_file_has_its_facts_listed():
    assert sorted(p.name for p in corpus_files("nvidia-smi-nvlink")) == sorted(set(NVLINK_FACTS) | NVLINK_COUNTERS)


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-nvlink"), ids=lambda p: p.name)
def test_every_nvlink_capture(path):
    if path.name in NVLINK_COUNTERS:
        status = parse_nvlink_status(path.read_text())
        assert status.gpus and all(g.counters and not g.links for g in status.gpus)
        return
    indexes, nlinks, gbps, unsupported = NVLINK_FACTS[path.name]
    status = parse_nvlink_status(path.read_text())
    assert [g.index for g in status.gpus] == indexes
    for gpu in status.gpus:
        assert [link.link for link in gpu.links] == list(range(nlinks))
        assert all(link.active and link.speed_gbps == gbps for link in gpu.links)
        assert gpu.uuid and gpu.uuid.startswith("GPU-") and gpu.name.startswith("NVIDIA ")
    if unsupported is None:
        assert status.unsupported is None
    else:
        assert status.unsupported and unsupported in status.unsupported
    assert msgspec.json.decode(msgspec.json.encode(status), type=NvLinkStatus) == status


def test_nvml_saying_all_links_are_inactive_is_a_fact_of_that_gpu():
    """NVML's message in place of GPU 6's links (field corpus, tuning): it was dropped,
    leaving a GPU with no links and nothing said. Also in the middle of a real capture:
    it belongs to the GPU above it only."""
    from support import FIXTURES

    text = (FIXTURES / "field/repos/nvidia-smi-nvlink/a100-gpu6-all-links-inactive-nvml.txt").read_text()
    status = parse_nvlink_status(text)
    gpu = status.gpus[0]
    assert (gpu.index, gpu.links, gpu.all_links_inactive) == (6, [], True)
    assert gpu.message and "all links are inactive" in gpu.message
    assert status.unsupported == gpu.message
    # the same two lines between GPU 0 and GPU 1 of the real 8-GPU capture (joined here)
    eight = (CORPUS / "nvidia-smi-nvlink/a100-8gpu-nvlink-status.txt").read_text().splitlines()
    first_gpu1 = next(i for i, line in enumerate(eight) if line.startswith("GPU 1:"))
    mixed = parse_nvlink_status("\n".join([*eight[:first_gpu1], *text.splitlines(), *eight[first_gpu1:]]))
    assert [(g.index, len(g.links), g.all_links_inactive) for g in mixed.gpus[:3]] == [
        (0, 12, False), (6, 0, True), (1, 12, False)]
    assert [g.message for g in mixed.gpus if g.message] == [gpu.message]


def test_nvlink_a100_names_and_uuids():
    status = parse_nvlink_status((CORPUS / "nvidia-smi-nvlink/a100-8gpu-nvlink-status.txt").read_text())
    assert status.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert status.gpus[0].uuid == "GPU-5269b708-678a-b1a8-60f0-c90406537486"
    assert status.gpus[7].uuid == "GPU-754035b4-4708-efcd-b261-623aea38bcad"
    assert sum(len(g.links) for g in status.gpus) == 96


def test_nvlink_inactive_links():
    text = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
        "\t Link 0: 26.562 GB/s\n"
        "\t Link 1: <inactive>\n"
        "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000001)\n"
    )
    status = parse_nvlink_status(text)
    link0, link1 = status.gpus[0].links
    assert (link0.active, link0.speed_gbps) == (True, 26.562)
    assert (link1.active, link1.speed_gbps) == (False, None)
    assert status.gpus[1].links == []


def test_nvlink_gt_d_throughput_is_read_as_counters_per_link():
    # real: `nvidia-smi nvlink -i 0 -gt d` on an H800 during training
    status = parse_nvlink_status(
        (CORPUS / "nvidia-smi-nvlink/h800-nvlink-gt-d-throughput-during-training.txt").read_text()
    )
    (gpu,) = status.gpus
    assert (gpu.index, gpu.name, gpu.links) == (0, "NVIDIA H800", [])  # counters say nothing of link state
    assert [c.link for c in gpu.counters] == list(range(8))
    assert gpu.counters[0].counters == {"data_tx_kib": 1390774681, "data_rx_kib": 1387831436}
    assert gpu.counters[7].counters == {"data_tx_kib": 1391348007, "data_rx_kib": 1387855953}
    assert msgspec.json.decode(msgspec.json.encode(status), type=NvLinkStatus) == status


def _as_counters(status_text: str, names: tuple[str, ...]) -> str:
    """SYNTHETIC, not a capture: a real `nvlink -s` capture's GPU lines and link numbers, each
    link line replaced by one line per counter in the layout `nvlink -gt d` prints
    ("\t Link 0: Data Tx: 1390774681 KiB"), with the counter names nvidia-smi's `-e` prints
    (Replay Errors, Recovery Errors, CRC Errors). No real `nvlink -e` capture is among the
    fixtures this test may use; the layout is the -gt d capture's."""
    out = []
    for line in status_text.splitlines():
        head, sep, _ = line.partition("Link ")
        if not sep:
            out.append(line)
            continue
        number = line.split("Link ", 1)[1].split(":", 1)[0]
        out += [f"{head}Link {number}: {name}: {i}" for i, name in enumerate(names)]
    return "\n".join(out) + "\n"


def test_nvlink_e_error_counters_on_18_links():
    text = _as_counters((CORPUS / "nvidia-smi-nvlink/h100-18links-590.txt").read_text(),
                        ("Replay Errors", "Recovery Errors", "CRC Errors"))
    (gpu,) = parse_nvlink_status(text).gpus
    assert gpu.links == [] and [c.link for c in gpu.counters] == list(range(18))
    assert all(c.counters == {"replay_errors": 0, "recovery_errors": 1, "crc_errors": 2} for c in gpu.counters)


def test_nvlink_counter_values_that_are_not_integers():
    text = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000000)\n"
            "\t Link 0: Replay Errors: N/A\n\t Link 0: Effective BER: 15e-255\n"
            "\t Link 0: FEC Errors - 3: 0\n\t Link 0: Raw Tx: 12 KiB\n\t Link 0: Data Tx: garbled words\n")
    (gpu,) = parse_nvlink_status(text).gpus
    assert gpu.counters[0].counters == {"replay_errors": None, "effective_ber": 15e-255, "fec_errors_3": 0,
                                        "raw_tx_kib": 12, "data_tx": "garbled words"}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   \n",
        "garbage",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.",
        "No devices were found",
        "\x00\xff\x1b",
    ],
)
def test_nvlink_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError) as info:
        parse_nvlink_status(text)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("path", corpus_files("nvidia-smi-nvlink"), ids=lambda p: p.name)
def test_nvlink_truncated_captures(path):
    text = path.read_text()
    try:
        full = {g.index: g.links for g in parse_nvlink_status(text).gpus}
    except ParseError:
        full = {}  # the -gt d counters: no cut of them may pass as link status
    for cut in range(len(text)):
        try:
            status = parse_nvlink_status(text[:cut])
        except ParseError:
            continue
        for gpu in status.gpus:
            # a cut drops links, never changes one: "26.562 GB/s" cut short is not "26 GB/s"
            assert gpu.links == full.get(gpu.index, [])[: len(gpu.links)]


def test_nvlink_value_cut_mid_line_is_no_link_and_says_so():
    """Pinned as an error before: the GPU and its name are facts the text holds, so only the cut
    link is left out (up or down would be a guess), counted unread, named in `incomplete`."""
    facts = parse_nvlink_status("GPU 0: NVIDIA H800 (UUID: GPU-1)\n         Link 0: 26.5")
    assert [(g.index, g.name, g.links) for g in facts.gpus] == [(0, "NVIDIA H800", [])]
    assert facts.unrecognized.count == 1 and "Link 0" in (facts.incomplete or "")


def test_nvlink_links_without_a_gpu_are_unnamed():
    """Pinned as garbage before: a link and its speed are what the parser reads, so they are
    kept as `unnamed` (which GPU not known), `incomplete` saying so."""
    facts = parse_nvlink_status("\t Link 0: 26.562 GB/s\n")
    assert facts.gpus == [] and facts.unnamed is not None
    assert [(link.link, link.active, link.speed_gbps) for link in facts.unnamed.links] == [(0, True, 26.562)]
    assert facts.incomplete and "GPU" in facts.incomplete


# --- both: long lines, binary-ish text, fuzz ----------------------------------------------

PARSERS = [parse_nvidia_topo, parse_nvlink_status]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda f: f.__name__)
def test_long_lines_and_binaryish_text(parser):
    rng = random.Random(99)
    samples = [
        "GPU0 " * 200_000,
        "      GPU0  GPU1\nGPU0 " + "X " * 500_000,
        "GPU 0: " + "N" * 1_000_000 + " (UUID: " + "x" * 10_000,
        "\t Link 0: " + "9" * 100_000 + " GB/s",
        "\x1b[" * 100_000,
    ]
    for folder in ("nvidia-smi-topo", "nvidia-smi-nvlink"):
        for path in corpus_files(folder):
            blob = bytearray(path.read_bytes())
            for _ in range(60):
                for _ in range(rng.randint(1, 20)):
                    blob[rng.randrange(len(blob))] = rng.randrange(256)
                samples.append(blob.decode("latin-1"))
    start = time.monotonic()
    for text in samples:
        try:
            parser(text)
        except ParseError:
            pass
    assert time.monotonic() - start < 10


_FRAGMENTS = st.sampled_from(
    ["GPU0", "GPU1", "NIC0", " X ", "NV18", "PIX", "\t", "  ", "CPU Affinity", "NUMA Affinity", "\x1b[4m", "\x1b[0m",
     "NIC Legend:", "  NIC0: mlx5_0", "Legend:", "GPU 0: NVIDIA H100 (UUID: GPU-1)", "\t Link 0: ", "26.562 GB/s",
     "<inactive>", "Data Tx: 1 KiB", "...", "Device does not have or support Nvlink", "\n", "\n", "\x00"]
)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda f: f.__name__)
@settings(max_examples=300, deadline=None)
@given(text=st.lists(_FRAGMENTS | st.text(max_size=10), max_size=40).map("".join))
def test_fuzz_only_parse_error(parser, text):
    try:
        msgspec.json.encode(parser(text))
    except ParseError:
        pass


def test_nvlink_lines_it_does_not_read_are_counted_and_a_bracketed_elision_is_none():
    # field/issues/nvidia-smi-nvlink/gb200-...-elided.txt (tuning): the command line before
    # the output, noise as every parser's command echo is (it was counted unread before the
    # audit of unread lines); field/repos/.../h100-nvlink-e-error-counters-18-links-elided.txt: `[...]`
    field = FIXTURES / "field"
    gb200 = (field / "issues" / "nvidia-smi-nvlink" / "gb200-nvlink-s-18-links-elided.txt").read_text()
    assert parse_nvlink_status(gb200).unrecognized.count == 0
    stray = gb200.replace("\n", "\nnot the tool's line\n", 1)  # a line of no tool's after the echo (inserted)
    elided = parse_nvlink_status(stray)
    assert elided.unrecognized.count == 1 and elided.unrecognized.sample[0].text == "not the tool's line"
    counters = (field / "repos" / "nvidia-smi-nvlink" / "h100-nvlink-e-error-counters-18-links-elided.txt").read_text()
    assert "[...]" in counters and parse_nvlink_status(counters).unrecognized.count == 0
    assert parse_nvlink_status("$ nvidia-smi nvlink -s\n" + counters).unrecognized.count == 0  # a prompt is none
