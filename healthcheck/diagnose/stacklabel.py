"""The rank an operator's label gives one pasted py-spy stack, for sources.py.

A py-spy dump names a process by pid, never by rank; a paste of one rank's stack is often
labelled by the line right above it: `The stack for rank0:`, `rank 3:`, `== rank 2 ==`
(field-3's fairseq paste: `The stack for rank0:`, a code fence, then `Thread 0x7FA6E7C01740
(idle): "MainThread"`). That label is the operator's word on whose stack it is, as a
per-rank file's name is: it is read only there (the last line before the dump's first
`Process`/`Thread` line, blank lines and a code fence skipped), only in one of those
shapes, only with a rank number, and only for a text of one process's stack. A rank read
so is the stack's owner, nothing more: a single stack with no peer shown waiting names no
one (one look cannot tell a hang from a slow step).
"""

from __future__ import annotations

import re

_DUMP_START = re.compile(r"(?:Process \d{1,10}: |Thread (?:0[xX][0-9A-Fa-f]{1,20}|\d{1,20}) \()")
_LABELS = (
    # `The stack for rank0:`, `stack of rank 3:`, `py-spy dump for rank 1`, `rank 3:`, `Rank 2 stack:`
    re.compile(r"(?:the )?(?:(?:py-?spy )?(?:stack|dump|trace)s? (?:for|of) )?rank[ _#-]?(\d{1,6})"
               r"(?: (?:stack|dump|trace))?:?", re.IGNORECASE),
    re.compile(r"={1,20} ?rank[ _#-]?(\d{1,6}) ?={1,20}", re.IGNORECASE),  # `== rank 2 ==`
)
_LOOK_BACK = 8  # lines above the dump's first line: blank ones and a fence may sit between


def _label_of(line: str) -> int | None:
    text = line.strip().strip("*#").strip()
    for pattern in _LABELS:
        m = pattern.fullmatch(text)
        if m is not None:
            return int(m.group(1))
    return None


def label_rank(text: str) -> int | None:
    """The rank the line above the dump's first line names (see the module's docstring)."""
    lines = text[:65536].splitlines()
    start = next((i for i, line in enumerate(lines) if _DUMP_START.match(line.lstrip())), None)
    if start is None:
        return None
    for line in reversed(lines[max(0, start - _LOOK_BACK):start]):
        stripped = line.strip()
        if not stripped or stripped.startswith("```"):
            continue
        return _label_of(stripped)
    return None


__all__ = ["label_rank"]
