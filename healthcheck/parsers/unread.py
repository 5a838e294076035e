"""The lines a table or tree parser reads, numbered, so it can count the ones it did not.

`lines.mended_lines` hands the table and tree parsers (ibstat, perfquery, scontrol, ...)
each line's text alone; a parser that counts the lines none of its parts read
(`lines.UnrecognizedLines`: evidence to show, never a reason to refuse a file whose
known facts are there) needs each line's number too: its sample names the line, and
`hc parse --explain` marks it `not read`. `mended_numbered` gives mended_lines' very
lines (the same mending, the same one-task label taken off) as `Line`s with their
numbers. (It belongs in lines.py, as `mended_lines` returning `Line`s; it is here while
another change holds that file.)
"""

from __future__ import annotations

import msgspec

from healthcheck.parsers.lines import Line, mended_lines, read_lines


def mended_numbered(text: str, *, one_task: bool = True) -> list[Line]:
    """`mended_lines(text, one_task=...)` as `Line`s: each its number, its text mended."""
    kept = [line for line in read_lines(text, stamps=False, srun=False) if not line.noise]
    texts = mended_lines(text, one_task=one_task)  # those lines' texts, a one-task label off
    return [line if line.text == mended else msgspec.structs.replace(line, text=mended)
            for line, mended in zip(kept, texts, strict=True)]
