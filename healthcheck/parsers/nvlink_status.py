"""`nvidia-smi nvlink -s` (`nvlink --status`) text -> NvLinkStatus.

Input: one block per GPU, a title line then one line per link:

    GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5269b708-678a-b1a8-60f0-c90406537486)
         Link 0: 26.562 GB/s
         Link 1: <inactive>

A GPU without NVLink, or in MIG mode, gets a message line instead of links ("Device does
not have or support Nvlink", "Nvlink queries are not supported for Devices in MIG
mode"): that message is kept in `unsupported`, with the GPUs listed so far. A line of
"..." (an elision in a pasted capture) is skipped.

`nvidia-smi nvlink -gt d` / `-e` print per-link counters ("Link 0: Data Tx: 1390774681
KiB") in the same layout. Those say nothing about whether a link is up (an inactive link
can print counters too), so they raise ParseError rather than pass as link status; so
does a link value that is neither a speed nor "<inactive>" (a capture cut mid-line).
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.gpu_common import NvLink

# The rest of a GPU or Link line is taken whole and split in code: a lazy `.*?` followed
# by `\s*$` (or an optional UUID group) tried every split of a long run of spaces,
# quadratic in the line's length.
_GPU = re.compile(r"GPU (?P<index>\d{1,4}): (?P<rest>.*)$", re.ASCII)
_UUID = re.compile(r"\(UUID: (?P<uuid>[^)]{0,128})\)", re.ASCII)
_LINK = re.compile(r"Link (?P<link>\d{1,4}): (?P<value>.*)$", re.ASCII)
_SPEED = re.compile(r"(?P<gbps>\d{1,6}(?:\.\d{1,6})?) GB/s\b", re.ASCII)
_COUNTER = re.compile(r"[A-Za-z][A-Za-z ]{0,40}:")  # "Data Tx:", "Replay Errors:" - a counter, not a status
_UNSUPPORTED = re.compile(r"not (?:have or )?support|not supported", re.IGNORECASE)


class NvLinkGpu(msgspec.Struct, frozen=True, omit_defaults=True):
    index: int
    name: str  # "NVIDIA H100 80GB HBM3"
    uuid: str | None = None
    links: list[NvLink] = []


class NvLinkStatus(msgspec.Struct, frozen=True, omit_defaults=True):
    gpus: list[NvLinkGpu]
    unsupported: str | None = None  # the driver's message when NVLink cannot be queried


def parse_nvlink_status(text: str) -> NvLinkStatus:
    if not isinstance(text, str):
        raise ParseError(f"nvidia-smi nvlink: expected text, got {type(text).__name__}")
    gpus: list[tuple[re.Match[str], list[NvLink]]] = []
    unsupported: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.strip(".…") == "":
            continue  # blank, or "..." where a capture's author elided GPUs
        m = _GPU.match(line)
        if m:
            gpus.append((m, []))
            continue
        m = _LINK.match(line)
        if m and gpus:
            gpus[-1][1].append(_link(int(m.group("link")), m.group("value").rstrip()))
            continue
        if _UNSUPPORTED.search(line) and "nvlink" in line.lower():
            unsupported = unsupported or line
    if not gpus and unsupported is None:
        raise ParseError(f"nvidia-smi nvlink: no 'GPU n: ...' line; starts with {clip(text.strip(), 60)!r}")
    return NvLinkStatus(gpus=[_gpu(m, links) for m, links in gpus], unsupported=unsupported)


def _link(number: int, value: str) -> NvLink:
    """`26.562 GB/s` is an active link, `<inactive>` a down one; nothing else is guessed."""
    if _COUNTER.match(value):
        raise ParseError(
            f"nvidia-smi nvlink: 'Link {number}: {clip(value, 40)}' is a counter (nvlink -gt/-e output), "
            "not link status (nvlink -s)"
        )
    if "inactive" in value.lower():  # nvidia-smi prints "<inactive>"
        return NvLink(link=number, active=False)
    m = _SPEED.search(value)
    if not m:
        # e.g. the last line of a cut capture ("Link 7: 26.5"): calling it up or down
        # would be a guess, and a wrong "up" hides a dead link
        raise ParseError(
            f"nvidia-smi nvlink: 'Link {number}: {clip(value, 40)}' is neither a speed nor <inactive>"
        )
    return NvLink(link=number, active=True, speed_gbps=float(m.group("gbps")))


def _gpu(m: re.Match[str], links: list[NvLink]) -> NvLinkGpu:
    """"NVIDIA H100 80GB HBM3 (UUID: GPU-5269...)": the UUID is the group that ends the line."""
    rest = m.group("rest").rstrip()
    at = rest.rfind("(UUID: ")
    u = _UUID.fullmatch(rest, at) if at >= 0 else None
    name, uuid = (rest[:at], u.group("uuid")) if u else (rest, None)
    return NvLinkGpu(index=int(m.group("index")), name=name.strip(), uuid=uuid, links=links)
