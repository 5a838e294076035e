"""Hostfiles -> node names: one host per line, MPI's "host slots=N" (Open MPI) and
"host:N" (MPICH) forms, comments, and hostlist expressions ("gpu[001-004]")."""

from __future__ import annotations

import re

from healthcheck.core.errors import ParseError


def parse_hostfile(text: str) -> list[str]:
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    from healthcheck.core.nodes import is_valid_node_name

    names: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        token = line.split()[0]
        mpich = re.match(r"^(.+):\d+$", token)  # MPICH "host:slots"
        if mpich:
            token = mpich.group(1)
        try:
            expanded = list(NodeSet(token))
        except (NodeSetException, ValueError) as exc:
            raise ParseError(f"line {number}: {token!r} is not a host name or hostlist: {exc}") from None
        for name in expanded:
            if not is_valid_node_name(name):
                raise ParseError(f"line {number}: {name!r} is not a valid host name")
            names.append(name)
    if not names:
        raise ParseError("no host in the hostfile")
    return list(dict.fromkeys(names))
