"""The lines hc's parsers leave unread in real outputs, and which of them look health-relevant.

Every parser counts the lines none of its handlers read (`unrecognized` in `hc parse TOOL
FILE`); those are where the next missed fact lives. This audit runs each tool's parser over
every real output it is for -- the `split: tuning` files of every field collection
(tests/fixtures/field/*/; held-out files are never opened), tests/fixtures/corpus/ and
../shared/corpus/ (a file in both read once) -- collects every line it left unread
(`lines.collecting_unread`: all of them, not the sample), and marks a line health-relevant
when it carries a token an operator or hc's judgement would look for (`HEALTH`: an error
word, a device's or a peer's address, a rank). Per tool it prints the files, the unread
lines, the health-relevant ones and the most common of those (numbers and hex replaced by
`N`/`H`) with a file each occurs in.

    .venv/bin/python tests/field/unread.py [--top N] [--tool TOOL] [--totals] [--all]

`--totals` prints only the table (bin/bench's "parsers: unread lines" part).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
if str(TESTS) not in sys.path:  # run as a script: `field` is tests/field
    sys.path.insert(0, str(TESTS))

from field import facts as field_facts  # noqa: E402
from healthcheck.core.errors import HcError  # noqa: E402
from healthcheck.parsers import BINARY_TOOLS, parser_for  # noqa: E402
from healthcheck.parsers.lines import Line, collecting_unread  # noqa: E402

CORPORA = (REPO / "tests" / "fixtures" / "corpus",
           REPO.parent / "shared" / "corpus", REPO.parents[1] / "shared" / "corpus")

# outputs that hold another tool's lines, which hc reads with that tool's parser too (hc diagnose
# reads a job's output as an NCCL log and as a torch log): test_parsers_cross_family's OVERLAPS
ALSO_READ_BY = {"nccl-tests": ("nccl-log",), "torch-log": ("nccl-log",), "nccl-log": ("nccl-tests", "torch-log")}

# a token an operator or hc's judgement looks for: an error word (also a process's death and
# the words a failure is said in: cannot, unable, lost...), a kernel or NCCL failure family, an
# errno name, a PCI bus id, an IP:port, a rank
HEALTH = re.compile(
    r"(?i:\b(?:errors?|fail\w*|warn\w*|time[ds]?[ -]?out\w*|xid|sxid|nvrm|aer|ecc|remap\w*|retir\w*"
    r"|exceptions?|traceback|abort\w*|refused|reset\w*|down|degraded|throttl\w*|ranks?"
    r"|segfault|oom|out of memory|killed|panic|hung|unreachable|unable|cannot|can't|could ?n[o']t|invalid|lost"
    r"|mismatch\w*|corrupt\w*|denied|not responding)\b)"
    r"|NCCL WARN|Error:|\bE[A-Z]{3,14}\b"
    r"|\b[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]\b"
    r"|\b\d{1,3}(?:\.\d{1,3}){3}[:<]\d{1,5}\b|\]:\d{1,5}\b")
# numbers and hex, for counting one message family once whatever its values
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b|\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{2,}\b")
_NUMBER = re.compile(r"\d+")
_IPV6 = re.compile(r"\[[0-9a-fA-F:]{2,45}\]")
NORMAL_TEXT = 160  # characters of a normalised line kept


def normalised(text: str) -> str:
    """The line with its hex replaced by `H` and its numbers by `N`, blanks squeezed."""
    text = _NUMBER.sub("N", _HEX.sub("H", _IPV6.sub("[ADDR]", text.strip())))
    return " ".join(text.split())[:NORMAL_TEXT]


def relevant(text: str) -> bool:
    return HEALTH.search(text) is not None


@dataclass
class ToolAudit:
    files: int = 0
    refused: int = 0
    unread: int = 0
    elsewhere: int = 0  # unread lines another of hc's parsers reads in the same text (ALSO_READ_BY)
    relevant: int = 0
    families: Counter[str] = field(default_factory=Counter)
    where: dict[str, str] = field(default_factory=dict)  # normalised line -> a file it occurs in

    def add(self, name: str, lines: list[Line], elsewhere: set[int], every: bool = False) -> None:
        """Count a file's unread lines (those another parser reads, numbered in `elsewhere`,
        apart); list the rest's health-relevant families (`every`: all of the rest's)."""
        self.unread += len(lines)
        for line in lines:
            if line.number in elsewhere:
                self.elsewhere += 1
                continue
            if not relevant(line.text):
                if not every:
                    continue
            else:
                self.relevant += 1
            family = normalised(line.text)
            self.families[family] += 1
            self.where.setdefault(family, name)


def corpus_files() -> Iterator[tuple[str, Path]]:
    """(tool, file) of every corpus output, each distinct text once."""
    seen: set[str] = set()
    for corpus in CORPORA:
        for folder, tool in field_facts.CORPUS_TOOL.items():
            place = corpus / folder
            for path in sorted(place.iterdir()) if place.is_dir() else ():
                digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
                if digest and digest not in seen:
                    seen.add(digest)
                    yield tool, path


def tuning_files() -> Iterator[tuple[str, Path]]:
    """(tool, file) of every field file of the tuning split; a held-out file is never opened."""
    for ff in field_facts.load():
        if ff.split == "tuning":
            yield ff.tool, ff.path


def unread_lines(tool: str, path: Path) -> list[Line] | None:
    """Every line the tool's parser left unread in the file (once each), None when it refused."""
    data = path.read_bytes()
    with collecting_unread() as every:
        try:
            parser_for(tool)(data if tool in BINARY_TOOLS else data.decode("utf-8", errors="replace"))
        except HcError:
            return None
    # a parser that tries two readings counts a line once for each: one line, one count
    return list({(line.number, line.text): line for line in every}.values())


def read_elsewhere(tool: str, path: Path, lines: list[Line]) -> set[int]:
    """The numbers of `lines` (unread by the tool's parser) that a parser of ALSO_READ_BY[tool]
    reads in the same file: it takes the file and leaves them off its own unread lines."""
    found: set[int] = set()
    for other in ALSO_READ_BY.get(tool, ()):
        theirs = unread_lines(other, path)
        if theirs is not None:
            left = {line.number for line in theirs}
            found |= {line.number for line in lines if line.number not in left}
    return found


def audit(every: bool = False) -> dict[str, ToolAudit]:
    """Per tool, what its parser left unread (`every`: the families of all unread lines listed,
    not only of the health-relevant ones)."""
    tools: dict[str, ToolAudit] = {}
    for tool, path in [*tuning_files(), *corpus_files()]:
        found = tools.setdefault(tool, ToolAudit())
        found.files += 1
        lines = unread_lines(tool, path)
        if lines is None:
            found.refused += 1
            continue
        found.add(_name(path), lines, read_elsewhere(tool, path, lines), every)
    return dict(sorted(tools.items()))


def _name(path: Path) -> str:
    for base in (REPO, *(c.parent for c in CORPORA[1:])):
        if path.is_relative_to(base):
            return str(path.relative_to(base))
    return str(path)


def totals_table(tools: dict[str, ToolAudit]) -> list[str]:
    rows = [f"{'tool':24} {'files':>5} {'refused':>7} {'unread':>7} {'elsewhere':>9} {'relevant':>8}"]
    rows += [f"{tool:24} {a.files:5} {a.refused:7} {a.unread:7} {a.elsewhere:9} {a.relevant:8}"
             for tool, a in tools.items()]
    total = {k: sum(getattr(a, k) for a in tools.values()) for k in ("files", "refused", "unread", "elsewhere",
                                                                     "relevant")}
    rows.append(f"{'total':24} {total['files']:5} {total['refused']:7} {total['unread']:7} {total['elsewhere']:9} "
                f"{total['relevant']:8}")
    return rows


def families_report(tool: str, found: ToolAudit, top: int) -> list[str]:
    rest = found.unread - found.elsewhere
    listed = " (all families listed)" if rest > found.relevant and sum(found.families.values()) == rest else ""
    out = [f"\n== {tool}: {found.files} files, {found.unread} unread lines ({found.elsewhere} read by another "
           f"parser), {found.relevant} health-relevant{listed}"]
    out += [f"{n:5}  {family}\n       ({found.where[family]})" for family, n in found.families.most_common(top)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--top", type=int, default=40, choices=range(1, 1001), metavar="N",
                    help="health-relevant families listed per tool (1-1000)")
    ap.add_argument("--tool", default="", help="only this tool (hc parse's name)")
    ap.add_argument("--totals", action="store_true", help="only the table of totals")
    ap.add_argument("--all", action="store_true", help="list the families of every unread line, not only "
                    "the health-relevant ones")
    args = ap.parse_args(argv)
    tools = {t: a for t, a in audit(args.all).items() if not args.tool or t == args.tool}
    print("\n".join(totals_table(tools)))
    if not args.totals:
        for tool, found in tools.items():
            print("\n".join(families_report(tool, found, args.top)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
