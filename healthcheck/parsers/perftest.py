"""perftest bandwidth output (`ib_write_bw`, `ib_read_bw`, `ib_send_bw`) text -> PerftestRun.

What perftest prints (linux-rdma/perftest @00b55b6, src/perftest_parameters.[ch],
src/perftest_resources.[ch], src/perftest_communication.c, src/write_bw.c):

* the server prints `* Waiting for client to connect... *` before anything else
  (`-R`: ` Waiting for client rdma_cm QP to connect`), then both sides print a banner:
  a title (`RDMA_Write [Bidirectional ][Post List ]BW Test`) and `Key : value` fields,
  two to a line, tab-separated (`Dual-port : OFF\\t\\tDevice : mlx5_0`), then the
  address lines (`local address: LID 0xd06 QPN 0x095f PSN ...`, ` GID: ...` on RoCE);
* the table: ` #bytes  #iterations  BW peak[Gb/sec]  BW average[Gb/sec]  MsgRate[Mpps]`
  (`--report_gbits`), `[MiB/sec]` otherwise (`[MB/sec]` before 24.07, same values);
  ` #sl` after #bytes with `--sl`-QoS reports, four per-port columns with
  `--report-per-port`, a CPU_Util column with `--cpu_util`;
* unidirectional `-a`: the client prints every size; the write server prints only the
  client's last row, once, at the end. Bidirectional (`-b`): both sides print every size,
  the sum of both directions. A loopback log (server and client into one file) therefore
  holds the same rows twice: with two banners, an exact repeat of a row is dropped;
* `-D` (duration), `-N`, `--run_infinitely`: the peak is not measured and prints `0.00`,
  which is read as unknown (None), never as zero; `--run_infinitely` prints a row for
  the same size every `-D` seconds until killed, and those rows are all kept;
* errors go to stderr, one line each, a specific line first and then what main() gave
  up on (`Failed to modify QP 122273 to RTR` / ` Unable to Connect the HCA's through the
  link`): every one is a PerftestFailure, in order, so the first is the most specific.
  stderr is unbuffered and stdout a pipe's full buffer, so an error may land inside
  another line: errors are found anywhere in a line, and a line may hold several.
  With `-R`, an rdma_cm event that ended the connection prints `RDMA CM event error:` and
  `Event: RDMA_CM_EVENT_REJECTED; error: -111.` (the event and its status, a negative errno
  or an IB reject reason): one failure naming both (`cm_event`, `cm_status`,
  `cm_status_text`), then the event loop's own errors (`Failed to handle RDMA CM event.`).

The perftest command line a paste carries before the output (`# ib_write_bw -d mlx5_0
HOST`, behind a prompt or a wrapper's words) names the device (`-d`, `--ib-dev`): the run's
`device` where no banner names one (a run that failed before its banner).

Linear time: every line is cut to MAX_LINE characters, every pattern is anchored at a
literal and bounded, and row de-duplication is a set lookup.
"""

from __future__ import annotations

import functools
import re
from enum import Enum
from typing import Literal

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.lines import (
    NOTHING_UNREAD,
    Line,
    Unrecognized,
    UnrecognizedLines,
    ends_mid_line,
    is_prompt,
    pasted_lines,
    recorded,
    recording_now,
    unindented,
    without_cut_end,
)

# MB/sec and MiB/sec in perftest are both 2^20 bytes a second: print_report_bw()
# (src/perftest_parameters.c @00b55b6) divides bytes/s by
# `format_factor = (report_fmt == MBS) ? 0x100000 : 125000000`, i.e. by 2^20 for
# "MiB/sec" (named "MB/sec" before perftest 24.07, commit 1d202bb, same value) and by
# 125,000,000 bytes (10^9 bits) for "Gb/sec" (--report_gbits). So
# Gb/s = MiB/s x 2^20 x 8 / 10^9 = MiB/s x 0.008388608.
MIB_PER_S_TO_GBITS = 2**20 * 8 / 1e9
_UNIT_TO_GBITS = {"Gb/sec": 1.0, "MB/sec": MIB_PER_S_TO_GBITS, "MiB/sec": MIB_PER_S_TO_GBITS}

MAX_LINE = 4096  # perftest's longest line (the per-port header) is ~190 characters

Side = Literal["client", "server", "both", "unknown"]
TestVerb = Literal["write", "write_imm", "read", "send", "send_imm", "atomic", "unknown"]


class PerftestFailureKind(str, Enum):
    """What a perftest error line says went wrong (a str, so `kind == "connect"` holds)."""

    CONNECT = "connect"  # client: "Couldn't connect to HOST:PORT" (server not up yet: retry)
    LISTEN = "listen"  # server: "Couldn't listen to port P" (port taken: a leftover perftest)
    SOCKET = "socket"  # "Unable to init the socket connection", "... open file descriptor ..."
    EXCHANGE = "exchange"  # connected, then the TCP side channel failed (keys, reports, sync)
    VERSION_MISMATCH = "version-mismatch"  # "not compatible with versions older than ..."
    RDMA_CM = "rdma-cm"  # -R: rdma_cm setup, resolve, connect or listen failed
    NO_DEVICE = "no-device"  # "No IB devices found" / " Did not detect devices "
    DEVICE_NOT_FOUND = "device-not-found"  # "IB device X not found", "Unable to find the Infiniband/RoCE device"
    DEVICE_CONTEXT = "device-context"  # "Couldn't get context for the device" (ibv_open_device failed)
    DEVICE_ATTRIBUTES = "device-attributes"  # "Couldn't get device attributes", port query failed
    LINK_CONFIG = "link-config"  # "Couldn't set the link layer", "Couldn't set Eth MTU"
    ALLOCATE_MR = "allocate-mr"  # "Couldn't allocate MR" (with --use_cuda: GPUDirect path)
    IB_RESOURCES = "ib-resources"  # "Couldn't create IB resources", PD, CQ, SRQ
    CREATE_QP = "create-qp"  # "Failed to create QP.", "Unable to create QP."
    MODIFY_QP = "modify-qp"  # "Failed to modify QP N to RTR" (GID/LID/MTU mismatch, no SM)
    HCA_CONNECT = "hca-connect"  # " Unable to Connect the HCA's through the link"
    COMPLETION_ERROR = "completion-error"  # "Completion with error at client" + "Failed status ..."
    RUN = "run"  # "Failed to complete run_iter_bw function successfully", post/poll failed
    GPU = "gpu"  # "Couldn't init GPU context", DMA-BUF unsupported, CUDA library missing
    USAGE = "usage"  # " Parser function exited with Error" (bad arguments)
    OTHER = "other"  # a line that reads as an error ("Couldn't ...", "Failed ...") hc does not know

    def __str__(self) -> str:
        return self.value


class PerftestFailure(msgspec.Struct, frozen=True, omit_defaults=True):
    """One error perftest printed; the fields it names, where it names them."""

    kind: PerftestFailureKind
    message: str  # the error as printed, stripped (the matched part of a line that held more)
    host: str | None = None  # CONNECT: the server asked for
    port: int | None = None  # CONNECT, LISTEN: the TCP port of the side channel (-p)
    device: str | None = None  # DEVICE_NOT_FOUND, DEVICE_CONTEXT: the -d name
    qp: int | None = None  # MODIFY_QP, COMPLETION_ERROR (Poll send CQ error): the QP number
    qp_state: str | None = None  # MODIFY_QP: RTR, RTS or INIT
    where: str | None = None  # COMPLETION_ERROR: "client" or "server", as printed
    wc_status: int | None = None  # COMPLETION_ERROR: ibv_wc_status number
    wc_status_text: str | None = None  # its ibv_wc_status_str() text
    vendor_syndrome: str | None = None  # COMPLETION_ERROR: "0x51" (perftest prints "syndrom")
    wr_id: int | None = None  # COMPLETION_ERROR: the work request id
    errno_text: str | None = None  # the "ERRNO: Bad address." line after it: strerror(errno), without the dot
    # RDMA_CM: the rdma_cm event perftest got instead of the one it waited for ("Event:
    # RDMA_CM_EVENT_REJECTED; error: -111."), its status (a negative errno; on IB a REJECTED
    # event's positive status is the CM's reject reason) and what that status means
    cm_event: str | None = None
    cm_status: int | None = None
    cm_status_text: str | None = None


class PerftestRow(msgspec.Struct, frozen=True, omit_defaults=True):
    """One result row, bandwidths in Gb/s (10^9 bits a second) whatever perftest printed."""

    size_bytes: int
    iterations: int  # with -D: the count achieved in the duration
    bw_avg_gbits: float
    msg_rate_mpps: float
    bw_peak_gbits: float | None = None  # None: not measured (-D, -N, --run_infinitely print 0.00)
    sl: int | None = None  # the service level column of QoS reports
    cpu_util_percent: float | None = None  # --cpu_util


class PerftestCutRow(msgspec.Struct, frozen=True, omit_defaults=True):
    """The last row of a text cut before its bandwidth columns (`65536      664644`): the
    size being measured when the output ended, never a measurement."""

    size_bytes: int
    iterations: int


class PerftestAddress(msgspec.Struct, frozen=True, omit_defaults=True):
    """A ` local address:` / ` remote address:` line (one per QP), with its ` GID:` line."""

    role: Literal["local", "remote"]
    lid: int  # 0 on RoCE; 0 on an IB port means no Subnet Manager gave it one
    qpn: int
    psn: int
    gid: str | None = None  # RoCE (and IB with a GRH), as perftest prints it


class PerftestRun(msgspec.Struct, frozen=True, omit_defaults=True):
    """One ib_*_bw test as its output tells it: banner, rows, failures.

    Banner fields are None where no banner was printed (a run that failed before it). A
    log holding both sides (loopback) is side "both": scalars come from the first banner,
    `devices` names every device seen.
    """

    test: TestVerb = "unknown"
    side: Side = "unknown"
    title: str | None = None  # "RDMA_Write Bidirectional BW Test"
    bidirectional: bool | None = None  # -b
    device: str | None = None  # "mlx5_0"
    devices: tuple[str, ...] = ()
    qps: int | None = None  # -q
    transport: str | None = None  # "IB" (verbs transport; RoCE is IB too), "IW"
    connection: str | None = None  # "RC", "UC", "UD", "XRC", "DC", "SRD"
    link_type: str | None = None  # "IB", "Ethernet" (RoCE), "Unknown"
    mtu: int | None = None  # bytes, the active path MTU
    gid_index: int | None = None  # -x; printed on RoCE only
    data_exchange: str | None = None  # "Ethernet" (TCP side channel) or "rdma_cm" (-R)
    rdma_cm_qps: bool | None = None
    tx_depth: int | None = None
    cq_moderation: int | None = None
    post_list: int | None = None
    unit: str | None = None  # the table's unit as printed: "Gb/sec", "MB/sec" or "MiB/sec"
    rows: tuple[PerftestRow, ...] = ()
    # --report-both on a bidirectional run: each direction's own rows
    local_rows: tuple[PerftestRow, ...] = ()
    remote_rows: tuple[PerftestRow, ...] = ()
    addresses: tuple[PerftestAddress, ...] = ()
    failures: tuple[PerftestFailure, ...] = ()
    warnings: tuple[str, ...] = ()  # "BW peak won't be measured in this run.", CPU frequency
    cpu_frequency_conflict: bool = False  # "Conflicting CPU frequency values detected" (run without -F)
    # -D/-N/--run_infinitely: perftest said the peak is not measured, or printed 0.00 for it
    # in every row; each row's iterations are then the count achieved, not the count asked
    peak_not_measured: bool = False
    crashed: str | None = None  # the shell's line for the signal that killed it: "Segmentation fault (core dumped)"
    # --use_cuda (GPUDirect): the GPU perftest picked, its name and PCI address as printed
    cuda_device: int | None = None
    cuda_device_name: str | None = None  # "NVIDIA A30-8C"
    cuda_pci: str | None = None  # "02:00"
    cut_row: PerftestCutRow | None = None  # the text ends inside a row: its size, no bandwidth
    # lines no handler read and that held no error (a driver's warning, another command's
    # output): counted, the first few kept as evidence; a prompt, a blank or `...` is none
    unrecognized: Unrecognized = NOTHING_UNREAD
    # why what was read is partial: a paste of the parameters box or the QP addresses alone (no
    # title, row or error): which test ran, and how it ended, are not known; None otherwise
    incomplete: str | None = None

    @property
    def ok(self) -> bool:
        """Rows and no failure."""
        return bool(self.rows) and not self.failures

    @property
    def first_failure(self) -> PerftestFailure | None:
        """The first error printed: the most specific (what main() gave up on follows it)."""
        return self.failures[0] if self.failures else None

    @property
    def sizes(self) -> tuple[int, ...]:
        """The message sizes measured, ascending."""
        return tuple(sorted({r.size_bytes for r in self.rows}))

    def rows_at(self, size_bytes: int | None = None) -> tuple[PerftestRow, ...]:
        """The rows of `size_bytes` (the largest size measured when None)."""
        if size_bytes is None:
            if not self.rows:
                return ()
            size_bytes = max(r.size_bytes for r in self.rows)
        return tuple(r for r in self.rows if r.size_bytes == size_bytes)

    def avg_gbits(self, size_bytes: int | None = None) -> float | None:
        """BW average in Gb/s at `size_bytes` (the largest size when None); None when not
        measured. --run_infinitely rows of one size: the mean of their averages."""
        rows = self.rows_at(size_bytes)
        return sum(r.bw_avg_gbits for r in rows) / len(rows) if rows else None


# ------------------------------------------------------------------ line shapes

_TITLE = lazy_compile(
    r"[ \t]*+(?P<verb>Send_imm|Send|RDMA_Write_imm|RDMA_Write|RDMA_Read|Atomic)"
    r"(?: (?:CMP_AND_SWAP|FETCH_AND_ADD))?(?P<bidir> Bidirectional)?(?: Post List)?"
    r" (?:BW|Latency)(?: forwarding)?(?: Multicast)? Test[ \t]*+$"
)
_VERBS: dict[str, TestVerb] = {"Send": "send", "Send_imm": "send_imm", "RDMA_Write": "write",
                               "RDMA_Write_imm": "write_imm", "RDMA_Read": "read", "Atomic": "atomic"}
# ctx_print_test_info(): the labels a banner line starts with (the left column)
_FIELD_LINE = lazy_compile(
    r"[ \t]*+(?:Dual-port|Number of qps|Connection type|PCIe relax order|ibv_wr\* API|TX depth|RX depth"
    r"|Post List|Recv Post List|CQ Moderation|CQE Poll Batch|Mtu|Link type|CPU freq|Buffer size"
    r"|G(?:ID|id) index2?|Max inline data|Outstand reads|rdma_cm QPs|Data ex\. method|NUMA node)[ \t]*+:"
)
_FIELD_LINE_MAX = 400  # a banner line is < 120 characters; cut so the split stays cheap
_HEADER = lazy_compile(r"BW average\[(?P<unit>Gb/sec|MB/sec|MiB/sec)\]")
_INT = lazy_compile(r"[0-9]{1,19}")
_ADDRESS = lazy_compile(
    r"[ \t]*+(?P<role>local|remote) address: LID (?P<lid>(?:0x)?[0-9a-fA-F]{1,8})"
    r" QPN (?P<qpn>(?:0x)?[0-9a-fA-F]{1,8}) PSN (?P<psn>(?:0x)?[0-9a-fA-F]{1,8})(?![0-9a-fA-FxX])"
)
_GID = lazy_compile(r"[ \t]*+GID: (?P<gid>[0-9a-fA-F:.]{1,64})[ \t]*+$")
_WAITING = ("Waiting for client to connect", "Waiting for client rdma_cm QP to connect")
_CPU_CONFLICT = lazy_compile(
    r"Conflicting CPU frequency values detected: [0-9.]{1,30} != [0-9.]{1,30}\.(?: CPU Frequency is not max\.)?"
)
_WARNING = lazy_compile(r"WARNING: (?P<text>.{1,200})")
_PEAK_NOT_MEASURED = "BW peak won't be measured"
# the preamble of a --use_cuda run: the devices listed, the one picked, its name
_CUDA_LISTED = lazy_compile(
    r"[ \t]*+CUDA device (?P<n>[0-9]{1,4}): PCIe address is (?P<pci>[0-9A-Fa-f:.]{1,16})[ \t]*+$")
_CUDA_PICKED = lazy_compile(r"[ \t]*+Picking device No\. (?P<n>[0-9]{1,4})")
_CUDA_NAME = lazy_compile(
    r"[ \t]*+\[pid = [0-9]{1,10}, dev = (?P<n>[0-9]{1,4})\] device name = \[(?P<name>[^\]]{1,128})\]"
)
# perftest's rdma_cm paths print strerror(errno) after their error: "ERRNO: Bad address."
# rdma_cm_event_error_handler() (src/perftest_communication.c): "RDMA CM event error:\nEvent:
# %s; error: %d.\n" with rdma_event_str() and event->status
_CM_EVENT = lazy_compile(r"[ \t]*+Event: (?P<event>RDMA_CM_EVENT_[A-Z_]{1,40}); error: (?P<status>-?[0-9]{1,9})\.?")
_ERRNO = lazy_compile(r"[ \t]*+ERRNO: (?P<text>[^\n]{1,200})")
# what a shell prints when a signal killed its child (bash: "Segmentation fault (core dumped)")
_CRASH = lazy_compile(r"\b(?:Segmentation fault|Bus error|Illegal instruction|Floating point exception|Aborted)"
                    r"(?: \(core dumped\))?(?=[ \t]|$)")
_SAMPLED_CPU = lazy_compile(r"Using sampled CPU speed [0-9]{1,9} MHz over reported speed [0-9]{1,9} MHz")

# ibv_wc_status_str() (rdma-core libibverbs/enum_strs.c), for builds that print the number only
WC_STATUS = {
    0: "success", 1: "local length error", 2: "local QP operation error",
    3: "local EE context operation error", 4: "local protection error", 5: "Work Request Flushed Error",
    6: "memory management operation error", 7: "bad response error", 8: "local access error",
    9: "remote invalid request error", 10: "remote access error", 11: "remote operation error",
    12: "transport retry counter exceeded", 13: "RNR retry counter exceeded", 14: "local RDD violation error",
    15: "remote invalid RD request", 16: "aborted error", 17: "invalid EE context number",
    18: "invalid EE context state", 19: "fatal error", 20: "response timeout error", 21: "general error",
}

# what an rdma_cm event's status says. librdmacm gives a negative errno (Linux's numbers,
# glibc's strerror text): an iWARP or RoCE peer refusing is -ECONNREFUSED
CM_ERRNO = {
    -12: "Cannot allocate memory", -19: "No such device", -22: "Invalid argument", -61: "No data available",
    -99: "Cannot assign requested address", -101: "Network is unreachable", -104: "Connection reset by peer",
    -110: "Connection timed out", -111: "Connection refused", -113: "No route to host",
}
# an IB peer's REJECTED event carries the CM's reject reason (enum ib_cm_rej_reason, rdma/ib_cm.h)
CM_REJECT_REASON = {
    1: "no QP", 3: "no resources", 4: "timeout", 5: "unsupported", 8: "invalid service ID (nobody listening)",
    9: "invalid transport type", 10: "stale connection", 12: "invalid GID", 13: "invalid LID", 14: "invalid SL",
    26: "invalid MTU", 27: "insufficient responder resources", 28: "consumer defined (the peer's program rejected it)",
    29: "invalid RNR retry",
}


def cm_status_text(event: str, status: int) -> str | None:
    """What an rdma_cm event's status means, where hc knows: an errno's text, or a REJECTED
    event's IB reject reason."""
    if status < 0:
        return CM_ERRNO.get(status)
    if event == "RDMA_CM_EVENT_REJECTED" and status:
        reason = CM_REJECT_REASON.get(status)
        return f"reject reason {status}: {reason}" if reason else f"reject reason {status}"
    return None


_K = PerftestFailureKind
# (literal that starts the error, kind, pattern matched at that literal for its fields or None).
# Longer literals before their prefixes: the alternation takes the first that matches.
_RULES: list[tuple[str, PerftestFailureKind | None, re.Pattern[str] | None]] = [
    ("Couldn't connect to ", _K.CONNECT, lazy_compile(r"Couldn't connect to (?P<target>[^\s]{1,300})")),
    ("Couldn't listen to port", _K.LISTEN, lazy_compile(r"Couldn't listen to port(?: (?P<port>[0-9]{1,9}))?")),
    ("Unable to init the socket connection", _K.SOCKET, None),
    ("Unable to open file descriptor for socket connection", _K.SOCKET, None),
    ("Unable to set up socket connection", _K.SOCKET, None),
    ("Failed to bind socket", _K.SOCKET, None),
    ("accept() failed", _K.SOCKET, None),
    ("Current implementation is not compatible with versions older than", _K.VERSION_MISMATCH,
     lazy_compile(r"Current implementation is not compatible with versions older than [0-9.]{1,20}")),
    ("Failed to exchange", _K.EXCHANGE, lazy_compile(r"Failed to exchange [^\n]{0,80}")),
    ("Couldn't send local address", _K.EXCHANGE, None),
    ("Couldn't read remote address", _K.EXCHANGE, None),
    ("Couldn't parse line", _K.EXCHANGE, None),
    ("Unable to write to socket/rdma_cm", _K.EXCHANGE, None),
    ("Unable to read from socket/rdma_cm", _K.EXCHANGE, None),
    ("Unable to read to socket/rdma_cm", _K.EXCHANGE, None),
    ("Unable to write from socket/rdma_cm", _K.EXCHANGE, None),
    ("Couldn't read reports", _K.EXCHANGE, None),
    ("Couldn't send reports", _K.EXCHANGE, None),
    ("Failed to close connection between server and client", _K.EXCHANGE, None),
    ("Failed to sync between server and client", _K.EXCHANGE, None),
    ("Unable to create RDMA_CM resources", _K.RDMA_CM, None),
    ("Unable to connect (retries", _K.RDMA_CM, lazy_compile(r"Unable to connect \(retries = [0-9]{1,9}\)")),
    ("Unable to perform rdma_client function", _K.RDMA_CM, None),
    ("Unable to perform rdma_server function", _K.RDMA_CM, None),
    ("Unable to create rdma resources", _K.RDMA_CM, None),
    ("Function rdma_connect failed", _K.RDMA_CM, None),
    ("bad event waiting for connect request", _K.RDMA_CM, None),
    ("rdma_listen failed", _K.RDMA_CM, None),
    ("rdma_resolve_addr failed", _K.RDMA_CM, None),
    ("rdma_resolve_route failed", _K.RDMA_CM, None),
    ("rdma_get_cm_events failed", _K.RDMA_CM, None),
    ("rdma_create_id failed", _K.RDMA_CM, None),
    ("rdma_create_event_channel failed", _K.RDMA_CM, None),
    ("Failed to create RDMA CM", _K.RDMA_CM, lazy_compile(r"Failed to create RDMA CM[^\n]{0,60}")),
    ("Failed to connect RDMA CM", _K.RDMA_CM, lazy_compile(r"Failed to connect RDMA CM[^\n]{0,60}")),
    ("Failed to connect through RDMA CM", _K.RDMA_CM, None),
    ("Failed to resolve RDMA CM route", _K.RDMA_CM, None),
    ("Failed to accept RDMA CM connection", _K.RDMA_CM, None),
    ("Failed to get RDMA CM address", _K.RDMA_CM, lazy_compile(r"Failed to get RDMA CM address[^\n]{0,120}")),
    # the event loop's errors and the setup around it (perftest_communication.c, perftest_resources.c)
    ("RDMA CM event error", _K.RDMA_CM, None),
    ("Failed to get RDMA CM event", _K.RDMA_CM, None),
    ("Failed to handle RDMA CM event", _K.RDMA_CM, None),
    ("Failed to ACK RDMA CM event", _K.RDMA_CM, None),
    ("Failed to bind RDMA CM address", _K.RDMA_CM, None),
    ("Failed to listen on RDMA CM server", _K.RDMA_CM, None),
    ("Failed to resolve RDMA CM address", _K.RDMA_CM, lazy_compile(r"Failed to resolve RDMA CM address[^\n]{0,40}")),
    ("Failed to destroy RDMA CM", _K.RDMA_CM, lazy_compile(r"Failed to destroy RDMA CM[^\n]{0,60}")),
    ("Failed to disconnect RDMA CM connection", _K.RDMA_CM, None),
    ("Failed to find matching CM node", _K.RDMA_CM, None),
    ("Failed to initialize RDMA contexts", _K.RDMA_CM, None),
    ("Failed to establish UD connection for RDMA CM", _K.RDMA_CM, None),
    ("Failed to allocate RDMA CM nodes", _K.RDMA_CM, None),
    ("Failed to allocate memory for RDMA CM nodes", _K.RDMA_CM, None),
    ("Failed to reallocate RDMA CM nodes", _K.RDMA_CM, None),
    ("Failed to send UD connection parameters", _K.RDMA_CM, None),
    ("Failed to set qp_timeout", _K.RDMA_CM, None),
    ("Problem in resolving basic address and port", _K.RDMA_CM, None),
    ("Received ", _K.RDMA_CM, lazy_compile(r"Received [0-9]{1,9} times ADDR_ERROR(?: - aborting)?")),
    ("unexpected CM event", _K.RDMA_CM, lazy_compile(r"unexpected CM event -?[0-9]{1,9}")),
    ("Unexpected CM event", _K.RDMA_CM, lazy_compile(r"Unexpected CM event[^\n]{0,24}?-?[0-9]{1,9}")),
    ("Set TOS option failed", _K.RDMA_CM, None),
    ("Set RDMA-CM Ack timeout option failed", _K.RDMA_CM, None),
    ("Unable to create the resources needed by comm struct", _K.RDMA_CM, None),
    ("No IB devices found", _K.NO_DEVICE, None),
    ("Did not detect devices", _K.NO_DEVICE, None),
    ("Unable to find the Infiniband/RoCE device", _K.DEVICE_NOT_FOUND, None),
    ("IB device ", _K.DEVICE_NOT_FOUND, lazy_compile(r"IB device (?P<device>[^\s]{1,64}) not found")),
    ("Couldn't get context for the device", _K.DEVICE_CONTEXT, None),
    ("Couldn't open IB device", _K.DEVICE_CONTEXT,
     lazy_compile(r"Couldn't open IB device(?: (?P<device>[^\s]{1,64}))?")),
    ("ibv_open_device", _K.DEVICE_CONTEXT, lazy_compile(r"ibv_open_device[^\n]{0,120}")),
    ("Couldn't get device attributes", _K.DEVICE_ATTRIBUTES, None),
    ("Failed to query device attributes", _K.DEVICE_ATTRIBUTES, None),
    ("Unable to query port", _K.DEVICE_ATTRIBUTES, lazy_compile(r"Unable to query port [0-9]{1,9} attributes")),
    ("Couldn't set the link layer", _K.LINK_CONFIG, None),
    ("Couldn't set Eth MTU", _K.LINK_CONFIG, None),
    ("Couldn't allocate MR", _K.ALLOCATE_MR, lazy_compile(r"Couldn't allocate MR(?: with error=-?[0-9]{1,9})?")),
    ("Failed to create MR", _K.ALLOCATE_MR, None),
    ("failed to create mr", _K.ALLOCATE_MR, None),
    ("Couldn't create null MR", _K.ALLOCATE_MR, None),
    ("Couldn't create IB resources", _K.IB_RESOURCES, None),
    ("Couldn't allocate PD", _K.IB_RESOURCES, None),
    ("Couldn't create CQ", _K.IB_RESOURCES, None),
    ("Couldn't create a receiver CQ", _K.IB_RESOURCES, None),
    ("Failed to create CQs", _K.IB_RESOURCES, None),
    ("Couldn't create SRQ", _K.IB_RESOURCES, None),
    ("Couldn't create XRC", _K.IB_RESOURCES, lazy_compile(r"Couldn't create XRC[^\n]{0,40}")),
    ("Couldn't allocate context", _K.IB_RESOURCES, None),
    ("Couldn't allocate work buf", _K.IB_RESOURCES, None),
    ("Failed to create QP", _K.CREATE_QP, None),
    ("Unable to create QP", _K.CREATE_QP, None),
    ("Couldn't create rdma new QP", _K.CREATE_QP, lazy_compile(r"Couldn't create rdma new QP[^\n]{0,80}")),
    ("Couldn't create rdma old QP", _K.CREATE_QP, lazy_compile(r"Couldn't create rdma old QP[^\n]{0,80}")),
    ("Requested QP size might be too big", _K.CREATE_QP, None),
    ("Failed to modify QP", _K.MODIFY_QP,
     lazy_compile(r"Failed to modify QP (?:(?P<qp>[0-9]{1,10}) )?to (?P<state>RTR|RTS|INIT)")),
    ("Unable to Connect the HCA's through the link", _K.HCA_CONNECT, None),
    ("Failed to create AH", _K.HCA_CONNECT, None),
    ("Completion with error at", _K.COMPLETION_ERROR,
     lazy_compile(r"Completion with error at (?P<where>client|server)")),
    ("Completion with wc_flags mismatch", _K.COMPLETION_ERROR, None),
    ("completion with Error in", _K.COMPLETION_ERROR, None),
    ("Poll send CQ error status=", _K.COMPLETION_ERROR,
     lazy_compile(r"Poll send CQ error status=(?P<status>[0-9]{1,4}) qp (?P<qp>[0-9]{1,10})")),
    ("Bad wc status", _K.COMPLETION_ERROR, lazy_compile(r"Bad wc status[^\n]{0,40}")),
    # the detail line of a completion error, folded into the failure before it
    ("Failed status", None,
     lazy_compile(r"Failed status(?:-(?P<text>[^()\n]{1,80}) \((?P<code>[0-9]{1,4})\)| (?P<code2>[0-9]{1,4}))"
                r": wr_id (?P<wr>-?[0-9]{1,19}) syndrom (?P<syn>0x[0-9a-fA-F]{1,8})")),
    ("Failed to complete run_iter", _K.RUN,
     lazy_compile(r"Failed to complete run_iter[^\s]{0,40} function successfully")),
    ("poll CQ failed", _K.RUN, None),
    ("Poll Receive CQ failed", _K.RUN, None),
    ("Couldn't post send", _K.RUN, None),
    ("Couldn't post recv", _K.RUN, None),
    ("Can't produce a report", _K.RUN, None),
    ("Couldn't init GPU context", _K.GPU, lazy_compile(r"Couldn't init GPU context(?:: -?[0-9]{1,9})?")),
    ("No such device ID", _K.GPU, lazy_compile(r"No such device ID \(-?[0-9]{1,9}\) exists in system")),
    ("cuDeviceGetByPCIBusId failed", _K.GPU, None),
    ("DMA-BUF is not supported", _K.GPU, None),
    ("Failed to load CUDA runtime library", _K.GPU, None),
    ("Parser function exited with Error", _K.USAGE, None),
]
# The rules by the first word of their literal: a line is searched for each word with
# str.find (a regex alternation of ~100 literals costs ~100 steps a character), and the
# rules of a word are tried only where it occurs.
_BY_WORD: dict[str, list[tuple[str, PerftestFailureKind | None, re.Pattern[str] | None]]] = {}
for _rule in _RULES:
    _BY_WORD.setdefault(_rule[0].split(" ")[0], []).append(_rule)
# a line that reads as an error although no rule knows it
_ERRORISH = lazy_compile(r"[ \t]*+(?:Couldn't|Unable to|Failed|failed|Can't|Error|ERROR)\b")


def parse_perftest(text: str) -> PerftestRun:
    """Parse an ib_write_bw / ib_read_bw / ib_send_bw log: one side or both interleaved."""
    p = _Parser()
    explaining = recording_now()
    lines = pasted_lines(text)
    if lines and ends_mid_line(text):  # a text that ends mid-line: its last word may be cut (a GID, an errno's text)
        lines[-1] = without_cut_end(lines[-1])[0]
    for number, raw in enumerate(lines, 1):
        if p.carry:  # the start of a stdout line that a stderr warning cut (see _Parser.line)
            raw, p.carry = p.carry + raw, ""
        name = p.line(raw[:MAX_LINE])
        if name is None and raw.strip():
            p.unread(number, raw[:MAX_LINE])
        if explaining and raw.strip():  # `hc parse --explain`: which of _LINE_HANDLERS read it
            recorded(Line(number=number, raw=raw[:MAX_LINE], text=raw[:MAX_LINE]), name)
    return p.result(text)


class _Parser:
    """Line by line; mutable state here, frozen facts at the end."""

    def __init__(self) -> None:
        self.titles = 0
        self.title: str | None = None
        self.verb: TestVerb = "unknown"
        self.bidir: bool | None = None
        self.fields: dict[str, str] = {}
        self.devices: dict[str, None] = {}
        self.unit: str | None = None
        self.unit_now: str | None = None
        self.layout: re.Pattern[str] | None = None
        self.section = "main"
        self.rows: dict[str, list[PerftestRow]] = {"main": [], "local": [], "remote": []}
        self.addresses: list[dict] = []
        self.failures: list[dict] = []
        self.warnings: dict[str, None] = {}
        self.cpu_conflict = False
        self.server = False
        self.client = False
        self.waiting = False
        self.carry = ""
        self.peak_not_measured = False  # " WARNING: BW peak won't be measured in this run."
        self.crashed: str | None = None
        self.cuda_pci: dict[int, str] = {}
        self.cut_row: PerftestCutRow | None = None  # a row cut short, while no line has come after it
        self.cuda_device: int | None = None
        self.cuda_name: str | None = None
        self.command_devices: dict[str, None] = {}  # the `-d` of each perftest command line pasted
        self.unrecognized = UnrecognizedLines()

    def unread(self, number: int, text: str) -> None:
        """A line no handler read: counted, unless it is a shell prompt (the paste's, no tool's)."""
        noise = "prompt" if is_prompt(unindented(text)) else ""
        self.unrecognized.note(Line(number=number, raw=text, text=text, noise=noise))

    # ------------------------------------------------------------- one line

    def line(self, line: str) -> str | None:
        """Read one line; the name of what read it (None: nothing, a blank or a border)."""
        cut = self._without_cpu_warning(line)
        if cut is None:
            return "cpu-warning"
        stripped = cut.strip()
        if not stripped:
            return None
        if stripped.startswith("---") or not stripped.strip("*"):  # the table's rule, the waiting box's
            return "border"
        self.cut_row = None  # a line after it: the short row was no cut at the text's end
        for name, handler in _LINE_HANDLERS:  # the first that reads the line takes it
            if handler(self, cut, stripped):
                return name
        if self._failures(cut, stripped):
            return "failure"
        return "cpu-warning" if cut != line else None  # a warning cut out of a line no handler read

    def _without_cpu_warning(self, line: str) -> str | None:
        """The line without a "Conflicting CPU frequency" warning; None when it was carried.

        get_cpu_mhz() warns on stderr (unbuffered) while the table is printed, and stdout
        into a pipe is written a 4 KiB buffer at a time: the warning can land after half a
        row, whose rest is the next line. Cut it out, join the halves.
        """
        if "Conflicting CPU frequency" not in line:
            return line
        m = _CPU_CONFLICT.search(line)
        self.cpu_conflict = True
        self.warnings[m.group(0) if m else "Conflicting CPU frequency values detected"] = None
        if not m:
            return line.replace("Conflicting CPU frequency", "")
        before, after = line[: m.start()], line[m.end():]
        if before.strip() and not after.strip():
            self.carry = before[:MAX_LINE]
            return None
        return before + after

    def _title(self, line: str, stripped: str) -> bool:
        m = _TITLE.match(line)
        if not m:
            return False
        self.titles += 1
        self.section = "main"
        if self.title is None:
            self.title = " ".join(stripped.split())
            self.verb = _VERBS[m.group("verb")]
            self.bidir = m.group("bidir") is not None
        return True

    def _table_header(self, line: str, stripped: str) -> bool:
        if "#bytes" not in line:
            return False
        h = _HEADER.search(line)
        if h:
            self.unit_now = h.group("unit")
            self.unit = self.unit or self.unit_now
            self.layout = self._layout(line)
        return True

    def _banner_fields(self, line: str, stripped: str) -> bool:
        if not _FIELD_LINE.match(line):
            return False
        self._fields(line)
        return True

    def _address(self, line: str, stripped: str) -> bool:
        m = _ADDRESS.match(line)
        if m:
            self.addresses.append({"role": m.group("role"), "lid": int(m.group("lid"), 16),
                                   "qpn": int(m.group("qpn"), 16), "psn": int(m.group("psn"), 16)})
            return True
        m = _GID.match(line)
        if m:
            if self.addresses and "gid" not in self.addresses[-1]:
                self.addresses[-1]["gid"] = m.group("gid")
            return True
        return False

    def _side_or_section(self, line: str, stripped: str) -> bool:
        if stripped.startswith("Local results:"):
            self.section = "local"
        elif stripped.startswith("Remote results:"):
            self.section = "remote"
        elif any(w in line for w in _WAITING):
            self.server = self.waiting = True
        elif "Please run the same command with the IB/RoCE interface IP" in line or "Client closed connection" in line:
            self.server = True
        else:
            return False
        return True

    def _warning(self, line: str, stripped: str) -> bool:
        m = _SAMPLED_CPU.search(line)
        if m:
            self.warnings[m.group(0)] = None
            return True
        m = _WARNING.search(line)
        if m:
            text = m.group("text").strip()
            self.warnings[text] = None
            self.peak_not_measured = self.peak_not_measured or text.startswith(_PEAK_NOT_MEASURED)
            return True
        return False

    def _errno(self, line: str, stripped: str) -> bool:
        """"ERRNO: Bad address." (strerror of the call that failed) is the detail of the
        failure printed before it; alone, it is a failure of its own."""
        m = _ERRNO.match(line)
        if not m:
            return False
        text = m.group("text").strip().rstrip(".").strip()[:120]
        if self.failures and "errno_text" not in self.failures[-1]:
            self.failures[-1]["errno_text"] = text
            return True
        self.failures.append({"kind": _K.OTHER, "message": clip(stripped, 200), "errno_text": text})
        return True

    def _command(self, line: str, stripped: str) -> bool:
        """The perftest command line pasted with its output (`# ib_write_bw -d rocep133s0f0
        192.168.125.211`, `user@h:~# ib_write_bw -d mlx5_0 ...`, a wrapper's `run ib_write_bw
        server on h: sudo taskset -c 28 ib_write_bw -d mlx5_3 ...`): the device its `-d` /
        `--ib-dev` names, the run's device where no banner names one (a run that failed before
        its banner)."""
        if "ib_" not in line or _COMMAND.search(line) is None:
            return False
        device = command_device(line)
        if device:
            self.command_devices.setdefault(device, None)
        return True

    def _cm_event(self, line: str, stripped: str) -> bool:
        """"Event: RDMA_CM_EVENT_REJECTED; error: -111." after "RDMA CM event error:": the
        event and its status, folded into that failure (its message then names the event);
        alone (a paste that cut the line before), a failure of its own."""
        m = _CM_EVENT.match(line) if "RDMA_CM_EVENT_" in line else None
        if m is None:
            return False
        event, status = m.group("event"), int(m.group("status"))
        detail = {"cm_event": event, "cm_status": status, "cm_status_text": cm_status_text(event, status)}
        last = self.failures[-1] if self.failures else None
        if last is not None and last["message"].startswith("RDMA CM event error") and "cm_event" not in last:
            last.update(detail, message=clip(f"{last['message']} {m.group(0).strip()}", 200))
        else:
            self.failures.append({"kind": _K.RDMA_CM, "message": clip(stripped, 200), **detail})
        return True

    def _cuda(self, line: str, stripped: str) -> bool:
        """--use_cuda's preamble: "CUDA device 0: PCIe address is 02:00", "Picking device
        No. 0", "[pid = 56, dev = 0] device name = [NVIDIA A30-8C]"."""
        if "device" not in line:
            return False
        m = _CUDA_LISTED.match(line)
        if m:
            self.cuda_pci.setdefault(int(m.group("n")), m.group("pci"))
            return True
        m = _CUDA_PICKED.match(line) or _CUDA_NAME.match(line)
        if not m:
            return False
        self.cuda_device = int(m.group("n")) if self.cuda_device is None else self.cuda_device
        if "name" in m.re.groupindex:
            self.cuda_name = self.cuda_name or m.group("name").strip()
        return True

    def _crash(self, line: str, stripped: str) -> bool:
        """The shell's word for the signal that killed perftest ("Segmentation fault (core
        dumped)"): it follows a failure perftest did not survive (an MR it could not
        register, then a NULL dereference), so it is kept beside the failures."""
        m = _CRASH.search(line)
        if not m:
            return False
        self.crashed = self.crashed or m.group(0)
        return True

    def _layout(self, header: str) -> re.Pattern[str]:
        cols = ["size", "iters", "peak", "avg", "rate"]
        if "#sl" in header:
            cols.insert(1, "sl")
        if "BW Port1" in header:
            cols += ["p1", "p1rate", "p2", "p2rate"]
        return _row_pattern(tuple(cols))

    def _row_line(self, line: str, stripped: str) -> bool:
        """A result row under a table header: True when it was one."""
        if self.unit_now is None or not stripped[0].isdigit() or len(stripped) > _FIELD_LINE_MAX:
            return False
        m = self.layout.fullmatch(stripped)  # type: ignore[union-attr]
        if m is None:
            return self._cut_row(stripped)
        factor = _UNIT_TO_GBITS[self.unit_now]
        peak = float(m.group("peak"))
        self.rows[self.section].append(PerftestRow(
            size_bytes=int(m.group("size")),
            iterations=int(m.group("iters")),
            bw_avg_gbits=round(float(m.group("avg")) * factor, 6),
            msg_rate_mpps=float(m.group("rate")),
            bw_peak_gbits=round(peak * factor, 6) if peak > 0 and not self.peak_not_measured else None,
            sl=int(m.group("sl")) if "sl" in m.re.groupindex else None,
            cpu_util_percent=float(m.group("cpu")) if m.group("cpu") else None,
        ))
        return True

    def _cut_row(self, stripped: str) -> bool:
        """A row with fewer numbers than its header's columns (at least its size and
        iterations): held as `cut_row` until another line shows it was not the text's end."""
        words = stripped.split()
        columns = len(self.layout.groupindex) - 1  # type: ignore[union-attr]  # less --cpu_util's
        if not 2 <= len(words) < columns or not all(_ROW_NUMBER.fullmatch(w) for w in words):
            return False
        if len(words[0]) > 19 or len(words[1]) > 19 or not (words[0] + words[1]).isdigit():
            return False
        self.cut_row = PerftestCutRow(size_bytes=int(words[0]), iterations=int(words[1]))
        return True

    def _fields(self, line: str) -> None:
        """`Key : value` pairs, two to a line. A value is one word (OFF, mlx5_0, 4096[B]), so
        the next field starts after it: pairs split by tabs, by the spaces a paste turned
        them into, or by a single space where a forum squeezed whitespace, all read alike."""
        rest = line[:_FIELD_LINE_MAX].strip()
        while rest:
            key, sep, after = rest.partition(":")
            if not sep:
                return
            words = after.split(maxsplit=1)
            rest = words[1] if len(words) > 1 else ""
            key = " ".join(key.split())
            key = "GID index" if key == "Gid index" else key  # older builds: "Gid index"
            value = words[0][:64] if words else ""
            if key == "Device" and value:
                self.devices.setdefault(value, None)
            if value and key not in self.fields:
                self.fields[key] = value

    def _failures(self, line: str, stripped: str) -> bool:
        """The errors in a line, each a failure (a completion's `Failed status` detail folded
        into the one before it); True when the line held one."""
        hits: list[tuple[int, int, str, PerftestFailureKind | None, re.Match[str] | None]] = []
        for word, rules in _BY_WORD.items():
            at = line.find(word)
            while at != -1:
                for literal, kind, pattern in rules:  # the first rule that matches here
                    if line.startswith(literal, at):
                        detail = pattern.match(line, at) if pattern else None
                        if pattern is None or detail is not None:  # a literal without its fields is not this error
                            hits.append((at, detail.end() if detail else at + len(literal), literal, kind, detail))
                            break
                at = line.find(word, at + len(word))
        hits.sort(key=lambda h: h[0])
        found: list[tuple[str, PerftestFailureKind | None, re.Match[str] | None]] = []
        end = 0
        for start, stop, literal, kind, detail in hits:
            if start >= end:  # one error's text is never read as the start of another
                found.append((literal, kind, detail))
                end = stop
        if not found:
            if _ERRORISH.match(line):
                self.failures.append({"kind": _K.OTHER, "message": clip(stripped, 200)})
                return True
            return False
        for literal, kind, detail in found:
            if kind is None:  # "Failed status ...": the detail of the completion error before it
                self._completion_status(detail)  # type: ignore[arg-type]
                continue
            # the line as printed when it holds this error alone; the error's own part when more
            message = clip(stripped, 200) if len(found) == 1 else detail.group(0).strip() if detail else literal
            self.failures.append(self._failure(kind, message, detail))
        return True

    def _failure(self, kind: PerftestFailureKind, message: str, m: re.Match[str] | None) -> dict:
        f: dict = {"kind": kind, "message": message}
        groups = m.groupdict() if m else {}
        if kind is _K.CONNECT:
            self.client = True
            host, colon, port = groups.get("target", "").rpartition(":")
            if colon and _INT.fullmatch(port) and len(port) <= 5:
                f["host"], f["port"] = host, int(port)
            elif groups.get("target"):
                f["host"] = groups["target"]
        elif kind is _K.LISTEN:
            self.server = True
            if groups.get("port"):
                f["port"] = int(groups["port"])
        elif kind is _K.RDMA_CM and message.startswith("Unable to connect (retries"):
            self.client = True
        if groups.get("device"):
            f["device"] = groups["device"]
        if groups.get("qp"):
            f["qp"] = int(groups["qp"])
        if groups.get("state"):
            f["qp_state"] = groups["state"]
        if groups.get("where"):
            f["where"] = groups["where"]
        if groups.get("status"):
            f["wc_status"] = int(groups["status"])
            f["wc_status_text"] = WC_STATUS.get(f["wc_status"])
        return f

    def _completion_status(self, m: re.Match[str]) -> None:
        code = int(m.group("code") or m.group("code2"))
        detail = {"wc_status": code, "wc_status_text": (m.group("text") or "").strip() or WC_STATUS.get(code),
                  "vendor_syndrome": m.group("syn").lower(), "wr_id": int(m.group("wr"))}
        for f in reversed(self.failures):
            if f["kind"] is _K.COMPLETION_ERROR and "vendor_syndrome" not in f:
                f.update(detail)
                return
        self.failures.append({"kind": _K.COMPLETION_ERROR, "message": m.group(0).strip(), **detail})

    # ------------------------------------------------------------- the facts

    def _command_device(self) -> str | None:
        """The device the pasted command lines name, where they name one only."""
        return next(iter(self.command_devices)) if len(self.command_devices) == 1 else None

    def result(self, text: str) -> PerftestRun:
        rows = {k: _dedupe(v) if self.titles >= 2 else tuple(v) for k, v in self.rows.items()}
        failures = _dedupe([PerftestFailure(**{k: v for k, v in f.items() if v is not None}) for f in self.failures])
        alone = self.titles == 0 and not any(rows.values()) and not failures
        # the box's device or link type, or a QP's address: perftest's own facts, read alone too
        if alone and not (self.fields.get("Device") or self.fields.get("Link type") or self.addresses):
            if self.waiting:
                raise ParseError("perftest: a server waiting for its client, and nothing after: no banner, "
                                 "result or error")
            raise ParseError("perftest: no test banner (\"RDMA_Write BW Test\"), result row or error "
                             f"(starts with {clip(text.strip(), 60)!r})")
        if self.titles >= 2 or (self.server and self.client):
            side: Side = "both"
        elif self.server:
            side = "server"
        elif self.client or self.titles:
            # the server prints "Waiting for client to connect" before its banner
            # (write_bw.c), so a banner without it is the client's
            side = "client"
        else:
            side = "unknown"
        fields = self.fields
        return PerftestRun(
            test=self.verb,
            side=side,
            title=self.title,
            bidirectional=self.bidir,
            device=fields.get("Device") or self._command_device(),
            devices=tuple(self.devices),
            qps=_int(fields.get("Number of qps")),
            transport=fields.get("Transport type"),
            connection=fields.get("Connection type"),
            link_type=fields.get("Link type"),
            mtu=_int(fields.get("Mtu", "").split("[")[0]),
            gid_index=_int(fields.get("GID index")),
            data_exchange=fields.get("Data ex. method"),
            rdma_cm_qps={"ON": True, "OFF": False}.get(fields.get("rdma_cm QPs", "")),
            tx_depth=_int(fields.get("TX depth")),
            cq_moderation=_int(fields.get("CQ Moderation")),
            post_list=_int(fields.get("Post List")),
            unit=self.unit,
            rows=rows["main"],
            local_rows=rows["local"],
            remote_rows=rows["remote"],
            addresses=_dedupe([PerftestAddress(**a) for a in self.addresses]),
            failures=failures,
            warnings=tuple(self.warnings),
            cpu_frequency_conflict=self.cpu_conflict,
            peak_not_measured=self.peak_not_measured or _no_peak_measured(rows["main"]),
            crashed=self.crashed,
            cut_row=self.cut_row,
            cuda_device=self.cuda_device,
            cuda_device_name=self.cuda_name,
            cuda_pci=self.cuda_pci.get(self.cuda_device) if self.cuda_device is not None else None,
            unrecognized=self.unrecognized.frozen_or_nothing(),
            incomplete=BOX_ALONE if alone else None,
        )


BOX_ALONE = ("the parameters box or the QP addresses alone, no test title, result row or error: which test "
             "ran and how it ended are not known")

# _Parser.line's handlers, in the order they are tried; a line none takes is searched for errors
_LINE_HANDLERS = (
    ("row", _Parser._row_line), ("title", _Parser._title), ("table-header", _Parser._table_header),
    ("banner-fields", _Parser._banner_fields), ("address", _Parser._address),
    ("side-or-section", _Parser._side_or_section), ("warning", _Parser._warning), ("errno", _Parser._errno),
    ("cm-event", _Parser._cm_event),
    ("cuda", _Parser._cuda), ("crash", _Parser._crash), ("command", _Parser._command),
)


# a perftest binary as a word of a command line (by a path too), an option or the line's end after
# it: never its name in a message (`ib_write_bw: error while loading shared libraries`)
_COMMAND = lazy_compile(r"(?:^|[\s/])ib_(?:write|read|send|atomic)_(?:bw|lat)(?=[ \t]|$)")
_COMMAND_WORDS = 64  # words of a command line read after the binary's name


def command_device(line: str) -> str | None:
    """The device a perftest command line's `-d DEV` / `--ib-dev=DEV` / `--ib-dev DEV` names,
    after the last perftest binary on the line (a wrapper names it before its own command);
    None where it names none."""
    end = -1
    for m in _COMMAND.finditer(line):  # the last binary's
        end = m.end()
    if end < 0:
        return None
    words = line[end:].split(None, _COMMAND_WORDS)[:_COMMAND_WORDS]
    for i, word in enumerate(words):
        if word.startswith("--ib-dev="):
            return word.partition("=")[2] or None
        if word.startswith("-d") and len(word) > 2:  # getopt's `-dmlx5_0`
            return word[2:]
        if word in ("-d", "--ib-dev") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            return words[i + 1]
    return None


_ROW_INT = r"[0-9]{1,19}"
_ROW_FLOAT = r"[0-9]{1,20}(?:\.[0-9]{1,20})?+"  # never "inf" or "nan": a broken measurement is no row
_ROW_NUMBER = lazy_compile(_ROW_FLOAT)


@functools.lru_cache(maxsize=8)
def _row_pattern(cols: tuple[str, ...]) -> re.Pattern[str]:
    """A row of `cols`, whitespace between, and the --cpu_util column after them or not."""
    parts = [f"(?P<{c}>{_ROW_INT if c in ('size', 'iters', 'sl') else _ROW_FLOAT})" for c in cols]
    return re.compile(r"[ \t]++".join(parts) + rf"(?:[ \t]++(?P<cpu>{_ROW_FLOAT}))?[ \t]*+")


def _no_peak_measured(rows: tuple[PerftestRow, ...]) -> bool:
    return bool(rows) and all(r.bw_peak_gbits is None for r in rows)


def _int(value: str | None) -> int | None:
    return int(value) if value and _INT.fullmatch(value) and len(value) <= 9 else None


def _dedupe(items: list) -> tuple:
    """Drop exact repeats, keeping the first of each in order (server and client print the
    same rows, addresses swap sides, both may print the same error)."""
    seen: set = set()
    out = []
    for item in items:
        key = msgspec.structs.astuple(item)
        if key not in seen:
            seen.add(key)
            out.append(item)
    return tuple(out)


# ------------------------------------------------- ib_write_bw loopback on one node (facts)
#
# The deep tier runs a server and a client of ib_write_bw on the same node, per compute
# HCA port (healthcheck/probes/ib_write_bw.py); these are what it found, judged by the
# check bw.ib_write_bw (healthcheck/checks/bw.py).

# What a perftest failure says about the HCA. These kinds are the HCA (or its driver, or
# the GPU-direct path) refusing or breaking RDMA on this node: evidence against it. Every
# other kind (the TCP side channel, a device perftest cannot see, bad arguments, a CUDA
# library it cannot load, a line hc does not know) means the test could not run, which
# says nothing about the node. "Couldn't allocate MR" is the HCA's only with --use_cuda
# (the GPUDirect path); in host memory it is almost always RLIMIT_MEMLOCK.
HCA_FAILURE_KINDS = frozenset({
    PerftestFailureKind.DEVICE_CONTEXT, PerftestFailureKind.DEVICE_ATTRIBUTES, PerftestFailureKind.LINK_CONFIG,
    PerftestFailureKind.IB_RESOURCES, PerftestFailureKind.CREATE_QP, PerftestFailureKind.MODIFY_QP,
    PerftestFailureKind.HCA_CONNECT, PerftestFailureKind.COMPLETION_ERROR, PerftestFailureKind.RUN,
})


def is_hca_failure(failure: PerftestFailure, use_cuda: bool) -> bool:
    """Whether `failure` is evidence against the HCA (see HCA_FAILURE_KINDS)."""
    if failure.kind is PerftestFailureKind.ALLOCATE_MR:
        return use_cuda
    return failure.kind in HCA_FAILURE_KINDS


def loopback_floor(per_hca_min_gbps: float | None, rate_fraction: float, bidirectional: bool,
                   rate_gbps: float | None) -> tuple[float | None, str]:
    """The Gb/s an HCA port's loopback must reach, and the setting that gave it.

    `per_hca_min_gbps` as set; otherwise NVIDIA's rule (ngc_multinode_perf): rate_fraction
    x the port's sysfs rate, x2 for a bidirectional run (both directions are summed).
    (None, "rate_fraction") when the rate is unknown and no floor is set.
    """
    if per_hca_min_gbps is not None:
        return per_hca_min_gbps, "per_hca_min_gbps"
    if rate_gbps is None or rate_gbps <= 0:
        return None, "rate_fraction"
    return round(rate_fraction * rate_gbps * (2 if bidirectional else 1), 6), "rate_fraction"


class IbWriteBwAttempt(msgspec.Struct, frozen=True, omit_defaults=True):
    """One loopback run on one HCA port: an ib_write_bw server and its client, both on this node."""

    server_argv: tuple[str, ...]
    client_argv: tuple[str, ...]
    env: dict[str, str] = {}  # the variables hc set for both sides, echoed in the report
    # the measuring side's rows: the client's (it measures a write), the server's where it printed none
    rows: tuple[PerftestRow, ...] = ()
    avg_gbits: float | None = None  # BW average at the size run; None: no row
    # the client's, then the server's (the server's first when the client only found no server listening)
    failures: tuple[PerftestFailure, ...] = ()
    client_returncode: int | None = None
    server_returncode: int | None = None
    hung: bool = False  # the client was killed at its whole timeout (bandwidth.ib_write_bw.timeout_s)
    cut_short: bool = False  # killed at a timeout the run's deadline had shortened: no sign of a hang
    server_timed_out: bool = False  # the server was killed at its timeout (no client came, or it hung)
    connect_tries: int = 1  # client starts: it is started again while perftest says "Couldn't connect"
    duration_s: float = 0.0
    unreadable: str | None = None  # output hc could not read as perftest's (no banner, row or error)
    output_tail: str = ""  # the end of what each side printed: evidence for a finding

    def hca_failures(self, use_cuda: bool) -> tuple[PerftestFailure, ...]:
        return tuple(f for f in self.failures if is_hca_failure(f, use_cuda))


class IbWriteBwHca(msgspec.Struct, frozen=True, omit_defaults=True):
    """Every loopback attempt on one compute HCA port, how it was run and what its error counters did."""

    device: str  # mlx5_0
    port: int  # the HCA port (-i)
    tcp_port: int  # the side channel's port (-p): port_base + this port's index
    rate_gbps: float | None = None  # the port's rate from sysfs (or ibstat)
    link_layer: str | None = None
    numa_node: int | None = None  # /sys/class/infiniband/DEV/device/numa_node; None: unknown (-1)
    pinned: bool = False  # both sides ran under numactl -N/-m of the HCA's node
    gpu: int | None = None  # --use_cuda=<this> (CUDA_DEVICE_ORDER=PCI_BUS_ID)
    notes: tuple[str, ...] = ()  # how it was run where that was not the plan (unpinned, GPU by index)
    floor_gbps: float | None = None  # the floor the probe re-ran against (the check derives its own)
    floor_setting: str = ""  # per_hca_min_gbps | rate_fraction
    attempts: tuple[IbWriteBwAttempt, ...] = ()
    # error counters that rose during the test (after - before, sysfs names), and why they are unknown
    counter_rises: dict[str, int] = {}
    counters_unknown: str | None = None
    not_run: str | None = None  # why hc could not run the test on this port (no GPU for --use_cuda, ...)

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"


class IbWriteBwLoopback(msgspec.Struct, frozen=True, omit_defaults=True):
    """ib_write_bw loopback on every Active compute HCA port of a node.

    No `hcas` and no `skipped` means the node has no compute HCA; `missing` says that
    perftest was not found and where hc looked (nothing was run).
    """

    size_bytes: int = 0
    bidirectional: bool = False
    use_cuda: bool = False
    hcas: tuple[IbWriteBwHca, ...] = ()
    skipped: tuple[str, ...] = ()  # compute ports not Active ("mlx5_2/1: Down/Polling"): ib.port_state's
    missing: str | None = None
