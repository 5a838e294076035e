"""Assemble a run's report from node results."""

from __future__ import annotations

import datetime as _dt
import os
import secrets
import socket
from collections import defaultdict
from typing import Any, Iterable

from healthcheck import __version__
from healthcheck.core.model import NodeResult, Report
from healthcheck.core.status import Status, worst


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


def iso(ts: _dt.datetime) -> str:
    return ts.astimezone(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_run_id(now: _dt.datetime) -> str:
    """Sortable and unique: 20261122T130501Z-3f2a9c."""
    return now.strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def group_findings(nodes: Iterable[NodeResult], min_status: Status = Status.WARN) -> list[dict[str, Any]]:
    """Identical findings across nodes, folded: one entry per (status, id, component, message)."""
    from ClusterShell.NodeSet import NodeSet

    groups: dict[tuple[str, str, str, str], list[str]] = defaultdict(list)
    for node in nodes:
        for f in node.findings:
            if f.status.rank >= min_status.rank:
                groups[(f.status.value, f.id, f.component, f.message)].append(f.node)
    out = []
    for (status, fid, component, message), members in groups.items():
        out.append(
            {
                "status": status,
                "id": fid,
                "component": component,
                "message": message,
                "nodes": str(NodeSet.fromlist(members)) if _foldable(members) else ",".join(members),
                "count": len(members),
            }
        )
    out.sort(key=lambda g: (-Status(g["status"]).rank, g["id"], g["component"], g["nodes"]))
    return out


def _foldable(names: list[str]) -> bool:
    # NodeSet parses brackets and commas; a hostile name must not be reinterpreted
    return all(n and all(c.isalnum() or c in "-_." for c in n) for n in names)


def make_report(
    *,
    command: str,
    tier: str,
    config_digest: str,
    config_path: str,
    started: _dt.datetime,
    finished: _dt.datetime,
    nodes: list[NodeResult],
) -> Report:
    summary: dict[str, int] = {s.value: 0 for s in Status}
    for node in nodes:
        summary[node.status.value] += 1
    return Report(
        run_id=new_run_id(started),
        hc_version=__version__,
        command=command,
        tier=tier,
        config_digest=config_digest,
        config_path=config_path,
        started_at=iso(started),
        finished_at=iso(finished),
        duration_s=round((finished - started).total_seconds(), 3),
        host=os.environ.get("HC_HOST") or socket.gethostname(),
        status=worst((n.status for n in nodes), default=Status.SKIP),
        nodes=sorted(nodes, key=lambda n: n.node),
        summary=summary,
        findings_summary=group_findings(nodes),
    )
