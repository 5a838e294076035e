"""NCCL debug logs (NCCL_DEBUG=INFO/WARN/TRACE, NCCL_DEBUG_FILE files, a job's stdout with
NCCL lines among others) -> NcclLog: per process, per communicator, WARNs classified.

Every NCCL from 2.4 to 2.30 (formats from NVIDIA/nccl src/debug.cc, init.cc, bootstrap.cc,
transport/*.cc, enqueue.cc at each tag; the real logs are in tests/fixtures/corpus/ and
field/, with their sources in each SOURCES.md):

* the line prefix: INFO `host:pid:tid [cudaDev] NCCL INFO msg`; WARN `host:pid:tid [cudaDev]
  file.cc:line NCCL WARN msg`, printed after a newline (a blank line before each WARN);
  TRACE `host:pid:tid [cudaDev] usec func:line NCCL TRACE msg`; CALL `host:pid:tid NCCL
  CALL msg`. From 2.26 an optional strftime timestamp comes first, by default on WARN
  lines only and shaped `[%F %T] ` (`[2026-04-28 14:14:48] `, `%Xf` adds a fraction);
  another NCCL_DEBUG_TIMESTAMP_FORMAT is not read as a time (the line still parses).
* a site's own prefix, source and host bracketed (`[0604/1024][2025-02-16 22:31:34,422]
  [misc/socket.cc:586] [s12gn3064:pid=3942408] NCCL WARN ...`): host, pid, source, stamp.
* the prefix cut after the host (`[0] NCCL INFO ...`, `[0] misc/socket.cc:71 NCCL WARN
  ...`): read as a bare line (no process named), its device and source kept.
* the host kept with no `:pid:tid` (`gpu-server320 [5] NCCL INFO ...`, a Kubernetes log's):
  the host's lines are one process (pid 0); only the stamp may precede the host.
* NCCL <= 2.3's prefix, no `NCCL` word (`host:pid:tid [0] INFO msg`, `... [0] file.cu:N WARN
  msg`): read only where the whole prefix starts the line (`split_old_line`); its phrases
  read as the newer ones (`NET : Using interface` as `Bootstrap : Using`, `Using internal
  Network` as `Using network`); a line cut right after `[dev]` is the process's.
* a launcher's prefix before that is skipped: `[rank3]:`, `0: ` (srun -l), `[1,0]<stdout>:`
  (mpirun --tag-output), `[155] `, `[default0]:` (torchrun --tee), `(RayTrainWorker pid=N,
  ip=...) `; whatever precedes `host:pid:tid` on the line.
* `NCCL version 2.x.y+cudaZ`: an INFO line (>= 2.22 at INFO), or a bare line without any
  prefix (<= 2.21 on stdout, and the VERSION level), which names no process: it goes to
  `versions` only.

Facts, each with the line number (1-based, lines split on "\\n" only, as `sed -n Np`
counts) of the line that said it, so a finding can name `file:line`:

* per process (host, pid): version, CUDA driver, bootstrap interface (`Bootstrap : Using
  eth0:...`, >= 2.24 `Bootstrap: Using`), IB devices (`NET/IB : Using [0]mlx5_0:1/IB ...`)
  or `NET/IB : No device found.` or why IB never started (`Failed to open libibverbs.so[.1]`,
  `Failed to initialize NET plugin IB`: `ib_unavailable`), socket interfaces (`NET/Socket : Using ...`), a net plugin's
  own device list (`NET/FastSocket : Using [0]ibs108:10.0.19.12<0> ...`), the network chosen
  (`Using network IB|Socket|<plugin>`; without that line, the net that listed devices last:
  NCCL tries a plugin, IB, Socket in turn and stops at the first with devices), NCCL_* settings echoed (`... set by
  environment to ...`), cudaDev seen, channel connections counted per transport (P2P/IPC,
  P2P/CUMEM, SHM, NET/IB/GDRDMA, NET/Socket ...), `Connected all rings|trees`, error
  returns (`file.cc:N -> code`), WARNs.
* per communicator (host, pid, comm pointer): the `[funcName ]comm 0x.. rank R nranks N
  cudaDev D [nvmlDev D] busId B [commId 0x..] - Init START|COMPLETE` lines (the pid <-> rank
  <-> comm map; START without COMPLETE is a hang in init), `Init timings`, `nNodes`/
  `localRanks`, teardown (`- Abort|Destroy START|COMPLETE`), and the COLL lines
  (`AllReduce: opCount 1e sendbuff .. count N datatype D op O root R comm 0x.. [nranks=N]
  stream ..`): how many, the last opCount and operation.
  opCount is `comm->opCount`, advanced only when a launch has proxy work: collectives
  grouped in one launch share it and an intra-node communicator may not advance it. Compare
  it only between ranks of one communicator (same `comm_id`); the count of COLL lines per
  communicator is the plainer progress measure.
* WARNs, classified (WarnKind): IB completion errors (peer, status, vendor err, hca), verbs
  call failures, socket errors (peer), no usable interface, CUDA failures, proxy errors,
  duplicate GPU, other; with host, pid, time when stamped, line and clipped text. A WARN's
  message quoted with no prefix at all (an issue title) is read where it is one of NCCL's
  own phrases (split_quoted_warn): a completion error of any net (`NET/IBP:Got completion
  from peer ...`), a verbs call's failure, a CUDA failure; so is a WARN that kept only its
  source, anywhere in a line (`... as 'transport/net_ib.cu:781 WARN NET/IB : Got completion
  with error 12, ...' although ...`: split_sourced_warn, to its closing quote). Old NCCL's
  completion error names no peer (`NET/IB : Got completion with error 12, opcode 0, ...`).

Lines are read through the line layer (lines.read_lines, stamps left on: NCCL's own are
read here) and tables of small handlers (`lines.Handler`, `dispatch`): an NCCL line's
message through its level's table (_INFO_HANDLERS, _WARN_HANDLERS; the handlers see the
message as the line's text and its prefix and process in the builder), a line with no
prefix through _UNPREFIXED_HANDLERS (a bare version). A line none reads (another program's,
an INFO message no handler knows, TRACE) is counted and sampled in `unrecognized`.

A text with no NCCL line (prefixed or a bare version line) is garbage: ParseError. Lists are
bounded (MAX_*), counters are not; `truncated` says something was left out. Every pattern
runs on a bounded piece of its line, so a hostile line costs its length.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal, cast

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.kernlog import iso_time
from healthcheck.parsers.lines import (
    NOTHING_UNREAD,
    Handler,
    HandlersByText,
    Line,
    Unrecognized,
    UnrecognizedLines,
    chained,
    dispatch,
    mpich_rank,
    read_line,
    read_lines,
    starts,
    unindented,
)
from healthcheck.parsers.peers import PEER, endpoint

MAX_PROCESSES = 65536
MAX_COMMS = 65536
MAX_WARNS = 1000  # listed; warn_counts counts them all
MAX_PER_PROCESS = 64  # devices, IB/socket devices, NCCL_* settings, transports of one process
TEXT_MAX = 300  # a WARN's text as kept
_HEAD_MAX = 2048  # where " NCCL " must appear: launcher prefix + timestamp + host:pid:tid [dev] src
_MSG_MAX = 8192  # what the patterns read of a message

WarnKind = Literal["ib-completion", "ibverbs", "socket", "no-interface", "cuda", "proxy", "duplicate-gpu", "other"]
WARN_KINDS: tuple[WarnKind, ...] = (
    "ib-completion", "ibverbs", "socket", "no-interface", "cuda", "proxy", "duplicate-gpu", "other",
)
Level = Literal["INFO", "WARN", "TRACE", "CALL", "ABORT"]
_LEVELS = frozenset(("INFO", "WARN", "TRACE", "CALL", "ABORT"))


# ---------------------------------------------------------------- fact types


class NcclPrefix(msgspec.Struct, frozen=True, omit_defaults=True):
    """One NCCL line's prefix and message (`split_nccl_line`)."""

    host: str
    pid: int
    tid: int
    level: Level
    message: str
    dev: int | None = None  # cudaDev in brackets; CALL lines have none
    src: str = ""  # WARN's `file.cc:line`, TRACE's `func:line`
    time: float | None = None  # the >= 2.26 timestamp, local time taken as UTC
    stamp: str = ""  # that timestamp as printed
    label: str = ""  # a launcher's prefix before it, as printed: "[1,0]<stdout>:", "0:", "[rank3]:"
    launcher_rank: int | None = None  # the rank the line layer read in that label (srun, mpirun, torch)
    bare: bool = False  # `NCCL INFO msg` with no host:pid:tid (host "", pid 0): a grep, a docs excerpt
    masked: bool = False  # the pid (and tid) masked by whoever pasted it: pid 0

    @property
    def label_rank(self) -> int | None:
        """The rank a launcher's label names: `[1,N]<stdout>:` (mpirun --tag-output), `N:`
        (srun -l), `[rankN]:` (torch), as the line layer read them, or MPICH/Intel MPI's
        `-prepend-rank` `[N]`; None for another label (torchrun's `[defaultN]:` is a local rank)."""
        if self.launcher_rank is not None:
            return self.launcher_rank
        return mpich_rank(self.label)


class NetDevice(msgspec.Struct, frozen=True, omit_defaults=True):
    """`[0]mlx5_0:1/IB` (NET/IB: name, port, link IB|RoCE, extra e.g. SHARP) or
    `[0]eth0:10.0.0.1<0>` (NET/Socket: name, addr)."""

    index: int
    name: str
    port: int | None = None
    link: str = ""
    extra: str = ""
    addr: str = ""


class EnvSetting(msgspec.Struct, frozen=True):
    """`NCCL_IB_HCA set by environment to mlx5_0` (the last value echoed wins)."""

    name: str
    value: str
    line: int


class TransportUse(msgspec.Struct, frozen=True):
    """Channel connections of one process over one transport ("NET/IB/GDRDMA", "P2P/IPC")."""

    transport: str
    count: int
    first_line: int


class NcclComm(msgspec.Struct, frozen=True, omit_defaults=True):
    """One communicator as one process saw it (host, pid, comm pointer).

    `comm_id` (>= 2.18) is the same on every rank of the communicator: group by it to
    compare ranks. A communicator known only from COLL lines has no rank.
    """

    host: str
    pid: int
    comm: str  # the pointer as printed: "0x55bef0201370"
    line: int  # where it was first named
    func: str = ""  # ncclCommInitRank, ncclCommInitRankConfig, ncclCommSplit ... (>= 2.21)
    comm_id: str = ""
    rank: int | None = None
    nranks: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    bus_id: str = ""
    parent: str = ""  # ncclCommSplit's parent comm
    nnodes: int | None = None
    local_ranks: int | None = None
    local_rank: int | None = None
    mnnvl: int | None = None  # `MNNVL 0|1` (>= 2.23): the communicator spans a multi-node NVLink domain
    init_start_line: int | None = None
    init_complete_line: int | None = None
    init_total_s: float | None = None  # `Init timings` (>= 2.22)
    init_timings: dict[str, float] = {}  # kernels, alloc, bootstrap, allgathers, topo, graphs, ...
    rings_connected: bool = False  # `Connected all rings` on the thread that initialized it
    trees_connected: bool = False
    end: str = ""  # "abort", "destroy" (a `- Abort|Destroy START|COMPLETE` line), lowercase
    end_complete: bool = False
    end_line: int | None = None
    coll_count: int = 0  # COLL lines (NCCL_DEBUG_SUBSYS=COLL)
    first_op_count: int | None = None
    last_op_count: int | None = None
    last_op: str = ""  # "AllReduce", "AllGather", "Send" ...
    last_count: int | None = None  # elements of the last COLL
    first_coll_line: int | None = None
    last_coll_line: int | None = None

    @property
    def init_hung(self) -> bool:
        """Init START printed, neither COMPLETE nor a teardown: stuck in init (if the log is whole)."""
        return self.init_start_line is not None and self.init_complete_line is None and not self.end


class NcclWarn(msgspec.Struct, frozen=True, omit_defaults=True):
    """One `NCCL WARN` line, classified.

    ib-completion: `NET/IB : Got completion from peer P with error|status=S ... vendor err V
    (Send|Recv) [hca H]` (status is ibv_wc_status: 5 flush, 12 retry exceeded, 13 RNR retry
    exceeded; the first in time names the bad link: hca + peer). ibverbs: `Call to ibv_X
    failed [with error E]`. socket: socketProgress/connect/poll failures (peer). no-interface:
    `no socket interface found`, `No usable listening interface found`. cuda: `Cuda failure
    [N] 'E'`, `Failed to CUDA calloc`. proxy: proxy thread and service errors. duplicate-gpu:
    `Duplicate GPU detected`.
    """

    kind: WarnKind
    line: int
    host: str
    pid: int
    text: str  # the message, clipped
    tid: int | None = None
    dev: int | None = None
    src: str = ""
    time: float | None = None
    stamp: str = ""
    peer: str = ""  # ib-completion, socket: "10.0.0.5<33092>", "host<51159>", as printed
    # the peer's address and port (peers.endpoint: IPv4, IPv6 with its zone `fe80::1%ib0`, the
    # IPv4-mapped `::ffff:10.1.1.1`, a host name; brackets taken off)
    peer_address: str = ""
    peer_port: int | None = None
    hca: str = ""  # ib-completion (>= 2.22 prints it)
    status: int | None = None  # ib-completion: ibv_wc_status
    vendor_err: int | None = None
    request: str = ""  # ib-completion: Send, Recv, Flush
    call: str = ""  # ibverbs: "ibv_create_qp"
    # ibverbs (>= 2.27's ibv_modify_qp): the QP's state and the one asked for, the GID index
    # and both GIDs (RoCE: IPv4-mapped `::ffff:10.0.0.1` or IPv6), as printed
    qp_state: str = ""
    next_qp_state: str = ""
    gid_index: int | None = None
    local_gid: str = ""
    remote_gid: str = ""
    error: str = ""  # ibverbs/socket/cuda: "Network is unreachable", "out of memory"
    code: int | None = None  # cuda: the driver error number (>= 2.20)


class NcclProcess(msgspec.Struct, frozen=True, omit_defaults=True):
    """What one process (host, pid) said about itself."""

    host: str
    pid: int
    first_line: int
    last_line: int
    lines: int = 0  # its NCCL lines
    version: str = ""  # "2.28.9" from its own INFO line
    cuda: str = ""  # "13.0" of "+cuda13.0"
    cuda_driver: int | None = None  # cudaDriverVersion 12070
    devices: tuple[int, ...] = ()  # cudaDev seen in its prefixes, in order
    bootstrap_if: str = ""  # "eth0"
    bootstrap_addr: str = ""  # "10.0.0.1<0>"
    network: str = ""  # "IB", "Socket", a plugin's name ("IBext_v8", "AWS Libfabric")
    network_inferred: bool = False  # no `Using network` line: the net that listed devices last (plugin, IB, Socket)
    net_plugin: str = ""  # an external net plugin and its version: "aws-ofi-nccl 1.13.2-aws", "IBext_v8"
    net_plugin_version: str = ""  # "1.13.2-aws", "v8"
    net_plugin_path: str = ""  # HPC-X's `Plugin Path : /opt/hpcx/.../libnccl-net.so`
    net_provider: str = ""  # aws-ofi-nccl's libfabric provider: "efa"
    net_nics: int | None = None  # the NICs that provider found
    ib_devices: tuple[NetDevice, ...] = ()
    ib_no_device: bool = False  # `NET/IB : No device found.`
    # why NCCL's IB transport never started (sockets carry the job): `Failed to open libibverbs.so[.1]`
    # (no rdma-core where NCCL runs, INFO or ibvwrap's WARN), `Failed to initialize NET plugin IB` (2.29)
    ib_unavailable: str = ""
    socket_devices: tuple[NetDevice, ...] = ()
    plugin_devices: tuple[NetDevice, ...] = ()  # a net plugin's own list: `NET/FastSocket : Using [0]ibs108:...`
    socket_fallback: bool = False  # network Socket, or IB found nothing and sockets were listed
    env: tuple[EnvSetting, ...] = ()
    transports: tuple[TransportUse, ...] = ()
    rings_connected: int = 0  # `Connected all rings` lines (one per comm and GPU)
    trees_connected: int = 0
    launcher_rank: int | None = None  # the rank its lines' launcher label names (NcclPrefix.label_rank)
    ranks: tuple[int, ...] = ()  # its ranks in its largest communicator(s)
    world_size: int | None = None  # that communicator's nranks
    warns: int = 0
    error_returns: int = 0  # `file.cc:N -> code` lines (an error unwinding)
    first_error_line: int | None = None
    first_error_code: int | None = None  # ncclResult_t: 1 cuda, 2 system, 3 internal, 5 usage, 6 remote
    # the first error return unwinding through init.cc (`init.cc:N -> code`): an error while a
    # communicator was being set up (ncclCommInitRank/Split), wherever it began
    init_error_line: int | None = None


class NcclLog(msgspec.Struct, frozen=True):
    """Everything an NCCL debug log (or stdout holding one) said, in line order."""

    lines: int  # lines in the text
    nccl_lines: int  # lines with an NCCL prefix
    versions: tuple[str, ...] = ()  # every NCCL version printed ("2.19.3+cuda12.3"), first seen first
    processes: tuple[NcclProcess, ...] = ()
    comms: tuple[NcclComm, ...] = ()
    warns: tuple[NcclWarn, ...] = ()  # the first MAX_WARNS, in line order
    warn_counts: dict[str, int] = {}  # kind -> WARNs of that kind (all of them)
    ranks: tuple[int, ...] = ()  # every rank a comm line named, sorted
    world_sizes: tuple[int, ...] = ()  # every nranks seen (comm and COLL lines), sorted
    first_warn: NcclWarn | None = None  # by line order
    first_warn_by_time: NcclWarn | None = None  # by timestamp (>= 2.26 stamps WARNs); None without
    truncated: bool = False  # a bounded list dropped something
    unrecognized: Unrecognized = NOTHING_UNREAD  # lines no handler read: another program's, an INFO message not read

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.host for p in self.processes))

    def process(self, host: str, pid: int) -> NcclProcess | None:
        return next((p for p in self.processes if p.host == host and p.pid == pid), None)

    def comm_groups(self) -> dict[str, tuple[NcclComm, ...]]:
        """commId -> the ranks' views of that communicator (comms that print no commId left out)."""
        groups: dict[str, list[NcclComm]] = {}
        for c in self.comms:
            if c.comm_id:
                groups.setdefault(c.comm_id, []).append(c)
        return {k: tuple(v) for k, v in groups.items()}

    def rank_map(self) -> dict[tuple[str, int], tuple[int, ...]]:
        """(host, pid) -> its ranks, in its largest communicator(s)."""
        return {(p.host, p.pid): p.ranks for p in self.processes if p.ranks}


# ---------------------------------------------------------------- the line prefix

_HOST_TOKEN = re.compile(r"(.{1,1024}):(\d{1,10}):(\d{1,10})", re.ASCII)
# a host whose pid a reporter masked (`host-01.example.com:XXXXXX`, the tid dropped with it)
_MASKED_HOST_TOKEN = re.compile(
    r"([^\s:]{1,255}):(?:X{2,12}|\*{2,12}|<pid>)(?::(?:\d{1,10}|X{2,12}|\*{2,12}|<tid>))?", re.ASCII)
_DEV_TOKEN = re.compile(r"\[(-?\d{1,6})\]", re.ASCII)
_SRC_TOKEN = re.compile(r"[^\s:]{1,512}:\d{1,9}", re.ASCII)
# a site's own prefix: `[misc/socket.cc:586] [s12gn3064:pid=3942408]` (source, then host and pid)
_BRACKET_SRC = re.compile(r"\[([^\s:\[\]]{1,512}:\d{1,9})\]", re.ASCII)
_BRACKET_HOST = re.compile(r"\[([^\s:\[\]]{1,255}):pid=(\d{1,10})\]", re.ASCII)
_USEC_TOKEN = re.compile(r"\d{1,20}\.\d{1,12}", re.ASCII)
_STAMP = re.compile(
    r"\[(?P<y>\d{4})-(?P<mo>\d{2})-(?P<d>\d{2})[ T](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})"
    r"(?:[.,](?P<frac>\d{1,9}))?(?P<tz>Z|[+-]\d{2}:?\d{2})?\]$",
    re.ASCII,
)


def split_nccl_line(line: str) -> NcclPrefix | None:
    """A line's NCCL prefix and message; None for a line that is not NCCL's.

    Bounded work: " NCCL " is looked for in the first 2 KiB only, and the message is cut
    to 8 KiB.
    """
    return split_read_line(read_line(1, line, stamps=False)[0])


def split_read_line(read: Line) -> NcclPrefix | None:
    """split_nccl_line of a line the line layer read: its launcher labels already off. A
    line whose `host:pid:tid` is gone but whose `[dev]` or WARN source is kept is read as
    a bare line (`_hostless`)."""
    line = read.text
    at = line.find(" NCCL ", 0, _HEAD_MAX)
    if at < 0:
        return None
    rest = line[at + 6:]
    level, _, message = rest.partition(" ")
    if level not in _LEVELS:
        return None
    tokens = line[:at].split()
    src = _pop_src(tokens, level)
    dev: int | None = None
    if tokens:
        m = _DEV_TOKEN.fullmatch(tokens[-1])
        if m:
            dev = int(m.group(1))
            tokens.pop()
    who = _host_token(tokens[-1]) if tokens else None
    if who is None:
        return (_bracketed(read, tokens, level, message) or _pidless(read, tokens, level, message, dev, src)
                or _hostless(read, tokens, level, message, dev, src))
    tokens.pop()
    host, pid, tid, glued = who
    before, stamp, time = _stamped(" ".join(tokens))
    label = " ".join(x for x in (read.labels.strip(), before, glued) if x)[-64:]
    return NcclPrefix(
        host=host, pid=pid if pid is not None else 0, tid=tid or 0, level=cast(Level, level),
        message=message[:_MSG_MAX].rstrip(), dev=dev, src=src, time=time, stamp=stamp, label=label,
        launcher_rank=read.task if read.task is not None else read.rank, masked=pid is None,
    )


def _stamped(before: str) -> tuple[str, str, float | None]:
    """What precedes the host (or the device) without NCCL's >= 2.26 `[%F %T]` stamp at its
    end: (the rest, the stamp as printed, its time)."""
    t = _STAMP.search(before[-64:]) if before else None
    if t is None:
        return before, "", None
    return before[: -len(t.group(0))].rstrip(), t.group(0)[1:-1], iso_time(t)


def _bracketed(read: Line, tokens: list[str], level: str, message: str) -> NcclPrefix | None:
    """A site's own NCCL prefix with the host and the source in brackets, the host last
    (`[0604/1024][2025-02-16 22:31:34,422] [misc/socket.cc:586] [s12gn3064:pid=3942408] NCCL
    WARN ...`): the host, its pid (no tid), the source and the stamp; what precedes them
    is the label."""
    m = _BRACKET_HOST.fullmatch(tokens[-1]) if tokens and tokens[-1][:1] == "[" else None
    if m is None:
        return None
    tokens = tokens[:-1]
    src = _BRACKET_SRC.fullmatch(tokens[-1]) if tokens else None
    if src is not None:
        tokens.pop()
    before, stamp, time = _stamped(" ".join(tokens))
    label = " ".join(x for x in (read.labels.strip(), before) if x)[-64:]
    return NcclPrefix(host=m.group(1), pid=int(m.group(2)), tid=0, level=cast(Level, level),
                      message=message[:_MSG_MAX].rstrip(), src=src.group(1) if src else "", time=time, stamp=stamp,
                      label=label, launcher_rank=read.task if read.task is not None else read.rank)


# a host named alone before its `[dev]`, no `:pid:tid` after it (`gpu-server320 [5] NCCL INFO`)
_BARE_HOST = re.compile(r"[A-Za-z0-9][\w.\-]{0,254}", re.ASCII)


def _pidless(read: Line, tokens: list[str], level: str, message: str, dev: int | None,
             src: str) -> NcclPrefix | None:
    """NCCL's prefix with the host kept and its `:pid:tid` gone: `gpu-server320 [5] NCCL
    INFO ...`, `[2025-11-24 11:20:21] gpu-server320 [5] misc/socket.cc:46 NCCL WARN ...`
    (field/issues-6's Kubernetes log). The `[dev]` must follow the host, only the >= 2.26
    stamp may precede it, and a host with no digit in its name (`see [0] NCCL INFO ...`: a
    word of a sentence) is one only after that stamp; the host's lines are one process
    (pid 0), as a masked pid's are."""
    host = tokens[-1] if tokens else ""
    if dev is None or _BARE_HOST.fullmatch(host) is None or host.isdigit():
        return None
    before, stamp, time = _stamped(" ".join(tokens[:-1]))
    if before or not (stamp or any(c.isdigit() for c in host)):
        return None
    return NcclPrefix(host=host, pid=0, tid=0, level=cast(Level, level), message=message[:_MSG_MAX].rstrip(),
                      dev=dev, src=src, time=time, stamp=stamp, label=read.labels.strip()[-64:],
                      launcher_rank=read.task if read.task is not None else read.rank)


def _hostless(read: Line, tokens: list[str], level: str, message: str, dev: int | None,
              src: str) -> NcclPrefix | None:
    """NCCL's prefix with its `host:pid:tid` gone and the rest kept: `[0] NCCL INFO ...`,
    `[0] misc/socket.cc:71 NCCL WARN ...` (a paste cut after the host, a grep -o, a
    debug file whose host a reporter took off). Only a `[dev]` or a WARN's `file.cc:N`
    (and the >= 2.26 stamp before them) may precede the level: no process is named
    (host "", pid 0, `bare`), as for a bare `NCCL INFO` line."""
    if dev is None and not src:
        return None
    before, stamp, time = _stamped(" ".join(tokens))
    if before:
        return None
    return NcclPrefix(host="", pid=0, tid=0, level=cast(Level, level), message=message[:_MSG_MAX].rstrip(),
                      dev=dev, src=src, time=time, stamp=stamp, label=read.labels.strip()[-64:], bare=True,
                      launcher_rank=read.task if read.task is not None else read.rank)


def _pop_src(tokens: list[str], level: str) -> str:
    """WARN's `file.cc:line` (and TRACE's `usec func:line`) off the end of the head's tokens."""
    if not tokens or level not in ("WARN", "TRACE", "ABORT") or not _SRC_TOKEN.fullmatch(tokens[-1]):
        return ""
    src = tokens.pop()
    if tokens and level == "TRACE" and _USEC_TOKEN.fullmatch(tokens[-1]):
        tokens.pop()
    return src


def _host_token(token: str) -> tuple[str, int | None, int | None, str] | None:
    """`host:pid:tid` -> (host, pid, tid, what was glued before the host); a pid masked by
    the reporter (`host:XXXXXX`) gives pid and tid None."""
    m = _HOST_TOKEN.fullmatch(token)
    if m:
        pid: int | None = int(m.group(2))
        tid: int | None = int(m.group(3))
    else:
        m = _MASKED_HOST_TOKEN.fullmatch(token)
        if not m:
            return None
        pid = tid = None
    host = m.group(1).rsplit(":", 1)[-1]  # `[1,0]<stdout>:host`, `[rank3]:host`
    if "]" in host:
        host = host.rsplit("]", 1)[-1]
    if not host:
        return None
    return host, pid, tid, m.group(1)[: len(m.group(1)) - len(host)]  # "[1,0]<stdout>:" glued, no space


def split_bare_line(read: Line) -> NcclPrefix | None:
    """`NCCL INFO msg` / `NCCL WARN msg` at the start of a line (after launcher labels), the
    host:pid:tid prefix gone (grepped out, a docs excerpt): no process named, host "" and
    pid 0. Not a prefixed line (split_read_line says None); `NCCL version` is _bare_version's.
    A paste's indent before it is no part of it (a markdown code block, a grep in a list)."""
    text = unindented(read.text)
    if not text.startswith("NCCL "):
        return None
    level, _, message = text[5:].partition(" ")
    if level not in _LEVELS or not message.strip():
        return None
    return NcclPrefix(host="", pid=0, tid=0, level=cast(Level, level), message=message[:_MSG_MAX].rstrip(),
                      label=read.labels.strip()[-64:], bare=True,
                      launcher_rank=read.task if read.task is not None else read.rank)


def split_quoted_warn(read: Line) -> NcclPrefix | None:
    """An NCCL WARN's message quoted with no prefix at all, not even `NCCL WARN` (an issue's
    title, the line after torch's `Last error:`): read as a WARN no process named, where
    its text is one of NCCL's own phrases (_QUOTED_WARN): `NET/IBP:Got completion from peer
    7.6.13.83<36315> with status=12 ... vendor err 129 (Send)`."""
    text = unindented(read.text)
    if not _QUOTED_WARN.match(text):
        return None
    return NcclPrefix(host="", pid=0, tid=0, level="WARN", message=text[:_MSG_MAX].rstrip(),
                      label=read.labels.strip()[-64:], bare=True,
                      launcher_rank=read.task if read.task is not None else read.rank)



# NCCL <= 2.3's prefix had no `NCCL` word: `host:pid:tid [cudaDev] INFO msg`, a WARN's source
# before its level (`... [0] transport/net_ib.cu:781 WARN msg`); read only where the whole
# prefix is there, from the line's start (behind the layer's labels and a paste's indent), so
# a sentence's `INFO` or `WARN` is never NCCL's. A line cut right after `[cudaDev]` (field/
# issues-12's last line) is the process's, with nothing said (an INFO with no message).
_OLD_PREFIX = re.compile(
    r"(?P<host>[A-Za-z0-9][\w.\-]{0,254}):(?P<pid>\d{1,10}):(?P<tid>\d{1,10}) \[(?P<dev>-?\d{1,6})\]"
    r"(?:[ \t]{1,8}(?:(?P<src>[^\s:]{1,512}:\d{1,9}) )?(?P<level>INFO|WARN)(?= |$))?",
    re.ASCII,
)


def split_old_line(read: Line) -> NcclPrefix | None:
    """A line of NCCL <= 2.3, whose prefix has no `NCCL` word (`_OLD_PREFIX`): ` seyun:17280:
    17553 [0] INFO NET : Using interface eth0:...` (field/issues-12); None for any other."""
    text = unindented(read.text)
    if not text[:1].isalnum():
        return None  # the common case, kept cheap
    m = _OLD_PREFIX.match(text)
    if m is None:
        return None
    rest = text[m.end():]
    level = m.group("level")
    if (level is None and rest.strip()) or (m.group("src") and level != "WARN"):
        return None  # after `[dev]`, no level: a cut line only when nothing follows
    return NcclPrefix(host=m.group("host"), pid=int(m.group("pid")), tid=int(m.group("tid")),
                      level=cast(Level, level or "INFO"), message=rest[1:_MSG_MAX + 1].rstrip(),
                      dev=int(m.group("dev")), src=m.group("src") or "", label=read.labels.strip()[-64:],
                      launcher_rank=read.task if read.task is not None else read.rank)


_QUOTES = "'\"`"
_SOURCED_TRIES = 4  # ` WARN ` words of one line looked at


def split_sourced_warn(read: Line) -> NcclPrefix | None:
    """A WARN whose `host:pid:tid [dev]` is gone and its source kept, anywhere in a line
    (quoted in a sentence: `... the same error as 'transport/net_ib.cu:781 WARN NET/IB : Got
    completion with error 12, ...' although ...`; old NCCL's `file.cu:N WARN` has no `NCCL`
    word, newer lines `file.cc:N NCCL WARN`): read as a WARN no process named where the
    message is one of NCCL's own phrases (_QUOTED_WARN), never a sentence's `WARN`; a quote
    before the source ends the message at its closing quote."""
    text = read.text
    at = -1
    for _ in range(_SOURCED_TRIES):
        at = text.find(" WARN ", at + 1, _HEAD_MAX + _MSG_MAX)
        if at < 0:
            return None
        head = text[max(0, at - 600):at]
        nccl = head.endswith(" NCCL")
        token = (head[:-5] if nccl else head).rsplit(None, 1)[-1] if head.strip() else ""
        quote = token[:1] if token[:1] in _QUOTES else ""
        message = text[at + 6:at + 6 + _MSG_MAX]
        if _SRC_TOKEN.fullmatch(token[len(quote):]) and _QUOTED_WARN.match(message):
            if quote and quote in message:
                message = message[:message.index(quote)]
            return NcclPrefix(host="", pid=0, tid=0, level="WARN", message=message.rstrip(), src=token[len(quote):],
                              label=read.labels.strip()[-64:], bare=True,
                              launcher_rank=read.task if read.task is not None else read.rank)
    return None


# ---------------------------------------------------------------- message patterns
# Anchored and bounded: each runs on at most _MSG_MAX characters.

_VERSION = re.compile(
    r"NCCL version (?P<v>\d{1,4}\.\d{1,4}\.\d{1,4}[^\s+]{0,32})(?:\+cuda(?P<cuda>\d{1,4}(?:\.\d{1,4})?))?", re.ASCII
)
_BARE_VERSION = re.compile(
    r"NCCL version \d{1,4}\.\d{1,4}\.\d{1,4}[^\s+]{0,32}\+cuda\d{1,4}(?:\.\d{1,4})?\s*$", re.ASCII
)
_BOOTSTRAP = re.compile(r"Bootstrap ?: Using (?:\[\d{1,4}\])?(?P<if>[^\s:\[\]]{1,64}):(?P<addr>\S{1,128})")
_IB_DEVICE = re.compile(r"\[(\d{1,4})\]([^\s:\[\]]{1,64}):(\d{1,4})/([A-Za-z]{1,8})(?:/([^\s\[\];]{1,32}))?")
_SOCKET_DEVICE = re.compile(r"\[(\d{1,4})\]([^\s:\[\]]{1,64}):([^\s\[\]]{1,128})")
# a net plugin's own device list, socket-shaped (Google's nccl-fastsocket): `NET/FastSocket : Using [0]...`
_NET_LIST = re.compile(r"NET/(?P<net>[A-Za-z][\w\-]{0,31}) ?: ?Using(?= \[\d)", re.ASCII)
_ENV = re.compile(r"(NCCL_[A-Za-z0-9_]{1,64}) set (?:by environment )?to ?(.{0,512})")
_DRIVER = re.compile(r"cudaDriverVersion (\d{1,9})")
_COMM = re.compile(
    r"(?:\[Rank -?\d{1,9}\] )?(?:(?P<func>nccl[A-Za-z]{1,40}) )?comm (?P<comm>0x[0-9a-fA-F]{1,16}) "
    r"rank (?P<rank>-?\d{1,9}) n[Rr]anks (?P<nranks>\d{1,9})(?P<rest>.*)"
)
_PHASE = re.compile(r"-\s{0,4}(?P<what>[A-Z][a-z]{1,15}) (?P<phase>START|COMPLETE)\s*$")
_COMM_FIELDS = {"cudaDev": "cuda_dev", "nvmlDev": "nvml_dev", "busId": "bus_id", "commId": "comm_id",
                "parent": "parent", "nNodes": "nnodes", "localRanks": "local_ranks", "localRank": "local_rank",
                "MNNVL": "mnnvl"}
_TIMINGS = re.compile(
    r"Init timings(?: - [A-Za-z]{1,40})?: rank (?P<rank>-?\d{1,9}) nranks (?P<nranks>\d{1,9}) "
    r"total (?P<total>\d{1,9}(?:\.\d{1,9})?)(?: \((?P<parts>[^)]{0,512})\))?"
)
_TIMING_PART = re.compile(r"([a-z]{1,20}) (\d{1,9}(?:\.\d{1,9})?)")
_COLL = re.compile(
    r"(?P<op>[A-Za-z][A-Za-z0-9_]{0,31}): opCount (?P<opc>[0-9a-fA-F]{1,16}) sendbuff \S{1,32} recvbuff \S{1,32} "
    r"count (?P<count>\d{1,20}) datatype -?\d{1,4} op -?\d{1,4} root -?\d{1,9} "
    r"comm (?P<comm>0x[0-9a-fA-F]{1,16}|\(nil\)) \[nranks=(?P<nranks>\d{1,9})\]"
)
_CONNECTION = re.compile(
    r"(?:Channel|Ring) \d{1,4}(?:/\d{1,4})? : \d{1,9}(?:\[[0-9a-fA-F]{1,16}\])? -> \d{1,9}(?:\[[0-9a-fA-F]{1,16}\])?"
    r"(?: \[(?:send|receive)\])? via (?P<via>.{1,200})"
)
# an external net plugin's own lines: aws-ofi-nccl's `NET/OFI Using|Initializing aws-ofi-nccl
# 1.13.2-aws`, `NET/OFI Selected Provider is efa (found 4 nics)`; HPC-X's `P2P plugin IBext_v8`
# and `Plugin Path : /opt/hpcx/.../libnccl-net.so`
_PLUGIN_LINES = (
    re.compile(r"NET/OFI (?:Using|Initializing) (?P<net_plugin>aws-ofi-nccl (?P<net_plugin_version>[\w.\-]{1,32}))"),
    re.compile(r"NET/OFI Selected Provider is (?P<net_provider>[\w.\-;]{1,64})"
               r"(?: \(found (?P<net_nics>\d{1,4}) nics?\))?"),
    re.compile(r"P2P plugin (?P<net_plugin>[A-Za-z][\w]{0,31}?(?:_(?P<net_plugin_version>v\d{1,3}))?)\s*$"),
    re.compile(r"Plugin Path : (?P<net_plugin_path>\S{1,512})"),
)
_OOB = re.compile(r"\s{0,4}(?P<if>[^\s:\[\]<>]{1,64}):(?P<addr>\S{1,128})")
# NCCL <= 2.3 (no `NCCL` word in the prefix): the socket interface its bootstrap and socket net
# use, `NET : Using interface eth0:115.145.178.160<0>`, read as >= 2.4's `Bootstrap : Using`;
# IB's out-of-band one, `NET/IB : Using interface eth0 for sideband communication` (>= 2.4's
# `; OOB eth0:...`); the net chosen, `Using internal Network Socket` (>= 2.4's `Using network`)
_OLD_NET_IF = re.compile(r"NET : Using interface (?P<if>[^\s:\[\]<>]{1,64}):(?P<addr>\S{1,128})")
_SIDEBAND = re.compile(r" Using interface (?P<if>[^\s:\[\]<>]{1,64}) for sideband")
_NETWORK_WORDS = ("Using network ", "Using internal Network ")
# `file.cc:N -> code`, maybe with the call that failed after it (>= 2.2x: `-> 6 socketWait(NCCL_SOCKET_SEND,
# sock, &sock->type, sizeof(sock->type), &sent)`, field/issues-6's Kubernetes log)
_ERROR_RETURN = re.compile(r"[^\s:]{1,256}:\d{1,9} -> (\d{1,4})(?:\s.{0,320})?")

# WARN classes
# NCCL's own IB transport says `NET/IB : Got completion`; an external IB plugin its own
# name (`NET/IBP:Got completion from peer 7.6.13.83<36315> with status=12`)
# NCCL <= 2.4's net_ib.cu names no peer: `NET/IB : Got completion with error 12, opcode 0, len 0,
# vendor err 129` (field/issues-11)
_IB_COMPLETION = re.compile(
    r"NET/[A-Za-z][\w\-]{0,31} ?: ?Got completion (?:from peer (?P<peer>\S{1,256}) )?with "
    r"(?:error (?P<err>-?\d{1,9})|status=(?P<st>-?\d{1,9}))"
)
_VENDOR = re.compile(r"vendor err (\d{1,9})(?: \((\w{1,16})\))?")
_HCA = re.compile(r" hca (\S{1,64})")
# WARN messages that are NCCL's own phrases, so read even quoted with no prefix: a completion
# error (any net's name), a verbs call's failure, NCCL's CUDA failure (`Cuda failure 'out of memory'`)
_QUOTED_WARN = re.compile(
    r"NET/[A-Za-z][\w\-]{0,31} ?: ?Got completion (?:from peer \S|with error -?\d)|Call to ibv_\w{1,64} failed"
    r"|Cuda failure (?:-?\d{1,9} )?'", re.ASCII)
# `failed with error E`; >= 2.27 `failed with 110 Connection timed out, on dev mlx5_0:1, curr state ...`
_VERBS = re.compile(r"Call to (ibv_\w{1,64}|\w{1,64}) failed(?: with (?:error )?([^,]{1,200}))?")
# 2.27's ibv_modify_qp detail: `, on dev mlx_x:1, curr state INIT, next state RTR, local GID
# index 3, local GID ::ffff:xxx.xx.xx.xx, remote GID ::ffff:xxx.xx.xxx.xx`
_VERBS_DEV = re.compile(
    r", on dev (?P<hca>[^\s,:]{1,64})(?::\d{1,4})?, curr state (?P<qp_state>[A-Z]{2,8}),"
    r" next state (?P<next>[A-Z]{2,8})"
    r"(?:, local GID index (?P<gid_index>\d{1,5}))?(?:, local GID (?P<local>[^\s,]{1,64}))?"
    r"(?:, remote GID (?P<remote>[^\s,]{1,64}))?"
)
_CUDA = re.compile(r"Cuda failure (?:(?P<code>-?\d{1,9}) )?'(?P<err>[^']{0,200})'?")
# ncclSocketToString: "10.0.0.1<42830>", "host<51159>"; after "peer", "from", "to" (not "Call to recv")
_PEER = re.compile(rf"(?:peer|from|to) ({PEER})(?<=>)")  # NCCL's always with its `<PORT>`
_SOCKET_SRC = ("misc/socket.cc", "transport/net_socket.cc", "socket.cc")
_CONNECTION_WORDS = ("Connection closed by remote peer", "Connection refused", "Connection reset by peer",
                     " connect to ", "Connection timed out")
_SOCKET_WORDS = ("socket", "Socket connect", "Net : Connect", "connect to ")


# NCCL's messages saying its IB transport could not start where it runs (ibvwrap.cc, net.cc)
_IB_UNAVAILABLE = ("Failed to open libibverbs", "Failed to initialize NET plugin IB")


# ---------------------------------------------------------------- builders


class _Proc:
    __slots__ = ("host", "pid", "first_line", "last_line", "lines", "version", "cuda", "cuda_driver", "devices",
                 "bootstrap_if", "bootstrap_addr", "network", "ib_devices", "ib_no_device", "ib_unavailable",
                 "socket_devices", "env", "transports", "rings", "trees", "warns", "error_returns", "first_error_line",
                 "first_error_code", "init_error_line",
                 "launcher_rank", "plugin", "plugin_devices", "net_listed")

    def __init__(self, host: str, pid: int, line: int) -> None:
        self.host, self.pid, self.first_line, self.last_line = host, pid, line, line
        self.lines = 0
        self.version = self.cuda = self.bootstrap_if = self.bootstrap_addr = self.network = ""
        self.cuda_driver: int | None = None
        self.devices: dict[int, None] = {}
        self.ib_devices: list[NetDevice] = []
        self.ib_no_device = False
        self.ib_unavailable = ""
        self.socket_devices: list[NetDevice] = []
        self.env: dict[str, EnvSetting] = {}
        self.transports: dict[str, list[int]] = {}  # transport -> [count, first line]
        self.rings = self.trees = self.warns = self.error_returns = 0
        self.first_error_line: int | None = None
        self.first_error_code: int | None = None
        self.init_error_line: int | None = None
        self.launcher_rank: int | None = None
        self.plugin: dict[str, Any] = {}  # NcclProcess's net_plugin* / net_provider / net_nics
        self.plugin_devices: list[NetDevice] = []
        self.net_listed = ""  # the net whose device list came last: "IB", "Socket", a plugin's name


class _Comm:
    __slots__ = ("host", "pid", "comm", "line", "fields", "init_start_line", "init_complete_line", "init_total_s",
                 "init_timings", "rings", "trees", "end", "end_complete", "end_line", "coll_count", "first_op_count",
                 "last_op_count", "last_op", "last_count", "first_coll_line", "last_coll_line")

    def __init__(self, host: str, pid: int, comm: str, line: int) -> None:
        self.host, self.pid, self.comm, self.line = host, pid, comm, line
        self.fields: dict[str, object] = {}
        self.init_start_line: int | None = None
        self.init_complete_line: int | None = None
        self.init_total_s: float | None = None
        self.init_timings: dict[str, float] = {}
        self.rings = self.trees = False
        self.end = ""
        self.end_complete = False
        self.end_line: int | None = None
        self.coll_count = 0
        self.first_op_count: int | None = None
        self.last_op_count: int | None = None
        self.last_op = ""
        self.last_count: int | None = None
        self.first_coll_line: int | None = None
        self.last_coll_line: int | None = None

    def freeze(self) -> NcclComm:
        f = self.fields
        return NcclComm(
            host=self.host, pid=self.pid, comm=self.comm, line=self.line,
            func=str(f.get("func", "")), comm_id=str(f.get("comm_id", "")),
            rank=_opt_int(f.get("rank")), nranks=_opt_int(f.get("nranks")),
            cuda_dev=_opt_int(f.get("cuda_dev")), nvml_dev=_opt_int(f.get("nvml_dev")),
            bus_id=str(f.get("bus_id", "")), parent=str(f.get("parent", "")),
            nnodes=_opt_int(f.get("nnodes")), local_ranks=_opt_int(f.get("local_ranks")),
            local_rank=_opt_int(f.get("local_rank")), mnnvl=_opt_int(f.get("mnnvl")),
            init_start_line=self.init_start_line, init_complete_line=self.init_complete_line,
            init_total_s=self.init_total_s, init_timings=self.init_timings,
            rings_connected=self.rings, trees_connected=self.trees,
            end=self.end, end_complete=self.end_complete, end_line=self.end_line,
            coll_count=self.coll_count, first_op_count=self.first_op_count, last_op_count=self.last_op_count,
            last_op=self.last_op, last_count=self.last_count,
            first_coll_line=self.first_coll_line, last_coll_line=self.last_coll_line,
        )


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) else None


def _int(token: str, digits: int = 12) -> int | None:
    body = token.removeprefix("-")
    if not (body.isascii() and body.isdigit()) or len(body) > digits:
        return None
    return int(token)


def _seconds(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


PREFIXES_MAX = 4096  # distinct lines whose NCCL prefix one parse keeps (_Builder.prefix_of)


class _Builder:
    def __init__(self) -> None:
        self.procs: dict[tuple[str, int], _Proc] = {}
        self.comms: list[_Comm] = []
        self.comm_at: dict[tuple[str, int, str], _Comm] = {}
        self.init_thread: dict[tuple[str, int, int], _Comm] = {}  # the comm a thread is initializing
        self.pending: dict[tuple[str, int, int], list[bool]] = {}  # rings/trees before an old COMPLETE
        self.by_rank: dict[tuple[str, int, int | None, int], _Comm] = {}  # (host, pid, rank, nranks) -> latest
        self.versions: dict[str, None] = {}
        self.warns: list[NcclWarn] = []
        self.warn_counts: dict[str, int] = {}
        self.first_warn: NcclWarn | None = None
        self.earliest: NcclWarn | None = None
        self.world_sizes: set[int] = set()
        self.nccl_lines = 0
        self.truncated = False
        self.unrecognized = UnrecognizedLines()
        # the NCCL line being read, for its handlers: its prefix, its process, a WARN's next line
        self.prefix = NcclPrefix(host="", pid=0, tid=0, level="INFO", message="")
        self.current = _Proc("", 0, 0)
        self.following: str | None = None
        self.following_line = 0
        self.tail_line = 0  # a line read as the WARN before it, wrapped (no line of its own)
        # per INFO message, the handlers of _INFO_HANDLERS whose test holds (info_table)
        self.tested = HandlersByText(_INFO_HANDLERS)
        # per line as the layer read it (all but its number), its prefix (prefix_of)
        self.prefixes: dict[tuple[str, str, int | None, int | None], NcclPrefix | None] = {}

    # -- processes and comms

    def proc(self, p: NcclPrefix, line: int) -> _Proc | None:
        key = (p.host, p.pid)
        proc = self.procs.get(key)
        if proc is None:
            if len(self.procs) >= MAX_PROCESSES:
                self.truncated = True
                return None
            proc = self.procs[key] = _Proc(p.host, p.pid, line)
        proc.last_line = line
        proc.lines += 1
        if p.label and proc.launcher_rank is None:
            proc.launcher_rank = p.label_rank
        if p.dev is not None and p.dev not in proc.devices:
            if len(proc.devices) < MAX_PER_PROCESS:
                proc.devices[p.dev] = None
            else:
                self.truncated = True
        return proc

    def comm(self, p: NcclPrefix, pointer: str, line: int, fresh: bool = False) -> _Comm | None:
        """The comm at this pointer in this process; a new one when `fresh` (Init START) and
        the pointer's last comm already began or ended (an address reused after a destroy)."""
        key = (p.host, p.pid, pointer)
        comm = self.comm_at.get(key)
        if comm is not None and not (fresh and (comm.init_start_line is not None or comm.end)):
            return comm
        if len(self.comms) >= MAX_COMMS:
            self.truncated = True
            return None
        comm = _Comm(p.host, p.pid, pointer, line)
        self.comms.append(comm)
        self.comm_at[key] = comm
        return comm

    # -- one line

    def read(self, lines: list[Line], index: int, line: Line) -> None:
        """One line through the handler table of its kind; counted in `unrecognized` where
        no handler read it (another program's line, an INFO message no handler knows).
        Blank lines and the layer's noise (a shell prompt) are no one's."""
        if line.noise or not line.text.strip():
            return
        prefix = self.prefix_of(line)
        if prefix is None:
            table = _TAIL_HANDLERS if line.number == self.tail_line else _UNPREFIXED_HANDLERS
            name = dispatch(table, self, line)
        else:
            name = self.read_nccl(prefix, lines, index, line)
        if name is None:
            self.unrecognized.note(line)

    def prefix_of(self, line: Line) -> NcclPrefix | None:
        """`_nccl_prefix(line)`, each distinct line split once (up to PREFIXES_MAX): a
        communicator's init lines come again word for word for each communicator. Exact: the
        split reads the line's text, labels, task and rank alone, never its number
        (tests/unit/parsers/test_nccl_log_tested.py reads every fixture both ways)."""
        key = (line.text, line.labels, line.task, line.rank)
        if key in self.prefixes:
            return self.prefixes[key]
        prefix = _nccl_prefix(line)
        if len(self.prefixes) < PREFIXES_MAX:
            self.prefixes[key] = prefix
        return prefix

    def read_nccl(self, prefix: NcclPrefix, lines: list[Line], index: int, line: Line) -> str | None:
        """An NCCL line: its process counted, then its message through its level's table
        (the handlers see the message as the line's text)."""
        self.nccl_lines += 1
        proc = self.proc(prefix, line.number)
        if proc is None:
            return "truncated"  # past MAX_PROCESSES: said by `truncated`
        self.prefix, self.current = prefix, proc
        self.following, self.following_line = _wrapped_tail(lines, index) if prefix.level == "WARN" else (None, 0)
        table = self.info_table(prefix.message) if prefix.level == "INFO" else \
            _WARN_HANDLERS if prefix.level == "WARN" else ()
        return dispatch(table, self, msgspec.structs.replace(line, text=prefix.message))

    def info_table(self, message: str) -> tuple[Handler[_Builder], ...]:
        """The handlers of _INFO_HANDLERS whose test holds for `message`, in order: a message
        that comes again in one parse (a communicator's init lines, word for word again for
        each communicator) is tested once. Exact: each test is a test of the message alone,
        so `dispatch` over them reads a line as over the whole table (each handler left out
        would have said no). tests/unit/parsers/test_nccl_log_tested.py reads every fixture
        both ways."""
        return self.tested.table(message)

    # -- the handlers of _INFO_HANDLERS: each reads one kind of INFO message (the line's
    # text) into the current process; True when the message was of its kind

    def version(self, line: Line) -> bool:
        m = _VERSION.match(line.text)
        if m is None:
            return False
        self.current.version, self.current.cuda = m.group("v"), m.group("cuda") or ""
        self.versions[m.group(0)[len("NCCL version "):]] = None
        return True

    def bare_version(self, line: Line) -> bool:
        """`NCCL version 2.10.3+cuda11.3` with no prefix: a version no process named."""
        version = _bare_version(line.text)
        if version is None:
            return False
        self.versions[version] = None
        return True

    def bootstrap(self, line: Line) -> bool:
        return self._bootstrap_from(_BOOTSTRAP.match(line.text))

    def net_interface(self, line: Line) -> bool:
        """NCCL <= 2.3's `NET : Using interface IF:ADDR`: the bootstrap's interface."""
        return self._bootstrap_from(_OLD_NET_IF.match(line.text))

    def _bootstrap_from(self, m: re.Match[str] | None) -> bool:
        """The process's bootstrap interface and address from a match of either phrasing (the
        first one it names stands)."""
        if m is None:
            return False
        proc = self.current
        if not proc.bootstrap_if:
            proc.bootstrap_if, proc.bootstrap_addr = m.group("if"), m.group("addr")
        return True

    def net_socket(self, line: Line) -> bool:
        proc = self.current
        if not proc.socket_devices:
            proc.socket_devices = self.devices(_SOCKET_DEVICE, line.text, socket=True)
        if proc.socket_devices:
            proc.net_listed = "Socket"
        return True

    def net_plugin_list(self, line: Line) -> bool:
        m = _NET_LIST.match(line.text)
        if m is None or m.group("net") in ("IB", "Socket"):
            return False
        proc = self.current
        if not proc.plugin_devices:
            proc.plugin_devices = self.devices(_SOCKET_DEVICE, line.text[m.end():], socket=True)
        if proc.plugin_devices:
            proc.net_listed = m.group("net")
        return True

    def network(self, line: Line) -> bool:
        self.current.network = _network_name(line.text) or self.current.network
        return True

    def plugin(self, line: Line) -> bool:
        for pattern in _PLUGIN_LINES:
            m = pattern.match(line.text)
            if m:
                self.current.plugin.update({k: v for k, v in m.groupdict().items() if v})
                return True
        return False

    def driver(self, line: Line) -> bool:
        m = _DRIVER.match(line.text)
        if m is None:
            return False
        self.current.cuda_driver = int(m.group(1))
        return True

    def error_return(self, line: Line) -> bool:
        m = _ERROR_RETURN.fullmatch(line.text[:400])
        if m is None:
            return False
        proc = self.current
        proc.error_returns += 1
        if proc.first_error_line is None:
            proc.first_error_line, proc.first_error_code = line.number, int(m.group(1))
        if proc.init_error_line is None and line.text.startswith("init.cc:"):
            proc.init_error_line = line.number
        return True

    def ib_unavailable(self, line: Line) -> bool:
        """`Failed to open libibverbs.so[.1]`, `Failed to initialize NET plugin IB`: IB never
        started in this process (the first such message kept)."""
        proc = self.current
        if not proc.ib_unavailable:
            proc.ib_unavailable = line.text[:_MSG_MAX].strip()
        return True

    def net_ib(self, line: Line) -> bool:
        proc, msg = self.current, line.text
        if "No device found" in msg[:40]:
            proc.ib_no_device = True
            return True
        using = msg.find(" Using", 0, 16)
        if using < 0:
            return False
        if proc.ib_devices:
            return True  # the first list is the process's
        sideband = _SIDEBAND.match(msg, using)
        if sideband:  # NCCL <= 2.3: the OOB interface alone, no device listed
            if not proc.bootstrap_if:
                proc.bootstrap_if = sideband.group("if")
            return True
        devices, _, oob = msg[using:using + _MSG_MAX].partition("; OOB")
        proc.ib_devices = self.devices(_IB_DEVICE, devices, socket=False)
        if proc.ib_devices:
            proc.net_listed = "IB"
        m = _OOB.match(oob)
        if m and not proc.bootstrap_if:  # the OOB interface: NCCL_SOCKET_IFNAME's pick, as bootstrap's
            proc.bootstrap_if, proc.bootstrap_addr = m.group("if"), m.group("addr")
        return True

    def devices(self, pattern: re.Pattern[str], text: str, socket: bool) -> list[NetDevice]:
        found: list[NetDevice] = []
        for m in pattern.finditer(text):
            if len(found) >= MAX_PER_PROCESS:
                self.truncated = True
                break
            if socket:
                found.append(NetDevice(index=int(m.group(1)), name=m.group(2), addr=m.group(3)))
            else:
                found.append(NetDevice(index=int(m.group(1)), name=m.group(2), port=int(m.group(3)),
                                       link=m.group(4), extra=m.group(5) or ""))
        return found

    def env(self, line: Line) -> bool:
        m = _ENV.fullmatch(line.text[:600])
        if m is None:
            return False
        name, value, proc = m.group(1), m.group(2).strip(), self.current
        if value.endswith(".") and _int(value[:-1], 20) is not None:  # "%s set by environment to %lld."
            value = value[:-1]
        if name in proc.env or len(proc.env) < MAX_PER_PROCESS:
            proc.env[name] = EnvSetting(name=name, value=value, line=line.number)
        else:
            self.truncated = True
        return True

    def connection(self, line: Line) -> bool:
        m = _CONNECTION.match(line.text)
        if m is None:
            return False
        transport, proc = _transport(m.group("via")), self.current
        use = proc.transports.get(transport)
        if use is not None:
            use[0] += 1
        elif len(proc.transports) < MAX_PER_PROCESS:
            proc.transports[transport] = [1, line.number]
        else:
            self.truncated = True
        return True

    def rings_connected(self, line: Line) -> bool:
        self.current.rings += 1
        self.connected(rings=True)
        return True

    def trees_connected(self, line: Line) -> bool:
        self.current.trees += 1
        self.connected(rings=False)
        return True

    def connected(self, rings: bool) -> None:
        """`Connected all rings|trees` on the thread initializing a comm: that comm's."""
        p = self.prefix
        key = (p.host, p.pid, p.tid)
        comm = self.init_thread.get(key)
        if comm is not None and comm.init_complete_line is None:
            if rings:
                comm.rings = True
            else:
                comm.trees = True
            return
        # before 2.18 there is no Init START: the thread's next COMPLETE is this comm's
        flags = self.pending.setdefault(key, [False, False])
        flags[0 if rings else 1] = True

    def comm_line(self, line: Line) -> bool:
        """`[func ]comm 0x.. rank R nranks N cudaDev D ... [- Init|Abort|Destroy START|COMPLETE]`."""
        m = _COMM.match(line.text)
        if m is None:
            return False
        rest = m.group("rest")[:1024]
        phase = _PHASE.search(rest)
        what = phase.group("what") if phase else ""
        starting = what == "Init" and phase is not None and phase.group("phase") == "START"
        comm = self.comm(self.prefix, m.group("comm"), line.number, fresh=starting)
        if comm is None:
            return True
        self.comm_fields(comm, m, (rest[:phase.start()] if phase else rest).split())
        if phase is not None:
            self.comm_phase(comm, what, phase.group("phase"), line.number)
        return True

    def comm_fields(self, comm: _Comm, m: re.Match[str], words: list[str]) -> None:
        """A comm line's rank, nranks and the `name value` pairs after them."""
        p, fields = self.prefix, comm.fields
        if m.group("func"):
            fields["func"] = m.group("func")
        rank, nranks = _int(m.group("rank")), int(m.group("nranks"))
        fields["rank"], fields["nranks"] = rank, nranks
        self.world_sizes.add(nranks)
        self.by_rank[(p.host, p.pid, rank, nranks)] = comm
        for i, word in enumerate(words[:-1]):
            name = _COMM_FIELDS.get(word)
            if name is None:
                continue
            value = words[i + 1].rstrip("-")
            if name in ("bus_id", "comm_id", "parent"):
                fields[name] = value[:64]
            else:
                number_value = _int(value)
                if number_value is not None:
                    fields[name] = number_value

    def comm_phase(self, comm: _Comm, what: str, phase: str, number: int) -> None:
        """`- Init START|COMPLETE` (the thread's comm from then on), `- Abort|Destroy ...`."""
        p = self.prefix
        key = (p.host, p.pid, p.tid)
        if what != "Init":
            comm.end, comm.end_complete, comm.end_line = what.lower(), phase == "COMPLETE", number
            return
        if phase == "START":
            comm.init_start_line = number
        else:
            comm.init_complete_line = number
            flags = self.pending.pop(key, None)
            if flags is not None:
                comm.rings = comm.rings or flags[0]
                comm.trees = comm.trees or flags[1]
        self.init_thread[key] = comm

    def timings(self, line: Line) -> bool:
        m = _TIMINGS.match(line.text)
        if m is None:
            return False
        p = self.prefix
        rank, nranks = _int(m.group("rank")), int(m.group("nranks"))
        self.world_sizes.add(nranks)
        comm = self.init_thread.get((p.host, p.pid, p.tid))
        if comm is None or comm.fields.get("rank") != rank or comm.fields.get("nranks") != nranks:
            comm = self.by_rank.get((p.host, p.pid, rank, nranks))
        if comm is None:
            return True
        comm.init_total_s = _seconds(m.group("total"))
        for part in _TIMING_PART.finditer(m.group("parts") or ""):
            seconds = _seconds(part.group(2))
            if seconds is not None and len(comm.init_timings) < 16:
                comm.init_timings[part.group(1)] = seconds
        return True

    def coll(self, line: Line) -> bool:
        m = _COLL.match(line.text)
        if m is None:
            return False
        number = line.number
        comm = self.comm(self.prefix, m.group("comm"), number)
        if comm is None:
            return True
        nranks = int(m.group("nranks"))
        self.world_sizes.add(nranks)
        comm.fields.setdefault("nranks", nranks)
        op_count = int(m.group("opc"), 16)
        comm.coll_count += 1
        if comm.first_op_count is None:
            comm.first_op_count, comm.first_coll_line = op_count, number
        comm.last_op_count, comm.last_op, comm.last_coll_line = op_count, m.group("op"), number
        comm.last_count = _int(m.group("count"), 20)
        return True

    # -- WARN (_WARN_HANDLERS)

    def warn(self, line: Line) -> bool:
        """Every WARN is read: classified, `other` at least; a wrapped tail it took is read with it."""
        p, proc, number, following = self.prefix, self.current, line.number, self.following
        proc.warns += 1
        w = _classify(p, number, following)
        if following is not None and w.kind == "ib-completion" and "vendor err" not in p.message:
            self.tail_line = self.following_line
        self.warn_counts[w.kind] = self.warn_counts.get(w.kind, 0) + 1
        if self.first_warn is None:
            self.first_warn = w
        if w.time is not None and (self.earliest is None or self.earliest.time is None or w.time < self.earliest.time):
            self.earliest = w
        if len(self.warns) < MAX_WARNS:
            self.warns.append(w)
        else:
            self.truncated = True
        return True

    # -- the facts

    def freeze(self, lines: int) -> NcclLog:
        comms = [c.freeze() for c in self.comms]
        by_proc: dict[tuple[str, int], list[NcclComm]] = {}
        for c in comms:
            by_proc.setdefault((c.host, c.pid), []).append(c)
        processes = [self.freeze_proc(proc, by_proc.get(key, [])) for key, proc in self.procs.items()]
        processes.sort(key=lambda x: x.first_line)
        counts: dict[str, int] = {kind: self.warn_counts[kind] for kind in WARN_KINDS if kind in self.warn_counts}
        return NcclLog(
            lines=lines, nccl_lines=self.nccl_lines, versions=tuple(self.versions),
            processes=tuple(processes), comms=tuple(comms), warns=tuple(self.warns), warn_counts=counts,
            ranks=tuple(sorted({c.rank for c in comms if c.rank is not None})),
            world_sizes=tuple(sorted(self.world_sizes)),
            first_warn=self.first_warn, first_warn_by_time=self.earliest, truncated=self.truncated,
            unrecognized=self.unrecognized.freeze(),
        )

    @staticmethod
    def freeze_proc(proc: _Proc, comms: list[NcclComm]) -> NcclProcess:
        sized = [c for c in comms if c.rank is not None and c.nranks is not None]
        world = max((c.nranks for c in sized if c.nranks is not None), default=None)
        ranks = tuple(sorted({c.rank for c in sized if c.nranks == world and c.rank is not None}))
        plugin = proc.plugin
        network, inferred = proc.network, False
        if not network:
            network = _inferred_network(proc)
            inferred = bool(network)
        fallback = network == "Socket" or (
            not network and not proc.ib_devices
            and (proc.ib_no_device or bool(proc.ib_unavailable) or bool(proc.socket_devices)))
        nics = plugin.get("net_nics")
        return NcclProcess(
            host=proc.host, pid=proc.pid, first_line=proc.first_line, last_line=proc.last_line, lines=proc.lines,
            version=proc.version, cuda=proc.cuda, cuda_driver=proc.cuda_driver, devices=tuple(proc.devices),
            bootstrap_if=proc.bootstrap_if, bootstrap_addr=proc.bootstrap_addr, network=network,
            network_inferred=inferred, net_plugin=str(plugin.get("net_plugin", "")),
            net_plugin_version=str(plugin.get("net_plugin_version", "")),
            net_plugin_path=str(plugin.get("net_plugin_path", "")), net_provider=str(plugin.get("net_provider", "")),
            net_nics=int(nics) if nics else None,
            ib_devices=tuple(proc.ib_devices), ib_no_device=proc.ib_no_device, ib_unavailable=proc.ib_unavailable,
            socket_devices=tuple(proc.socket_devices), plugin_devices=tuple(proc.plugin_devices),
            socket_fallback=fallback,
            env=tuple(proc.env.values()),
            transports=tuple(TransportUse(transport=t, count=use[0], first_line=use[1])
                             for t, use in proc.transports.items()),
            rings_connected=proc.rings, trees_connected=proc.trees, launcher_rank=proc.launcher_rank,
            ranks=ranks, world_size=world,
            warns=proc.warns, error_returns=proc.error_returns, first_error_line=proc.first_error_line,
            first_error_code=proc.first_error_code, init_error_line=proc.init_error_line,
        )


# An INFO message's handlers, in order; the first that reads it names it (`hc parse --explain`)
_INFO_HANDLERS: tuple[Handler[_Builder], ...] = (
    Handler("version", starts("NCCL version "), _Builder.version),
    Handler("bootstrap", lambda m: m.startswith("Bootstrap") and " Using " in m[:40], _Builder.bootstrap),
    Handler("net-ib", starts("NET/IB"), _Builder.net_ib),
    Handler("ib-unavailable", starts(*_IB_UNAVAILABLE), _Builder.ib_unavailable),
    Handler("net-socket", lambda m: m.startswith("NET/Socket") and " Using" in m[:40], _Builder.net_socket),
    Handler("net-plugin-devices", lambda m: m.startswith("NET/") and " Using [" in m[:48], _Builder.net_plugin_list),
    Handler("net-interface", starts("NET : Using interface "), _Builder.net_interface),
    Handler("network", starts(*_NETWORK_WORDS), _Builder.network),
    Handler("net-plugin", starts("NET/OFI ", "P2P plugin ", "Plugin Path "), _Builder.plugin),
    Handler("cuda-driver", starts("cudaDriverVersion"), _Builder.driver),
    Handler("rings-connected", starts("Connected all rings"), _Builder.rings_connected),
    Handler("trees-connected", starts("Connected all trees"), _Builder.trees_connected),
    Handler("init-timings", starts("Init timings"), _Builder.timings),
    Handler("connection", starts("Channel ", "Ring "), _Builder.connection),
    Handler("coll", lambda m: "opCount " in m[:48], _Builder.coll),
    Handler("comm", lambda m: "comm 0x" in m[:64], _Builder.comm_line),
    Handler("env", lambda m: m.startswith("NCCL_") and " set " in m[:100], _Builder.env),
    Handler("error-return", lambda m: " -> " in m[:300], _Builder.error_return),
    Handler("cut", lambda m: not m.strip(), lambda state, line: True),  # cut right after its prefix: said nothing
)
# ibvwrap's WARN that IB never started is a WARN like any other too
_WARN_HANDLERS: tuple[Handler[_Builder], ...] = chained((
    Handler("ib-unavailable", starts(*_IB_UNAVAILABLE), _Builder.ib_unavailable),
    Handler("warn", lambda m: True, _Builder.warn),
))
# a line with no NCCL prefix: only a bare version line is NCCL's
_UNPREFIXED_HANDLERS: tuple[Handler[_Builder], ...] = (
    Handler("bare-version", lambda t: "NCCL version " in t[:256], _Builder.bare_version),
)
# the line after an IB completion WARN that the terminal wrapped: the WARN read it
_TAIL_HANDLERS: tuple[Handler[_Builder], ...] = (*_UNPREFIXED_HANDLERS, Handler("warn-tail", lambda t: True,
                                                                                lambda s, line: True))


def _nccl_prefix(line: Line) -> NcclPrefix | None:
    return (split_read_line(line) or split_old_line(line) or split_bare_line(line) or split_quoted_warn(line)
            or split_sourced_warn(line))


def _wrapped_tail(lines: list[Line], index: int) -> tuple[str | None, int]:
    """The line after a WARN when it is no NCCL line (maybe the WARN's text, wrapped), and
    its number."""
    if index + 1 >= len(lines):
        return None, 0
    nxt = lines[index + 1]
    text = nxt.text[:TEXT_MAX].strip()
    return (text, nxt.number) if text and _nccl_prefix(nxt) is None else (None, 0)


def _inferred_network(proc: _Proc) -> str:
    """The network a process chose when no `Using network` line says: the net that listed
    its devices last (NCCL tries a plugin, IB, Socket in turn and stops at the first with
    devices); a built-in one only where no plugin named itself (a plugin may print NCCL's
    own IB list)."""
    if proc.net_listed in ("IB", "Socket") and (proc.plugin.get("net_plugin") or proc.plugin.get("net_plugin_path")):
        return ""
    return proc.net_listed


def _network_name(msg: str) -> str:
    """`Using network IB` -> "IB", `Using network AWS Libfabric` -> "AWS Libfabric" (a plugin's
    name may hold spaces), NCCL <= 2.3's `Using internal Network Socket` -> "Socket"; never
    more than a few words."""
    name = msg[len(next((w for w in _NETWORK_WORDS if msg.startswith(w)), "")):].strip()
    return name[:64] if name and name.count(" ") <= 3 else ""


def _transport(via: str) -> str:
    """`NET/IB/0/GDRDMA` -> "NET/IB/GDRDMA", `P2P/CUMEM/read` -> "P2P/CUMEM",
    `SHM/direct/direct` and `direct shared memory` -> "SHM", `NET/Socket/0` -> "NET/Socket"."""
    via = via.strip()
    if via.startswith("NET/"):
        parts = via.split("/")
        name = parts[1].split("(")[0] if len(parts) > 1 else ""
        flags = [part for part in parts[2:] if part.isalpha() and part.isascii()]
        return "/".join(["NET", name[:32], *flags[:2]])
    if via.startswith("P2P/"):
        return "/".join(via.split("/")[:2])[:40]
    if via.startswith("SHM") or via.endswith("shared memory"):
        return "SHM"
    return via.split()[0][:32] if via.split() else "?"


def _warn(kind: WarnKind, p: NcclPrefix, number: int, text: str, **fields: Any) -> NcclWarn:
    found = endpoint(fields["peer"]) if fields.get("peer") else None
    if found is not None:
        fields.update(peer_address=found.address, peer_port=found.port)
    return NcclWarn(kind=kind, line=number, host=p.host, pid=p.pid, text=text, tid=p.tid, dev=p.dev, src=p.src,
                    time=p.time, stamp=p.stamp, **fields)


def _verbs_detail(rest: str) -> dict[str, Any]:
    """A verbs WARN's device, QP states and GIDs after its error (`_VERBS_DEV`); {} without."""
    m = _VERBS_DEV.match(rest) if rest.startswith(", on dev ") else None
    if m is None:
        return {}
    return {"hca": m.group("hca"), "qp_state": m.group("qp_state"), "next_qp_state": m.group("next"),
            "gid_index": _int(m.group("gid_index") or ""), "local_gid": m.group("local") or "",
            "remote_gid": m.group("remote") or ""}


def warn_of(line: Line) -> NcclWarn | None:
    """The line's NCCL WARN, classified as a log's are (kind, peer, status, hca...), None
    where it is no WARN: for a tool whose output holds NCCL's lines among its own
    (nccl-tests), where the WARN is a failure's cause."""
    if "NCCL WARN" not in line.text:
        return None
    p = split_read_line(line) or split_bare_line(line)
    return _classify(p, line.number, None) if p is not None and p.level == "WARN" else None


def _classify(p: NcclPrefix, number: int, following: str | None) -> NcclWarn:
    msg = p.message
    m = _IB_COMPLETION.search(msg[:200])
    if m:
        full = msg
        if "vendor err" not in msg and following is not None:  # a line the terminal wrapped
            full = msg + " " + following
        vendor = _VENDOR.search(full)
        hca = _HCA.search(full)
        return _warn("ib-completion", p, number, clip(full, TEXT_MAX), peer=m.group("peer") or "",
                     status=_int(m.group("err") or m.group("st") or ""),
                     vendor_err=_int(vendor.group(1)) if vendor else None,
                     request=(vendor.group(2) or "") if vendor else "", hca=hca.group(1) if hca else "")
    text = clip(msg, TEXT_MAX)
    if "Call to " in msg[:40]:
        v = _VERBS.search(msg[:400])
        if v and (v.group(1).startswith("ibv_") or "ibvwrap" in p.src):
            return _warn("ibverbs", p, number, text, call=v.group(1), error=(v.group(2) or "").strip(),
                         **_verbs_detail(msg[v.end():v.end() + 400]))
    if "Cuda failure" in msg[:80] or "CUDA calloc" in msg[:80]:
        c = _CUDA.search(msg[:400])
        return _warn("cuda", p, number, text, error=c.group("err") if c else "",
                     code=_int(c.group("code")) if c and c.group("code") else None)
    if msg.startswith("Duplicate GPU detected"):
        return _warn("duplicate-gpu", p, number, text)
    lower = msg[:120].lower()
    if "no socket interface found" in lower or "no usable listening interface" in lower:
        return _warn("no-interface", p, number, text)
    src_file = p.src.rsplit(":", 1)[0]
    if (msg.startswith(_SOCKET_WORDS) or any(w in msg[:200] for w in _CONNECTION_WORDS)
            or src_file.endswith(_SOCKET_SRC)):
        peer = _PEER.search(msg[:400])
        error = msg[:400].rsplit(" : ", 1)[1].strip()[:200] if " : " in msg[:400] else ""
        return _warn("socket", p, number, text, peer=peer.group(1) if peer else "", error=error)
    if (src_file.rsplit("/", 1)[-1].startswith("proxy") or "[Proxy" in msg[:40] or "[Service thread]" in msg[:40]
            or msg.startswith("Proxy")):
        return _warn("proxy", p, number, text)
    return _warn("other", p, number, text)


# ---------------------------------------------------------------- the parser


def _bare_version(line: str) -> str | None:
    """`NCCL version 2.10.3+cuda11.3` printed without a prefix (<= 2.21, or the VERSION level),
    after a launcher's label at most; never a sentence that mentions a version."""
    at = line.find("NCCL version ", 0, 128)
    if at < 0:
        return None
    before = line[:at]
    if before.strip() and not before.rstrip().endswith((":", "]", ">", ")")):
        return None
    if not _BARE_VERSION.match(line, at):
        return None
    m = _VERSION.match(line, at)
    return m.group(0)[len("NCCL version "):] if m else None


# Something of every line `_Builder.read` can read, in its raw text (lines.marked_lines):
# `NCCL` (split_read_line's ` NCCL `, split_bare_line's `NCCL `, the bare `NCCL version `),
# split_sourced_warn's ` WARN `, split_old_line's `host:pid:tid [dev]`, the starts of
# _QUOTED_WARN's phrases; the line after a WARN (_wrapped_tail) is read by marked_lines'
# rule. Every other line the builder only counts unread.
NCCL_MARKS = re.compile(r"NCCL|WARN |:\d{1,10}:\d{1,10}[ \t]\[|Got completion|Call to |Cuda failure ", re.ASCII)


def parse_nccl_log(text: str, *, marked_only: bool = False) -> NcclLog:
    """An NCCL debug log, or any output holding NCCL lines -> NcclLog; ParseError when no
    line is NCCL's. `marked_only`: the fast path for a job's whole output (hc diagnose
    logs), reading only the lines NCCL_MARKS finds something in: the same facts, but its
    `unrecognized` counts only the unmarked lines it read."""
    lines = list(read_lines(text, stamps=False, cut_end=True,  # `failed with 110 Connection timed o`: not read
                            marks=NCCL_MARKS if marked_only else None))
    builder = _Builder()
    for index, line in enumerate(lines):
        builder.read(lines, index, line)
    count = text.count("\n") + (not text.endswith("\n"))  # lines as "\n" splits them, a last empty one not
    if not builder.nccl_lines and not builder.versions:
        raise ParseError(f"nccl-log: no NCCL debug line (host:pid:tid [dev] NCCL INFO|WARN ...) "
                         f"and no 'NCCL version' line (starts with {clip(text.strip(), 60)!r})")
    return builder.freeze(count)
