"""Whether hc's parsers survive the ways people paste a real output (issue 20's metamorphic audit).

Every fresh set of outputs nobody here has seen finds one to three paste SHAPES the parsers do
not survive: a web page that flattened ibstat's tab indentation to column 0, an `nvidia-smi -q`
fragment that starts mid-GPU, markdown's quotes and indented code blocks, a prose line before the
output. This audit makes those shapes from the real outputs we already have, before the field
does: for each file of the tuning split and of the retired held-out splits (`SPLITS`: already
read by the parser writers; the held-out sets still measuring are never opened here) it applies
each of `TRANSFORMS` -- one thing people's tools do to a pasted output -- and checks the file's
facts (facts.yaml, tests/field/facts.py's matcher) are still surfaced.

A fact is *expected* after a transformation when the parser surfaced it on the file as it is
and its evidence is still in the transformed text (`evidence`: the value's text, a bus id in
any form, a number with no digit either side; dropping lines can take the evidence away). A
fact whose value the text never spells (a bool, a derived number) is expected after the
transformations that drop nothing; one that is a line number of the text (`positional`) after
those that move no line. *Kept*: surfaced after the transformation too. After a cut, the word a
text ends inside with no line end after it is no evidence: `Link 13` there may be `Link 1` of
13 or `Link 13` of 130, and a parser must not read it as whole (lines.without_cut_end).

A cut can take what NAMES the values left: a CSV's header (which column is which), a record's
name line or a row's node list (whose values they are). The values are still spelled, so
`evidence` finds them, but no reader can say what they are without guessing: the parser's right
answer is to refuse, saying which part is missing, with `FragmentError` (core/errors.py). After a
transformation that drops text (`DROPS_TEXT`), a file its parser refuses so has no fact expected
(counted in `fragments`, not in a miss); after one that drops nothing, a FragmentError is a miss
like any refusal. The rule is the parser's class of refusal, never a list of files or tools: a
parser that raises FragmentError where the text does name its values is a parser bug, and its
unit tests (tests/unit/parsers/test_parsers_cut_fragments.py) hold each such refusal to a text that
lacks them.

    .venv/bin/python tests/field/mutate.py [--tool TOOL] [--transform NAME] [--misses] [--totals] [--record]

Per tool x transformation it prints files, facts expected, facts kept and files fully kept
(`--misses`: each file that lost a fact, and which); `--totals` only the table per
transformation (bin/bench's "parsers: paste shapes" part), with both sides: the rate on the
untransformed files, the rate after the transformation, and their ratio. `--record` writes
each cell's kept/expected to RECORD (paste-shapes.yaml), which unit/parsers/test_paste_shapes_ratchet.py
holds the parsers to: a cell's kept rate only goes up.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parents[1]
if str(TESTS) not in sys.path:  # run as a script: `field` is tests/field
    sys.path.insert(0, str(TESTS))

from field import facts as field_facts  # noqa: E402
from healthcheck.core.errors import FragmentError, HcError  # noqa: E402
from healthcheck.parsers import BINARY_TOOLS, parser_for  # noqa: E402
from healthcheck.parsers.gpu_common import normalize_pci  # noqa: E402
from healthcheck.parsers.lines import without_cut_end  # noqa: E402

# the splits this audit reads: tuning, and the held-out sets the parser writers have opened
# (held-out to held-out-12). Written out, not derived from facts.SPLITS: a held-out set added
# later is a measure of outputs nobody tuned to, and stays unread here until it is retired.
SPLITS = ("tuning", "held-out", *(f"held-out-{n}" for n in range(2, 13)))

# the command a paste's prompt line shows before each tool's output (`prompt`): no option that
# names a fact (a device, a size, a field list), which the parsers read from a pasted command line
COMMANDS = {
    "dcgmi-diag": "dcgmi diag -r 2", "flight-recorder-analysis": "torchfrtrace traces/ -j",
    "hostfile": "cat hostfile", "ib_write_bw": "ib_write_bw",
    "ibstat": "ibstat", "ibstatus": "ibstatus", "ibv_devinfo": "ibv_devinfo -v", "ip-link": "ip -d link",
    "ldconfig": "ldconfig -N -v", "nccl-log": "NCCL_DEBUG=INFO torchrun --nproc_per_node 8 train.py",
    "nccl-ras": "ncclras", "nccl-tests": "./build/all_reduce_perf -b 8 -e 128M -f 2 -g 8",
    "nvidia-smi": "nvidia-smi", "nvidia-smi-nvlink": "nvidia-smi nvlink -s", "nvidia-smi-q": "nvidia-smi -q",
    # a wrapper script: a `--query-gpu=` line would name the fields, which the parser reads (field/issues-10)
    "nvidia-smi-query-gpu": "./gpu-report.sh",
    "nvidia-smi-topo": "nvidia-smi topo -m", "perfquery": "perfquery -x", "py-spy": "py-spy dump --pid 4242",
    "scontrol-show-node": "scontrol show node", "sinfo": "sinfo -R", "torch-log": "torchrun --nproc_per_node 8 train.py",
    "xid": "sudo dmesg -T",
}
# prose a person writes around a paste (made up here, as every paste's own prose is)
PROSE_BEFORE = "Here is what I get when I run it on the node:"
PROSE_AFTER = "Any idea what is going on? Thanks in advance."
RECORD = Path(__file__).resolve().parent / "paste-shapes.yaml"
FRAGMENT = "fragment: "  # how `surfaced` marks a FragmentError refusal
HEAD_CUT_SHARE = 0.25  # of the lines a fragment that starts mid-output lacks
TAB_STOP = 8


def _lines(text: str) -> list[str]:
    return text.split("\n")


def _each_line(change: Callable[[str], str]) -> Callable[[str, str], str]:
    return lambda text, tool: "\n".join(change(line) for line in _lines(text))


def flatten(text: str, tool: str = "") -> str:
    """Every line's leading whitespace gone: a web page or a chat client that renders a paste as
    prose (field/issues-15's knowledge-base ibstat, its tab indentation at column 0)."""
    return _each_line(str.lstrip)(text, tool)


def squeeze(text: str, tool: str = "") -> str:
    """Every run of spaces one space: HTML collapses white space outside <pre>."""
    return _each_line(lambda line: re.sub(" {2,}", " ", line))(text, tool)


def quote(text: str, tool: str = "") -> str:
    """`> ` before every line, blank ones too: a markdown quote (a reply quoting the paste)."""
    return _each_line(lambda line: "> " + line)(text, tool)


def indent4(text: str, tool: str = "") -> str:
    """4 spaces before every non-blank line, after a prose line and a blank one: markdown's
    indented code block (a blank line opens it after prose)."""
    return f"{PROSE_BEFORE}\n\n" + _each_line(lambda line: "    " + line if line.strip() else line)(text, tool)


def crlf(text: str, tool: str = "") -> str:
    """Windows line ends: a paste saved on Windows, a serial console's log."""
    return text.replace("\n", "\r\n")


def prompt(text: str, tool: str = "") -> str:
    """A prose line, `$ COMMAND`, the output, a prose line: how an issue thread frames a paste."""
    return f"{PROSE_BEFORE}\n$ {COMMANDS.get(tool, tool)}\n{text.rstrip(chr(10))}\n{PROSE_AFTER}\n"


def head_cut(text: str, tool: str = "") -> str:
    """The first quarter of the lines gone: a fragment that starts mid-output (field/issues-15's
    `nvidia-smi -q` from `Board Part Number`, no `GPU 0000...` header above it)."""
    lines = _lines(text)
    return "\n".join(lines[max(1, int(len(lines) * HEAD_CUT_SHARE)):])


def tail_cut(text: str, tool: str = "") -> str:
    """The last non-blank line cut in half: a paste or a capture that ends mid-line."""
    lines = text.rstrip().split("\n")
    lines[-1] = lines[-1][: len(lines[-1]) // 2]
    return "\n".join(lines)


def _tabified(line: str) -> str:
    """GNU `unexpand -a`: every run of two or more spaces that ends at a tab stop a tab."""
    line = line.expandtabs(TAB_STOP)
    out, column, spaces = [], 0, 0
    for char in line:
        column += 1
        if char == " ":
            spaces += 1
            if column % TAB_STOP == 0:
                out.append("\t" if spaces > 1 else " ")
                spaces = 0
            continue
        out.append(" " * spaces + char)
        spaces = 0
    out.append(" " * spaces)
    return "".join(out)


def tabs(text: str, tool: str = "") -> str:
    """Tabs expanded to spaces and spaces re-tabbed at 8-column stops: an editor's tabify
    (`unexpand -a`) over a terminal copy, which had turned the tool's tabs into spaces."""
    return _each_line(_tabified)(text, tool)


Transform = Callable[[str, str], str]
TRANSFORMS: dict[str, Transform] = {
    "flatten": flatten, "squeeze": squeeze, "quote": quote, "indent4": indent4, "crlf": crlf,
    "prompt": prompt, "head-cut": head_cut, "tail-cut": tail_cut, "tabs": tabs,
}
DROPS_TEXT = frozenset({"head-cut", "tail-cut"})  # the transformations that can take evidence away
# the transformations that move the text's lines (lines added before, or dropped): a fact that is
# a line number in the text (a key ending `_line`: nccl-log's `init_complete_line`) moves with them
MOVES_LINES = frozenset({"indent4", "prompt", "head-cut"})


def positional(fact: field_facts.Fact) -> bool:
    return fact.key.endswith("_line")


_BUS_ID = re.compile(r"[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-9a-fA-F]")


def _number_forms(value: float) -> set[str]:
    forms = {repr(value), f"{value:g}"}
    if float(value).is_integer():
        forms.add(str(int(value)))
    return forms


def evidence(fact: field_facts.Fact, text: str) -> bool | None:
    """Whether the text still spells the fact's value (None: its value is never spelled as such,
    a bool or a number the parser derives)."""
    want = fact.value
    if isinstance(want, bool) or want is None:
        return None
    if isinstance(want, (int, float)):
        return any(re.search(rf"(?<!\d){re.escape(form)}(?!\d)", text) for form in _number_forms(want)) or None
    want = str(want)
    if _BUS_ID.fullmatch(want):
        return any(normalize_pci(m.group()) == normalize_pci(want) for m in _BUS_ID.finditer(text))
    return want.removeprefix("~").lower() in text.lower() or None


def surfaced(tool: str, data: bytes | str, facts: tuple[field_facts.Fact, ...]) -> tuple[set[int], str, str]:
    """(the indices of `facts` the tool's parser surfaces in `data`, its refusal, its crash); a
    refusal that the text lacks what names its values (FragmentError) starts with FRAGMENT."""
    import msgspec

    try:
        parsed = parser_for(tool)(data)
    except FragmentError as e:
        return set(), FRAGMENT + str(e).splitlines()[0], ""
    except HcError as e:
        return set(), str(e).splitlines()[0] if str(e) else type(e).__name__, ""
    except Exception as e:  # any other exception is a bug this audit finds
        return set(), "", f"{type(e).__name__}: {e}"
    found = list(field_facts.leaves(msgspec.to_builtins(parsed)))
    return {i for i, fact in enumerate(facts) if any(fact.matches(k, v) for k, v in found)}, "", ""


@dataclass
class Cell:
    """One tool under one transformation."""

    files: int = 0  # files with a fact whose evidence the transformation leaves
    facts: int = 0  # facts whose evidence the transformation leaves
    read: int = 0  # of those, surfaced on the untransformed file (the expected ones)
    kept: int = 0  # of the expected, surfaced after the transformation
    full: int = 0  # files with every expected fact kept
    crashed: int = 0
    fragments: int = 0  # files a cut left without what names their values, refused so (no fact expected)
    misses: list[tuple[str, str]] = field(default_factory=list)  # (file, what it lost)

    def add(self, other: Cell) -> None:
        for key in ("files", "facts", "read", "kept", "full", "crashed", "fragments"):
            setattr(self, key, getattr(self, key) + getattr(other, key))


def audited_files(tool: str = "") -> Iterator[field_facts.FieldFile]:
    """The text files of `SPLITS` with facts to check (a refusal file has none)."""
    for ff in field_facts.load():
        if ff.split in SPLITS and ff.facts and not ff.refused and ff.tool not in BINARY_TOOLS:
            if not tool or ff.tool == tool:
                yield ff


def mutate_one(ff: field_facts.FieldFile, text: str, before: set[int], name: str) -> Cell:
    """One file under one transformation."""
    cell = Cell()
    changed = TRANSFORMS[name](text, ff.tool)
    whole = without_cut_end(changed)[0] if name in DROPS_TEXT else changed  # a cut's last word: no evidence
    present = [evidence(fact, whole) for fact in ff.facts]
    left = [i for i, fact in enumerate(ff.facts)
            if (present[i] or (present[i] is None and evidence(fact, text) is None and name not in DROPS_TEXT))
            and not (positional(fact) and name in MOVES_LINES)]
    if not left:
        return cell
    expected = [i for i in left if i in before]
    after, refused, crashed = surfaced(ff.tool, changed, ff.facts)
    if refused.startswith(FRAGMENT) and name in DROPS_TEXT:  # the cut took what names the values left
        cell.fragments = 1
        return cell
    cell.files, cell.facts, cell.read, cell.crashed = 1, len(left), len(expected), bool(crashed)
    lost = [ff.facts[i] for i in expected if i not in after]
    cell.kept = len(expected) - len(lost)
    cell.full = not lost and not crashed
    if lost or crashed:
        cell.misses.append((ff.name, crashed or refused or "lost " + ", ".join(map(str, lost))))
    return cell


def audit(tool: str = "", transforms: tuple[str, ...] = tuple(TRANSFORMS)) -> dict[tuple[str, str], Cell]:
    """(tool, transformation) -> what the tool's parser kept of its files' facts."""
    cells: dict[tuple[str, str], Cell] = {}
    for ff in audited_files(tool):
        text = ff.path.read_bytes().decode("utf-8", errors="replace")
        before, _, _ = surfaced(ff.tool, text, ff.facts)
        for name in transforms:
            one = mutate_one(ff, text, before, name)
            cell = cells.setdefault((ff.tool, name), Cell())
            cell.add(one)
            cell.misses += one.misses
    return dict(sorted(cells.items()))


def per_transform(cells: dict[tuple[str, str], Cell]) -> dict[str, Cell]:
    out: dict[str, Cell] = {}
    for (_, name), cell in cells.items():
        out.setdefault(name, Cell()).add(cell)
    return {name: out[name] for name in TRANSFORMS if name in out}


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}" if whole else "-"


def totals_rows(cells: dict[tuple[str, str], Cell]) -> list[list[str]]:
    """Per transformation: files, facts, the untransformed rate, the transformed rate, the ratio."""
    rows = []
    for name, c in per_transform(cells).items():
        ratio = f"{c.kept / c.read:.3f}" if c.read else "-"
        rows.append([name, str(c.files), str(c.facts), _pct(c.read, c.facts), _pct(c.kept, c.facts), ratio,
                     f"{c.full}/{c.files}", str(c.crashed)])
    return rows


TOTALS_HEADERS = ["TRANSFORM", "FILES", "FACTS", "% READ AS IS", "% READ TRANSFORMED", "RATIO", "FILES KEPT",
                  "CRASHES"]


def table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    return ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths, strict=True)))
            for r in [headers, *rows]]


def cells_rows(cells: dict[tuple[str, str], Cell]) -> list[list[str]]:
    return [[tool, name, str(c.files), str(c.read), str(c.kept), _pct(c.kept, c.read), f"{c.full}/{c.files}",
             str(c.crashed), str(c.fragments)] for (tool, name), c in cells.items()]


CELLS_HEADERS = ["TOOL", "TRANSFORM", "FILES", "EXPECTED", "KEPT", "% KEPT", "FILES KEPT", "CRASHES", "FRAGMENTS"]


def recorded() -> dict[tuple[str, str], tuple[int, int]]:
    """(tool, transformation) -> (kept, expected) as RECORD holds them."""
    import yaml

    doc: dict[str, dict[str, list[int]]] = yaml.safe_load(RECORD.read_text()) if RECORD.exists() else {}
    return {(tool, name): (pair[0], pair[1]) for tool, cells in (doc or {}).items() for name, pair in cells.items()}


def record(cells: dict[tuple[str, str], Cell]) -> None:
    """Write each cell's kept/expected to RECORD (after a fix raised one: the ratchet's new floor)."""
    import yaml

    doc: dict[str, dict[str, Any]] = {}
    for (tool, name), cell in cells.items():
        doc.setdefault(tool, {})[name] = [cell.kept, cell.read]
    head = "# tests/field/mutate.py --record: per tool and paste shape, [facts kept, facts expected]\n"
    RECORD.write_text(head + yaml.safe_dump(doc, sort_keys=True, default_flow_style=None, width=200))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--tool", default="", help="only this tool (hc parse's name)")
    ap.add_argument("--transform", default="", choices=["", *TRANSFORMS], help="only this transformation")
    ap.add_argument("--misses", action="store_true", help="list each file that lost a fact, and what")
    ap.add_argument("--totals", action="store_true", help="only the table per transformation")
    ap.add_argument("--record", action="store_true", help=f"write every cell's kept/expected to {RECORD.name}")
    args = ap.parse_args(argv)
    if args.record and (args.tool or args.transform):
        ap.error("--record records every tool and transformation: no --tool or --transform")
    cells = audit(args.tool, (args.transform,) if args.transform else tuple(TRANSFORMS))
    if args.record:
        record(cells)
    if not args.totals:
        print("\n".join(table(CELLS_HEADERS, cells_rows(cells))) + "\n")
    print("\n".join(table(TOTALS_HEADERS, totals_rows(cells))))
    if args.misses:
        for (tool, name), cell in cells.items():
            for file, what in cell.misses:
                print(f"{tool:22} {name:9} {file}  {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
