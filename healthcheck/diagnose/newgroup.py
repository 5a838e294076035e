"""The process group a stack waits to create: py-spy `--locals` of torch's
`_new_process_group_helper` / `_new_group_with_tag` / `new_group` frames hold its ranks
(`global_ranks_in_group`, `ranks`) and its name (`group_name`). Read for a saved dump and
for each live sample (motion.StackSample.creating); grouporder.py compares the ranks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from healthcheck.parsers.py_spy import PySpyFrame

CREATORS = ("_new_process_group_helper", "_new_group_with_tag", "new_group")
_RANKS_ARGS = ("global_ranks_in_group", "ranks")
_RANK_LIST = re.compile(r"^\[\s{0,4}(\d{1,9}(?:\s{0,4},\s{0,4}\d{1,9}){0,4095})\s{0,4}\]$")


def in_new_group(frames: Sequence[PySpyFrame]) -> bool:
    return any(f.name in CREATORS for f in frames)


def group_created(frames: Sequence[PySpyFrame]) -> tuple[tuple[int, ...], str] | None:
    """(the group's ranks, its name: "" where not shown) of the group the stack waits to
    create; None outside new_group or without locals."""
    for f in frames:
        if f.name not in CREATORS or not f.locals:
            continue
        values = {v.name: (v.repr or "").strip() for v in f.locals}
        for name in _RANKS_ARGS:
            m = _RANK_LIST.match(values.get(name, ""))
            if m:
                return tuple(int(r) for r in m.group(1).split(",")), values.get("group_name", "").strip("\"'")
    return None


__all__ = ["CREATORS", "group_created", "in_new_group"]
