"""What the torch log's handlers share while they read: the facts so far (each list bounded
by MAX_LISTED), the facts still read from the lines after them, and where a line's facts
come from (its line, rank, task and time)."""

from __future__ import annotations

import re

import msgspec

from healthcheck.parsers.lines import Line, UnrecognizedLines
from healthcheck.parsers.torch_log.facts import FACT_KINDS, MAX_LISTED, FingerprintRan, RankWarned, StepLogged
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


# The messages in which torch names the rank that prints them, in their own words (no `[rankN]:`
# label needed): where a line's labels name no rank, its facts' `rank` is this one (the rank in
# the message's group: the global rank on the default group, as `[Rank N]` is). Sources, the
# format strings filled in:
#   ProcessGroupNCCL.cpp broadcastUniqueNCCLID: "[N] is setting up NCCL communicator and retrieving
#     ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: ..."
#   ProcessGroupWrapper.cpp (libtorch_cpu strings): "Detected mismatch between collectives on ranks.
#     Rank N is running collective: CollectiveFingerPrint(...)" (this rank's), "... inconsistent collective"
#   distributed_c10d.py _store_based_barrier: "Timed out initializing process group in store based
#     barrier on rank N, for key: ..."
#   gloo allgather.cc (libtorch_cpu strings): "missing connection between rank N (this process) and rank M"
#   ProcessGroupGloo.cpp monitoredBarrier (libtorch_cpu strings): "Rank N successfully reached
#     monitoredBarrier, but received errors ...", and rank 0's "[Rank 0]: Ranks 1, 3 failed to pass ..."
#   algorithms/join.py: "Rank N exhausted all inputs."
SELF_NAMED = re.compile(
    r"\[(\d{1,9})\] is setting up NCCL communicator"
    r"|collectives on ranks\. Rank (\d{1,9}) is running"
    r"|store based barrier on rank (\d{1,9})\b"
    r"|missing connection between rank (\d{1,9}) \(this process\)"
    r"|Rank (\d{1,9}) successfully reached monitoredBarrier"
    r"|\[Rank (\d{1,9})\]: Ranks? \d"
    r"|Rank (\d{1,9}) exhausted all inputs",
    re.ASCII,
)
_SELF_NAMED_WORDS = ("is setting up", "collectives on ranks", "store based barrier", "missing connection",
                     "reached monitoredBarrier", "]: Rank", "exhausted all inputs")
SELF_NAMED_REACH = 2048  # characters of a line the words are looked for in (a gloo path comes before them)


def self_named_rank(text: str) -> int | None:
    """The rank a message says printed it (SELF_NAMED), None where it names none."""
    head = text[:SELF_NAMED_REACH]
    if not any(word in head for word in _SELF_NAMED_WORDS):
        return None
    m = SELF_NAMED.search(head)
    return to_int(next(g for g in m.groups() if g is not None)) if m else None


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
        self.field_indent = 0  # blanks before the last field's name: its traceback's lines sit deeper
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
        self.last_running: dict[int, FingerprintRan] = {}  # rank -> its wrapper's last `Running collective`
        self.traceback_at: dict[RankKey, dict] = {}  # where the rank's last traceback opened (where())
        self.frames: dict[RankKey, tuple[str, str, str]] = {}  # (own frame, collective, library) so far
        self.chains: dict[RankKey, list[str]] = {}  # own frames so far, outermost first
        self.setups: dict[RankKey, str] = {}  # whose setup the rank's open traceback is in (bindsetup.py)
        self.setup_steps: dict[RankKey, str] = {}  # the open traceback's outermost set-up step (setupframes.py)
        self.pending_binds: dict[RankKey, list[int]] = {}  # bind failures waiting for their traceback
        self.bind_lines: dict[RankKey, int] = {}  # the line of the rank's last one
        self.threads: dict[RankKey, str] = {}  # `Exception in thread NAME:` before a traceback
        self.children: set[RankKey] = set()  # the open traceback is a multiprocessing child's (_bootstrap)
        self.box: FailureBox | None = None
        self.after_child_error = False  # the line before ended `ChildFailedError:` (a box with no border may follow)
        self.border = False  # the line before was a `====` border
        self.pending_work: Line | None = None  # a WorkNCCL line cut by a hard wrap
        self.step_aborted = False  # srun said it aborted or cancelled the step
        self.job_lines = 0  # lines so far that are neither Slurm's tools' nor noise (reader.torch_line)
        self.mpirun_process: int | None = None  # mpirun's non-zero-exit box: the rank of its `Process name:`
        self.horovod_first: dict[str, int] | None = None  # Horovod's first-exit report so far (launchreports.py)
        self.launched_world: int | None = None  # a torchrun command's world; 0 where commands disagree (agent.py)
        self.launched_np: int | None = None  # an MPI/Slurm launch command's -np/-n; 0 where they disagree
        self.hydra_box: dict[str, str] | None = None  # Hydra's BAD TERMINATION box so far (rankends.py)
        self.mpd_abort: tuple[int, int] | None = None  # mpd's `rank R ... caused collective abort`: (R, line)
        self.stall_report = 0  # Horovod's stall warnings read so far (stall.py)
        self.stall_reporter: int | None = None  # the rank that printed the last one
        self.stall_block = False  # inside its `Missing ranks:` block
        self.spawn_process: int | None = None  # mp.spawn's `-- Process N terminated with the following error:`
        self.spawn_opened = False  # that process's traceback was opened (spawn.py)
        self.desync_reporter: int | None = None
        self.desync_seq: int | None = None  # the desync report's snapshot being read: `#SEQ started ranks:`
        self.unrecognized = UnrecognizedLines()
        self.last_step: dict[RankKey, StepLogged] = {}  # the last step line per rank (steps.py)
        self.rounds: dict[str, set[int]] = {}  # a loop counter's word -> values logged, any rank (steps.py)
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
    """A fact's line, rank, task and time: the rank the line's labels name, else the one its
    message says printed it (`self_named_rank`)."""
    rank, task = rank_key(line)
    if rank is None:
        rank = self_named_rank(line.text)
    return {"line": line.number, "rank": rank, "task": task, "time": time_of(line)}


def agent_where(line: Line) -> dict:
    """Where, for torchrun's agent's and a launcher's own lines: a label is a node's, never a rank."""
    return {"line": line.number, "task": rank_key(line)[1], "time": time_of(line)}


def group_where(line: Line, body: str) -> dict:
    """Where, and the first `[PG ... Rank N]` prefix of the message."""
    return where(line) | group_of(body)


def group_of(message: str) -> dict:
    """The group and rank a message's first `[PG ... Rank N]` prefix names (none: {})."""
    m = PG_PREFIX.search(message, 0, 600)
    if m is None:
        return {}
    pg_id, guid, desc, rank = m.groups()
    return {"pg_rank": to_int(rank), "pg_id": pg_id or "", "pg_name": guid or "", "pg_desc": desc or ""}


# an exception's message ending with the rank that raised it (DeepBench's `NCCL failure: unhandled
# cuda error in nccl_mpi_all_reduce.cu at line: 86 rank: 0`); not a peer it names (`by remote rank 3`)
_END_RANK = re.compile(r"(?:^|[\s,;(])[Rr]ank[:=]? ?(\d{1,7})\)?[.!]?\s*$")
_PEER_BEFORE = re.compile(r"\b(?:to|from|with|by|of|at|on|for|remote|peer|other|and|or)\s*$", re.IGNORECASE)


def end_named_rank(message: str) -> int | None:
    """The rank an exception's message ends by naming as its own (`... rank: 0`), or None."""
    tail = message[-64:]
    m = _END_RANK.search(tail)
    if m is None or _PEER_BEFORE.search(tail, 0, m.start() + 1) is not None:
        return None
    return int(m.group(1))


def said_by(message: str, rank: int | None) -> dict:
    """What an exception's message says of the rank that raised it, where its line's labels
    named none (`rank` None): the rank it names as its own, and its `[PG ... Rank N]`."""
    if rank is not None or not message:
        return {}
    named = self_named_rank(message)
    if named is None:
        named = end_named_rank(message)
    return group_of(message) | ({"rank": named} if named is not None else {})
