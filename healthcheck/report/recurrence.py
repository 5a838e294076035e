"""The history's record of Xids by boot and of repairs: what escalation counts.

Two tables beside the runs (created by `create_tables` when a history is opened, so a
history an older hc wrote gains them, and an older hc reading a newer history ignores
them): `node_xids`, one row per (node, GPU, Xid code) a recorded run reported, with the
boot id the node's kernel had then; and `repairs`, one row per repair an operator put on
record (`hc node NODE --repaired TEXT`). The same Xid on the same GPU in two boots is a
recurrence after a reboot; counts start again after the node's last repair.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from healthcheck.core.model import NodeResult, Report
from healthcheck.core.status import Status

XID_FINDING = "gpu.E020"
BOOT_METRIC = "boot_id"
MAX_REPAIR_TEXT = 500  # an operator's note, not a document

SCHEMA = """
CREATE TABLE IF NOT EXISTS node_xids (
    node TEXT NOT NULL,
    gpu TEXT NOT NULL,
    code INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    boot_id TEXT NOT NULL,
    PRIMARY KEY (node, gpu, code, started_at, run)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS node_xids_by_run ON node_xids (run);
CREATE TABLE IF NOT EXISTS repairs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node TEXT NOT NULL,
    at TEXT NOT NULL,
    text TEXT NOT NULL,
    by TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS repairs_by_node ON repairs (node, at);
"""


@dataclass(frozen=True)
class Repair:
    node: str
    at: str  # UTC, as reports write times
    text: str
    by: str  # the user who put it on record


def create_tables(db: sqlite3.Connection) -> None:
    """The tables of this module, inside the caller's transaction (idempotent)."""
    for statement in SCHEMA.split(";"):
        if statement.strip():
            db.execute(statement)


def boot_of(node: NodeResult) -> str | None:
    """The boot id gpu.xid read on the node, or None (not read: no recurrence is counted)."""
    return next((str(m.value) for m in node.metrics if m.name == BOOT_METRIC and m.value), None)


def xid_keys(node: NodeResult) -> Iterator[tuple[str, int]]:
    """(GPU, code) of each Xid finding the node carries that judged it (WARN or FAIL)."""
    for f in node.findings:
        if f.id != XID_FINDING or f.status not in (Status.FAIL, Status.WARN):
            continue
        gpu, sep, code = f.component.rpartition(":xid")
        if sep and code.isdigit():
            yield gpu, int(code)


def insert_xids(db: sqlite3.Connection, report: Report, run: int) -> None:
    """One row per (node, GPU, code) of the run's Xid findings where the node's boot id is known."""
    rows = [(n.node, gpu, code, report.started_at, run, boot)
            for n in report.nodes if (boot := boot_of(n)) is not None for gpu, code in set(xid_keys(n))]
    db.executemany("INSERT OR IGNORE INTO node_xids (node, gpu, code, started_at, run, boot_id) "
                   "VALUES (?, ?, ?, ?, ?, ?)", rows)


def insert_repair(db: sqlite3.Connection, repair: Repair) -> None:
    db.execute("INSERT INTO repairs (node, at, text, by) VALUES (?, ?, ?, ?)",
               (repair.node, repair.at, repair.text[:MAX_REPAIR_TEXT], repair.by))


def last_repair_at(db: sqlite3.Connection, node: str) -> str:
    row = db.execute("SELECT max(at) FROM repairs WHERE node = ?", (node,)).fetchone()
    return row[0] or "" if row else ""


def xid_boots(db: sqlite3.Connection, node: str, since: str, limit: int = 512) -> dict[tuple[str, int], list[str]]:
    """(GPU, code) -> the distinct boots, oldest first, in which `node` reported that Xid in runs after
    `since` (the last repair), from its newest `limit` rows."""
    rows = db.execute(
        "SELECT gpu, code, boot_id, min(started_at) AS first FROM (SELECT * FROM node_xids WHERE node = ? "
        "AND started_at > ? ORDER BY started_at DESC LIMIT ?) GROUP BY gpu, code, boot_id ORDER BY first",
        (node, since, limit)).fetchall()
    out: dict[tuple[str, int], list[str]] = {}
    for gpu, code, boot, _ in rows:
        out.setdefault((gpu, code), []).append(boot)
    return out


def xid_rows(db: sqlite3.Connection, node: str, limit: int) -> list[dict[str, Any]]:
    """`node`'s newest `limit` recorded Xid rows (GPU, code, run, boot), oldest first: an evidence bundle's excerpt."""
    rows = db.execute("SELECT x.gpu, x.code, x.started_at, r.run_id, x.boot_id FROM node_xids x JOIN runs r "
                      "ON r.id = x.run WHERE x.node = ? ORDER BY x.started_at DESC LIMIT ?",
                      (node, max(limit, 0))).fetchall()
    return [{"gpu": gpu, "code": code, "started_at": at, "run_id": run_id, "boot_id": boot}
            for gpu, code, at, run_id, boot in reversed(rows)]


def repairs_of(db: sqlite3.Connection, node: str, limit: int) -> list[Repair]:
    """`node`'s newest `limit` repairs, newest first."""
    rows = db.execute("SELECT node, at, text, by FROM repairs WHERE node = ? ORDER BY at DESC, id DESC LIMIT ?",
                      (node, max(limit, 0))).fetchall()
    return [Repair(*row) for row in rows]


def repair_entry(repair: Repair) -> dict[str, Any]:
    """A repair as `hc report history --node N --format json` lists it among the node's results."""
    return {"started_at": repair.at, "status": "REPAIR", "command": "repair", "text": repair.text, "by": repair.by}


def failure_onsets(results: Sequence[tuple[str, str]]) -> list[str]:
    """When each failure began (oldest first) among (started_at, status) results: a FAIL whose
    result before it did not FAIL."""
    onsets, before = [], None
    for started_at, status in sorted(results):
        if status == Status.FAIL.value and before != Status.FAIL.value:
            onsets.append(started_at)
        before = status
    return onsets


def _when(stamp: str) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def mtbf_line(results: Sequence[tuple[str, str]]) -> str:
    """"mean time between failures: 1.5 days (3 failures, ...)", or why there is none, over the results listed."""
    onsets = [t for t in (_when(s) for s in failure_onsets(results)) if t is not None]
    if len(onsets) < 2:
        return f"mean time between failures: not known ({len(onsets)} failure(s) in the runs listed; 2 needed)"
    mean = (onsets[-1] - onsets[0]).total_seconds() / (len(onsets) - 1)
    shown = f"{mean / 86400:.1f} days" if mean >= 86400 else f"{mean / 3600:.1f} hours"
    return (f"mean time between failures: {shown} ({len(onsets)} failures from {onsets[0]:%Y-%m-%d %H:%M} "
            f"to {onsets[-1]:%Y-%m-%d %H:%M} UTC, in the runs listed)")
