"""Node names and node sets (Slurm hostlist expressions, via ClusterShell's NodeSet)."""

from __future__ import annotations

import re
from typing import Iterable

from healthcheck.core.errors import UsageError

# RFC 1123 labels (letters, digits, hyphens; no leading hyphen), dots between labels.
# Stricter than what Slurm accepts, on purpose: a node name reaches scontrol and ssh.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_NODE_RE = re.compile(rf"{_LABEL}(?:\.{_LABEL})*")


def is_valid_node_name(name: str) -> bool:
    # fullmatch: "$" would also accept a name followed by a newline
    return len(name) <= 253 and bool(_NODE_RE.fullmatch(name))


def check_node_name(name: str) -> str:
    if not is_valid_node_name(name):
        raise UsageError(f"{name!r} is not a valid node name (letters, digits, hyphens and dots)")
    return name


def expand(patterns: Iterable[str]) -> list[str]:
    """Expand hostlist expressions ("gpu[001-004],login1") into validated node names, in order."""
    from ClusterShell.NodeSet import NodeSet, NodeSetException

    names: list[str] = []
    for pattern in patterns:
        try:
            ns = NodeSet(pattern)
        except (NodeSetException, ValueError) as exc:
            raise UsageError(f"{pattern!r} is not a valid hostlist: {exc}") from None
        for name in ns:
            names.append(check_node_name(name))
    return list(dict.fromkeys(names))


def fold(names: Iterable[str]) -> str:
    """["gpu017", "gpu033", "gpu034"] -> "gpu[017,033-034]"."""
    from ClusterShell.NodeSet import NodeSet

    return str(NodeSet.fromlist(list(names)))
