"""What the torch log's handlers share while they read: the facts so far (each list bounded
by MAX_LISTED), the facts still read from the lines after them, and where a line's facts
come from (its line, rank, task and time)."""

from __future__ import annotations

import re

import msgspec

from healthcheck.parsers.lines import Line, UnrecognizedLines
from healthcheck.parsers.torch_log.facts import FACT_KINDS, MAX_LISTED, RankWarned, StepLogged
from healthcheck.parsers.torch_log.text import to_int

RankKey = tuple[int | None, int | None]  # (rank, task): whose lines a fact read on is on

OPEN_MAX = 256  # facts read on at once (ranks that never finish theirs: the oldest forgotten)
VERSIONS_MAX = 16
PREFIXED_MAX = 4096 * 16

# `[PG 3 Rank 4]` (2.3-2.4), `[PG 0 (default_pg) Rank 2]` (2.4), `[PG ID 0 PG GUID 0(default_pg) Rank 3]`
# (2.5+), `[Rank N]`: the rank in that group
PG_PREFIX = re.compile(
    r"\[(?:PG (?:ID )?(\d{1,9})(?: PG GUID ([^\s()\[\]]{1,128}))? ?(?:\(([^()\[\]]{0,128})\) )?)?Rank (\d{1,9})\]"
)


class OpenFact:
    """A fact still read from the lines after it."""

    __slots__ = ("expect_last", "index", "key", "kind")

    def __init__(self, kind: str, index: int, key: RankKey) -> None:
        self.kind = kind  # "backend", "terminate", "fr-stack"
        self.index = index
        self.key = key
        self.expect_last = False  # NCCL's `Last error:` alone: the error is on the next line


class FailureBox:
    """A torchrun ChildFailedError box being read."""

    def __init__(self, line: Line, program: str, loose: bool = False) -> None:
        self.line = line
        self.program = program
        self.section = ""
        self.no_other = False
        self.entries: list[dict] = []
        self.field = ""
        self.loose = loose  # no border: a box collapsed onto few lines (its fields run together)
        self.misses = 0  # lines in a row a loose box did not read


class TorchState:
    """The handlers' shared state (see the module doc)."""

    def __init__(self) -> None:
        self.facts: dict[str, list] = {name: [] for name in FACT_KINDS}
        self.dropped = 0
        self.torch = False  # a line only PyTorch / torchrun / a traceback prints
        self.versions: list[str] = []
        self.prefixed: set[int] = set()
        self.open: dict[tuple[str, RankKey], OpenFact] = {}  # (kind, rank key) -> fact
        self.last_open: dict[str, RankKey] = {}  # kind -> the rank key opened last
        self.tracebacks: dict[RankKey, int] = {}  # tracebacks open per rank
        self.frames: dict[RankKey, tuple[str, str]] = {}  # (own frame, collective) so far
        self.chains: dict[RankKey, list[str]] = {}  # own frames so far, outermost first
        self.threads: dict[RankKey, str] = {}  # `Exception in thread NAME:` before a traceback
        self.children: set[RankKey] = set()  # the open traceback is a multiprocessing child's (_bootstrap)
        self.box: FailureBox | None = None
        self.after_child_error = False  # the line before ended `ChildFailedError:` (a box with no border may follow)
        self.border = False  # the line before was a `====` border
        self.pending_work: Line | None = None  # a WorkNCCL line cut by a hard wrap
        self.step_aborted = False  # srun said it aborted or cancelled the step
        self.mpirun_process: int | None = None  # mpirun's non-zero-exit box: the rank of its `Process name:`
        self.spawn_process: int | None = None  # mp.spawn's `-- Process N terminated with the following error:`
        self.spawn_opened = False  # that process's traceback was opened (spawn.py)
        self.desync_reporter: int | None = None
        self.desync_seq: int | None = None  # the desync report's snapshot being read: `#SEQ started ranks:`
        self.unrecognized = UnrecognizedLines()
        self.last_step: dict[RankKey, StepLogged] = {}  # the last step line per rank (steps.py)
        self.last_warning: dict[RankKey, RankWarned] = {}  # the last logged warning per rank (steps.py)

    def add(self, kind: str, fact: object) -> int:
        """Keep `fact` (index in its list), or count it dropped (-1)."""
        facts = self.facts[kind]
        if len(facts) >= MAX_LISTED:
            self.dropped += 1
            return -1
        facts.append(fact)
        return len(facts) - 1

    def amend(self, kind: str, index: int, **changes: object) -> None:
        facts = self.facts[kind]
        if 0 <= index < len(facts):
            facts[index] = msgspec.structs.replace(facts[index], **changes)

    def version(self, version: str) -> None:
        if version not in self.versions and len(self.versions) < VERSIONS_MAX:
            self.versions.append(version)

    def start(self, kind: str, index: int, key: RankKey) -> None:
        """Read the lines after this one of the same rank into fact `index` of `kind`."""
        if len(self.open) >= OPEN_MAX:
            del self.open[next(iter(self.open))]
        self.open[(kind, key)] = OpenFact(kind, index, key)
        self.last_open[kind] = key

    def find_open(self, kind: str, key: RankKey) -> OpenFact | None:
        """The open fact of `kind` for this rank; for a line with no prefix, the one opened
        last (c10 prefixes only the first line of a message that holds newlines)."""
        found = self.open.get((kind, key))
        if found is None and key == (None, None):
            last = self.last_open.get(kind)
            found = self.open.get((kind, last)) if last is not None else None
        return found

    def close(self, kind: str, key: RankKey) -> None:
        self.open.pop((kind, key), None)


def rank_key(line: Line) -> RankKey:
    """(rank, task): the rank the line's labels name (lines.rank_named); the task is the
    launcher's label, else torchrun's local rank."""
    return line.global_rank, line.task if line.task is not None else line.local_rank


def time_of(line: Line) -> str:
    """The time a log prefix printed: glog's (c10's, the agent's) or Python logging's."""
    return line.stamp if line.stamp_kind in ("glog", "pylog") else ""


def where(line: Line) -> dict:
    """A fact's line, rank, task and time."""
    rank, task = rank_key(line)
    return {"line": line.number, "rank": rank, "task": task, "time": time_of(line)}


def agent_where(line: Line) -> dict:
    """Where, for torchrun's agent's and a launcher's own lines: a label is a node's, never a rank."""
    return {"line": line.number, "task": rank_key(line)[1], "time": time_of(line)}


def group_where(line: Line, body: str) -> dict:
    """Where, and the first `[PG ... Rank N]` prefix of the message."""
    fields = where(line)
    m = PG_PREFIX.search(body, 0, 600)
    if m:
        pg_id, guid, desc, rank = m.groups()
        fields.update(pg_rank=to_int(rank), pg_id=pg_id or "", pg_name=guid or "", pg_desc=desc or "")
    return fields
