"""The GPU and perftest parsers on outputs as people paste them (issue 20): quoted in a
markdown reply, quoted twice, each line continued with " \\" as in a shell snippet.

Every case is a transformation of a real capture (the fixtures named), not a capture:
the parse of the pasted text must be the parse of the capture.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from support import CORPUS, FIXTURES, assert_linear

from healthcheck.parsers.lines import unpasted
from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q
from healthcheck.parsers.nvidia_smi_table import parse_nvidia_smi_table
from healthcheck.parsers.nvidia_topo import parse_nvidia_topo
from healthcheck.parsers.nvlink_status import parse_nvlink_status
from healthcheck.parsers.perftest import parse_perftest

PARSERS: dict[str, tuple[Callable[[str], object], list[Path]]] = {
    "nvidia-smi": (parse_nvidia_smi_table,
                   sorted((FIXTURES / "nvidia-smi").glob("*.txt")) + sorted((CORPUS / "nvidia-smi").glob("*.txt"))),
    "nvidia-smi-q": (parse_nvidia_smi_q, sorted((CORPUS / "nvidia-smi-q").glob("*.txt"))),
    "nvidia-smi-topo": (parse_nvidia_topo, sorted((CORPUS / "nvidia-smi-topo").glob("*.txt"))),
    "nvidia-smi-nvlink": (parse_nvlink_status, sorted((CORPUS / "nvidia-smi-nvlink").glob("*.txt"))),
    "ib_write_bw": (parse_perftest, sorted((FIXTURES / "ib_write_bw").glob("*.txt"))),
}
CASES = [(tool, path) for tool, (_, paths) in PARSERS.items() for path in paths]
SHAPES: dict[str, Callable[[str], str]] = {
    "quoted": lambda line: "> " + line,
    "quoted-twice": lambda line: "> > " + line,
    "quoted-no-space": lambda line: ">" + line,
    "continued": lambda line: line + " \\",
    "quoted-and-continued": lambda line: "> " + line + " \\",
}


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("tool", "path"), CASES, ids=[f"{t}/{p.name}" for t, p in CASES])
def test_a_pasted_capture_reads_as_the_capture(tool, path, shape):
    parse = PARSERS[tool][0]
    text = path.read_text()
    pasted = "".join(SHAPES[shape](line) + "\n" for line in text.splitlines())
    assert msgspec.to_builtins(parse(pasted)) == msgspec.to_builtins(parse(text))


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("> | NVIDIA-SMI 590.48.01 |", "| NVIDIA-SMI 590.48.01 |"),
        (">     Product Name : NVIDIA H100", "    Product Name : NVIDIA H100"),  # -q's indentation kept
        ("   > > GPU0  X  NV18", "GPU0  X  NV18"),
        ("    > not a quote: four spaces are code", "    > not a quote: four spaces are code"),
        ("Link 0: Data Tx: 1 KiB \\", "Link 0: Data Tx: 1 KiB"),
        ("C:\\Windows\\", "C:\\Windows\\"),  # a backslash with no space before it is the value's
        ("", ""),
    ],
)
def test_unpasted(line, expected):
    assert unpasted(line) == expected


@pytest.mark.parametrize("line", [">" * 8 + " " * 100_000 + "\\", " \\" * 50_000, "> " * 50_000])
def test_unpasted_is_linear_on_long_lines(line):
    assert_linear(unpasted, line, line * 10)
