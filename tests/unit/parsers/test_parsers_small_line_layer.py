"""The small parsers read through the one line layer (issue 20): `nvidia-smi --query-gpu`
CSV, hostfiles and `ldconfig -v` take srun labels (where a row cannot look like one),
CRLF, colour codes and a pasted prompt off, as every other text parser does.

Each input is built from a real output by a named transformation (the way a launcher, a
Windows editor or a terminal paste changes it), never written by hand as if real."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from healthcheck.core.errors import ParseError
from healthcheck.parsers.hostfile import parse_hostfile
from healthcheck.parsers.ldconfig import parse_ldconfig
from healthcheck.parsers.nvidia_smi_query import parse_nvidia_smi_query

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
QUERY = FIXTURES / "field" / "device" / "nvidia-smi-query-gpu" / "h100-query-gpu-fabric-state-na.txt"


def srun_labelled(text: str, task: int) -> str:
    """What `srun -l` prints: every line prefixed by the task number."""
    return "".join(f"{task}: {line}\n" for line in text.splitlines())


def test_query_gpu_rows_from_an_srun_task_are_read_as_gpus() -> None:
    real = QUERY.read_text()
    plain = parse_nvidia_smi_query(real)
    labelled = parse_nvidia_smi_query(srun_labelled(real, 0))
    assert [g.name for g in labelled.gpus] == [g.name for g in plain.gpus] != []
    assert [g.pci_bus_id for g in labelled.gpus] == [g.pci_bus_id for g in plain.gpus]
    assert labelled.driver_version == plain.driver_version


def test_query_gpu_through_a_windows_editor_and_a_coloured_prompt() -> None:
    real = QUERY.read_text()
    pasted = "\x1b[01;32m$\x1b[0m nvidia-smi --query-gpu=index,name --format=csv\r\n" + real.replace("\n", "\r\n")
    facts = parse_nvidia_smi_query(pasted)
    assert [g.name for g in facts.gpus] == [g.name for g in parse_nvidia_smi_query(real).gpus]


def test_hostfile_with_crlf_a_prompt_and_comments() -> None:
    text = "$ cat hosts\r\n# rack 1\r\ngpu001 slots=8\r\ngpu[002-003]:8\r\n"
    assert parse_hostfile(text) == ["gpu001", "gpu002", "gpu003"]


def test_hostfile_error_names_the_line_the_file_has() -> None:
    with pytest.raises(ParseError, match="line 3:"):
        parse_hostfile("$ cat hosts\ngpu001\ngpu/002\n")


@pytest.mark.skipif(not Path("/sbin/ldconfig").exists(), reason="no ldconfig")
def test_ldconfig_through_crlf_and_colour_codes_reads_the_same_libraries() -> None:
    real = subprocess.run(["/sbin/ldconfig", "-N", "-X", "-v"], capture_output=True, text=True).stdout
    mangled = "\x1b[0m" + real.replace("\n", "\r\n")
    assert parse_ldconfig(mangled).libs == parse_ldconfig(real).libs != {}
