"""What `hc --version` names besides hc itself: the torch, NCCL and NVIDIA driver versions
this machine shows hc, each read cheaply and none able to fail the command.

torch comes from its package metadata (importing torch costs seconds and may touch the
GPUs); NCCL from the nvidia-nccl wheel a CUDA torch depends on and from the libnccl.so
the loader finds (`ldconfig -N -X -v`, as the gpu.versions check reads it, so the two
agree); the driver from /proc/driver/nvidia/version, else /sys/module/nvidia/version.
Whatever is absent, unreadable or garbled is "not found" with the reason, never an error.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from healthcheck.core.errors import ParseError
from healthcheck.parsers.ldconfig import parse_ldconfig
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import run_command

# as probes/gpu.py runs it for the gpu.versions check: list only, no cache rebuilt, no root
LDCONFIG = ("ldconfig", "-N", "-X", "-v")
# ldconfig lives in /sbin, which a user's PATH often lacks (Debian's included)
LDCONFIG_DIRS = ("/sbin", "/usr/sbin")
LDCONFIG_TIMEOUT_S = 2.0  # one scan of the library directories; a wedged NFS mount must not hang --version
LDCONFIG_MAX_CHARS = 4 * 1024 * 1024  # a node with many library directories prints ~100 kB

# The wheels NVIDIA ships NCCL in: torch's CUDA builds depend on the one for their CUDA.
NCCL_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11", "nvidia-nccl")

DRIVER_FILES = ("/proc/driver/nvidia/version", "/sys/module/nvidia/version")
_HEAD_BYTES = 4096  # the driver's version file is one or two lines

# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 ..." and the open
# modules' "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build ..."
_NVRM_RE = re.compile(r"Kernel Module\b[^\n]*?\s(\d{2,4}(?:\.\d{1,4}){1,3})(?:\s|$)")
_PLAIN_VERSION_RE = re.compile(r"\s*(\d{2,4}(?:\.\d{1,4}){1,3})\s*")  # /sys/module/nvidia/version
_WHEEL_VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+!-]{0,63}")  # PEP 440-ish, and bounded for display


@dataclass(frozen=True)
class Found:
    """One version, or None with why: `where` names the file, wheel or library it came from."""

    version: str | None
    where: str

    def text(self) -> str:
        return f"{self.version} ({self.where})" if self.version else f"not found ({self.where})"


Metadata = Callable[[str], str]  # importlib.metadata.version: raises when the distribution is absent
Run = Callable[[Sequence[str]], CommandResult]


def _metadata_version(name: str) -> str:
    return version(name)


def _run_ldconfig(argv: Sequence[str]) -> CommandResult:
    result = run_command(tuple(argv), timeout_s=LDCONFIG_TIMEOUT_S)
    for directory in LDCONFIG_DIRS:
        if not result.not_found or "/" in argv[0]:
            break
        result = run_command((f"{directory}/{argv[0]}", *argv[1:]), timeout_s=LDCONFIG_TIMEOUT_S)
    return result


def _distribution_version(name: str, metadata: Metadata) -> str | None:
    try:
        version = metadata(name)
    except Exception:  # PackageNotFoundError, or metadata a broken install left unreadable
        return None
    return version if isinstance(version, str) and _WHEEL_VERSION_RE.fullmatch(version) else None


def torch_version(metadata: Metadata = _metadata_version) -> Found:
    """torch's version from its package metadata, without importing torch."""
    version = _distribution_version("torch", metadata)
    return Found(version, "package metadata" if version else f"no torch package in {sys.prefix}")


def nccl_versions(metadata: Metadata = _metadata_version, run: Run = _run_ldconfig,
                  ldconfig: Sequence[str] = LDCONFIG) -> list[Found]:
    """Every NCCL hc can see: the nvidia-nccl wheels installed beside hc, then the system
    libnccl.so the loader would use; one "not found" entry when there is none."""
    found = [Found(v, f"{name} wheel") for name in NCCL_WHEELS
             if (v := _distribution_version(name, metadata)) is not None]
    system, why = _system_nccl(run, ldconfig)
    if system is not None:
        found.append(system)
    if found:
        return found
    return [Found(None, f"no nvidia-nccl wheel; {why}")]


def _system_nccl(run: Run, ldconfig: Sequence[str]) -> tuple[Found | None, str]:
    result = run(ldconfig)
    if result.not_found:
        return None, "ldconfig not found"
    if result.timed_out:
        return None, f"ldconfig did not answer in {LDCONFIG_TIMEOUT_S:g} s"
    # ldconfig exits 1 when some listed directory cannot be read, and still lists the rest
    if result.error or result.returncode not in (0, 1):
        return None, f"ldconfig failed ({result.error or f'exit {result.returncode}'})"
    try:
        libs = parse_ldconfig(result.stdout[:LDCONFIG_MAX_CHARS])
    except ParseError:
        return None, "ldconfig printed no library directory"
    lib = libs.version_of("libnccl.so")
    if lib is None:
        return None, "ldconfig lists no libnccl.so"
    if lib.version is None:
        return None, f"{lib.path} names no version"
    return Found(lib.version, lib.path), ""


def _read_head(path: Path) -> str | None:
    """The first bytes of a regular file; None for anything else (a FIFO or device planted at
    that path must not block or flood `hc --version`)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, _HEAD_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)


def parse_driver_version(text: str) -> str | None:
    """"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  ..." or a bare "535.104.05"
    (sysfs) -> "535.104.05"; None when the text names no driver version."""
    first = text.split("\n", 1)[0][:_HEAD_BYTES]
    m = _NVRM_RE.search(first) if "Kernel Module" in first else _PLAIN_VERSION_RE.fullmatch(first)
    return m.group(1) if m else None


def driver_version(root: Path = Path("/")) -> Found:
    """The loaded NVIDIA kernel module's version, from /proc, else /sys."""
    why = []
    for absolute in DRIVER_FILES:
        text = _read_head(root / absolute.lstrip("/"))
        if text is None:
            why.append(f"no {absolute}")
            continue
        version = parse_driver_version(text)
        if version is not None:
            return Found(version, absolute)
        why.append(f"{absolute} names no version")
    return Found(None, ", ".join(why) + ": no NVIDIA driver loaded")


def version_lines(hc_version: str, *, root: Path = Path("/"), metadata: Metadata = _metadata_version,
                  run: Run = _run_ldconfig) -> list[str]:
    """`hc --version`'s lines: hc, Python, torch, NCCL, the NVIDIA driver; never raises."""

    def guarded(label: str, probe: Callable[[], str]) -> str:
        try:
            return f"{label}: {probe()}"
        except Exception as exc:  # a version line must never cost the operator the others
            return f"{label}: unknown ({type(exc).__name__}: {str(exc)[:120]})"

    return [
        f"hc, version {hc_version}",
        guarded("python", lambda: f"{sys.version.split()[0]} ({sys.executable})"),
        guarded("torch", lambda: torch_version(metadata).text()),
        guarded("NCCL", lambda: "; ".join(f.text() for f in nccl_versions(metadata, run))),
        guarded("NVIDIA driver", lambda: driver_version(root).text()),
    ]
