"""The process tree from /proc: which processes there are, each one's state and parent,
and everything below a process. Read bounded, never raising on a process that vanishes or
refuses; a machine without /proc has no tree (empty answers).

One reader for the runners (the launcher's kill of everything a command started) and
diagnosis (a job's ranks below its launcher, diagnose/procs.py for the rest of /proc).
"""

from __future__ import annotations

import os
from collections.abc import Mapping


def read_small(path: str, limit: int = 65536) -> bytes | None:
    """A small file's first `limit` bytes, None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def read_stat(pid: int, proc: str = "/proc") -> tuple[str, int | None] | None:
    """(state letter, ppid) from /proc/PID/stat, None when unreadable."""
    data = read_small(f"{proc}/{pid}/stat", 4096)
    if not data:
        return None
    fields = data[data.rfind(b")") + 2:].split()  # the command name may hold spaces and ')'
    if not fields:
        return None
    state = fields[0].decode("ascii", errors="replace")[:1]
    ppid = int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None
    return state, ppid


def all_pids(proc: str) -> list[int]:
    """Every pid /proc lists, ascending ([] when it cannot be listed)."""
    try:
        return sorted(int(e) for e in os.listdir(proc) if e.isdigit())
    except OSError:
        return []


def children_by_parent(proc: str = "/proc") -> dict[int, list[int]]:
    """{parent pid: its children's pids} for every process /proc lists now."""
    children: dict[int, list[int]] = {}
    for pid in all_pids(proc):
        stat_fields = read_stat(pid, proc)
        if stat_fields is not None and stat_fields[1] is not None:
            children.setdefault(stat_fields[1], []).append(pid)
    return children


def descendants(root: int, children: Mapping[int, list[int]]) -> list[int]:
    """Every pid below `root` in the tree `children`, nearest first."""
    out: list[int] = []
    seen: set[int] = set()  # a list's `in` would make a big tree quadratic
    todo = [root]
    while todo:
        for c in children.get(todo.pop(), []):
            if c not in seen:
                seen.add(c)
                out.append(c)
                todo.append(c)
    return out
