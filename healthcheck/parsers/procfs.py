"""/proc/meminfo and /proc/self/mounts text -> facts; the sys checks' other facts.

DiskSpace (statvfs, or `stat -f` over SSH) and Processes (/proc, or `ps` over SSH) are
read by probes/sysinfo.py; their types live here with the rest of the sys facts.

What hc was not allowed to read is kept apart from what is broken: a path statvfs is
refused for (EACCES) is `unreadable`, a path that fails otherwise (EIO, a dead mount) is
an `error`; a process list that other users' processes are hidden from (/proc mounted
hidepid=) is `incomplete`.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import ParseError

_KIB = re.compile(r"[0-9]{1,20}")  # not str.isdigit(): int() refuses "²" and 4,301 digits


class MemInfo(msgspec.Struct, frozen=True):
    total_kib: int
    available_kib: int | None = None


class Mount(msgspec.Struct, frozen=True):
    device: str
    mountpoint: str
    fstype: str
    options: str = ""


class Mounts(msgspec.Struct, frozen=True):
    mounts: list[Mount]

    def at(self, mountpoint: str) -> list[Mount]:
        return [m for m in self.mounts if m.mountpoint == mountpoint]


class PathSpace(msgspec.Struct, frozen=True, omit_defaults=True):
    path: str
    exists: bool
    free_bytes: int | None = None
    total_bytes: int | None = None
    error: str | None = None  # statvfs failed on a path that is there: the filesystem is broken
    unreadable: str | None = None  # hc may not look (permission): nothing can be said about it


class DiskSpace(msgspec.Struct, frozen=True):
    paths: list[PathSpace]


class Processes(msgspec.Struct, frozen=True):
    # executable names of every running process (basename of argv[0] and of comm)
    names: frozenset[str]
    # why some processes may be missing from `names` (hidepid, permission), or None
    incomplete: str | None = None


def parse_meminfo(text: str) -> MemInfo:
    values: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and _KIB.fullmatch(parts[0]):
            values[key.strip()] = int(parts[0])
    if "MemTotal" not in values:
        raise ParseError("meminfo: no MemTotal line")
    return MemInfo(total_kib=values["MemTotal"], available_kib=values.get("MemAvailable"))


def _unescape(field: str) -> str:
    # the kernel writes space, tab, newline and backslash in mount paths as octal escapes
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and len(field) >= i + 4 and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mounts(text: str) -> Mounts:
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            mounts.append(
                Mount(
                    device=_unescape(parts[0]),
                    mountpoint=_unescape(parts[1]),
                    fstype=parts[2],
                    options=parts[3] if len(parts) > 3 else "",
                )
            )
    if not mounts:
        raise ParseError("mounts: no mount entry found")
    return Mounts(mounts)


def parse_boot_time(stat_text: str) -> float | None:
    """/proc/stat -> when this boot started (epoch seconds), from its "btime" line."""
    for line in stat_text.splitlines():
        if line.startswith("btime "):
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                return float(parts[1])
    return None
