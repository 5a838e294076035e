"""Per-task output files named by their task number (`0.out`, `1.out`, ... : Slurm's
`--output=%t.out`; after one stem, `train-0.out`, `train-0.err`: `--output=train-%t.out
--error=train-%t.err`, a launcher's own task files): the number is the rank where the files say so.

A file's name gives a rank only where it says `rank` (sources.rank_from_name); a bare number
may be anything (a shard, an attempt, a date). A folder's files of one stem are a rank's each where the
numbers run 0..N-1 (two or more) and every one of them that names its rank in its own lines
(`[rankN]:`, one rank per file) names its own number, at least one doing so: then a file of
that folder that names no rank (a rank that printed no error, whose lines torch never
labelled) is that number's rank's output, and what it holds (or does not) is that rank's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# `3.out`, or one stem and the number (`train-3.out`, `job_3.err`: srun's `--output=train-%t.out`
# `--error=train-%t.err`, a launcher's own per-worker files): the stem is part of the group
_TASK_FILE = re.compile(r"(?:([A-Za-z][\w.]{0,63}?)[-_.])?(\d{1,5})\.(?:out|err|log|txt|stdout|stderr)")
TASK_FILES_MAX = 4096  # files of one folder looked at


def _split(source: str) -> tuple[str, int] | None:
    """(the group a task file is in: its folder and stem, its number), or None."""
    folder, _, name = source.replace("\\", "/").rpartition("/")
    m = _TASK_FILE.fullmatch(name)
    return (f"{folder}/{m.group(1) or ''}", int(m.group(2))) if m else None


def task_ranks(files: Iterable[tuple[str, int | None]]) -> dict[str, int]:
    """source -> rank for the task files that named no rank themselves, from `files`: every
    file read (source, the rank it was read as, None where nothing placed it)."""
    folders: dict[str, list[tuple[str, int, int | None]]] = {}
    for source, rank in files:
        split = _split(source)
        if split is not None and len(folders.setdefault(split[0], [])) < TASK_FILES_MAX:
            folders[split[0]].append((source, split[1], rank))
    out: dict[str, int] = {}
    for entries in folders.values():
        numbers = {n for _, n, _ in entries}
        placed = [(n, r) for _, n, r in entries if r is not None]
        if len(numbers) < 2 or numbers != set(range(len(numbers))):
            continue
        if not placed or any(n != r for n, r in placed):
            continue
        out |= {s: n for s, n, r in entries if r is None}
    return out


__all__ = ["task_ranks"]
