"""Node names and hostlists (Slurm/ClusterShell hostlist expressions).

A hostlist can name far more nodes than exist ("gpu[1-1000000000]"), and ClusterShell
expands every name into memory before it can answer anything. hc therefore never
expands a hostlist to decide membership: `Hostlist` parses the common form (names,
bracketed numeric ranges, commas) into ClusterShell's own model of a name, a pattern
of non-digit text with one numeric index per digit run ("gpu%s-ib%s"), and tests a
name against the ranges arithmetically, in time linear in the name. Only where a list
is really needed (`expand`, for `--nodes`) are names produced, and only after
counting them: more than MAX_EXPAND is an error. Forms outside the common one
(operators `!&^`, `@groups`, wildcards) are left to ClusterShell, after an upper bound
on what it would expand. A hostlist holds printable ASCII only: no node name holds
anything else. Which of many hostlists share a name (a config's node patterns) is found
by `overlapping`, a sweep, never by comparing every pair.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from healthcheck.core.errors import UsageError
from healthcheck.core.inputs import clip
from healthcheck.core.lazyre import lazy_compile

if TYPE_CHECKING:  # pragma: no cover
    from ClusterShell.NodeSet import NodeSet

# The most names a hostlist may expand to where hc needs the list itself (`--nodes`,
# `hc sweep`, a pattern with operators or @groups, a folded overlap in `hc config
# validate`): far above any cluster, far below what exhausts memory or a deadline
# (ClusterShell spends ~1 us and ~200 bytes per name: 10 million took 8 s and 1.7 GB).
MAX_EXPAND = 100_000

# RFC 1123 labels (letters, digits, hyphens; no leading hyphen), dots between labels.
# Stricter than what Slurm accepts, on purpose: a node name reaches scontrol and ssh.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_NODE_RE = lazy_compile(rf"{_LABEL}(?:\.{_LABEL})*")


def is_valid_node_name(name: str) -> bool:
    # fullmatch: "$" would also accept a name followed by a newline
    return len(name) <= 253 and bool(_NODE_RE.fullmatch(name))


def check_node_name(name: str) -> str:
    if not is_valid_node_name(name):
        raise UsageError(f"{name!r} is not a valid node name (letters, digits, hyphens and dots)")
    return name


class HostlistError(ValueError):
    """A hostlist that is malformed, or that would expand to more names than hc allows."""


# ---------------------------------------------------------------------- ranges


def _pad_of(digits: str) -> int:
    """ClusterShell's padding of a range bound: its length when written with leading zeros."""
    return len(digits) if len(digits) > 1 and digits[0] == "0" else 0


class _Range(msgspec.Struct, frozen=True):
    """start..stop (inclusive) every `step`, each index written zero-padded to `pad` digits."""

    start: int
    stop: int
    step: int = 1
    pad: int = 0

    def count(self) -> int:  # not __len__: len() fails past sys.maxsize
        return (self.stop - self.start) // self.step + 1

    def has(self, digits: str) -> bool:
        n = int(digits)
        return (self.start <= n <= self.stop and (n - self.start) % self.step == 0
                and digits == f"{n:0{self.pad}d}")

    def intersect(self, other: _Range) -> _Range | None:
        """The indexes both ranges write the same way (an arithmetic progression), if any."""
        lo, hi, pad = max(self.start, other.start), min(self.stop, other.stop), self.pad
        if self.pad != other.pad:
            # "7" and "007" differ; only indexes with at least max(pad) digits read the same
            lo, pad = max(lo, 10 ** (max(self.pad, other.pad) - 1)), 0
        g = math.gcd(self.step, other.step)
        if (other.start - self.start) % g:
            return None
        lcm = self.step // g * other.step
        # x = self.start (mod self.step) and x = other.start (mod other.step)
        k = (other.start - self.start) // g * pow(self.step // g, -1, other.step // g) % (other.step // g)
        first = lo + (self.start + k * self.step - lo) % lcm  # the smallest such x >= lo
        if first > hi:
            return None
        return _Range(first, first + (hi - first) // lcm * lcm, lcm, pad)

    def text(self) -> str:
        """ClusterShell range syntax. A padded range never reaches 10**pad (ClusterShell
        requires both bounds of "001-999" to have the same width), so one form fits all."""
        a, b = f"{self.start:0{self.pad}d}", f"{self.stop:0{self.pad}d}"
        if self.start == self.stop:
            return a
        return f"{a}-{b}" + (f"/{self.step}" if self.step > 1 else "")


_MAX_DIGITS = 4000  # Python's int() refuses strings of more than 4300 digits
_SUBRANGE_RE = lazy_compile(r"(\d+)(?:-(\d+)(?:/(\d+))?)?")


def _parse_subrange(text: str) -> _Range:
    """One "a", "a-b" or "a-b/step", with ClusterShell's rules for padding and order."""
    m = _SUBRANGE_RE.fullmatch(text)
    if m is None or len(text) > _MAX_DIGITS:
        raise HostlistError(f"{text[:40]!r} is not a range")
    begin, end, step = m.group(1), m.group(2) or m.group(1), int(m.group(3) or 1)
    end_pad = _pad_of(end) if int(end) != 0 else 0
    if (_pad_of(begin) or end_pad) and len(begin) != len(end):
        raise HostlistError(f"{text!r}: padding length mismatch")
    start, stop = int(begin), int(end)
    if stop > 1e100 or start > stop or step < 1:
        raise HostlistError(f"{text!r}: invalid values in range")
    return _Range(start, stop, step, _pad_of(begin))


Dims = tuple[tuple[_Range, ...], ...]  # one tuple of ranges per numeric index of a pattern

_RUN_RE = lazy_compile(r"(\D*)(\d*)")
_GROUP_RE = lazy_compile(r"\[([0-9,/-]*)\]")
_SIMPLE_RE = lazy_compile(r"(?:[A-Za-z0-9._-]|\[[0-9,/-]*\])+")


def split_name(name: str) -> tuple[str, tuple[str, ...]]:
    """ClusterShell's view of a name: "gpu1-ib0" -> ("gpu%s-ib%s", ("1", "0"))."""
    pat, indexes = [], []
    for text, digits in _RUN_RE.findall(name.replace("%", "%%"))[:-1]:
        pat.append(text + ("%s" if digits else ""))
        if digits:
            indexes.append(digits)
    return "".join(pat), tuple(indexes)


def _parse_element(element: str) -> tuple[str, Dims] | None:
    """"gpu[01-16]-ib0" -> ("gpu%s-ib%s", ((01-16,), (0,))); None when the element is not
    plain names and bracketed ranges with non-digits on both sides of each bracket."""
    if not _SIMPLE_RE.fullmatch(element):
        return None
    pat, dims = "", []
    pos = 0
    for m in _GROUP_RE.finditer(element):
        before, after = element[m.start() - 1 : m.start()], element[m.end() : m.end() + 1]
        # digits glued to a bracket ("gpu1[0-9]") or two brackets in a row: ClusterShell
        # rewrites those; leave them to it
        if before.isdigit() or before == "]" or after.isdigit() or after == "[":
            return None
        if not all(_SUBRANGE_RE.fullmatch(part) for part in m.group(1).split(",") if part):
            return None  # negative indexes ("-8--4") and the like: ClusterShell's business
        lit_pat, lit_dims = _literal(element[pos : m.start()])
        pat += lit_pat + "%s"
        dims += lit_dims
        dims.append(tuple(_parse_subrange(part) for part in m.group(1).split(",")))
        pos = m.end()
    lit_pat, lit_dims = _literal(element[pos:])
    return pat + lit_pat, tuple(dims + lit_dims)


def _literal(text: str) -> tuple[str, list[tuple[_Range, ...]]]:
    """Plain text: each digit run is an index with one value ("ib0" -> "ib%s", [0])."""
    pat, dims = split_name(text)
    if any(len(d) > _MAX_DIGITS or int(d) > 1e100 for d in dims):
        raise HostlistError(f"{text!r}: invalid rangeset index")  # as ClusterShell: above 1e100
    return pat, [(_Range(int(d), int(d), 1, _pad_of(d)),) for d in dims]


def _split_top(text: str, ops: str) -> list[str]:
    """Split at the operator characters outside brackets; unbalanced brackets are an error."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError("nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError("']' without '['")
        elif ch in ops and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError("missing ']'")
    parts.append(text[start:])
    return parts


def _dims_size(dims: Dims) -> int:
    return math.prod(sum(r.count() for r in ranges) for ranges in dims)


# --------------------------------------------------------------------- hostlist


class Hostlist:
    """A parsed hostlist: membership without expansion, an upper bound on its size, and its
    names when they are few enough. Raises HostlistError for a malformed hostlist."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._elements: dict[str, list[Dims]] | None = self._parse_simple(text)
        self._nodeset: NodeSet | None = None
        if self._elements is not None:
            self.size_bound = sum(_dims_size(d) for ds in self._elements.values() for d in ds)
            return
        self.size_bound = _fallback_bound(text)
        if self.size_bound > MAX_EXPAND:
            raise HostlistError(
                f"may expand to more than {MAX_EXPAND} nodes; write large ranges as plain "
                f"\"prefix[a-b]\" terms (no !&^@ operators, no digits glued to a bracket)")
        self._nodeset = _nodeset(text)  # bounded: ClusterShell reports its own parse errors now

    @staticmethod
    def _parse_simple(text: str) -> dict[str, list[Dims]] | None:
        """pattern -> index ranges of each plain term; None when some term is not plain."""
        elements: dict[str, list[Dims]] = {}
        for part in _split_top(text, ","):
            parsed = _parse_element(part.strip())
            if parsed is None:
                return None
            pat, dims = parsed
            elements.setdefault(pat, []).append(dims)
        return elements

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        if self._elements is None:
            return name in self.nodeset()
        pat, indexes = split_name(name)
        if any(len(ix) > _MAX_DIGITS for ix in indexes):
            return False  # int() refuses such numbers; no range in a hostlist reaches them
        for dims in self._elements.get(pat, ()):
            if all(any(r.has(ix) for r in ranges) for ranges, ix in zip(dims, indexes, strict=True)):
                return True
        return False

    def nodeset(self) -> NodeSet:
        """ClusterShell's NodeSet of this hostlist, built once; HostlistError past MAX_EXPAND."""
        if self._nodeset is None:
            if self.size_bound > MAX_EXPAND:
                raise HostlistError(f"expands to more than {MAX_EXPAND} nodes")
            self._nodeset = _nodeset(self.text)
        return self._nodeset

    @property
    def plain(self) -> bool:
        """Whether every term is plain names and bracketed ranges (no operators, no @groups):
        then `boxes` describes it without expanding it."""
        return self._elements is not None

    def names_starting(self, prefix: str) -> list[str]:
        """The names that start with `prefix`, without expanding the others: each box's
        text between its indexes decides which index values can still lead to `prefix`,
        so a TAB on "gpu001" of "gpu[00001-10000]" builds 100 names, not 10,000. The work
        is at most `size_bound` steps; HostlistError past MAX_EXPAND, as `names`."""
        if self._elements is None:
            return [n for n in self.names() if n.startswith(prefix)]
        if self.size_bound > MAX_EXPAND:
            raise HostlistError(f"expands to more than {MAX_EXPAND} nodes")
        out: list[str] = []
        for pat in sorted(self._elements):  # ClusterShell's order: by pattern, then by index
            found: dict[str, None] = {}
            boxes = self._elements[pat]
            pieces = [piece.replace("%%", "%") for piece in pat.split("%s")]
            for dims in boxes:
                _walk_box(pieces, dims, prefix, "", found)
            names = list(found)
            if len(boxes) > 1:  # terms of one pattern merge into one sorted set
                names.sort(key=lambda name: [(int(ix), len(ix)) for ix in split_name(name)[1]])
            out.extend(names)
        return out

    def names(self) -> list[str]:
        """Every name, in ClusterShell's order; HostlistError past MAX_EXPAND."""
        return list(self.nodeset())

    def overlap(self, other: Hostlist) -> str | None:
        """The names in both, as a folded hostlist (None when there are none)."""
        if self._elements is None or other._elements is None:
            small, big = (self, other) if self._elements is None else (other, self)
            common = [n for n in small.nodeset() if n in big]
            return fold(common) if common else None
        parts: list[str] = []
        size = 0
        for pat, mine in self._elements.items():
            for a in mine:
                for b in other._elements.get(pat, ()):
                    dims = _intersect_dims(a, b)
                    if dims is not None:
                        parts.append(pat % tuple(f"[{','.join(r.text() for r in rs)}]" for rs in dims))
                        size += _dims_size(dims)
        if not parts:
            return None
        text = ",".join(parts)
        # fold it as ClusterShell would when that is cheap; else the unfolded pieces
        return str(_nodeset(text)) if size <= MAX_EXPAND else text

    def boxes(self) -> list[tuple[str, Dims]]:
        """This hostlist as boxes, each a name pattern with one tuple of ranges per index: its
        terms where it is plain, else one box per name (at most MAX_EXPAND, counted at parse)."""
        if self._elements is not None:
            return [(pat, dims) for pat, many in self._elements.items() for dims in many]
        out: list[tuple[str, Dims]] = []
        for name in self.nodeset():
            pat, indexes = split_name(name)
            if all(len(ix) <= _MAX_DIGITS for ix in indexes):  # int() refuses longer; no range reaches them
                out.append((pat, tuple((_Range(int(ix), int(ix), 1, _pad_of(ix)),) for ix in indexes)))
        return out


def _index_texts(ranges: tuple[_Range, ...], rest: str) -> list[str]:
    """One index's values as written, in ClusterShell's order (by value, then padding), that
    start with the digits `rest` (what is left of a prefix) starts with; none where `rest`
    starts with a non-digit (the text after an index never starts with a digit)."""
    digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
    if rest and not digits:
        return []
    if len(ranges) == 1:
        return _range_texts(ranges[0], digits)
    values = {(n, r.pad) for r in ranges for n in range(r.start, r.stop + 1, r.step)}
    return [text for text in (f"{n:0{pad}d}" for n, pad in sorted(values)) if text.startswith(digits)]


def _range_texts(r: _Range, digits: str) -> list[str]:
    """The values of `r` whose text starts with `digits`, found by arithmetic: for each text
    width, the numbers written with that prefix are one interval."""
    if not digits:
        return [f"{n:0{r.pad}d}" for n in range(r.start, r.stop + 1, r.step)]
    out: list[str] = []
    narrow = max(r.pad, 1)  # the width of the shortest text (zero-padded to pad)
    for width in range(max(narrow, len(digits)), max(narrow, len(str(r.stop))) + 1):
        scale = 10 ** (width - len(digits))
        lo = max(int(digits) * scale, r.start, 0 if width == narrow else 10 ** (width - 1))
        hi = min((int(digits) + 1) * scale - 1, r.stop, 10**width - 1)
        first = r.start + -(-(lo - r.start) // r.step) * r.step  # the first value of r at or past lo
        out.extend(f"{n:0{r.pad}d}" for n in range(first, hi + 1, r.step))
    return out


def _walk_box(pieces: list[str], dims: Dims, prefix: str, head: str, found: dict[str, None]) -> None:
    """Add to `found` the names of one box (text pieces around its indexes) that start with
    `prefix`, given `head`, the name so far: a head that cannot lead to the prefix stops there."""
    head += pieces[0]
    if not (head.startswith(prefix) or prefix.startswith(head)):
        return
    if not dims:
        if head.startswith(prefix) and is_valid_node_name(head):
            found.setdefault(head)
        return
    for text in _index_texts(dims[0], prefix[len(head):]):
        _walk_box(pieces[1:], dims[1:], prefix, head + text, found)


# ------------------------------------------------------------- many hostlists at once


class _Piece(msgspec.Struct, frozen=True):
    """One box of a hostlist (`owner`) cut to one range of the index the sweep runs along."""

    owner: int
    start: int
    stop: int
    dims: Dims


def _pieces(boxes: list[tuple[int, Dims]]) -> list[_Piece]:
    """The boxes of one name pattern, cut along the index whose ranges start in the most
    places (the one that tells the boxes apart best), sorted by where they start."""
    if not boxes or not boxes[0][1]:
        return [_Piece(owner, 0, 0, dims) for owner, dims in boxes]  # no index: one name each
    width = len(boxes[0][1])
    axis = max(range(width), key=lambda k: len({r.start for _, dims in boxes for r in dims[k]}))
    pieces = [_Piece(owner, r.start, r.stop, dims[:axis] + ((r,),) + dims[axis + 1:])
              for owner, dims in boxes for r in dims[axis]]
    pieces.sort(key=lambda p: (p.start, p.owner))
    return pieces


def overlapping(hostlists: Sequence[Hostlist], groups: Sequence[Hashable],
                apart: Callable[[Hashable, Hashable], bool]) -> Iterator[tuple[int, int]]:
    """The pairs (i, j), i < j, of hostlists that share a name and whose groups are `apart`,
    each once, without comparing every pair: boxes of the same name pattern are swept along
    one index in order, and a box is compared only with the boxes still open there whose
    group is apart from its own (a config's node patterns grouped by fabric: only patterns
    of other fabrics). A config of N disjoint patterns costs N log N, not N squared.
    HostlistError where a pattern outside the plain form cannot be listed."""
    by_pattern: dict[str, list[tuple[int, Dims]]] = {}
    for owner, hostlist in enumerate(hostlists):
        for pat, dims in hostlist.boxes():
            by_pattern.setdefault(pat, []).append((owner, dims))
    found: set[tuple[int, int]] = set()
    for boxes in by_pattern.values():
        open_: dict[Hashable, list[_Piece]] = {}
        for piece in _pieces(boxes):
            mine = groups[piece.owner]
            for group, pieces in open_.items():
                if not apart(mine, group):
                    continue
                pieces[:] = [p for p in pieces if p.stop >= piece.start]  # the ones closed here go
                for other in pieces:
                    pair = (min(other.owner, piece.owner), max(other.owner, piece.owner))
                    if other.owner != piece.owner and pair not in found and _intersect_dims(
                            other.dims, piece.dims) is not None:
                        found.add(pair)
                        yield pair
            open_.setdefault(mine, []).append(piece)


def _intersect_dims(a: Dims, b: Dims) -> Dims | None:
    out = []
    for ra, rb in zip(a, b, strict=True):
        both = tuple(r for x in ra for y in rb if (r := x.intersect(y)) is not None)
        if not both:
            return None
        out.append(both)
    return tuple(out)


def _fallback_bound(text: str) -> int:
    """An upper bound on the names ClusterShell would build for a hostlist outside the plain
    form: per term, the product of its brackets' sizes. ClusterShell moves digits glued
    before a bracket into its bounds ("1[0-9]" is 10-19), which can only widen the range
    to int("1" + stop) - int("1" + start); digits glued after it add a step, not names. A
    bracket it cannot parse here counts every number of its width, negative ones too."""
    total = 0
    for term in _split_top(text, ",!&^"):
        size = 1
        for m in re.finditer(r"(\d*)\[([^\]]*)\]", term):
            size *= sum(_part_bound(part, m.group(1)) for part in m.group(2).split(","))
        total += size
    return total


def _part_bound(part: str, lead: str) -> int:
    m = _SUBRANGE_RE.fullmatch(part.strip())
    if m is not None:
        begin, end = m.group(1), m.group(2) or m.group(1)
        return int(lead + end) - int(lead + begin) + 1 if int(end) >= int(begin) else 1
    width = max((len(d) for d in re.findall(r"\d+", part)), default=0) + len(lead)
    return 2 * 10**width + 1


def _nodeset(text: str) -> NodeSet:
    from ClusterShell.NodeSet import NodeSet  # TID253: ~20 ms, and a --local run names no hostlist

    try:
        ns = NodeSet(text)
    except Exception as exc:
        raise HostlistError(_reason(exc)) from None
    if len(ns) > MAX_EXPAND:  # @groups come from ClusterShell's group source: no bound before
        raise HostlistError(f"expands to more than {MAX_EXPAND} nodes")
    return ns


def _reason(exc: BaseException) -> str:
    """ClusterShell's own message for its parse errors; the exception's name for anything
    else it raised (AssertionError, RecursionError, MemoryError...)."""
    text = " ".join(str(exc).split())[:200]
    if type(exc).__name__.startswith(("NodeSet", "RangeSet")) and text:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def foreign_character(text: str) -> str | None:
    """The first character of `text` that no hostlist of node names can hold, described
    ("U+202E RIGHT-TO-LEFT OVERRIDE"): anything but printable ASCII and spaces. Slurm and
    ClusterShell node names are ASCII; a pattern with another letter, a control character
    or a bidi override that reorders how it is shown can never match, only mislead."""
    if text.isascii() and text.isprintable():
        return None

    import unicodedata  # noqa: PLC0415 -- only for a name that is not ASCII; not on the prologue's path

    ch = next(c for c in text if not " " <= c <= "~")
    return f"U+{ord(ch):04X} {unicodedata.name(ch, 'a control character')}"


def parse_hostlist(text: str) -> Hostlist:
    """Hostlist(text), with every failure (ClusterShell's included) a HostlistError."""
    if not isinstance(text, str) or not text.strip():
        raise HostlistError("empty hostlist")
    if len(text) > 65536:
        raise HostlistError(f"{len(text)} characters long")
    foreign = foreign_character(text)
    if foreign is not None:
        raise HostlistError(f"it holds {foreign}, which no node name can (node names are ASCII letters, digits, "
                            "hyphens and dots)")
    try:
        return Hostlist(text)
    except HostlistError:
        raise
    except Exception as exc:
        raise HostlistError(_reason(exc)) from None


def expand(patterns: Iterable[str]) -> list[str]:
    """Expand hostlist expressions ("gpu[001-004],login1") into validated node names, in order.

    The names are counted before any is produced: more than MAX_EXPAND in all is a UsageError.
    """
    hostlists = []
    for pattern in patterns:
        try:
            hostlists.append(parse_hostlist(pattern))
        except HostlistError as exc:
            raise UsageError(f"{ascii(_clip(pattern))} is not a valid hostlist: {exc}") from None
    if sum(h.size_bound for h in hostlists) > MAX_EXPAND:
        every = _clip(", ".join(h.text for h in hostlists))
        raise UsageError(f"hostlist expands to more than {MAX_EXPAND} nodes: {every}")
    names: list[str] = []
    for h in hostlists:
        try:
            expanded = h.names()
        except HostlistError as exc:
            raise UsageError(f"{_clip(h.text)!r} is not a valid hostlist: {exc}") from None
        names.extend(check_node_name(name) for name in expanded)
    return list(dict.fromkeys(names))


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def fold(names: Iterable[str]) -> str:
    """["gpu017", "gpu033", "gpu034"] -> "gpu[017,033-034]"."""
    from ClusterShell.NodeSet import NodeSet  # TID253

    return str(NodeSet.fromlist(list(names)))


def this_node_name(env: Mapping[str, str] | None = None) -> str:
    """$HC_NODE_NAME, else Slurm's name for this node, else the short host name; validated,
    since the name becomes file names under state_dir/report_dir and scontrol arguments."""

    env = os.environ if env is None else env
    for var in ("HC_NODE_NAME", "SLURMD_NODENAME"):
        if env.get(var):
            name, source = env[var], f"${var}"
            break
    else:
        host = os.uname().nodename  # what socket.gethostname() returns, without importing socket
        name = host.split(".", 1)[0]
        source = "the host name" if name == host else f"the host name {host[:80]!r}, short name"
    if not is_valid_node_name(name):
        raise UsageError(f"{source} {clip(name, 80)!r} is not a valid node name "
                         "(letters, digits, hyphens and dots; set HC_NODE_NAME)")
    return name
