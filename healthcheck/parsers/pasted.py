"""What a paste puts around each line of a tool's output, taken off before the GPU and
perftest parsers read the line.

Operators paste outputs into issues, tickets and chat: a reply quotes them in markdown
("> " before every line, "> > " quoted again), a shell snippet continues every line with
" \\". None of the tools these parsers read prints a line that starts with ">" or ends in
" \\", so both are taken off wherever they are; a line without them is returned as it
is (indentation kept: the `-q` report is a tree by its indentation).

Linear: one bounded match at the start of the line, one strip at its end.
"""

from __future__ import annotations

import re

# up to 3 spaces, then one to eight ">" each with the one space after it
_QUOTE = re.compile(r"[ \t]{0,3}+(?:>[ \t]?){1,8}")


def unpasted(line: str) -> str:
    """`line` without a markdown quote before it and a shell continuation (" \\") after it."""
    quote = _QUOTE.match(line)
    if quote:
        line = line[quote.end():]
    end = line.rstrip()
    if end.endswith("\\") and end[-2:-1] in (" ", "\t"):
        return end[:-1].rstrip()
    return line
