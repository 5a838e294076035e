"""Memory, free space, mounts and running processes, from /proc and statvfs.

What hc was not allowed to read is kept apart from what is broken: a path statvfs is
refused for (EACCES) is `unreadable` (the check ERRORs), a path that fails otherwise
(EIO, a dead mount) is an `error` (evidence: the check FAILs); a process list that
other users' processes are hidden from (/proc mounted hidepid=) is `incomplete`, so a
service missing from it is not proof that it is down.
"""

from __future__ import annotations

import os
from pathlib import Path

from healthcheck.core.facts import ProbeContext, ProbeError, provides
from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.procfs import (
    DiskSpace,
    MemInfo,
    Mounts,
    PathSpace,
    Processes,
    parse_boot_time,
    parse_meminfo,
    parse_mounts,
)


def _read_text(ctx: ProbeContext, path: str) -> str:
    try:
        return ctx.path(path).read_text(errors="replace")
    except OSError as exc:
        raise ProbeError("unreadable", f"{path}: {exc.strerror or exc}") from None


def boot_time(root: str = "/") -> float | None:
    """When this node last booted (epoch seconds), or None if /proc/stat cannot say."""

    try:
        return parse_boot_time((Path(root) / "proc/stat").read_text())
    except OSError:
        return None


@provides("meminfo", "local")
def meminfo(ctx: ProbeContext) -> MemInfo:
    return ctx.parse(parse_meminfo, _read_text(ctx, "/proc/meminfo"), "/proc/meminfo")


@provides("mounts", "local")
def mounts(ctx: ProbeContext) -> Mounts:
    return ctx.parse(parse_mounts, _read_text(ctx, "/proc/self/mounts"), "/proc/self/mounts")


@provides("disk_space", "local")
def disk_space(ctx: ProbeContext) -> DiskSpace:
    # statvfs can block on a dead network filesystem; the engine runs providers in
    # threads it can abandon, so a hung mount becomes a timeout ERROR, not a hung prolog.
    paths = sorted(ctx.limits.sys.disk_free_min_gib) if ctx.limits is not None else []
    out = []
    for path in paths:
        try:
            st = os.statvfs(ctx.path(path))
        except FileNotFoundError:
            out.append(PathSpace(path=path, exists=False))
            continue
        except PermissionError as exc:
            out.append(PathSpace(path=path, exists=True, unreadable=exc.strerror or str(exc)))
            continue
        except OSError as exc:
            out.append(PathSpace(path=path, exists=True, error=exc.strerror or str(exc)))
            continue
        out.append(
            PathSpace(path=path, exists=True, free_bytes=st.f_bavail * st.f_frsize,
                      total_bytes=st.f_blocks * st.f_frsize)
        )
    return DiskSpace(out)


@provides("processes", "local")
def processes(ctx: ProbeContext) -> Processes:
    names: set[str] = set()
    proc = ctx.path("/proc")
    try:
        pids = [p for p in os.listdir(proc) if p.isdigit()]
    except OSError as exc:
        raise ProbeError("unreadable", f"/proc: {exc.strerror or exc}") from None
    if not pids:
        raise ProbeError("unreadable", "/proc lists no process: it is not procfs, or not mounted")
    hidden = 0
    where = str(proc)
    for pid in pids:
        # comm is cut at 15 characters (nvidia-persistenced -> nvidia-persiste), so
        # argv[0] is the name that matches; comm covers kernel threads and odd argv.
        try:
            argv0 = _read_proc(f"{where}/{pid}/cmdline", 4096).split(b"\0", 1)[0].decode(errors="replace")
            if argv0:
                names.add(os.path.basename(argv0.split()[0]) if " " in argv0 else os.path.basename(argv0))
            names.add(_read_proc(f"{where}/{pid}/comm").decode(errors="replace").strip())
        except PermissionError:
            hidden += 1  # /proc mounted hidepid=1: another user's process, there but unreadable
        except OSError:
            continue  # the process exited while we looked
    incomplete = None
    if "1" not in pids:  # init is always there: hidepid=2 hides every other user's process
        incomplete = "/proc does not show PID 1: other users' processes are hidden (hidepid)"
    elif hidden:
        incomplete = f"{hidden} processes could not be read (permission denied: hidepid)"
    return Processes(frozenset(names), incomplete)


def _read_proc(path: str, limit: int | None = None) -> bytes:
    """A /proc file's bytes (the first `limit` of them), through the descriptor alone: a
    node runs hundreds of processes, two files each, and a buffered file object and a
    Path for each cost a prologue more than its memory check (issue 22)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks: list[bytes] = []
        size = 0
        while limit is None or size < limit:
            chunk = os.read(fd, 4096 if limit is None else min(4096, limit - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- agentless (ssh)

MEMINFO = ("cat", "/proc/meminfo")
MOUNTS = ("cat", "/proc/self/mounts")
PS = (("ps", "-e", "-o", "pid=,comm="), ("ps", "-e", "-o", "pid=,args="))
# "stat: cannot read file system information for '/scratch': Permission denied"
_STAT_FAILED = lazy_compile(
    r"cannot read file system information for (?:'(?P<q>.*)'|‘(?P<u>.*)’|(?P<b>\S+)): (?P<why>.*)$")


def _stat_paths(ctx: ProbeContext) -> list[str]:
    return sorted(ctx.limits.sys.disk_free_min_gib) if ctx.limits is not None else []


def _stat_argv(ctx: ProbeContext) -> tuple[str, ...]:
    # stat -f: one line per path it could stat ("path<TAB>avail<TAB>bsize<TAB>blocks"),
    # exit 1 when some path is missing
    return ("stat", "-f", "-c", "%n\t%a\t%S\t%b", "--", *_stat_paths(ctx))


@provides("meminfo", "ssh", prefetch=lambda ctx: [MEMINFO])
def meminfo_ssh(ctx: ProbeContext) -> MemInfo:
    return ctx.parse(parse_meminfo, ctx.run_checked(MEMINFO).stdout, "/proc/meminfo")


@provides("mounts", "ssh", prefetch=lambda ctx: [MOUNTS])
def mounts_ssh(ctx: ProbeContext) -> Mounts:
    return ctx.parse(parse_mounts, ctx.run_checked(MOUNTS).stdout, "/proc/self/mounts")


@provides("disk_space", "ssh", prefetch=lambda ctx: [_stat_argv(ctx)] if _stat_paths(ctx) else [])
def disk_space_ssh(ctx: ProbeContext) -> DiskSpace:
    paths = _stat_paths(ctx)
    if not paths:
        return DiskSpace([])
    result = ctx.run_checked(_stat_argv(ctx), ok_codes=(0, 1))
    seen: dict[str, PathSpace] = {}
    for line in result.stdout.splitlines():
        parts = line.rsplit("\t", 3)
        if len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            path, avail, bsize, blocks = parts[0], int(parts[1]), int(parts[2]), int(parts[3])
            seen[path] = PathSpace(path=path, exists=True, free_bytes=avail * bsize, total_bytes=blocks * bsize)
    for line in result.stderr.splitlines():
        m = _STAT_FAILED.search(line)
        if not m:
            continue
        path, why = m.group("q") or m.group("u") or m.group("b"), m.group("why").strip()
        if path in seen:
            continue
        if why == "No such file or directory":
            seen[path] = PathSpace(path=path, exists=False)
        elif why in ("Permission denied", "Operation not permitted"):
            seen[path] = PathSpace(path=path, exists=True, unreadable=why)
        else:
            seen[path] = PathSpace(path=path, exists=True, error=why)
    # a path stat neither measured nor named a reason for: nothing is known about it
    return DiskSpace([seen.get(p, PathSpace(path=p, exists=True, unreadable="stat -f said nothing about it"))
                      for p in paths])


@provides("processes", "ssh", prefetch=lambda ctx: list(PS))
def processes_ssh(ctx: ProbeContext) -> Processes:
    names: set[str] = set()
    pids: set[str] = set()
    for argv in PS:
        for line in ctx.run_checked(argv).stdout.splitlines():
            pid, _, rest = line.strip().partition(" ")
            word = rest.strip().split(" ", 1)[0] if rest.strip() else ""
            if pid.isdigit():
                pids.add(pid)
            if word:
                names.add(os.path.basename(word))
    if not pids:
        raise ProbeError("unparsable", "ps -e listed no process")
    incomplete = None if "1" in pids else "ps does not show PID 1: other users' processes are hidden (hidepid)"
    return Processes(frozenset(names), incomplete)
