"""Kernel log text -> NVIDIA Xid (GPU) and SXid (NVSwitch) events.

Input: the kernel ring buffer or a log that holds it, one message a line, in any of
the shapes that reach a health check (dmesg raw, -T, --time-format iso, -x, -r; the
journal's short, short-iso and short-monotonic; syslog; bare messages). Line framing and
timestamps are parsers/kernlog.py's: this module reads what a message says.

The Xid message itself is `NVRM: Xid (PCI:<bus id>): <code>, pid=<pid>, name=<comm>,
<text>`; older drivers omit `name=`, and `pid`/`name` may be `'<unknown>'`. Drivers
before Xid 79 existed (and some since) print `NVRM: GPU at PCI:0000:91:00: GPU has
fallen off the bus.` instead: that becomes a `legacy` Xid 79, as do `NVRM: GPU at
0000:06:00.0 has fallen off the bus.` and the probe-time `NVRM: The NVIDIA GPU
0000:5d:00.0 (PCI ID: 10de:2330) installed in this system has fallen off the bus and is
not responding to commands.` (one line, or three where dmesg/journalctl print a
multi-line message as continuation lines). A GPU the driver could not bring up
(`NVRM: GPU 0000:41:00.0: RmInitAdapter failed!`), `NVRM: A GPU crash dump has been
created.` and a driver line naming a status that means the GPU needs a reset
(`Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] (0x00000062) ...`, also
NV_ERR_GPU_IS_LOST, NV_ERR_GPU_IN_FULLCHIP_RESET: `reset-required`, its `error` the status)
and the driver's NVLink code saying a step failed (`NVRM: knvlinkDiscoverPostRxDetLinks_GH100:
Getting peer0's postRxDetLinkMask failed!`: `nvlink-failed`, a fact the xid check leaves to the
NVLink check's link state) become `faults` (no Xid number either); a crash dump, an assertion
and an NVLink failure name no GPU, so they are given the bus id of the NVIDIA line just before
them, when there is one. NVSwitch errors are
`nvidia-nvswitchN: SXid (PCI:<bus id>): <code>, <Fatal|Non-fatal>, <text>`, followed by
`Severity ...` and `Data {...}` lines carrying the same code.

A multi-line driver message (dmesg and journalctl print its further lines indented under
the first one's stamp, each with `NVRM: ` again; a paste may take that indent off: an
unstamped `NVRM:` line after a stamped one whose sentence has not ended) is read as one message; its evidence
`line` is its first line. Besides the events: `caused by previous Xid N` is `caused_by`;
Blackwell's NVLink5 Xids (144-150: `RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x... ...)`)
give `unit`, `severity`, `link` and the `status` words; `nvidia: probe of <bus> failed`
is an `init-failed` fault at stage `probe`, with the `(PCI ID: 10de:2901)` the driver
named for that bus; `The NVIDIA probe routine was not called for N device(s).` (another
driver owns them) is one naming no bus, with `devices` N, and `No NVIDIA graphics adapter
probed!` a `none-probed` fact (a node without NVIDIA GPUs prints it too); `The NVIDIA probe
routine failed for N device(s).` adds nothing to the per-GPU line before it; the load
banner gives `driver_version`; GSP firmware errors logged without an Xid number are
`gsp_errors` (parsers/nvrm_load.py) and PCIe AER errors `aer`
(parsers/pcie_aer.py), with `aer_recovery` (a device that "can't recover" after one: often
the GPU behind the port that logged the error), facts beside the Xids that no check judges
yet. The driver's other error families, read from its source rather than samples, are
parsers/nvrm_errors.py's table (pattern -> kind and meaning): each a fault of its row's kind,
with its `meaning`. A MIG-attributed Xid (`Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 94, ...`)
gives its bus and `gpu_instance`, `compute_instance`.
A bus id redacted in a paste (`PCI:...`, `0000:XX:00.0`) keeps its event with
`pci_bus_id` None; a kernel line another tool quoted (`"NVRM: Xid ...\\n"`) is read
without the quote.

Times are those kernlog.split_prefix reads off each line (an explicit UTC offset
honoured, zoneless stamps taken as UTC, raw `[uptime]` stamps a wall-clock time only
when the caller gives `boot_time`); a timestamp that cannot be a real date leaves
`time` unset rather than failing the parse.

Other lines are ignored. An empty log is valid (no events); a non-empty text in which
no line looks like a kernel log raises ParseError. Nothing else is ever raised.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.gpu_common import normalize_pci
from healthcheck.parsers.kernel_tasks import HUNG_MARKER, SEGFAULT_MARKER, HungTask, Segfault, TaskReader
from healthcheck.parsers.kernlog import Stamp, split_prefix
from healthcheck.parsers.lines import (
    NOTHING_UNREAD,
    Line,
    Unrecognized,
    UnrecognizedLines,
    code_block_indents,
    continues_bare,
    continues_indented,
    cut_end_note,
    drop_quote,
    join_continuation,
    quoted_paste,
    quoted_reply,
    read_line,
    recorded,
    recording_now,
    unquoted,
    without_cut_end,
    word_wrapped,
)
from healthcheck.parsers.nvrm_errors import (
    DRIVER_MISMATCH,
    INIT_CAUSE,
    INIT_FAILED,
    NONE_PROBED,
    PROBE,
    RESET_REQUIRED,
    DriverError,
    DriverErrorLine,
    driver_error,
)
from healthcheck.parsers.nvrm_load import (
    PROBE_MARKER,
    GspError,
    device_id,
    driver_version,
    gsp_error,
    probe_failure,
)
from healthcheck.parsers.pcie_aer import REDACTABLE_BUS, AerEvent, AerReader, AerRecovery
from healthcheck.parsers.unread import note_unread


class XidEvent(msgspec.Struct, frozen=True, omit_defaults=True):
    code: int  # 79; the legacy "GPU has fallen off the bus" line without a code -> 79, legacy=True
    pci_bus_id: str | None  # normalize_pci(...) -> "0000:19:00.0"
    message: str  # the text after "pid=..., name=...," (or after the code)
    line: str  # the raw line (evidence for tickets)
    pid: int | None = None  # None for pid='<unknown>'
    process: str | None = None  # None for name=<unknown>
    time: float | None = None  # epoch seconds (UTC) when the line has a wall-clock timestamp
    uptime_s: float | None = None  # seconds since boot when the line has "[12345.678901]"
    legacy: bool = False
    caused_by: int | None = None  # "... caused by previous Xid 149": the Xid this one follows from
    # NVLink5 (Blackwell, Xid 144-150): "<unit> <Fatal|Nonfatal> XC0 i0 Link <n> (<status words>)"
    unit: str | None = None  # "NETIR", "RLW_RXPIPE", "SAW_MVB"
    severity: str | None = None  # "Fatal" / "Nonfatal" as printed
    link: int | None = None  # the NVLink the driver names; -1 where it names none
    status: list[str] = []  # the status words, hex as printed
    pci_device_id: str | None = None  # "10de:2901" when the driver names it (a GPU lost at probe)
    # the MIG instance the driver attributes the Xid to, `Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 94, ...`
    gpu_instance: int | None = None
    compute_instance: int | None = None


class SXidEvent(msgspec.Struct, frozen=True, omit_defaults=True):
    code: int  # 20034
    message: str
    line: str
    switch: str | None = None  # "nvidia-nvswitch1"
    pci_bus_id: str | None = None
    severity: str | None = None  # "Fatal" / "Non-fatal"; None on "Severity ..."/"Data {...}" lines
    time: float | None = None
    uptime_s: float | None = None


class GpuFault(msgspec.Struct, frozen=True, omit_defaults=True):
    """A GPU failure the driver logs without an Xid number."""

    # INIT_FAILED ("RmInitAdapter failed!", a failed probe, "The NVIDIA probe routine was not called for
    # N device(s)": no GPU named, `devices` N), NONE_PROBED ("No NVIDIA graphics adapter probed!": a fact,
    # which a node without NVIDIA GPUs prints too; the GPU count judges a node's missing GPUs),
    # CRASH_DUMP ("A GPU crash dump ..."),
    # RESET_REQUIRED (an assertion naming NV_ERR_RESET_REQUIRED: the GPU takes no work until reset), or
    # NVLINK_FAILED (the driver's NVLink code says a step failed: a link that did not train; a fact
    # beside the link state `nvidia-smi nvlink -s` gives, which the NVLink check judges); and the
    # driver's other messages nvrm_errors.DRIVER_ERRORS reads (INIT_FAILED, RESET_REQUIRED, NONE_PROBED,
    # and the facts DRIVER_MISMATCH and INIT_CAUSE), each with its row's `meaning`
    kind: str
    pci_bus_id: str | None
    message: str
    line: str
    time: float | None = None
    uptime_s: float | None = None
    stage: str | None = None  # PROBE: the driver refused the GPU when it probed it
    pci_device_id: str | None = None  # "10de:2901" when the driver named it for this bus
    error: str | None = None  # RESET_REQUIRED: the driver's status name, "NV_ERR_RESET_REQUIRED"
    devices: int | None = None  # INIT_FAILED at PROBE naming no GPU: the devices the driver did not bind
    meaning: str | None = None  # a nvrm_errors.DRIVER_ERRORS row's: what the driver's message says


CRASH_DUMP = "crash-dump"
NVLINK_FAILED = "nvlink-failed"


# the faults no check judges: facts beside the ones that are (a link that did not train: the NVLink
# check judges the links' state; no adapter probed: a node without NVIDIA GPUs says it too; a client's
# libraries of another version: maybe a container's own; a bring-up step that failed: the
# `RmInitAdapter failed!` after it is what is judged)
UNJUDGED_FAULTS = frozenset({NVLINK_FAILED, NONE_PROBED, DRIVER_MISMATCH, INIT_CAUSE})


class KernelGpuLog(msgspec.Struct, frozen=True, omit_defaults=True):
    xids: list[XidEvent]
    sxids: list[SXidEvent]
    gpu_uuids: dict[str, str] = {}  # pci_bus_id -> "GPU-b6c3..." from "NVRM: GPU at PCI:...: GPU-..." lines
    # pci_bus_id -> the board's serial ("1653723052734") the driver logs beside an Xid: what an RMA names
    gpu_serials: dict[str, str] = {}
    lines: int = 0  # lines parsed
    faults: list[GpuFault] = []
    driver_version: str | None = None  # from the driver's load banner ("NVRM: loading NVIDIA UNIX ...  580.159.04")
    gsp_errors: list[GspError] = []  # GSP firmware errors logged without an Xid number
    aer: list[AerEvent] = []  # PCIe AER errors (any device: facts beside the Xids, never a verdict here)
    aer_recovery: list[AerRecovery] = []  # how recovery from them went, per device (a GPU that "can't recover")
    hung_tasks: list[HungTask] = []  # `INFO: task nvidia-smi:N blocked for more than 120 seconds.` (facts)
    segfaults: list[Segfault] = []  # `python[N]: segfault at ... in libnccl.so.2[...]` (facts)
    # lines nothing read (another driver's, another program's; omitted when none): in a whole
    # kernel log most of its lines, so `hc parse` shows how many and the first few
    unrecognized: Unrecognized = NOTHING_UNREAD
    incomplete: str | None = None  # why what was read is partial: the text ends mid-line (its last word unread)
    # Set by the providers (not the parser): where the text came from, how many lines the
    # source gave before they were narrowed to the NVIDIA driver's, and the window kept.
    source: str | None = None  # "/dev/kmsg", "dmesg", "journalctl -k -b", "file /var/log/kern.log"
    source_lines: int | None = None
    since: float | None = None  # epoch seconds; None: since boot
    window_note: str | None = None  # why the window is not the one asked for, if it is not
    # /proc/sys/kernel/random/boot_id when the log was read (set by the providers): the same Xid in two
    # boots is a recurrence after a reboot, which the history counts (orchestrate/escalate.py)
    boot_id: str | None = None


class XidSummary(msgspec.Struct, frozen=True, omit_defaults=True):
    """All the events of one Xid code on one GPU: a flood of 629 lines is one fact."""

    code: int
    pci_bus_id: str | None
    count: int
    first_time: float | None
    last_time: float | None
    first_line: str
    processes: list[str]  # distinct process names, in the order first seen


# --- messages --------------------------------------------------------------------------

# The comma after the code is required: every driver prints one, and a capture cut in
# mid-line ("...): 4" of "...): 48, ...") must not report a different Xid.
_XID = lazy_compile(r"NVRM: Xid \((?P<pci>[^)]{0,64})\):\s*(?P<code>\d{1,9}),\s*(?P<rest>.*)", re.ASCII)
_PID = lazy_compile(r"pid=(?:'<unknown>'|<unknown>|'?(?P<pid>\d{1,10})'?|[^,\s]{0,64})\s*(?:,\s*|$)", re.ASCII)
_NAME = lazy_compile(r"name=(?P<name>[^,]{0,256}?)\s*(?:,\s*|$)")
_SXID = lazy_compile(
    r"(?:(?P<switch>nvidia-nvswitch\d{1,4}):\s*)?"
    r"SXid \((?P<pci>[^)]{0,64})\):\s*(?P<code>\d{1,9}),\s*(?P<rest>.*)",
    re.ASCII,
)
# a MIG-attributed Xid's bus is followed by its GPU instance and compute instance: src/nvidia/src/
# kernel/gpu/rc/kernel_rc.c "NVRM: Xid (PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u): %d, pid=%s, ..." and
# "... GPU-I:%02u): ..." (515.43.04 .. 535.288.01; XID_PRINT_WITH_ATTR's, 570.211.01 .. 595.45.04): the
# bus is what comes before them
_MIG_ATTRIBUTION = lazy_compile(r"\s{1,4}GPU-I:(?P<gi>\d{1,4})(?:\s{1,4}GPU-CI:(?P<ci>\d{1,4}))?\s*$", re.ASCII)
_SEVERITY = lazy_compile(r"(?P<sev>fatal|non-fatal|nonfatal|non fatal)\s*(?:,\s*|$)", re.IGNORECASE)
# a bus id, or one redacted in a paste ("PCI:...", "0000:XX:00.0"): the event stays, its bus None
_PCI_TEXT = r"(?:PCI:)?(?P<pci>" + REDACTABLE_BUS + ")"
# "NVRM: GPU at PCI:0000:91:00: GPU has fallen off the bus." / "NVRM: GPU 0000:91:00.0: GPU has
# fallen off the bus." / older "NVRM: GPU at 0000:06:00.0 has fallen off the bus."
_FELL_OFF = lazy_compile(r"NVRM: GPU (?:at )?" + _PCI_TEXT + r":?\s{1,16}(?:GPU\s{1,16})?has fallen off the bus\.?")
# probe time: "NVRM: The NVIDIA GPU 0000:5d:00.0 (PCI ID: 10de:2330) installed in this system has
# fallen off the bus and is not responding to commands." (on one line or on up to three)
_THE_GPU = lazy_compile(r"NVRM: The NVIDIA GPU " + _PCI_TEXT)
_FALLEN = "fallen off the bus"
_CONTINUATION_LINES = 3  # the driver splits that message over at most three lines
_INIT_FAILED = lazy_compile(r"NVRM: (?:GPU (?:at )?" + _PCI_TEXT + r":?\s{1,16})?RmInitAdapter failed")
_CRASH_DUMP = "NVRM: A GPU crash dump has been created"
# the driver bound none of the GPUs it was loaded for, naming none: another driver (nouveau)
# owns them (`NVRM: The NVIDIA probe routine was not called for 3 device(s).`, field/issues-6), or
# it found none (`NVRM: No NVIDIA graphics adapter probed!`, which a node with no NVIDIA GPU prints too)
_NOT_CALLED = lazy_compile(r"NVRM: The NVIDIA probe routine was not called for (?P<devices>\d{1,4}) device\(s\)",
                         re.ASCII)
_NONE_PROBED = "NVRM: No NVIDIA graphics adapter probed"
# the driver's probe ran and failed, naming no GPU (`NVRM: The NVIDIA probe routine failed for 1
# device(s).`, after the GPU it lost at probe, field/issues): the GPU a line just before named, if any
_PROBE_FAILED = lazy_compile(r"The NVIDIA probe routine failed for \d{1,4} device\(s\)", re.ASCII)
# a driver status named in brackets: `NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required
# [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874`
_NV_ERR = lazy_compile(r"\[(?P<error>NV_ERR_[A-Z0-9_]{1,48})\]", re.ASCII)
# the statuses that say the GPU takes no more work until it is reset: what the driver's GSP
# RPC path returns once GSP met a fatal error, while the GPU is in a full-chip reset, and
# once it is lost from the bus (the driver's kernel_gsp.c); any other status is no fault here
RESET_ERRORS = frozenset({"NV_ERR_RESET_REQUIRED", "NV_ERR_GPU_IN_FULLCHIP_RESET", "NV_ERR_GPU_IS_LOST"})
# the driver's NVLink code saying a step failed, with no Xid number: `NVRM:
# knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!` (links found
# no peer at discovery, field/issues-5). The function is the KernelNvlink object's (`knvlink`, a
# `_GH100`-style HAL suffix) or the NVLink core library's (`nvlink`); an optional `GPUn `
# before it, as the driver's other per-GPU messages print
_NVLINK_FAILED = lazy_compile(
    r"NVRM: (?:GPU\d{1,3} )?(?P<what>k?nvlink[A-Za-z0-9_]{1,96}: [^\n]{0,300}?\bfail(?:ed|ure)\b[^\n]{0,200})",
    re.ASCII,
)
_GPU_AT = lazy_compile(r"NVRM: (?:GPU (?:at )?|Xid \()" + _PCI_TEXT)  # any driver line naming a GPU
_CRASH_DUMP_REACH = 20  # lines back a crash dump may borrow a GPU's bus id from
_UUID = lazy_compile(r"NVRM: GPU at " + _PCI_TEXT + r":\s+(?P<uuid>GPU-[0-9A-Fa-f-]{8,64})")
# the board's serial, as the driver logs it with an Xid: `NVRM: GPU 0000:91:00.0: GPU serial number
# is 1653723052734.` names its GPU; `NVRM: GPU Board Serial Number: 1653723052734` (empty on some
# boards) comes right after the `NVRM: GPU at PCI:...: GPU-...` line naming it
_SERIAL_OF = lazy_compile(r"NVRM: GPU " + _PCI_TEXT + r":\s{1,16}GPU serial number is (?P<serial>[0-9A-Za-z]{1,32})")
_BOARD_SERIAL = lazy_compile(r"NVRM: GPU Board Serial Number:(?:\s{1,16}(?P<serial>[0-9A-Za-z]{1,32}))?")
_CAUSED_BY = lazy_compile(r"caused by previous Xid (?P<code>\d{1,9})", re.ASCII)
_NVLINK5 = lazy_compile(
    r"(?P<unit>[A-Z][A-Z0-9_]{1,31}) (?P<severity>Fatal|Nonfatal|Non-fatal) XC\d{1,3} i\d{1,3} "
    r"(?:Link (?P<link>-?\d{1,3})\b(?:\s{0,8}\((?P<words>[0-9A-Fa-fx ]{0,200}))?|Link$)",
    re.ASCII,
)
# "on link 14(0x0, ...)", "link 3": a link an NVLink Xid before NVLink5 names in its words
_LINK_NAMED = lazy_compile(r"\b[Ll]ink (?P<link>\d{1,3})(?![\d.:])", re.ASCII)
_HEX_WORD = lazy_compile(r"0x[0-9A-Fa-f]{1,16}", re.ASCII)
_STATUS_WORDS = 16
_NORMAL_PCI = lazy_compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")


def parse_kernel_log(
    text: str, *, boot_time: float | None = None, year: int | None = None
) -> KernelGpuLog:
    """Every Xid and SXid event in a kernel log, in the order logged.

    boot_time: epoch seconds of this boot, to turn raw "[uptime]" stamps into times.
    year: the year of syslog/journal "short" timestamps, which print none (default: the
    current year, or the one before when that would put a line in the future).
    """
    if not isinstance(text, str):  # a caller bug, but parsers only ever raise ParseError
        raise ParseError(f"kernel log: expected text, got {type(text).__name__}")
    given, (text, cut) = text, without_cut_end(text)  # a paste that ends mid-line: `Xid ...: 4` may be 45's
    lines = text.splitlines()
    read = _Read(lines, boot_time, year)
    quoted, reply = quoted_paste(lines), quoted_reply(lines)
    indents = code_block_indents([drop_quote(line) for line in lines] if reply else lines)
    read.reply = reply
    for number, raw in enumerate(lines):
        if not _worth_reading(raw) and not read.expects(number, raw):  # the common case, kept cheap
            if not read.looks_like_log:
                read.looks_like_log = split_prefix(raw, boot_time, year)[0].prefixed or _mentions_kernel(raw)
            read.told(number, raw, None)
            continue
        # the line layer takes off a launcher's label (`srun -l dmesg`), colour codes
        # (`dmesg --color=always`), CRLF, a quoted paste's ` \`; kernlog reads the stamps
        for piece in read_line(number + 1, raw, stamps=False, quoted=quoted, reply=reply, indent=indents[number]):
            read.piece(number, raw, piece.text)
    read.flush()
    if not read.looks_like_log and given.strip():
        raise ParseError(
            "kernel log: no line looks like kernel log output (no timestamp prefix, "
            f"'NVRM:', 'kernel:' or 'nvidia'); starts with {text.strip()[:60]!r}"
        )
    return msgspec.structs.replace(read.log(), incomplete=cut_end_note(cut)) if cut else read.log()


_MARKERS = ("NVRM:", "SXid", "AER", "PCIe Bus Error", PROBE_MARKER, HUNG_MARKER, SEGFAULT_MARKER)


def _worth_reading(raw: str) -> bool:
    return any(marker in raw for marker in _MARKERS)


_JOINED_LINES = 8  # continuation lines joined to one driver message at most
_MARKER = "NVRM:"  # what each continuation line of a driver message starts with again
_BARE_HEAD = "NVRM: Xid"  # an Xid line with no stamp or label before it: a paste's, its continuations bare too
_QUOTED_MARKERS = ("NVRM:", "SXid")  # where a message another tool quoted starts
# an NVLink5 Xid cut after its link, and the status words a word wrap moved onto the next line
_LINK_AT_END = lazy_compile(r"(?:Fatal|Nonfatal|Non-fatal) XC\d{1,3} i\d{1,3} Link -?\d{1,3}$", re.ASCII)
_STATUS_OPENS = lazy_compile(r"\(0x[0-9A-Fa-f]{1,16}\b", re.ASCII)


class _Message:
    """A driver message being read: its first line, and the continuation lines after it."""

    def __init__(self, number: int, raw: str, text: str) -> None:
        self.number, self.raw, self.text = number, raw, text
        self.last = number  # the line number of its newest line
        self.indent = len(text) - len(text.lstrip())
        self.joined = 0
        # an Xid pasted without its stamp: the lines the driver split it onto come bare too
        self.bare = text.lstrip().startswith(_BARE_HEAD)
        # a stamp (or a host) before its `NVRM:`: continuation lines a paste took the indent off
        # start at `NVRM:` with none (`unindented`)
        self.stamped = not self.bare and not text.lstrip().startswith(_MARKER) and _BARE_HEAD not in text

    def takes(self, number: int, text: str) -> bool:
        """Whether `text` continues this message: dmesg and journalctl print a multi-line
        kernel message's further lines indented under its stamp, each with "NVRM: " again
        (lines.continues_indented); a paste's word wrap moves an NVLink5 Xid's status words
        onto the next line (`wraps`)."""
        if number != self.last + 1 or self.joined >= _JOINED_LINES:
            return False
        if self.wraps(text) or self.continues_bare(text) or self.unindented(text):
            return True
        return continues_indented(self.indent, text, _MARKER) and not text.lstrip().startswith("NVRM: Xid")

    def unindented(self, text: str) -> bool:
        """`text` continues this stamped message though a paste took its indent off: it starts
        at `NVRM:` with no stamp while the message so far ends no sentence (field/issues-6's
        `NVRM: This can occur when a driver such as: ` / `NVRM: nouveau, rivafb, nvidiafb or
        rivatv ` / `NVRM: was loaded and obtained ownership of the NVIDIA device(s).`)."""
        return (self.stamped and text.startswith(_MARKER) and not text.startswith(_BARE_HEAD)
                and not self.text.rstrip().endswith((".", "!")))

    def continues_bare(self, text: str) -> bool:
        """`text` is the next line of an Xid pasted without stamps, which the driver split
        over at most _CONTINUATION_LINES lines (lines.continues_bare: real, issue 20's
        field set: an Xid 31's `MMU Fault: ...` and `Fault is of type ...` lines)."""
        return self.bare and self.joined < _CONTINUATION_LINES - 1 and continues_bare(text, _MARKERS)

    def wraps(self, text: str) -> bool:
        """`text` is the `(0x... ...)` status words of this NVLink5 Xid, which ends at its
        `Link N` (a word wrap in an issue or a chat moved them: real, issue 20's field set)."""
        return self.joined == 0 and word_wrapped(self.text, text, head_ends=_LINK_AT_END, tail_starts=_STATUS_OPENS)

    def join(self, number: int, text: str) -> None:
        if self.wraps(text) or self.continues_bare(text):
            self.text = f"{self.text.rstrip()} {text.strip()}"
        else:
            self.text = join_continuation(self.text, text, _MARKER)
        self.last, self.joined = number, self.joined + 1


class _Read:
    """What the kernel log said so far; `piece` reads one line's text (`line` in each
    event is the line as logged: a continued message's first line)."""

    def __init__(self, lines: list[str], boot_time: float | None, year: int | None) -> None:
        self.lines, self.boot_time, self.year = lines, boot_time, year
        self.xids: list[tuple[int, XidEvent]] = []
        self.legacy: list[tuple[int, XidEvent]] = []
        self.sxids: list[SXidEvent] = []
        self.uuids: dict[str, str] = {}
        self.serials: dict[str, str] = {}
        self.faults: list[GpuFault] = []
        self.refused_at_probe: set[str | None] = set()  # the buses of the init-failed faults at probe
        self.gsp: list[GspError] = []
        self.versions: list[tuple[int, str]] = []  # (line number, driver version) of each load banner
        self.device_ids: dict[str | None, str] = {}  # bus id -> "10de:2901", as the driver named them
        self.aer = AerReader()
        self.tasks = TaskReader()
        self.pending: _Message | None = None
        self.explaining = recording_now()  # `hc parse --explain`: what read each line, told to lines.recorded
        self.unread = UnrecognizedLines()  # lines nothing read: the other drivers' and programs' lines
        self.last_gpu: tuple[int, str | None] = (-_CRASH_DUMP_REACH - 1, None)  # (line number, bus id)
        self.looks_like_log = False
        self.reply = False  # a markdown reply's paste (lines.quoted_reply): `> ` is the reply's, not the log's

    def expects(self, number: int, raw: str) -> bool:
        """Whether line `number` may belong to what is being read though it names no marker:
        an AER event's detail line, or a driver message's wrapped words."""
        if self.aer.expects_detail(number):
            return True
        pending = self.pending
        return pending is not None and pending.last == number - 1 and ("(0x" in raw[:256] or pending.bare)

    def near_gpu(self, number: int) -> str | None:
        return self.last_gpu[1] if number - self.last_gpu[0] <= _CRASH_DUMP_REACH else None

    def told(self, number: int, raw: str, name: str | None) -> None:
        """What read line `number` (0-based; None: nothing): told to `hc parse --explain`,
        and a line nothing read counted in `unrecognized`."""
        if name is None:  # a markdown reply's `>` alone is its blank line, no line of the log's
            note_unread(self.unread, number + 1, drop_quote(raw) if self.reply else raw)
        if self.explaining and raw.strip():
            recorded(Line(number=number + 1, raw=raw, text=raw), name)

    def piece(self, number: int, raw: str, text: str) -> None:
        if self.pending is not None and self.pending.takes(number, text):
            self.pending.join(number, text)
            self.told(number, raw, "continuation")
            return
        self.flush()
        if "NVRM:" in text:
            self.pending = _Message(number, raw, text)  # read (and told) when it is complete
            return
        self.told(number, raw, self._other(number, raw, text))

    def _other(self, number: int, raw: str, text: str) -> str | None:
        """A line that opens no driver message: an AER event, a probe failure, an SXid."""
        stamp, body = split_prefix(text, self.boot_time, self.year)
        self.looks_like_log = self.looks_like_log or stamp.prefixed or _mentions_kernel(raw)
        if self.aer.read(number, body, raw, stamp):
            return "aer"
        probe = probe_failure(body)
        if probe is not None:
            self._fault(GpuFault(kind=INIT_FAILED, pci_bus_id=probe.pci_bus_id, message=probe.message, line=raw,
                                 time=stamp.time, uptime_s=stamp.uptime_s, stage=PROBE,
                                 pci_device_id=self.device_ids.get(probe.pci_bus_id)))
            return "probe-failure"
        return self.message(number, raw, text) if "SXid" in body else self.tasks.read(body, raw, stamp)

    def flush(self) -> None:
        if self.pending is not None:
            pending, self.pending = self.pending, None
            self.told(pending.number, pending.raw, self.message(pending.number, pending.raw, pending.text))

    def message(self, number: int, line: str, text: str) -> str | None:
        """A driver message read; what it was (None: no event of a kind hc keeps)."""
        stamp, body = split_prefix(text, self.boot_time, self.year)
        self.looks_like_log = self.looks_like_log or stamp.prefixed or _mentions_kernel(line)
        if "NVRM:" not in body and "SXid" not in body:
            return None
        body = unquoted(body, _QUOTED_MARKERS)
        return self._event(number, line, body, stamp) or self._numberless(number, line, body, stamp)

    def _event(self, number: int, line: str, body: str, stamp: Stamp) -> str | None:
        """An Xid, an SXid or a GPU lost without an Xid number: which (None: none of them)."""
        event = _xid(body, line, stamp)
        if event is not None:
            self.xids.append((number, event))
            self.last_gpu = (number, event.pci_bus_id)
            return "xid"
        sxid = _sxid(body, line, stamp)
        if sxid is not None:
            self.sxids.append(sxid)
            return "sxid"
        self._note_device(body)
        lost = _fallen_off(body, line, stamp) or _not_responding(body, line, stamp, self.lines, number)
        if lost is not None:
            if lost.pci_device_id is not None:
                self.device_ids[lost.pci_bus_id] = lost.pci_device_id
            self.legacy.append((number, lost))
            self.last_gpu = (number, lost.pci_bus_id)
            return "gpu-lost"
        return None

    def _note_device(self, body: str) -> None:
        """The device id in "The NVIDIA GPU <bus> (PCI ID: 10de:2901) installed in this system ...",
        whatever the driver goes on to say about that GPU: the evidence a later probe failure names."""
        m = _THE_GPU.search(body)
        named = device_id(body) if m else None
        if m and named:
            self.device_ids[_bus_id(m.group("pci"))] = named

    def _note_named(self, number: int, body: str) -> None:
        """The GPU a driver line names (`NVRM: GPU <bus>`, an Xid's, `The NVIDIA GPU <bus>`): the
        one a message after it that names none is about."""
        named = _GPU_AT.search(body) or _THE_GPU.search(body)
        if named is not None:
            self.last_gpu = (number, _bus_id(named.group("pci")))

    def _numberless(self, number: int, line: str, body: str, stamp: Stamp) -> str | None:
        """A crash dump, a failed init, the load banner, a GSP error, a GPU's UUID: which."""
        if _CRASH_DUMP in body:
            self.faults.append(GpuFault(kind=CRASH_DUMP, pci_bus_id=self.near_gpu(number),
                                        message="A GPU crash dump has been created.", line=line, time=stamp.time,
                                        uptime_s=stamp.uptime_s))
            return "crash-dump"
        self._note_named(number, body)
        named = _GPU_AT.search(body)
        nearby = self.near_gpu(number)
        failed = (_init_failed(body, line, stamp, nearby) or _not_bound(body, line, stamp, nearby)
                  or _reset_required(body, line, stamp, nearby) or _nvlink_failed(body, line, stamp, nearby))
        if failed is not None:
            return self._fault(failed)
        read = driver_error(body)
        if read is not None:
            return self._driver_error(read, line, body, stamp, nearby)
        version = driver_version(body)
        if version is not None:
            self.versions.append((number, version))
            return "driver-banner"
        gsp = gsp_error(body)
        if gsp is not None:
            message, gpu, bus = gsp
            self.gsp.append(GspError(message=message, line=line, gpu=gpu, pci_bus_id=bus, time=stamp.time,
                                     uptime_s=stamp.uptime_s, driver_version=self.version_at(number)))
            return "gsp-error"
        return self._identity(number, body) or ("gpu-named" if named is not None else None)

    def _fault(self, fault: GpuFault) -> str:
        """Keep a fault logged without an Xid number; what it was. The driver's summary of a
        failed probe (`_PROBE_FAILED`) is the same failure as the kernel's `nvidia: probe of
        <bus> failed` before it, where that line was logged: read, not kept twice."""
        if _PROBE_FAILED.search(fault.message) and fault.pci_bus_id in self.refused_at_probe:
            return "probe-summary"
        self.faults.append(fault)
        if fault.stage == PROBE:
            self.refused_at_probe.add(fault.pci_bus_id)
        return fault.kind

    def _driver_error(self, read: DriverErrorLine, line: str, body: str, stamp: Stamp,
                      nearby: str | None) -> str:
        """A message nvrm_errors.DRIVER_ERRORS reads, kept as a fault of its row's kind; what
        it was. Its GPU is the one it prints, else the one a driver line just before named; a
        summary row repeating an init failure already kept (`rm_init_adapter failed` after
        `RmInitAdapter failed!`) is read, not kept twice."""
        row = read.row
        bus = read.pci_bus_id or nearby if row.gpu else None
        if row.summary and any(_summarized(row, bus, f) for f in self.faults):
            return "init-summary"
        return self._fault(GpuFault(kind=row.kind, pci_bus_id=bus, message=read.message, line=line,
                                    time=stamp.time, uptime_s=stamp.uptime_s, stage=row.stage,
                                    pci_device_id=device_id(body) or self.device_ids.get(bus), meaning=row.meaning))

    def _identity(self, number: int, body: str) -> str | None:
        """A GPU's UUID or its board's serial kept by its bus id: which (None: neither)."""
        if _record_uuid(body, self.uuids):
            return "gpu-uuid"
        return "gpu-serial" if _record_serial(body, self.serials, self.near_gpu(number)) else None

    def version_at(self, number: int) -> str | None:
        """The driver version loaded when line `number` was logged: the banner before it."""
        return self.versions[-1][1] if self.versions and self.versions[-1][0] < number else None

    def log(self) -> KernelGpuLog:
        first = self.versions[0][1] if self.versions else None  # a banner after the errors is the same load's
        gsp = [e if e.driver_version else msgspec.structs.replace(e, driver_version=first) for e in self.gsp]
        return KernelGpuLog(xids=_merge_legacy(self.xids, self.legacy), sxids=self.sxids, gpu_uuids=self.uuids,
                            gpu_serials=self.serials,
                            lines=len(self.lines), faults=self.faults,
                            driver_version=self.versions[-1][1] if self.versions else None,
                            gsp_errors=gsp, aer=self.aer.events(), aer_recovery=self.aer.recovery,
                            hung_tasks=self.tasks.hung, segfaults=self.tasks.segfaults,
                            unrecognized=self.unread.frozen_or_nothing())


def _summarized(row: DriverError, bus: str | None, fault: GpuFault) -> bool:
    """Whether `fault` is the failure a summary row repeats: any init failure for the driver's
    count at probe (`None of the NVIDIA devices were initialized.`, the old closed drivers'
    `NVIDIA init module failed!`), and for those a driver that found no GPU at all (`No NVIDIA
    graphics adapter found!`: the module fails because of it, a fact); for `rm_init_adapter
    failed`, the `RmInitAdapter failed!` of its GPU (or one naming none) just before it."""
    if fault.kind == NONE_PROBED:  # the module failing because it found no GPU: not a GPU's failure
        return not row.gpu
    if fault.kind != INIT_FAILED:
        return False
    if row.stage == PROBE:
        return True
    return fault.stage is None and (bus is None or fault.pci_bus_id in (bus, None))


def _mentions_kernel(line: str) -> bool:
    return "NVRM:" in line or "kernel:" in line or "nvidia" in line


# --- messages --------------------------------------------------------------------------


def _bus_id(raw: str) -> str | None:
    """The parenthesised bus id, normalised; None when it is not a PCI address."""
    bus = normalize_pci(raw)
    return bus if _NORMAL_PCI.fullmatch(bus) else None


def _xid(body: str, line: str, stamp: Stamp) -> XidEvent | None:
    m = _XID.search(body)
    if not m:
        return None
    pid, process, message = _pid_name(m.group("rest") or "")
    cause = _CAUSED_BY.search(message)
    pci, mig = m.group("pci"), _MIG_ATTRIBUTION.search(m.group("pci"))
    return XidEvent(
        code=int(m.group("code")),
        pci_bus_id=_bus_id(pci[: mig.start()] if mig else pci),
        gpu_instance=int(mig.group("gi")) if mig else None,
        compute_instance=int(mig.group("ci")) if mig and mig.group("ci") else None,
        message=message,
        line=line,
        pid=pid,
        process=process,
        time=stamp.time,
        uptime_s=stamp.uptime_s,
        caused_by=int(cause.group("code")) if cause else None,
        **_nvlink(message),
    )


def _nvlink(message: str) -> dict[str, Any]:
    """The NVLink an Xid's message names: NVLink5's fields (`_nvlink5`), else the link of
    an older NVLink Xid (74: `NVLink: fatal error detected on link 14(0x0, ...)`)."""
    fields = _nvlink5(message)
    if fields or "NVLink" not in message:
        return fields
    m = _LINK_NAMED.search(message)
    return {"link": int(m.group("link"))} if m else {}


def _nvlink5(message: str) -> dict[str, Any]:
    """`RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 ...)` -> unit, severity, link, status.

    Blackwell's NVLink5 Xids (144-150) name the unit that saw the error, whether it is
    fatal, and the link (-1: none in particular); a capture cut before the status words
    still gives the rest; one that ends at `Link` (its number the word a cut text ended inside,
    not read) its unit and severity."""
    m = _NVLINK5.match(message)
    if not m:
        return {}
    words = _HEX_WORD.findall(m.group("words") or "")
    link = m.group("link")
    return {"unit": m.group("unit"), "severity": m.group("severity"), "link": None if link is None else int(link),
            "status": words[:_STATUS_WORDS]}


def _pid_name(rest: str) -> tuple[int | None, str | None, str]:
    """`pid=1248209, name=python3.10, Ch 00000008` -> (1248209, "python3.10", "Ch 00000008").

    Old drivers print no `name=`; `<unknown>` (quoted or not) means the driver did not
    know, which is None, not a process called "<unknown>".
    """
    pid: int | None = None
    process: str | None = None
    m = _PID.match(rest)
    if m:
        pid = int(m.group("pid")) if m.group("pid") else None
        rest = rest[m.end():]
    m = _NAME.match(rest)
    if m:
        name = m.group("name").strip().strip("'")
        process = None if name in ("", "<unknown>") else name
        rest = rest[m.end():]
    return pid, process, rest.strip()


def _sxid(body: str, line: str, stamp: Stamp) -> SXidEvent | None:
    m = _SXID.search(body)
    if not m:
        return None
    message = (m.group("rest") or "").strip()
    severity = None
    sev = _SEVERITY.match(message)
    if sev:
        severity = "Fatal" if sev.group("sev").lower() == "fatal" else "Non-fatal"
        message = message[sev.end():].strip()
    return SXidEvent(
        code=int(m.group("code")),
        message=message,
        line=line,
        switch=m.group("switch"),
        pci_bus_id=_bus_id(m.group("pci")),
        severity=severity,
        time=stamp.time,
        uptime_s=stamp.uptime_s,
    )


def _fallen_off(body: str, line: str, stamp: Stamp) -> XidEvent | None:
    m = _FELL_OFF.search(body)
    return _legacy_79(m.group("pci"), "GPU has fallen off the bus.", line, stamp) if m else None


def _not_responding(body: str, line: str, stamp: Stamp, lines: list[str], number: int) -> XidEvent | None:
    """The probe-time "The NVIDIA GPU ... has fallen off the bus and is not responding" message.

    dmesg and journalctl print a multi-line kernel message as continuation lines, and
    older drivers print it as three messages, so the words may be on the next lines: a
    bounded look ahead, which keeps the parse linear.
    """
    m = _THE_GPU.search(body)
    if not m:
        return None
    after = lines[number + 1 : number + 1 + _CONTINUATION_LINES]
    if _FALLEN not in body[m.end():] and not any(_FALLEN in nxt for nxt in after):
        return None
    lost = _legacy_79(m.group("pci"), "GPU has fallen off the bus and is not responding to commands.", line, stamp)
    named = device_id(body) or next((d for d in map(device_id, after) if d), None)
    return msgspec.structs.replace(lost, pci_device_id=named) if named else lost


def _legacy_79(pci: str, message: str, line: str, stamp: Stamp) -> XidEvent:
    """A GPU lost without an Xid number in the log, judged as the Xid it stands for (79)."""
    return XidEvent(code=79, pci_bus_id=_bus_id(pci), message=message, line=line, time=stamp.time,
                    uptime_s=stamp.uptime_s, legacy=True)


def _init_failed(body: str, line: str, stamp: Stamp, nearby: str | None) -> GpuFault | None:
    """`NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x62:0x40:2028)` (older drivers name no GPU)."""
    m = _INIT_FAILED.search(body)
    if not m:
        return None
    bus = _bus_id(m.group("pci")) if m.group("pci") else nearby
    return GpuFault(kind=INIT_FAILED, pci_bus_id=bus, message=body[m.start() + len("NVRM: "):].strip()[:200],
                    line=line, time=stamp.time, uptime_s=stamp.uptime_s)


def _not_bound(body: str, line: str, stamp: Stamp, nearby: str | None = None) -> GpuFault | None:
    """The driver bound none of the GPUs it was loaded for and names none of them: `The NVIDIA
    probe routine was not called for 3 device(s).` (another driver owns them: init-failed at
    probe, `devices` 3), `The NVIDIA probe routine failed for 1 device(s).` (init-failed at
    probe: the GPU `nearby` names, the one it lost just before, else none), `No NVIDIA graphics
    adapter probed!` (none-probed: a fact)."""
    if "NVRM: " not in body or " probe" not in body:
        return None
    failed = _PROBE_FAILED.search(body)
    if failed is not None:
        message = body[failed.start():].strip()[:300]
        return GpuFault(kind=INIT_FAILED, pci_bus_id=nearby, message=message, line=line, time=stamp.time,
                        uptime_s=stamp.uptime_s, stage=PROBE)
    m = _NOT_CALLED.search(body)
    at = body.find(_NONE_PROBED) if m is None else m.start()
    if at < 0:
        return None
    message = body[at + len("NVRM: "):].strip()[:300]
    if m is not None:
        return GpuFault(kind=INIT_FAILED, pci_bus_id=None, message=message, line=line, time=stamp.time,
                        uptime_s=stamp.uptime_s, stage=PROBE, devices=int(m.group("devices")))
    return GpuFault(kind=NONE_PROBED, pci_bus_id=None, message=message, line=line, time=stamp.time,
                    uptime_s=stamp.uptime_s)


def _reset_required(body: str, line: str, stamp: Stamp, nearby: str | None) -> GpuFault | None:
    """A driver line naming a status that means the GPU needs a reset (RESET_ERRORS), with
    no Xid number: `NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required
    [NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874`. It
    names no GPU: the bus is the one a driver line just before it named, if any."""
    m = _NV_ERR.search(body) if "NV_ERR_" in body else None
    if m is None or m.group("error") not in RESET_ERRORS:
        return None
    at = body.find("NVRM:")
    return GpuFault(kind=RESET_REQUIRED, pci_bus_id=nearby, message=body[at + len("NVRM:"):].strip()[:300],
                    line=line, time=stamp.time, uptime_s=stamp.uptime_s, error=m.group("error"))


def _nvlink_failed(body: str, line: str, stamp: Stamp, nearby: str | None) -> GpuFault | None:
    """The driver's NVLink code saying a step failed, with no Xid number (`_NVLINK_FAILED`).
    It names no bus: the one a driver line just before it named, if any."""
    m = _NVLINK_FAILED.search(body) if "nvlink" in body else None
    if m is None:
        return None
    return GpuFault(kind=NVLINK_FAILED, pci_bus_id=nearby, message=m.group("what").strip(), line=line,
                    time=stamp.time, uptime_s=stamp.uptime_s)


def _record_uuid(body: str, uuids: dict[str, str]) -> bool:
    """A GPU's UUID kept by its bus id; True when the line named one."""
    m = _UUID.search(body)
    bus = _bus_id(m.group("pci")) if m else None
    if m is None or bus is None:
        return False
    uuids[bus] = m.group("uuid")
    return True


def _record_serial(body: str, serials: dict[str, str], nearby: str | None) -> bool:
    """A board's serial kept by its GPU's bus id (`_SERIAL_OF`'s own, else `nearby`: the GPU
    the line before named); True when the line was a serial line. A serial of zeros, or none,
    is a board without one (a GeForce logs `0`): the line is read, nothing kept."""
    m = _SERIAL_OF.search(body)
    bus = _bus_id(m.group("pci")) if m else nearby
    if m is None:
        m = _BOARD_SERIAL.search(body)
    if m is None:
        return False
    serial = m.group("serial") or ""
    if bus is not None and serial.strip("0"):
        serials[bus] = serial
    return True


def _merge_legacy(
    xids: list[tuple[int, XidEvent]], legacy: list[tuple[int, XidEvent]]
) -> list[XidEvent]:
    """Add one legacy Xid 79 per GPU that has no explicit Xid 79, in log order.

    A current driver prints both the Xid 79 line and "GPU ... has fallen off the bus";
    an old one prints two legacy shapes for the same GPU. Either way it is one event.
    """
    seen = {event.pci_bus_id for _, event in xids if event.code == 79}
    kept: list[tuple[int, XidEvent]] = []
    for number, event in legacy:
        if event.pci_bus_id in seen:
            continue
        seen.add(event.pci_bus_id)
        kept.append((number, event))
    merged = sorted(xids + kept, key=lambda pair: pair[0])
    return [event for _, event in merged]


# --- helpers on parsed logs ------------------------------------------------------------


def since(log: KernelGpuLog, t: float) -> KernelGpuLog:
    """The events logged at or after epoch time t.

    Events without a time are kept: a raw "[uptime]" line read without boot_time, or a
    bare message, may be from a minute ago, and we cannot prove it is old. Dropping it
    could hide a fresh fault; keeping it at worst repeats an old one. A t that is not a
    finite number (NaN, inf) keeps every event: it must never hide them all.
    """
    if not math.isfinite(t):
        # NaN compares false with everything and +inf is after every event: either would
        # hide every event, so a window that is not a real time is no window at all
        return log
    return msgspec.structs.replace(
        log,
        xids=[e for e in log.xids if e.time is None or e.time >= t],
        sxids=[e for e in log.sxids if e.time is None or e.time >= t],
        faults=[e for e in log.faults if e.time is None or e.time >= t],
        gsp_errors=[e for e in log.gsp_errors if e.time is None or e.time >= t],
        aer=[e for e in log.aer if e.time is None or e.time >= t],
        aer_recovery=[e for e in log.aer_recovery if e.time is None or e.time >= t],
        hung_tasks=[e for e in log.hung_tasks if e.time is None or e.time >= t],
        segfaults=[e for e in log.segfaults if e.time is None or e.time >= t],
        gpu_uuids=dict(log.gpu_uuids),
        gpu_serials=dict(log.gpu_serials),
        since=t,
    )


def summarize(xids: list[XidEvent]) -> list[XidSummary]:
    """Fold a flood into one summary per (code, GPU), in the order first seen."""
    groups: dict[tuple[int, str | None], list[XidEvent]] = {}
    for event in xids:
        groups.setdefault((event.code, event.pci_bus_id), []).append(event)
    return [_summary(code, bus, events) for (code, bus), events in groups.items()]


def _summary(code: int, bus: str | None, events: list[XidEvent]) -> XidSummary:
    times = [e.time for e in events if e.time is not None]
    processes: list[str] = []
    for e in events:
        if e.process is not None and e.process not in processes:
            processes.append(e.process)
    return XidSummary(
        code=code,
        pci_bus_id=bus,
        count=len(events),
        first_time=min(times) if times else None,
        last_time=max(times) if times else None,
        first_line=events[0].line,
        processes=processes,
    )
