"""What the NVIDIA driver says at load and probe time without an Xid number: its version
(the load banner), GSP firmware errors, and a GPU it refused at probe.

Real lines (tests/fixtures/kernel-log/, tests/fixtures/field/*/xid/, tuning files):

    NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)
    NVRM: loading NVIDIA UNIX x86_64 Kernel Module  525.125.06  Tue May 30 05:11:37 UTC 2023
    NVRM: RmInitAdapter: Cannot initialize GSP firmware RM
    NVRM: nvAssertOkFailedNoLog: Assertion failed: ... returned from status @ kernel_gsp_tu102.c:482
    NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of every 30). ...
    nvidia: probe of 0000:18:00.0 failed with error -1

A GSP error is any driver line (not an Xid: Xid 119/120 are Xids) that names the GSP
(`GSP`, its `kernel_gsp_*.c` sources and `kgsp*` functions: "gsp" in any case) and says it failed: a timeout, a
heartbeat that timed out, a failed RPC, an error. The RPC history table the driver dumps
after an Xid 119 names GSP functions but reports nothing failing: not an event. These are
surfaced as facts with the driver version beside them; no check judges them yet.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.gpu_common import normalize_pci
from healthcheck.parsers.pcie_aer import REDACTABLE_BUS, bus_id

# "loading NVIDIA UNIX Open Kernel Module for x86_64  580.159.04" / "... x86_64 Kernel Module  525.125.06";
# a blank or a tab after each word (a log an editor tabified: `x86_64\t580.159.04`)
_BANNER = lazy_compile(r"NVRM: loading NVIDIA UNIX (?:[A-Za-z][\w-]{0,31}[ \t]){1,8}\s{0,8}"
                     r"(?P<version>\d{2,4}\.\d{1,4}(?:\.\d{1,4})?)(?![\w.])", re.ASCII)
_GSP = lazy_compile(r"gsp", re.ASCII | re.IGNORECASE)  # "GSP", "kernel_gsp_tu102.c", the kgsp* functions
_FAILING = lazy_compile(r"time ?out|timed out|fail|error|cannot|unexpected", re.IGNORECASE)
_GPU_INDEX = lazy_compile(r"\bGPU(?P<index>\d{1,3})\b", re.ASCII)
_PCI = lazy_compile(r"PCI:(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)", re.ASCII)
_PROBE = lazy_compile(r"(?P<driver>nvidia): probe of (?:PCI:)?(?P<pci>" + REDACTABLE_BUS + r") "
                    r"failed with error (?P<errno>-?\d{1,6})", re.ASCII)
PROBE_MARKER = "probe of"  # a cheap test before _PROBE
# "(PCI ID: 10de:2901)" in the driver's "The NVIDIA GPU ... installed in this system ..." message
_DEVICE_ID = lazy_compile(r"\(PCI ID: (?P<id>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4})\)", re.ASCII)


class GspError(msgspec.Struct, frozen=True, omit_defaults=True):
    """A GSP firmware error the driver logged without an Xid number."""

    message: str  # the driver's text after "NVRM: "
    line: str
    gpu: str | None = None  # "GPU6": the driver's own GPU index, when it names one
    pci_bus_id: str | None = None  # when the line names the bus
    driver_version: str | None = None  # from the load banner (see parse_kernel_log)
    time: float | None = None
    uptime_s: float | None = None


class Probe(msgspec.Struct, frozen=True):
    """`nvidia: probe of <bus> failed with error <errno>`."""

    pci_bus_id: str | None  # None: redacted in a paste
    errno: int
    message: str


def driver_version(body: str) -> str | None:
    """The version in the driver's load banner, if this is it."""
    if "loading NVIDIA" not in body:
        return None
    m = _BANNER.search(body)
    return m.group("version") if m else None


def gsp_error(body: str) -> tuple[str, str | None, str | None] | None:
    """(message, GPU index, bus id) when the driver line is a GSP error; None otherwise."""
    at = body.find("NVRM:")
    text = body[at + len("NVRM:"):].strip() if at >= 0 else body.strip()
    if not _GSP.search(text) or not _FAILING.search(text):
        return None
    index = _GPU_INDEX.search(text)
    pci = _PCI.search(text)
    return text[:300], index.group(0) if index else None, normalize_pci(pci.group("pci")) if pci else None


def probe_failure(body: str) -> Probe | None:
    m = _PROBE.search(body) if PROBE_MARKER in body else None
    if m is None:
        return None
    return Probe(pci_bus_id=bus_id(m.group("pci")), errno=int(m.group("errno")),
                 message=body[m.start():].strip()[:200])


def device_id(body: str) -> str | None:
    """The PCI vendor:device id the driver names ("10de:2901"), lower case."""
    m = _DEVICE_ID.search(body)
    return m.group("id").lower() if m else None
