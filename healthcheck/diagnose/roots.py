"""The root rank a rooted collective was called with (broadcast's `src`, reduce's `dst`,
...), from py-spy `--locals` of torch's `_exception_logger` wrapper, which holds the
call's `args` and `kwargs` (`{"src": 2}`, or the argument after the tensor). Read for a
saved dump (stackrules.rank_root) and for each live sample (motion.StackSample.root);
desyncorder.py compares the ranks' roots.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from healthcheck.parsers.py_spy import PySpyFrame

# the ops whose arguments name a root rank, and the argument (keyword, position after the tensor)
ROOTED = {"broadcast": "src", "reduce": "dst", "scatter": "src", "gather": "dst"}
_KWARG = {name: re.compile(rf'"{name}":\s{{0,4}}(-?\d{{1,9}})') for name in set(ROOTED.values())}
_POSITIONAL = re.compile(r"^\(<[^>]{1,200}>,\s{0,4}(-?\d{1,9})[,)]")
def collective_root(frames: Sequence[PySpyFrame], collective: str | None) -> int | None:
    """The root rank a rooted collective was called with (`src`/`dst` as keyword or the
    argument after the tensor), from py-spy `--locals` of torch's wrapper; None without
    locals or for another op."""
    name = ROOTED.get(collective or "")
    if name is None:
        return None
    for f in frames:
        if not f.name.endswith("wrapper") or not f.locals or "c10d_logger" not in (f.file or f.filename):
            continue
        values = {v.name: v.repr or "" for v in f.locals}
        m = _KWARG[name].search(values.get("kwargs", "")) or _POSITIONAL.search(values.get("args", ""))
        return int(m.group(1)) if m else None
    return None


__all__ = ["ROOTED", "collective_root"]
