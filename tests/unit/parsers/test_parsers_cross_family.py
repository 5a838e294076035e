"""Every parser over every real output of every other tool's family (issue 20): an operator
pastes the wrong file, or `hc parse` is given the wrong TOOL. The parser may refuse it (a
one-line ParseError) or read it, but never crash, and the hardware parsers never report
devices, ports or rows of their own tool out of another tool's output (a kernel log read as
GPUs, a torch log read as IB ports): wrong-tool facts would judge a node on nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from field import facts as field
from field.facts import CORPUS_TOOL

from healthcheck.core.errors import HcError
from healthcheck.parsers import BINARY_TOOLS, TOOLS, parser_for

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "corpus"


def _count(*keys: str) -> Callable[[dict[str, Any]], int]:
    return lambda facts: sum(len(facts.get(k) or ()) for k in keys)


# a hardware parser's own evidence: what it must not find in another tool's output
OWN_EVIDENCE: dict[str, Callable[[dict[str, Any]], int]] = {
    "nvidia-smi": _count("gpus", "mig_devices"),
    "nvidia-smi-q": _count("gpus"),
    "nvidia-smi-topo": _count("devices"),
    "nvidia-smi-nvlink": _count("gpus"),
    "ibstat": _count("ports"),
    "ibstatus": _count("ports"),
    "perfquery": _count("ports"),
    "ibv_devinfo": _count("devices"),
    "nccl-tests": _count("samples", "ranks"),
    "ib_write_bw": _count("rows"),
    "xid": _count("xids", "sxids"),
}
# outputs that really hold another tool's lines: an nccl-tests or torch run prints NCCL's log,
# a kernel log can hold anything, a torch log can quote nccl-tests
OVERLAPS = {("nccl-log", "nccl-tests"), ("nccl-log", "torch-log"), ("torch-log", "nccl-log"),
            ("torch-log", "nccl-tests"), ("nccl-tests", "nccl-log"), ("nvidia-smi", "nvidia-smi-q")}


def outputs() -> list[tuple[str, Path]]:
    """(tool, file) for every real output: the corpus and the harvested field collections."""
    found = [(tool, p) for folder, tool in CORPUS_TOOL.items()
             for p in sorted((CORPUS / folder).iterdir()) if p.is_file()]
    found += [(ff.tool, ff.path) for ff in field.load()]
    return found


OUTPUTS = outputs()


def parse(tool: str, path: Path) -> dict[str, Any] | None:
    """The parser's facts as plain data, None when it refused the file."""
    data = path.read_bytes()
    try:
        facts = parser_for(tool)(data if tool in BINARY_TOOLS else data.decode("utf-8", errors="replace"))
    except HcError:
        return None
    built = msgspec.to_builtins(facts)
    return built if isinstance(built, dict) else {"items": built}


@pytest.mark.parametrize("tool", sorted(set(TOOLS) - BINARY_TOOLS))
def test_a_parser_given_another_tools_output_refuses_or_reads_none_of_its_own(tool):
    wrong = []
    for owner, path in OUTPUTS:
        if owner == tool or owner in BINARY_TOOLS:
            continue
        facts = parse(tool, path)  # any exception but HcError fails the test here: a crash
        own = OWN_EVIDENCE.get(tool)
        if facts is not None and own is not None and (tool, owner) not in OVERLAPS and own(facts):
            wrong.append(f"{path.relative_to(CORPUS.parent)} ({owner}): {own(facts)}")
    assert not wrong, f"{tool} found its own evidence in other tools' outputs:\n" + "\n".join(wrong)


def test_the_cross_family_run_covers_every_family():
    assert {tool for tool, _ in OUTPUTS} >= set(CORPUS_TOOL.values())
    assert len(OUTPUTS) >= 150


@pytest.mark.parametrize("tool", sorted(OWN_EVIDENCE))
def test_the_evidence_counted_is_what_the_parser_reports_on_its_own_outputs(tool):
    """The counters above name real keys: on its own family's outputs each parser finds some."""
    own = [parse(tool, path) for owner, path in OUTPUTS if owner == tool]
    assert any(facts and OWN_EVIDENCE[tool](facts) for facts in own), f"{tool}: no own evidence counted"
