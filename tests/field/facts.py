"""Scores hc's parsers on real outputs harvested from the field (issue 20).

Each file under tests/fixtures/field/<collection>/<tool>/ is a verbatim output (or a
verbatim fragment of one) pasted in a public issue thread, documentation or another tool's
test data; its source is in the collection's SOURCES.md (`issues/`: issue threads and
docs found by search; `repos/`: test data and docs of public repositories, by commit), and
the collection's facts.yaml lists, per file, the parser it is for and the facts a health judgement needs from it: each fact is a
leaf of `hc parse TOOL FILE`'s JSON, named by its key and its value (`~text` matches a
string that contains text). A file is *read* when the parser surfaces every fact.

`split: held-out` files are never used to write a parser rule; they measure whether
reading holds on outputs nobody tuned to. Once others began fixing parsers against the
held-out files, that set stopped measuring it: `split: held-out-2` is the newer set that
replaces it as the measure (`unseen/`: files harvested later from repositories not mined
before, their facts written from the text before hc was run on them); nobody writing a
parser rule opens these files. When held-out-2 in turn was opened for fixing, `split:
held-out-3` (`issues-3/`: issue threads no earlier harvest used, facts written first)
became the measure; then `split: held-out-4` (`issues-4/`, the same way, weighted to
newer drivers and hardware and to wrappers' prefixes) when held-out-3 was opened, and
`split: held-out-5` (`issues-5/`) when held-out-4 was, and `split: held-out-6`
(`issues-6/`) when held-out-5 was. Each of held-out-3 to -6 has since been read by a parser
writer (issue 20's fifth to eighth rounds): retired, like the first two. `split: held-out-7`
(`issues-7/`, 12 files harvested while held-out-6 was being fixed) was opened in the ninth
round; `split: held-out-8` (`issues-8/`, 23 files harvested while held-out-7 was being fixed)
was opened in the tenth; `split: held-out-9` (`issues-9/`, 26 files harvested during rounds
9 and 10, added after both) in the eleventh; `split: held-out-10` (`issues-10/`, 18 files
harvested during round 11, added after it) in the twelfth; `split: held-out-11` (`issues-11/`,
24 files harvested after round 12) in the thirteenth; `split: held-out-12` (`issues-12/`, 19
files harvested during round 13) in the fourteenth; `split: held-out-13` (`issues-13/`, 16
files harvested after round 13) was measured once, at 4910edf, and stays unread; `split:
held-out-14` (`issues-14/`, 11 files harvested after round 14) was measured once, at 6a4a07f,
and opened to round 15; `split: held-out-15` (`issues-15/`, 15 files harvested while round 15
worked, measured before it merged) was opened to the paste-shape round; `split: held-out-16`
(`issues-16/`, 18 files harvested while rounds 15 and paste-shapes worked) was measured
after those rounds; `split: held-out-17` (`issues-17/`, 6 files harvested after them) and
`split: held-out-18` (`issues-18/`, 10 files harvested after them) were measured once each; `split: held-out-19` (`issues-19/`, harvested while rounds 12 (diagnosis) and
cuts (parsers) worked, measured before either merged) likewise, and `split: held-out-20`
(`issues-20/`, harvested after the cuts round merged) was measured at 74ff202, and `split:
held-out-21` (`issues-21/`, harvested after held-out-20's misses were fixed) at cc89fab,
and `split: held-out-22` (`issues-22/`, a batch of three fixed before measuring) at a15feca. `gap: WHY` marks a file hc does not read yet: the test
insists it still misses something, so the gap list can only shrink.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from healthcheck.core.errors import HcError
from healthcheck.parsers import BINARY_TOOLS, parser_for
from healthcheck.parsers.gpu_common import normalize_pci

FIELD = Path(__file__).resolve().parents[1] / "fixtures" / "field"
SPLITS = ("tuning", "held-out", "held-out-2", "held-out-3", "held-out-4", "held-out-5", "held-out-6", "held-out-7", "held-out-8", "held-out-9", "held-out-10", "held-out-11", "held-out-12", "held-out-13", "held-out-14", "held-out-15", "held-out-16", "held-out-17", "held-out-18", "held-out-19", "held-out-20",
          "held-out-21", "held-out-22")  # held-out-22: unseen

# the corpus folders (tests/fixtures/corpus, ../shared/corpus) -> the hc parse tool their files are
# outputs of: one map for every test that walks the corpus
CORPUS_TOOL = {
    "dcgmi-diag": "dcgmi-diag", "ib_write_bw": "ib_write_bw", "ibstat": "ibstat", "ibstatus": "ibstatus",
    "ip-json-link": "ip-link", "nccl-debug": "nccl-log", "nccl-tests": "nccl-tests", "nvidia-smi": "nvidia-smi",
    "nvidia-smi-nvlink": "nvidia-smi-nvlink", "nvidia-smi-q": "nvidia-smi-q",
    "nvidia-smi-query-gpu": "nvidia-smi-query-gpu", "nvidia-smi-topo": "nvidia-smi-topo", "perfquery": "perfquery",
    "py-spy": "py-spy", "scontrol-show-node": "scontrol-show-node", "torch-nccl-error": "torch-log",
    "torch-watchdog": "torch-log", "torchrun": "torch-log", "xid-dmesg": "xid",
}


# a PCI address written out in full (`00000000:CC:00.0` as nvidia-smi prints it, `0000:cc:00.0`
# as hc surfaces it): one device, whatever the domain's width and the case
_BUS_ID = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]")


def same_bus_id(want: Any, value: Any) -> bool:
    """Both are full PCI addresses (`_BUS_ID`) of the same device."""
    if not (isinstance(want, str) and isinstance(value, str)):
        return False
    if not (_BUS_ID.fullmatch(want) and _BUS_ID.fullmatch(value)):
        return False
    return normalize_pci(want) == normalize_pci(value)


@dataclass(frozen=True)
class Fact:
    key: str
    value: Any

    def matches(self, key: str, value: Any) -> bool:
        if key != self.key:
            return False
        want = self.value
        if isinstance(want, str) and want.startswith("~"):
            return isinstance(value, str) and want[1:].lower() in value.lower()  # bus ids print in either case
        if isinstance(want, bool) or isinstance(value, bool):
            return want is value
        if isinstance(want, (int, float)) and isinstance(value, (int, float)):
            return abs(float(want) - float(value)) <= 1e-6 * max(1.0, abs(float(want)))
        return bool(want == value) or same_bus_id(want, value)

    def __str__(self) -> str:
        return f"{self.key}={self.value!r}"


@dataclass(frozen=True)
class FieldFile:
    path: Path
    tool: str
    facts: tuple[Fact, ...]
    split: str = "tuning"
    gap: str = ""
    refused: bool = False  # the file holds nothing of the tool's: refusing it (exit 4) is right

    @property
    def name(self) -> str:
        return str(self.path.relative_to(FIELD))


@dataclass
class Reading:
    file: FieldFile
    facts_found: list[Fact] = field(default_factory=list)
    facts_missed: list[Fact] = field(default_factory=list)
    refused: str = ""   # the one-line reason when the parser refused the file
    crashed: str = ""   # anything but a refusal: a bug

    @property
    def read(self) -> bool:
        if self.crashed:
            return False
        if self.file.refused:
            return bool(self.refused)
        return not self.refused and not self.facts_missed


def load() -> list[FieldFile]:
    """Every harvested file with its facts, in the facts files' order."""
    files = []
    for facts_file in sorted(FIELD.glob("*/facts.yaml")):
        doc: dict[str, dict[str, Any]] = yaml.safe_load(facts_file.read_text()) or {}
        for name, entry in doc.items():
            facts = tuple(Fact(str(k), v) for item in entry.get("facts", []) for k, v in item.items())
            files.append(FieldFile(facts_file.parent / name, entry["tool"], facts, entry.get("split", "tuning"),
                                   entry.get("gap", ""), bool(entry.get("refused", False))))
    return files


def leaves(doc: Any, key: str = "") -> Iterator[tuple[str, Any]]:
    """(key, value) for every scalar in a parsed document; list items carry their list's key."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from leaves(v, str(k))
    elif isinstance(doc, (list, tuple)):
        for v in doc:
            yield from leaves(v, key)
    else:
        yield key, doc


def read(ff: FieldFile) -> Reading:
    """What hc's parser for the file's tool surfaces of its facts."""
    import msgspec

    out = Reading(ff)
    data = ff.path.read_bytes()
    try:
        parsed = parser_for(ff.tool)(data if ff.tool in BINARY_TOOLS else data.decode("utf-8", errors="replace"))
    except HcError as e:
        out.refused = str(e).splitlines()[0] if str(e) else type(e).__name__
        out.facts_missed = list(ff.facts)
        return out
    except Exception as e:  # any other exception is the bug this measures
        out.crashed = f"{type(e).__name__}: {e}"
        out.facts_missed = list(ff.facts)
        return out
    found = list(leaves(msgspec.to_builtins(parsed)))
    for fact in ff.facts:
        (out.facts_found if any(fact.matches(k, v) for k, v in found) else out.facts_missed).append(fact)
    return out


def mark_gaps(facts_file: Path) -> int:
    """Write `gap:` on every file of one collection that hc does not read fully today (and
    drop it where hc now does); returns how many gaps remain."""
    doc: dict[str, dict[str, Any]] = yaml.safe_load(facts_file.read_text()) or {}
    by_name = {ff.path: ff for ff in load()}
    remaining = 0
    for name, entry in doc.items():
        reading = read(by_name[facts_file.parent / name])
        if reading.read:
            entry.pop("gap", None)
            continue
        remaining += 1
        entry["gap"] = reading.crashed or reading.refused or "misses " + ", ".join(map(str, reading.facts_missed))
    facts_file.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=200))
    return remaining


def main() -> int:
    """Print, per file, what the parser surfaced; `python tests/field/facts.py [SUBSTRING]`."""
    import sys

    if sys.argv[1:2] == ["--mark-gaps"]:  # after harvesting or fixing: record what is still missed
        for facts_file in sorted(FIELD.glob("*/facts.yaml")):
            print(f"{facts_file}: {mark_gaps(facts_file)} gaps")
        return 0
    wanted = sys.argv[1] if len(sys.argv) > 1 else ""
    readings = [read(ff) for ff in load() if wanted in ff.name]
    for r in readings:
        state = "read" if r.read else ("CRASH" if r.crashed else "refused" if r.refused else "missed")
        detail = r.crashed or r.refused or ", ".join(map(str, r.facts_missed))
        print(f"{state:8} {r.file.split:9} {r.file.name}  {detail}")
    n = len(readings)
    print(f"{sum(r.read for r in readings)}/{n} files read")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
