"""Why a stuck rank, outside any collective, does not come: what its stack waits on.

- pdb: a `breakpoint()` (or `pdb.set_trace()`) left in the code stops the rank in pdb's
  command loop, reading a command from stdin, which under a launcher is a pipe or
  /dev/null no one types into: the stack ends in pdb/bdb/cmd's `cmdloop`;
- a lock: its thread blocks taking a lock (the innermost program frame's source line is a
  `with ...lock...:` or an `.acquire(`); where another of its own threads blocks taking a
  lock too, the two hold what the other wants: a lock-order deadlock between its threads.

Read from py-spy's frames (and the program's source line, where the file is at its
path on this node); "" where neither applies.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from healthcheck.parsers.py_spy import PySpyProcess, PySpyThread, source_line

_PDB_FILES = ("pdb.py", "bdb.py", "cmd.py")
_LOCK_LINE = re.compile(r"^\s*(?:async\s+)?with\b[^#]*lock|\.acquire\(", re.IGNORECASE)


def in_pdb(frames: Sequence[str]) -> bool:
    """A stack (frames as "name (file:line)") inside pdb's command loop."""
    for text in frames:
        name, _, where = text.partition(" (")
        path = where.rstrip(")").rsplit(":", 1)[0]
        if path.endswith(_PDB_FILES) and ("cmdloop" in name or "interaction" in name or path.endswith("pdb.py")):
            return True
    return False


def _taking_lock(thread: PySpyThread) -> bool:
    """The thread's innermost program frame is on a line that takes a lock."""
    for f in thread.frames:
        if f.native:
            continue
        if f.library:
            return False
        path = f.filename or f.file
        return f.line is not None and path.startswith("/") and bool(_LOCK_LINE.search(source_line(path, f.line)))
    return False


def lock_waiters(proc: PySpyProcess | None) -> list[str]:
    """The names of the process's threads blocked taking a lock."""
    if proc is None:
        return []
    return [t.name or t.id for t in proc.threads if t.status not in ("active", "active+gil") and _taking_lock(t)]


def wait_reason(frames: Sequence[str], proc: PySpyProcess | None) -> str:
    """What the stack waits on, in words; "" where it says nothing hc reads."""
    if in_pdb(frames):
        return "waiting on stdin in pdb: a breakpoint() left in the code, under a launcher no one types into it"
    locked = lock_waiters(proc)
    if len(locked) >= 2:
        names = ", ".join(f"'{n}'" for n in locked[:4])
        return (f"blocked taking a lock, as is another of its threads: threads {names} each wait for a lock the "
                "other holds (a lock-order deadlock between its own threads)")
    if locked:
        return f"blocked taking a lock (thread '{locked[0]}')"
    return ""
