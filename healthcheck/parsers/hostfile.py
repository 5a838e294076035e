"""Hostfiles -> node names: one host per line, MPI's "host slots=N" (Open MPI) and
"host:N" (MPICH) forms, comments, and hostlist expressions ("gpu[001-004]")."""

from __future__ import annotations

import re

from healthcheck.core.errors import ParseError, UsageError
from healthcheck.core.inputs import clip
from healthcheck.core.nodes import MAX_EXPAND, expand, is_valid_node_name
from healthcheck.parsers.lines import read_lines

_MPICH = re.compile(r"^(.+):[0-9]+$")  # MPICH "host:slots"
# A hostfile names hosts, not set operations or @groups: only the plain hostlist form
# gets past here, and only so long, which keeps a hostile line away from the costly
# corners of hostlist parsing (ClusterShell's fallback, int() of long digit runs).
MAX_TOKEN = 256
_HOSTLIST = re.compile(rf"[A-Za-z0-9.\-\[\],]{{1,{MAX_TOKEN}}}")


def parse_hostfile(text: str) -> list[str]:
    names: list[str] = []
    # through the line layer: CRLF, colour codes and a pasted prompt line (`$ cat hosts`)
    # come off; no srun label is taken, a host name may look like one
    for read in read_lines(text, stamps=False, srun=False):
        if read.noise:
            continue
        number, line = read.number, read.text.split("#", 1)[0].strip()
        if not line:
            continue
        names.extend(_line_names(number, line.split()[0]))
        if len(names) > MAX_EXPAND:
            raise ParseError(f"line {number}: the hostfile names more than {MAX_EXPAND} nodes")
    if not names:
        raise ParseError("no host in the hostfile")
    return list(dict.fromkeys(names))


def _line_names(number: int, token: str) -> list[str]:
    """The names one line's first word stands for."""

    mpich = _MPICH.match(token)
    if mpich:
        token = mpich.group(1)
    if not _HOSTLIST.fullmatch(token):
        raise ParseError(
            f"line {number}: {clip(token, 60)!r} is not a host name or hostlist "
            f"(letters, digits, . - [ ] and commas, at most {MAX_TOKEN} characters)"
        )
    if is_valid_node_name(token):  # the usual line: one name, nothing to expand
        return [token]
    # expand() counts a hostlist's names before building any, so "gpu[1-1000000000]"
    # is an error, not a prologue out of memory.
    try:
        return expand([token])
    except UsageError as exc:
        raise ParseError(f"line {number}: {clip(str(exc), 200)}") from None
