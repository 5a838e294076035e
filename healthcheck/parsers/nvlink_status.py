"""`nvidia-smi nvlink -s` (`nvlink --status`) text -> NvLinkStatus.

Input: one block per GPU, a title line then one line per link:

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5269b708-678a-b1a8-60f0-c90406537486)
         Link 0: 26.562 GB/s
         Link 1: <inactive>

A GPU without NVLink, or in MIG mode, or whose links are all down, gets a message line
instead of links ("Device does not have or support Nvlink", "Nvlink queries are not
supported for Devices in MIG mode", "NVML: Unable to retrieve NVLink information as all
links are inactive"): the first such message is kept in `unsupported`, and each GPU's in
its `message` (`all_links_inactive` where NVML says so), with the GPUs listed so far. A line of
"..." (an elision in a pasted capture) is skipped.

`nvidia-smi nvlink -e` (error counters: "Link 0: Replay Errors: 0") and `-gt d` / `-gt r`
(throughput: "Link 0: Data Tx: 1390774681 KiB") print per-link counters in the same
layout, one line per link and counter, 18 links a GPU on NVLink4/5. They are kept apart
from link status, in each GPU's `counters` (link -> name -> value, the name lower-case
with its unit: "replay_errors", "data_tx_kib"): a counter says nothing about whether its
link is up (an inactive link prints counters too), so counter output leaves `links`
empty, and `links` empty there means "not asked", never "no links". A counter's value is
an int, a float ("15e-255"), None (N/A) or the text printed. A status value that is
neither a speed nor "<inactive>" (a capture cut mid-line) is no link (up or down would be a
guess): the line is counted unread and `incomplete` says which link's state is not known.
Link lines pasted before any `GPU n:` title (a paste cut below it) are `unnamed`: their
links and counters, which GPU they are of not known, `incomplete` saying so.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.gpu_common import NvLink
from healthcheck.parsers.lines import (
    NOTHING_UNREAD,
    Unrecognized,
    UnrecognizedLines,
    is_elision,
    pasted_lines,
)
from healthcheck.parsers.unread import note_unread

# The rest of a GPU or Link line is taken whole and split in code: a lazy `.*?` followed
# by `\s*$` (or an optional UUID group) tried every split of a long run of spaces,
# quadratic in the line's length.
_GPU = re.compile(r"GPU (?P<index>\d{1,4}): (?P<rest>.*)$", re.ASCII)
_UUID = re.compile(r"\(UUID: (?P<uuid>[^)]{0,128})\)", re.ASCII)
_LINK = re.compile(r"Link (?P<link>\d{1,4}): (?P<value>.*)$", re.ASCII)
_SPEED = re.compile(r"(?P<gbps>\d{1,6}(?:\.\d{1,6})?) GB/s\b", re.ASCII)
# a counter's name, then its value and unit: "Data Tx: 1390774681 KiB", "Replay Errors: 0", "FEC Errors - 3: 0"
_COUNTER_NAME = re.compile(r"(?P<name>[A-Za-z][^:]{0,80}+): ")
_COUNTER_VALUE = re.compile(r"(?P<value>\S{1,64}+)(?: (?P<unit>[A-Za-z/]{1,8}+))?")
_INT = re.compile(r"-?[0-9]{1,20}")
_FLOAT = re.compile(r"-?[0-9]{1,20}(?:\.[0-9]{1,20})?(?:[eE][-+]?[0-9]{1,4})?")
_NOT_A_NAME = re.compile(r"[^a-z0-9]+")
_NO_VALUE = {"n/a", "[n/a]", "not supported", "[not supported]", "unknown", "unknown error"}

CounterValue = int | float | str | None
_UNSUPPORTED = re.compile(r"not (?:have or )?support|not supported", re.IGNORECASE)
# NVML's own message in place of a GPU's links: "NVML: Unable to retrieve NVLink information
# as all links are inactive" (a driver's answer, a fact about that GPU, not a parse failure)
_NVML_MESSAGE = re.compile(r"NVML: |(?:Unable|Failed) to ", re.IGNORECASE)
_ALL_INACTIVE = re.compile(r"all (?:nvlinks|links) are inactive", re.IGNORECASE)


class NvLinkCounters(msgspec.Struct, frozen=True):
    link: int
    counters: dict[str, CounterValue]  # "replay_errors": 0, "data_tx_kib": 1390774681, "effective_ber": 1.5e-254


class NvLinkGpu(msgspec.Struct, frozen=True, omit_defaults=True):
    index: int
    name: str  # "NVIDIA H100 80GB HBM3"
    uuid: str | None = None
    links: list[NvLink] = []  # nvlink -s; empty for counter output (nothing said about link state)
    message: str | None = None  # the driver's message in place of this GPU's links (NVML's, "not supported")
    all_links_inactive: bool = False  # NVML said so: no NVLink of this GPU is up
    # nvlink -e / -gt d / -gt r: each link's counters, in the order printed
    counters: list[NvLinkCounters] = []


class NvLinkUnnamed(msgspec.Struct, frozen=True, omit_defaults=True):
    """Link lines pasted before any `GPU n: ...` title: which GPU they are of is not known."""

    links: list[NvLink] = []
    counters: list[NvLinkCounters] = []


class NvLinkStatus(msgspec.Struct, frozen=True, omit_defaults=True):
    gpus: list[NvLinkGpu]
    unsupported: str | None = None  # the driver's message when NVLink cannot be queried
    unnamed: NvLinkUnnamed | None = None  # link lines before any GPU title (a paste cut below it)
    # why what was read is partial (link lines with no GPU title, a link whose value is cut);
    # None when nothing was missing
    incomplete: str | None = None
    # lines that are no GPU title, link line or driver message (another command's output,
    # prose): counted, the first few kept as evidence; a prompt is none
    unrecognized: Unrecognized = NOTHING_UNREAD


def parse_nvlink_status(text: str) -> NvLinkStatus:
    if not isinstance(text, str):
        raise ParseError(f"nvidia-smi nvlink: expected text, got {type(text).__name__}")
    gpus: list[_GpuBlock] = []
    untitled = _GpuBlock(None)  # link lines before any GPU title
    why: list[str] = []
    unsupported: str | None = None
    unread = UnrecognizedLines()
    for number, pasted in enumerate(pasted_lines(text), 1):
        line = pasted.strip()
        if not line or is_elision(line):
            continue  # blank, or "..." where a capture's author elided GPUs
        m = _GPU.match(line)
        if m:
            gpus.append(_GpuBlock(m))
            continue
        m = _LINK.match(line)
        if m:
            block = gpus[-1] if gpus else untitled
            if not _read_link(int(m.group("link")), m.group("value").rstrip(), block.links, block.counters):
                note_unread(unread, number, line)
                why.append(f"Link {m.group('link')}: {clip(m.group('value').strip(), 40)!r} is neither a speed nor "
                           "<inactive> (a cut line): that link's state is not known")
            continue
        if _is_driver_message(line):
            unsupported = unsupported or clip(line, 200)
            if gpus and gpus[-1].message is None:
                gpus[-1].message = clip(line, 200)
        else:  # a prompt, or the command echoed before the output, is no line of the tool's
            note_unread(unread, number, line)
    unnamed = untitled.freeze_unnamed()
    if unnamed is not None:
        why.insert(0, UNTITLED_LINKS)
    if not gpus and unsupported is None and unnamed is None:
        raise ParseError(f"nvidia-smi nvlink: no 'GPU n: ...' line; starts with {clip(text.strip(), 60)!r}")
    return NvLinkStatus(gpus=[g.freeze() for g in gpus], unsupported=unsupported, unnamed=unnamed,
                        incomplete="; ".join(why[:MAX_REASONS]) or None, unrecognized=unread.frozen_or_nothing())


UNTITLED_LINKS = "link lines before any 'GPU n:' title: which GPU they are of is not known (`unnamed`)"
MAX_REASONS = 4  # reasons `incomplete` names (each cut link's); the lines are all counted unread


def _is_driver_message(line: str) -> bool:
    """"Device does not have or support Nvlink", "Nvlink queries are not supported ... MIG
    mode", NVML's "Unable to retrieve NVLink information as all links are inactive"."""
    if _UNSUPPORTED.search(line) and "nvlink" in line.lower():
        return True
    return _NVML_MESSAGE.match(line) is not None


class _GpuBlock:
    """One GPU's title line and what followed it (title None: the link lines before any)."""

    def __init__(self, title: re.Match[str] | None) -> None:
        self.title = title
        self.links: list[NvLink] = []
        self.counters: dict[int, dict[str, CounterValue]] = {}
        self.message: str | None = None

    def freeze_unnamed(self) -> NvLinkUnnamed | None:
        if not (self.links or self.counters):
            return None
        return NvLinkUnnamed(links=self.links, counters=_counters(self.counters))

    def freeze(self) -> NvLinkGpu:
        assert self.title is not None  # a GPU's block: only `untitled` has none
        gpu = _gpu(self.title, self.links, self.counters)
        if self.message is None:
            return gpu
        return msgspec.structs.replace(gpu, message=self.message,
                                       all_links_inactive=_ALL_INACTIVE.search(self.message) is not None)


def _read_link(number: int, value: str, links: list[NvLink], counters: dict[int, dict[str, CounterValue]]) -> bool:
    """One "Link N: ..." line: a counter ("name: value [unit]") or a link's status; False where
    the status is neither (a cut line: nothing read)."""
    c = _COUNTER_NAME.match(value)
    if c is None:
        link = _link(number, value)
        if link is not None:
            links.append(link)
        return link is not None
    name = _NOT_A_NAME.sub("_", c.group("name").lower()).strip("_")
    key, counted = _counter(name, value[c.end():].strip())
    counters.setdefault(number, {}).setdefault(key, counted)  # a repeated line: the first stands
    return True


def _counter(name: str, text: str) -> tuple[str, CounterValue]:
    """(the counter's key, with its unit when one is printed; its value): an int, a float,
    None where nvidia-smi has none ("N/A"), else the text as printed."""
    if text.lower() in _NO_VALUE:
        return name, None
    m = _COUNTER_VALUE.fullmatch(text)
    value = m.group("value") if m else ""
    number: CounterValue = int(value) if _INT.fullmatch(value) else float(value) if _FLOAT.fullmatch(value) else None
    if m is None or number is None:  # a word after a word is no value and unit
        return name, clip(text, 64)
    unit = m.group("unit")
    return (f"{name}_{unit.lower().replace('/', '_')}" if unit else name), number


def _link(number: int, value: str) -> NvLink | None:
    """`26.562 GB/s` is an active link, `<inactive>` a down one; nothing else is guessed (None)."""
    if "inactive" in value.lower():  # nvidia-smi prints "<inactive>"
        return NvLink(link=number, active=False)
    m = _SPEED.search(value)
    if not m:
        # e.g. the last line of a cut capture ("Link 7: 26.5"): calling it up or down
        # would be a guess, and a wrong "up" hides a dead link
        return None
    return NvLink(link=number, active=True, speed_gbps=float(m.group("gbps")))


def _gpu(m: re.Match[str], links: list[NvLink], counters: dict[int, dict[str, CounterValue]]) -> NvLinkGpu:
    """"NVIDIA H100 80GB HBM3 (UUID: GPU-5269...)": the UUID is the group that ends the line."""
    rest = m.group("rest").rstrip()
    at = rest.rfind("(UUID: ")
    u = _UUID.fullmatch(rest, at) if at >= 0 else None
    name, uuid = (rest[:at], u.group("uuid")) if u else (rest, None)
    return NvLinkGpu(index=int(m.group("index")), name=name.strip(), uuid=uuid, links=links,
                     counters=_counters(counters))


def _counters(counters: dict[int, dict[str, CounterValue]]) -> list[NvLinkCounters]:
    return [NvLinkCounters(link=n, counters=c) for n, c in counters.items()]
