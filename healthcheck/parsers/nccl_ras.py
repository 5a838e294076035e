"""NCCL RAS replies (`STATUS` / `VERBOSE STATUS` on TCP 28028, NCCL >= 2.24; `ncclras`'s
output, or a raw transcript of the protocol) -> NcclRasStatus.

What NCCL prints (NVIDIA/nccl src/ras/client_support.cc and client.cc, compared at the
tags v2.24.3-1, v2.26.2-1, v2.27.7-1, v2.28.9-1, v2.29.7-1, v2.30.7-1; real 2.28.9
captures in tests/fixtures/h100-captures, derived ones in tests/fixtures/nccl-ras):

* the handshake, when the capture is a transcript: the client's `CLIENT PROTOCOL 2`,
  `TIMEOUT N`, `[VERBOSE ]STATUS` (kept here with a `>>> ` prefix, or bare), the
  server's `SERVER PROTOCOL 2`, `OK`, or `ERROR: ...`; `ncclras`'s own errors on stderr
  (`Connecting to HOST:PORT: REASON`, `Failed to connect to the NCCL RAS service!`, ...);
* `NCCL version 2.28.9 compiled with CUDA 13.0`, `CUDA runtime version 13000, driver
  version 13000`;
* `Job summary` / `===========`: one row `Nodes (total) / Processes per node / GPUs per
  process / Processes (total) / GPUs (total)` when every node is alike; else the
  distributions (`Nodes / Processes per node [/ GPUs per process]` rows, `Processes /
  GPUs per process` rows), the totals row (`Nodes / Processes / GPUs (total)`) and
  `The outlier node(s):` / `  Node IP running process(es) PID,PID`;
* `Communicators... (0.000s)` / `=============`, then `Group Comms Nodes Ranks Ranks Ranks
  Status Errors` rows (`%5d  %8d  %8d  %8s  %8d  %8d  %8s  %6s`: ranks per node is `N` or
  `MIN-MAX`, status NOCOMM (UNKNOWN in 2.24)/INIT/RUNNING/FINALIZE/ABORT, errors OK or
  MISMATCH/ERROR/INCOMPLETE joined by commas), or `No communicator data collected!`;
* `Errors` / `======`: `INCOMPLETE` + `Missing communicator data from N job processes`
  + `  Process PID on node IP managing GPU(s) LIST`; `DEAD` + `N job process(es are| is)
  considered dead (unreachable via the RAS network)` + the same process lines; per
  communicator `#G-I (HASH) INCOMPLETE` + `Missing communicator data from N ranks` +
  `  Rank R -- GPU G managed by process P on node IP` (2.24: `The missing ranks: 1,3`),
  `#G-I (HASH) ERROR` + `Initialization|Asynchronous error(s) on N rank(s)` + `N ranks
  reported ERROR` / `Rank R reported ERROR -- GPU ...`;
* `Warnings` / `========`: `TIMEOUT` + `Encountered N communication timeout(s) while
  gathering communicator data`; `#G-I (HASH) MISMATCH` + `Communicator ranks have
  different status` (`N ranks have status S`, `Rank R has status S -- GPU ...`; 2.24
  `The unknown ranks: ...`) and `Communicator ranks have different OP operation counts`
  (2.24: `collective`) + `N ranks have launched up to operation K` / `Rank R has launched
  up to operation K -- GPU G managed by process P on node IP` / `... have not launched
  any operations`. A `Rank R -- GPU ...` line belongs to the `N ranks ...` line above it.
  Non-verbose replies list ranks only for small (outlier) sets.
* `Warning: missing data from N process(es) (received from X, expected Y)` is in code that
  every release so far compiles out (`#if 0`); it is read all the same.
* NCCL >= 2.29 `ncclras -f json` / `SET FORMAT json`: one JSON object (nccl_version,
  communicators [{hash, size, ranks [{rank, host, pid, cuda_dev, nvml_dev, status,
  collective_counts}], missing_ranks}], ras {collection_time_sec, timeouts_count}).

Lines are read through the line layer (mended; `>>> STATUS` kept, a shell prompt left out)
and a table of small handlers (`lines.Handler`, `dispatch`, _LINE_HANDLERS): the transcript
and the sections' titles, then each section's lines, every handler checking its section.
A line none reads is counted and sampled in `unrecognized` (left out of the JSON when none).

Any of: a version line, a section header, a handshake line, an ncclras error, a JSON
reply. Else ParseError. Lines are cut at MAX_LINE; patterns are anchored and bounded.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from healthcheck.core import typed
from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import (
    NOTHING_UNREAD,
    Handler,
    Line,
    Unrecognized,
    UnrecognizedLines,
    dispatch,
    read_lines,
    starts,
)

MAX_LINE = 4096
MAX_LISTED = 10_000  # ranks and processes kept per list (NCCL itself lists at most a few)

IssueKind = Literal["INCOMPLETE", "ERROR", "MISMATCH"]


class RasRank(msgspec.Struct, frozen=True, omit_defaults=True):
    """`Rank R -- GPU G managed by process P on node IP` (GPU, process and node None for
    `[process information not found]`). `gpu` is the CUDA device as printed, with
    `nvml_gpu` where NVML numbers it differently (`0 (NVML 3)`)."""

    rank: int
    gpu: int | None = None
    nvml_gpu: int | None = None
    pid: int | None = None
    node: str | None = None  # the process's IP address (NCCL prints no hostname)


class RasProcess(msgspec.Struct, frozen=True, omit_defaults=True):
    """`Process P on node IP managing GPU(s) 0,1 [(NVML 2,3)]`."""

    pid: int
    node: str
    gpus: tuple[int, ...] = ()
    nvml_gpus: tuple[int, ...] = ()


class RasRankSet(msgspec.Struct, frozen=True, omit_defaults=True):
    """Ranks that share a value: `N ranks have launched up to operation K` and the rank
    lines under it (listed only when NCCL judged the set an outlier), or one `Rank R has
    launched up to operation K -- ...` line (count 1). `value` is the operation count
    (None: not launched any), the status (RUNNING...) or the error (Remote process
    error...)."""

    count: int
    value: str | None = None
    ranks: tuple[RasRank, ...] = ()


class RasOpCounts(msgspec.Struct, frozen=True, omit_defaults=True):
    """`Communicator ranks have different OP operation counts`: OP is AllReduce,
    AllGather... ("collective" in 2.24, which did not split by operation)."""

    operation: str
    sets: tuple[RasRankSet, ...] = ()

    @property
    def behind(self) -> RasRankSet | None:
        """The set with the lowest count (not launched any counts as lowest)."""
        if not self.sets:
            return None
        return min(self.sets, key=lambda s: -1 if s.value is None else int(s.value))


class RasErrors(msgspec.Struct, frozen=True, omit_defaults=True):
    """`Initialization|Asynchronous error(s) on N rank(s)` and what each set reported."""

    kind: Literal["init", "async"]
    ranks: int
    sets: tuple[RasRankSet, ...] = ()


class RasCommIssue(msgspec.Struct, frozen=True, omit_defaults=True):
    """A `#G-I (HASH) INCOMPLETE|ERROR|MISMATCH` block: communicator I of summary group G."""

    kind: IssueKind
    group: int
    index: int
    hash: str  # 16 hex digits, as printed
    missing_rank_count: int | None = None  # INCOMPLETE: "Missing communicator data from N ranks"
    missing_ranks: tuple[RasRank, ...] = ()  # INCOMPLETE (2.24 lists numbers only: RasRank(rank=R))
    status_sets: tuple[RasRankSet, ...] = ()  # MISMATCH: "Communicator ranks have different status"
    unknown_ranks: tuple[int, ...] = ()  # 2.24: "The unknown ranks: ..."
    op_counts: tuple[RasOpCounts, ...] = ()  # MISMATCH
    errors: tuple[RasErrors, ...] = ()  # ERROR


class RasCommGroup(msgspec.Struct, frozen=True, omit_defaults=True):
    """A row of the Communicators table: communicators alike in size, nodes, status and
    errors, grouped."""

    group: int
    comms: int
    nodes: int
    ranks_per_node_min: int
    ranks_per_node_max: int
    ranks_per_comm: int
    ranks_in_group: int
    status: str  # NOCOMM (UNKNOWN in 2.24) / INIT / RUNNING / FINALIZE / ABORT
    errors: tuple[str, ...] = ()  # () for OK; else MISMATCH, ERROR, INCOMPLETE

    @property
    def ok(self) -> bool:
        return not self.errors


class RasCount(msgspec.Struct, frozen=True):
    """A row of the job summary's distributions: `count` nodes (or processes) have
    `value` processes per node (or GPUs per process)."""

    count: int
    value: int


class RasOutlierNode(msgspec.Struct, frozen=True):
    node: str
    pids: tuple[int, ...]


class RasJob(msgspec.Struct, frozen=True, omit_defaults=True):
    nodes: int | None = None
    processes: int | None = None
    gpus: int | None = None
    processes_per_node: tuple[RasCount, ...] = ()  # one row when every node is alike
    gpus_per_process: tuple[RasCount, ...] = ()
    outlier_nodes: tuple[RasOutlierNode, ...] = ()


class RasJsonRank(msgspec.Struct, frozen=True, omit_defaults=True):
    """A rank of the JSON reply (NCCL >= 2.29)."""

    rank: int
    host: str = ""
    pid: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    init_state: int | None = None  # ncclResult_t: 0 success
    async_error: int | None = None
    finalize_called: bool = False
    destroy_flag: bool = False
    abort_flag: bool = False
    collective_counts: dict[str, int] = {}
    missing: bool = False  # listed under missing_ranks (no data from it)
    unresponsive: bool | None = None  # missing: its process did not answer (2.30)
    dead: bool | None = None  # missing: its process is considered dead (2.30)


class RasCommunicator(msgspec.Struct, frozen=True, omit_defaults=True):
    """A communicator of the JSON reply, with every rank's operation counts."""

    hash: str
    size: int
    ranks: tuple[RasJsonRank, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.behind and not any(
            r.missing or r.abort_flag or (r.init_state or 0) not in (0, 7) or (r.async_error or 0) not in (0, 7)
            for r in self.ranks)  # 7: ncclInProgress

    @property
    def behind(self) -> dict[str, tuple[int, ...]]:
        """Per operation whose counts differ: the ranks with the lowest count."""
        out: dict[str, tuple[int, ...]] = {}
        present = [r for r in self.ranks if not r.missing]
        for op in sorted({op for r in present for op in r.collective_counts}):
            counts = {r.rank: r.collective_counts.get(op, 0) for r in present}
            if len(set(counts.values())) > 1:
                low = min(counts.values())
                out[op] = tuple(sorted(r for r, c in counts.items() if c == low))
        return out


class NcclRasStatus(msgspec.Struct, frozen=True, omit_defaults=True):
    format: Literal["text", "json"] = "text"
    nccl_version: str | None = None  # "2.28.9"
    cuda_compiled: str | None = None  # "13.0"
    cuda_runtime: int | None = None  # 13000
    cuda_driver: int | None = None
    protocol: int | None = None  # SERVER PROTOCOL N
    verbose: bool | None = None  # the transcript's `VERBOSE STATUS` / `STATUS`
    job: RasJob | None = None
    collection_s: float | None = None  # "Communicators... (0.000s)", JSON collection_time_sec
    groups: tuple[RasCommGroup, ...] = ()
    no_communicators: bool = False  # "No communicator data collected!"
    incomplete_processes: int | None = None  # Errors/INCOMPLETE: job processes that sent no data
    missing_processes: tuple[RasProcess, ...] = ()
    dead_processes: int | None = None  # Errors/DEAD
    dead: tuple[RasProcess, ...] = ()
    processes_not_found: int = 0  # "[could not find information on N processes]"
    issues: tuple[RasCommIssue, ...] = ()
    timeouts: int | None = None  # Warnings/TIMEOUT (JSON: timeouts_count)
    missing_data: int | None = None  # "Warning: missing data from N processes"
    communicators: tuple[RasCommunicator, ...] = ()  # JSON only
    complete: bool = False  # the Warnings section (JSON: its "ras" block) was reached
    server_errors: tuple[str, ...] = ()  # "ERROR: Unknown command ..." from the server
    client_error: str | None = None  # ncclras could not reach or talk to the RAS service
    # why what was read is partial: a paste cut above its `Errors`/`Warnings` title, its
    # `#G-I (HASH) ...` blocks read without knowing which of the two they were in (never `ok`:
    # `complete` stays False); None when nothing was missing
    incomplete: str | None = None
    unrecognized: Unrecognized = NOTHING_UNREAD  # lines no handler read (JSON: around the reply); omitted when none

    @property
    def ok(self) -> bool:
        """Every communicator group OK and no Errors/Warnings entry; in JSON, no missing
        rank, no error and no operation count that differs (a report that was cut, or no
        report at all, is not OK)."""
        return (self.complete and not self.issues and not self.incomplete_processes and not self.dead_processes
                and not self.timeouts and all(g.ok for g in self.groups) and self.client_error is None
                and all(c.ok for c in self.communicators))

    @property
    def lagging(self) -> tuple[tuple[str, RasRankSet], ...]:
        """(operation, the ranks with the lowest count) for every operation-count mismatch."""
        return tuple((c.operation, behind) for i in self.issues for c in i.op_counts
                     if (behind := c.behind) is not None)


# ---------------------------------------------------------------- text

_VERSION = re.compile(r"NCCL version (\d{1,4}\.\d{1,4}\.\d{1,4}\S{0,64}) compiled with CUDA (\d{1,4}\.\d{1,4})")
_CUDA = re.compile(r"CUDA runtime version (-?\d{1,9}), driver version (-?\d{1,9})")
_COMMUNICATORS = re.compile(r"Communicators\.\.\.(?: \((\d{1,9}\.\d{1,9})s\))?")
_HASH_DIGITS = 16  # a communicator's hash as NCCL prints it ("%016lx")
UNTITLED = "untitled"  # _Reader.section of `#G-I` blocks read before any section title
UNTITLED_BLOCKS = ("cut above its Errors/Warnings title: the communicator blocks are read, which of the two "
                   "sections each was in is not known")
_ISSUE = re.compile(r"#(\d{1,9})-(\d{1,9}) \(([0-9a-fA-F]{1,32})\) (INCOMPLETE|ERROR|MISMATCH)")
_GPU = r"GPU (\d{1,9})(?: \(NVML (\d{1,9})\))?"
_WHO = r"(?:" + _GPU + r" managed by process (\d{1,10}) on node (\S{0,256})|\[process information not found\])"
_RANK = re.compile(r"Rank (\d{1,9}) -- " + _WHO)
_RANK_OP = re.compile(r"Rank (\d{1,9}) has (?:launched up to operation (\d{1,20})|not launched any operations) -- "
                      + _WHO)
_RANK_STATUS = re.compile(r"Rank (\d{1,9}) has status ([A-Z]{1,16}) -- " + _WHO)
_RANK_REPORTED = re.compile(r"Rank (\d{1,9}) reported (.{1,64}?) -- " + _WHO)
_SET_OP = re.compile(r"(\d{1,9}) ranks have (?:launched up to operation (\d{1,20})|not launched any operations)")
_SET_STATUS = re.compile(r"(\d{1,9}) ranks have status ([A-Z]{1,16})")
_SET_REPORTED = re.compile(r"(\d{1,9}) ranks reported (.{1,64})")
_RANKS_STATUS_24 = re.compile(r"Rank ([\d,]{1,100000}) has status ([A-Z]{1,16})")
_DIFFERENT_OPS = re.compile(r"Communicator ranks have different (\w{1,32}) operation counts")
_ERRORS_ON = re.compile(r"(Initialization|Asynchronous) errors? on (\d{1,9}) ranks?")
_MISSING_RANKS = re.compile(r"Missing communicator data from (\d{1,9}) ranks?")
_MISSING_PROCS = re.compile(r"Missing communicator data from (\d{1,9}) job process(?:es)?")
_DEAD = re.compile(r"(\d{1,9}) job process(?:es are| is) considered dead")
_PROCESS = re.compile(r"Process (\d{1,10}) on node (\S{0,256}) managing GPUs? ([\d,]{0,256})"
                      r"(?: \(NVML ([\d,]{0,256})\))?")
_NOT_FOUND = re.compile(r"\[could not find information on (\d{1,9}) process(?:es)?\]")
_TIMEOUTS = re.compile(r"Encountered (\d{1,9}) communication timeouts? while gathering")
_MISSING_DATA = re.compile(r"Warning: missing data from (\d{1,9}) process(?:es)?")
_OUTLIER = re.compile(r"Node (\S{1,256}) running process(?:es)? ([\d,]{1,100000})")
_PROTOCOL = re.compile(r"SERVER PROTOCOL (\d{1,9})")
_CLIENT_ERRORS = (
    "Failed to connect to the NCCL RAS service!", "NCCL unexpectedly closed the connection",
    "Unexpected response from NCCL:", "Connection timed out", "Connecting to ", "Resolving ",
    "NCCL RAS protocol version mismatch",
)
# the lines ncclras prints after "Failed to connect to the NCCL RAS service!" (src/ras/client.cc)
_CLIENT_ADVICE = ("Please make sure that the NCCL job has the RAS service enabled",
                  "the RAS client was started on a node where the NCCL job is running")
_SEPARATORS = frozenset({"===========", "=============", "======", "========"})


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(t) for t in text.split(",")[:MAX_LISTED] if t.isascii() and t.isdigit() and len(t) < 12)


def _who(rank: int, m: re.Match, first: int) -> RasRank:
    """The GPU/process/node groups that start at group `first` of `m`."""
    gpu, nvml, pid, node = m.group(first), m.group(first + 1), m.group(first + 2), m.group(first + 3)
    if gpu is None:
        return RasRank(rank=rank)
    return RasRank(rank=rank, gpu=int(gpu), nvml_gpu=None if nvml is None else int(nvml), pid=int(pid), node=node)


class _Reader:
    """The handlers' state while a text reply is read (see _LINE_HANDLERS)."""

    def __init__(self) -> None:
        self.out: dict = {}
        self.section = ""  # "job", "comms", "errors", "warnings"; "untitled": blocks cut from their title
        self.job: dict = {}
        self.table = ""  # the job summary's table being read
        self.pending_header: list[str] = []
        self.groups: list[RasCommGroup] = []
        self.issues: list[dict] = []
        self.issue: dict | None = None
        self.block = ""  # "INCOMPLETE" / "DEAD" (process lists) outside a #G-I block
        self.rankset: dict | None = None  # the `N ranks ...` set rank lines attach to
        self.missing_processes: list[RasProcess] = []
        self.dead: list[RasProcess] = []
        self.server_errors: list[str] = []
        self.facts = 0
        self.unrecognized = UnrecognizedLines()

    def read(self, line: Line) -> None:
        """One line, its blanks off, through _LINE_HANDLERS; counted in `unrecognized` where
        none read it. A shell prompt is no line of the reply (`>>> STATUS` is the transcript's)."""
        body = line.text[:MAX_LINE].strip()
        if not body or (line.noise and not body.startswith(">>>")):
            return
        if body != line.text:
            line = msgspec.structs.replace(line, text=body)
        if dispatch(_LINE_HANDLERS, self, line) is None:
            self.unrecognized.note(msgspec.structs.replace(line, noise=""))

    def line(self, number: int, text: str) -> None:
        """A line as it stands (the handshake around a JSON reply)."""
        self.read(Line(number=number, raw=text, text=text))

    # -- the transcript and the sections' titles: True when the line was theirs

    def command(self, line: Line) -> bool:
        """The client's transcript: `>>> STATUS`, `>>> VERBOSE STATUS`."""
        command = line.text[3:].strip().upper()
        if command in ("STATUS", "VERBOSE STATUS"):
            self.out["verbose"] = command == "VERBOSE STATUS"
            self.facts += 1
        return True

    def protocol(self, line: Line) -> bool:
        m = _PROTOCOL.fullmatch(line.text)
        if m is None:
            return False
        self.out["protocol"] = int(m.group(1))
        self.facts += 1
        return True

    def server_error(self, line: Line) -> bool:
        self.server_errors.append(clip(line.text, 300))
        self.facts += 1
        return True

    def client_error(self, line: Line) -> bool:
        body = line.text
        if "client_error" not in self.out and not body.startswith("NCCL RAS protocol version mismatch"):
            self.out["client_error"] = clip(body, 300)
        self.facts += 1
        return True

    def client_advice(self, line: Line) -> bool:
        """The rest of ncclras's `Failed to connect to the NCCL RAS service!` message."""
        return "client_error" in self.out

    def version(self, line: Line) -> bool:
        m = _VERSION.fullmatch(line.text)
        if m is None:
            return False
        self.out["nccl_version"], self.out["cuda_compiled"] = m.group(1), m.group(2)
        self.facts += 1
        return True

    def cuda(self, line: Line) -> bool:
        m = _CUDA.fullmatch(line.text)
        if m is None:
            return False
        self.out["cuda_runtime"], self.out["cuda_driver"] = int(m.group(1)), int(m.group(2))
        return True

    def job_summary(self, line: Line) -> bool:
        self.section, self.facts = "job", self.facts + 1
        return True

    def communicators(self, line: Line) -> bool:
        self.section, self.facts = "comms", self.facts + 1
        m = _COMMUNICATORS.fullmatch(line.text)
        if m and m.group(1):
            self.out["collection_s"] = float(m.group(1))
        return True

    def issues_section(self, line: Line) -> bool:
        """`Errors` or `Warnings` (the reply's last section: it is complete)."""
        body = line.text
        self.section, self.facts, self.issue, self.block, self.rankset = body.lower(), self.facts + 1, None, "", None
        if body == "Warnings":
            self.out["complete"] = True
        return True

    def missing_data(self, line: Line) -> bool:
        m = _MISSING_DATA.search(line.text)
        if m is None:
            return False
        self.out["missing_data"] = int(m.group(1))
        return True

    # -- Job summary

    def job_header(self, line: Line) -> bool:
        """A header line of the job summary's tables (two make a header), `The outlier
        node(s):` or an outlier node's line; a line of other words is kept in the header
        all the same, unread."""
        body = line.text
        if self.section != "job" or body.split()[0].isdigit():
            return False
        self.pending_header.append(body)
        if body.startswith("The outlier node"):
            self.table, self.pending_header = "outliers", []
            return True
        if (m := _OUTLIER.fullmatch(body)) is not None:
            self.job.setdefault("outlier_nodes", []).append(RasOutlierNode(node=m.group(1), pids=_ints(m.group(2))))
            self.pending_header = []
            return True
        if len(self.pending_header) >= 2:
            self.table = _job_table(" ".join(self.pending_header).split()) or self.table
            self.pending_header = []
        return set(body.split()) <= _JOB_HEADER_WORDS

    def job_row(self, line: Line) -> bool:
        """A row of numbers under the job summary's header."""
        tokens = line.text.split()
        numbers = [int(t) for t in tokens if t.isascii() and t.isdigit() and len(t) < 12]
        if self.section != "job" or len(numbers) != len(tokens):
            return False
        self.pending_header = []
        if self.table == "consistent" and len(numbers) == 5:
            nodes, ppn, gpp, procs, gpus = numbers
            self.job.update(nodes=nodes, processes=procs, gpus=gpus,
                            processes_per_node=[RasCount(count=nodes, value=ppn)],
                            gpus_per_process=[RasCount(count=procs, value=gpp)])
        elif self.table == "totals" and len(numbers) == 3:
            self.job.update(nodes=numbers[0], processes=numbers[1], gpus=numbers[2])
        elif self.table == "nodes3" and len(numbers) == 3:
            self.job.setdefault("processes_per_node", []).append(RasCount(count=numbers[0], value=numbers[1]))
            per_process = self.job.setdefault("gpus_per_process", [])
            if not per_process:  # every process has this many GPUs: counted from the totals row
                per_process.append(RasCount(count=0, value=numbers[2]))
        elif self.table == "nodes2" and len(numbers) == 2:
            self.job.setdefault("processes_per_node", []).append(RasCount(count=numbers[0], value=numbers[1]))
        elif self.table == "gpus" and len(numbers) == 2:
            self.job.setdefault("gpus_per_process", []).append(RasCount(count=numbers[0], value=numbers[1]))
        return True

    # -- Communicators table

    def no_communicators(self, line: Line) -> bool:
        if self.section != "comms":
            return False
        self.out["no_communicators"] = True
        return True

    def comms_header(self, line: Line) -> bool:
        """The table's two header lines (`Group     Comms ...`, `    #  in group ...`)."""
        return self.section == "comms"

    def comms_row(self, line: Line) -> bool:
        tokens = line.text.split()
        if self.section != "comms" or len(tokens) != 8 or not all(
                t.isascii() and t.isdigit() and len(t) < 12 for t in tokens[:3] + tokens[4:6]):
            return False
        low, _, high = tokens[3].partition("-")
        if not (low.isascii() and low.isdigit() and len(low) < 12) or (high and not (
                high.isascii() and high.isdigit() and len(high) < 12)):
            return False
        errors = tuple(e for e in tokens[7].split(",") if e and e != "OK")
        self.groups.append(RasCommGroup(
            group=int(tokens[0]), comms=int(tokens[1]), nodes=int(tokens[2]), ranks_per_node_min=int(low),
            ranks_per_node_max=int(high or low), ranks_per_comm=int(tokens[4]), ranks_in_group=int(tokens[5]),
            status=tokens[6][:16], errors=errors[:8]))
        return True

    # -- Errors and Warnings: the blocks

    def in_issues(self) -> bool:
        return self.section in ("errors", "warnings", UNTITLED)

    def comm_issue(self, line: Line) -> bool:
        """`#G-I (HASH) INCOMPLETE|ERROR|MISMATCH`: the block of communicator I of group G."""
        m = _ISSUE.fullmatch(line.text)
        if m is None or not (self.in_issues() or not self.section and len(m.group(3)) == _HASH_DIGITS):
            return False
        if not self.section:
            # a paste cut above its `Errors` / `Warnings` title: the block is read (its kind is
            # on its line, its hash as NCCL prints it), which section it was in is not known
            self.section, self.facts = UNTITLED, self.facts + 1
        self.issue = {"kind": m.group(4), "group": int(m.group(1)), "index": int(m.group(2)), "hash": m.group(3),
                      "missing_ranks": [], "status_sets": [], "op_counts": [], "errors": []}
        self.issues.append(self.issue)
        self.block, self.rankset = "", None
        return True

    def job_block(self, line: Line) -> bool:
        """`INCOMPLETE`, `DEAD`, `TIMEOUT`: a block about the job's processes."""
        if not self.in_issues():
            return False
        self.issue, self.block, self.rankset = None, line.text, None
        return True

    # -- a job block's lines (no #G-I block open)

    def processes_counted(self, line: Line) -> bool:
        """`Missing communicator data from N job processes` (INCOMPLETE), `N job processes
        are considered dead` (DEAD), `Encountered N communication timeouts` (TIMEOUT)."""
        if not self.in_issues() or self.issue is not None:
            return False
        body = line.text
        if self.block == "INCOMPLETE" and (m := _MISSING_PROCS.fullmatch(body)):
            self.out["incomplete_processes"] = int(m.group(1))
        elif self.block == "DEAD" and (m := _DEAD.match(body)):
            self.out["dead_processes"] = int(m.group(1))
        elif self.block == "TIMEOUT" and (m := _TIMEOUTS.match(body)):
            self.out["timeouts"] = int(m.group(1))
        else:
            return False
        return True

    def process(self, line: Line) -> bool:
        """`Process P on node IP managing GPU(s) ...`, `[could not find information on N processes]`."""
        if not self.in_issues() or self.issue is not None:
            return False
        if (m := _PROCESS.fullmatch(line.text)) is not None:
            target = self.dead if self.block == "DEAD" else self.missing_processes
            if len(target) < MAX_LISTED:
                target.append(RasProcess(pid=int(m.group(1)), node=m.group(2), gpus=_ints(m.group(3)),
                                         nvml_gpus=_ints(m.group(4) or "")))
        elif (m := _NOT_FOUND.fullmatch(line.text)) is not None:
            self.out["processes_not_found"] = self.out.get("processes_not_found", 0) + int(m.group(1))
        else:
            return False
        return True

    # -- a #G-I block's lines

    def open_issue(self) -> dict | None:
        return self.issue if self.in_issues() else None

    def missing_ranks(self, line: Line) -> bool:
        """`Missing communicator data from N ranks`; 2.24's `The missing rank(s): 1,3`."""
        issue, body = self.open_issue(), line.text
        if issue is None:
            return False
        if (m := _MISSING_RANKS.fullmatch(body)) is not None:
            issue["missing_rank_count"] = int(m.group(1))
        elif body.startswith("The missing rank") and ":" in body:  # 2.24
            issue["missing_ranks"].extend(RasRank(rank=r) for r in _ints(body.partition(":")[2].strip()))
        else:
            return False
        return True

    def rank_line(self, line: Line) -> bool:
        """`Rank R ...`: one rank's own set (`has launched up to`, `has status`, `reported`),
        or a rank of the set (or the missing ranks) above it."""
        issue = self.open_issue()
        if issue is None:
            return False
        body, target = line.text, issue.get("_list")
        for pattern in (_RANK_OP, _RANK_STATUS, _RANK_REPORTED):
            if (m := pattern.fullmatch(body)) is not None and target is not None:
                self.new_set(target, 1, m.group(2))
                self.rankset["ranks"].append(_who(int(m.group(1)), m, 3))  # type: ignore[index]
                self.rankset = None
                return True
        if (m := _RANKS_STATUS_24.fullmatch(body)) is not None and target is not None:  # 2.24: "Rank 3 has status X"
            ranks = _ints(m.group(1))
            self.new_set(target, len(ranks), m.group(2))
            self.rankset["ranks"].extend(RasRank(rank=r) for r in ranks)  # type: ignore[index]
            self.rankset = None
            return True
        if (m := _RANK.fullmatch(body)) is not None:
            rank = _who(int(m.group(1)), m, 2)
            if self.rankset is not None and len(self.rankset["ranks"]) < MAX_LISTED:
                self.rankset["ranks"].append(rank)
            elif issue["kind"] == "INCOMPLETE" and len(issue["missing_ranks"]) < MAX_LISTED:
                issue["missing_ranks"].append(rank)
            return True
        return False

    def issue_list(self, line: Line) -> bool:
        """What the sets below are about: `Communicator ranks have different status`, `...
        different OP operation counts`, `Initialization|Asynchronous error(s) on N rank(s)`."""
        issue, body = self.open_issue(), line.text
        if issue is None:
            return False
        if body == "Communicator ranks have different status":
            issue["_list"] = issue["status_sets"]
        elif (m := _DIFFERENT_OPS.fullmatch(body)) is not None:
            counts: dict[str, Any] = {"operation": m.group(1), "sets": []}
            issue["op_counts"].append(counts)
            issue["_list"] = counts["sets"]
        elif (m := _ERRORS_ON.fullmatch(body)) is not None:
            errors: dict[str, Any] = {"kind": "init" if m.group(1) == "Initialization" else "async",
                                      "ranks": int(m.group(2)), "sets": []}
            issue["errors"].append(errors)
            issue["_list"] = errors["sets"]
        else:
            return False
        return True

    def rank_set(self, line: Line) -> bool:
        """`N ranks have launched up to operation K`, `N ranks have status S`, `N ranks reported E`."""
        issue = self.open_issue()
        if issue is None or "_list" not in issue:
            return False
        for pattern in (_SET_OP, _SET_STATUS, _SET_REPORTED):
            if (m := pattern.fullmatch(line.text)) is not None:
                self.new_set(issue["_list"], int(m.group(1)), m.group(2))
                return True
        return False

    def unknown_ranks(self, line: Line) -> bool:
        """2.24's `The unknown ranks: ...`."""
        issue = self.open_issue()
        if issue is None:
            return False
        issue["unknown_ranks"] = _ints(line.text.partition(":")[2].strip())
        return True

    def unread(self) -> Unrecognized:
        return self.unrecognized.frozen_or_nothing()

    def new_set(self, target: list, count: int, value: str | None) -> None:
        self.rankset = {"count": count, "value": value, "ranks": []}
        target.append(self.rankset)

    def finish(self) -> NcclRasStatus:
        job = None
        per_process = self.job.get("gpus_per_process")
        if per_process and per_process[0].count == 0 and self.job.get("processes") is not None:
            per_process[0] = RasCount(count=self.job["processes"], value=per_process[0].value)  # every process
        if self.job:
            job = RasJob(nodes=self.job.get("nodes"), processes=self.job.get("processes"), gpus=self.job.get("gpus"),
                         processes_per_node=tuple(self.job.get("processes_per_node", ())),
                         gpus_per_process=tuple(self.job.get("gpus_per_process", ())),
                         outlier_nodes=tuple(self.job.get("outlier_nodes", ())))
        issues = []
        for i in self.issues:
            issues.append(RasCommIssue(
                kind=i["kind"], group=i["group"], index=i["index"], hash=i["hash"],
                missing_rank_count=i.get("missing_rank_count"), missing_ranks=tuple(i["missing_ranks"]),
                status_sets=_sets(i["status_sets"]), unknown_ranks=i.get("unknown_ranks", ()),
                op_counts=tuple(RasOpCounts(operation=c["operation"], sets=_sets(c["sets"])) for c in i["op_counts"]),
                errors=tuple(RasErrors(kind=e["kind"], ranks=e["ranks"], sets=_sets(e["sets"])) for e in i["errors"]),
            ))
        incomplete = UNTITLED_BLOCKS if self.section == UNTITLED else None
        return NcclRasStatus(**self.out, job=job, groups=tuple(self.groups), issues=tuple(issues),
                             incomplete=incomplete, missing_processes=tuple(self.missing_processes),
                             dead=tuple(self.dead), server_errors=tuple(self.server_errors[:100]),
                             unrecognized=self.unread())


_JOB_HEADER_WORDS = frozenset(("Nodes", "Processes", "GPUs", "(total)", "per", "node", "process"))


def _job_table(words: list[str]) -> str:
    """Which job summary table two header lines open ("" for none)."""
    if words[:5] == ["Nodes", "Processes", "GPUs", "Processes", "GPUs"]:
        return "consistent"
    if words[:3] == ["Nodes", "Processes", "GPUs"]:
        return "totals" if "(total)" in words else "nodes3"
    if words[:2] == ["Nodes", "Processes"]:
        return "nodes2"
    return "gpus" if words[:2] == ["Processes", "GPUs"] else ""


def _sets(sets: list[dict]) -> tuple[RasRankSet, ...]:
    return tuple(RasRankSet(count=s["count"], value=s["value"], ranks=tuple(s["ranks"])) for s in sets)


# ---------------------------------------------------------------- JSON (NCCL >= 2.29)


class _JStatus(msgspec.Struct):
    init_state: int | None = None
    async_error: int | None = None
    finalize_called: bool = False
    destroy_flag: bool = False
    abort_flag: bool = False
    unresponsive: bool | None = None  # missing ranks (2.30)
    considered_dead: bool | None = None


class _JRank(msgspec.Struct):
    rank: int
    host: str = ""
    pid: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    status: _JStatus | None = None
    collective_counts: dict[str, int] = {}


class _JComm(msgspec.Struct):
    hash: str = ""
    size: int = 0
    ranks: list[_JRank] = []
    missing_ranks: list[_JRank] = []


class _JRas(msgspec.Struct):
    collection_time_sec: float | None = None
    timeouts_count: int | None = None


class _JReply(msgspec.Struct):
    nccl_version: str
    cuda_runtime_version: int | None = None
    cuda_driver_version: int | None = None
    communicators: list[_JComm] = []
    ras: _JRas | None = None


def _json_rank(r: _JRank, missing: bool) -> RasJsonRank:
    s = r.status or _JStatus()
    return RasJsonRank(rank=r.rank, host=clip(r.host, 256), pid=None if r.pid is None or r.pid < 0 else r.pid,
                       cuda_dev=r.cuda_dev, nvml_dev=r.nvml_dev, init_state=s.init_state, async_error=s.async_error,
                       finalize_called=s.finalize_called, destroy_flag=s.destroy_flag, abort_flag=s.abort_flag,
                       collective_counts=dict(list(r.collective_counts.items())[:64]), missing=missing,
                       unresponsive=s.unresponsive, dead=s.considered_dead)


def _parse_json(text: str) -> NcclRasStatus:
    start, end = text.find("{"), text.rfind("}")
    try:
        reply = typed.decode_json(text[start:end + 1], _JReply)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ParseError(f"nccl-ras JSON: {clip(message)}") from None
    except RecursionError:
        raise ParseError("nccl-ras JSON: nested too deeply") from None
    reader = _Reader()  # the handshake around the JSON, if any
    for number, line in _around(text, start, end):
        reader.line(number, line)
    head = reader.out
    return NcclRasStatus(
        format="json", nccl_version=clip(reply.nccl_version, 64), cuda_runtime=reply.cuda_runtime_version,
        cuda_driver=reply.cuda_driver_version, protocol=head.get("protocol"), verbose=head.get("verbose"),
        collection_s=reply.ras.collection_time_sec if reply.ras else None,
        timeouts=reply.ras.timeouts_count if reply.ras else None,
        communicators=tuple(RasCommunicator(
            hash=clip(c.hash, 64), size=c.size,
            ranks=tuple([_json_rank(r, False) for r in c.ranks] + [_json_rank(r, True) for r in c.missing_ranks]))
            for c in reply.communicators),
        complete=reply.ras is not None, server_errors=tuple(reader.server_errors[:100]),
        client_error=head.get("client_error"), unrecognized=reader.unread(),
    )


def _around(text: str, start: int, end: int) -> list[tuple[int, str]]:
    """The lines before a JSON reply's `{` and after its `}`, with their line numbers."""
    before = text[:start].splitlines()
    after_first = text[:end + 1].count("\n") + 1
    return list(enumerate(before, 1)) + list(enumerate(text[end + 1:].splitlines(), after_first))


def _read_nothing(reader: _Reader, line: Line) -> bool:
    return True  # a line of the reply's frame: a separator, the server's OK


def _digit(text: str) -> bool:
    return text[:1].isdigit()


# A reply line's handlers (the line stripped), in order; the first that reads it names it
# (`hc parse --explain`). The transcript and the sections' titles first; then the lines of
# the section being read, each handler checking it is in its section.
_LINE_HANDLERS: tuple[Handler[_Reader], ...] = (
    Handler("command", starts(">>>"), _Reader.command),
    Handler("protocol", starts("SERVER PROTOCOL"), _Reader.protocol),
    Handler("server-error", starts("ERROR: "), _Reader.server_error),
    Handler("client-error", starts(*_CLIENT_ERRORS), _Reader.client_error),
    Handler("client-advice", starts(*_CLIENT_ADVICE), _Reader.client_advice),
    Handler("version", starts("NCCL version "), _Reader.version),
    Handler("cuda", starts("CUDA runtime version "), _Reader.cuda),
    Handler("separator", lambda b: b in _SEPARATORS, _read_nothing),
    Handler("ok", lambda b: b == "OK", _read_nothing),
    Handler("job-summary", lambda b: b == "Job summary", _Reader.job_summary),
    Handler("communicators", starts("Communicators..."), _Reader.communicators),
    Handler("section", lambda b: b in ("Errors", "Warnings"), _Reader.issues_section),
    Handler("missing-data", lambda b: "missing data from" in b, _Reader.missing_data),
    # Job summary
    Handler("job-header", lambda b: True, _Reader.job_header),
    Handler("job-row", _digit, _Reader.job_row),
    # Communicators
    Handler("no-communicators", lambda b: b == "No communicator data collected!", _Reader.no_communicators),
    Handler("comms-header", starts("Group ", "#"), _Reader.comms_header),
    Handler("comms-row", _digit, _Reader.comms_row),
    # Errors and Warnings
    Handler("comm-issue", starts("#"), _Reader.comm_issue),
    Handler("job-block", lambda b: b in ("INCOMPLETE", "DEAD", "TIMEOUT"), _Reader.job_block),
    Handler("processes-counted", lambda b: _digit(b) or b.startswith(("Missing ", "Encountered ")),
            _Reader.processes_counted),
    Handler("process", starts("Process ", "[could not find information on "), _Reader.process),
    Handler("missing-ranks", starts("Missing communicator data from ", "The missing rank"), _Reader.missing_ranks),
    Handler("rank", starts("Rank "), _Reader.rank_line),
    Handler("issue-list", starts("Communicator ranks have different ", "Initialization error", "Asynchronous error"),
            _Reader.issue_list),
    Handler("rank-set", _digit, _Reader.rank_set),
    Handler("unknown-ranks", starts("The unknown ranks:"), _Reader.unknown_ranks),
)


def parse_nccl_ras(text: str) -> NcclRasStatus:
    """A RAS reply (text or JSON), with or without the protocol transcript around it."""
    first = text.find("{")
    if first >= 0 and '"nccl_version"' in text[first:first + 4096]:
        return _parse_json(text)
    reader = _Reader()
    # the line layer mends a pasted reply; `>>> STATUS` is the transcript's, not a prompt
    for line in read_lines(text, stamps=False, srun=False):
        reader.read(line)
    if not reader.facts:
        raise ParseError(f"nccl-ras: no RAS reply, handshake or ncclras error in the output "
                         f"(starts with {clip(text.strip(), 60)!r})")
    return reader.finish()
