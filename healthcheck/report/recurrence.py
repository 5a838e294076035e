"""The history's record of Xids by boot and of repairs: what escalation counts.

Two tables beside the runs (created by `create_tables` when a history is opened, so a
history an older hc wrote gains them, and an older hc reading a newer history ignores
them): `node_xids`, one row per (node, GPU, Xid code) a recorded run reported, with the
boot id the node's kernel had then; and `repairs`, one row per repair an operator put on
record (`hc node NODE --repaired TEXT`); and `gpu_resets`, one row per GPU reset an operator
put on record (`hc node NODE --gpu-reset GPUS`: neither the kernel log nor NVML says that a
GPU was reset). The same Xid on the same GPU in two boots, or logged again after a reset of
that GPU on record, is a recurrence; counts start again after the node's last repair.

A row's `boot_id` is the epoch the Xid was logged in: the boot id, or, where the Xid was last
logged after a reset of its GPU on record, the boot id and that reset
(`<boot id>+reset@<time>`). An older hc reading it counts each as a boot of its own.
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
LAST_LOGGED_METRIC = "xid_last_logged"  # gpu.xid: when a GPU's Xid was last logged (epoch s), where the log says
RESET_MARK = "+reset@"
ALL_GPUS = ""  # a reset on record of every GPU of the node
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
CREATE TABLE IF NOT EXISTS gpu_resets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    node TEXT NOT NULL,
    gpu TEXT NOT NULL,
    at TEXT NOT NULL,
    by TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS gpu_resets_by_node ON gpu_resets (node, at);
"""


@dataclass(frozen=True)
class Repair:
    node: str
    at: str  # UTC, as reports write times
    text: str
    by: str  # the user who put it on record


@dataclass(frozen=True)
class GpuReset:
    node: str
    gpu: str  # as gpu.xid names it ("GPU3", or a bus id where the index was not known); ALL_GPUS: all
    at: str  # UTC, as reports write times
    by: str


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


def last_logged(node: NodeResult) -> dict[tuple[str, int], float]:
    """(GPU, code) -> when gpu.xid says the node last logged that Xid (epoch seconds), where its log had times."""
    out = {}
    for m in node.metrics:
        gpu, sep, code = m.component.rpartition(":xid")
        if m.name == LAST_LOGGED_METRIC and sep and code.isdigit() and isinstance(m.value, (int, float)):
            out[(gpu, int(code))] = float(m.value)
    return out


def epoch_of(boot: str, gpu: str, logged: float | None, resets: Sequence[GpuReset]) -> str:
    """The epoch an Xid of `gpu` last logged at `logged` belongs to: its boot, or its boot after the
    latest reset of that GPU (or of all the node's GPUs) on record before it was logged. An Xid
    whose log had no times is placed by its boot only: a reset is then not counted for it."""
    if logged is None:
        return boot
    before = [at.timestamp() for r in resets if r.gpu in (gpu, ALL_GPUS) and (at := _when(r.at)) is not None]
    before = [t for t in before if t < logged]
    if not before:
        return boot
    reset = dt.datetime.fromtimestamp(max(before), dt.timezone.utc)
    return f"{boot}{RESET_MARK}{reset:%Y-%m-%dT%H:%M:%S}Z"


def epoch_text(epoch: str) -> str:
    """An epoch as a message shows it: "3a8286bf", "3a8286bf after the GPU reset of 2026-11-20T02:30:00Z"."""
    boot, sep, reset = epoch.partition(RESET_MARK)
    return f"{boot[:8]} after the GPU reset of {reset}" if sep else boot[:8]


def node_epochs(node: NodeResult, resets: Sequence[GpuReset]) -> dict[tuple[str, int], str]:
    """(GPU, code) -> the epoch of each Xid the node reported, where its boot id is known."""
    boot = boot_of(node)
    if boot is None:
        return {}
    logged = last_logged(node)
    return {(gpu, code): epoch_of(boot, gpu, logged.get((gpu, code)), resets) for gpu, code in set(xid_keys(node))}


def insert_xids(db: sqlite3.Connection, report: Report, run: int) -> None:
    """One row per (node, GPU, code) of the run's Xid findings where the node's boot id is known,
    with the epoch (boot, or boot after a GPU reset) it was logged in."""
    rows = []
    for n in report.nodes:
        if boot_of(n) is None or next(xid_keys(n), None) is None:  # no query for a node without one
            continue
        for (gpu, code), epoch in node_epochs(n, gpu_resets_of(db, n.node)).items():
            rows.append((n.node, gpu, code, report.started_at, run, epoch))
    db.executemany("INSERT OR IGNORE INTO node_xids (node, gpu, code, started_at, run, boot_id) "
                   "VALUES (?, ?, ?, ?, ?, ?)", rows)


def insert_gpu_reset(db: sqlite3.Connection, reset: GpuReset) -> None:
    db.execute("INSERT INTO gpu_resets (node, gpu, at, by) VALUES (?, ?, ?, ?)",
               (reset.node, reset.gpu, reset.at, reset.by))


def gpu_resets_of(db: sqlite3.Connection, node: str, limit: int = 512) -> list[GpuReset]:
    """`node`'s newest `limit` GPU resets on record, oldest first."""
    rows = db.execute("SELECT node, gpu, at, by FROM gpu_resets WHERE node = ? ORDER BY at DESC, id DESC LIMIT ?",
                      (node, limit)).fetchall()
    return [GpuReset(*row) for row in reversed(rows)]


def insert_repair(db: sqlite3.Connection, repair: Repair) -> bool:
    """Put `repair` on record unless the same one (node, time, words) is already: a repair sent on
    to the node (`hc node NODE --repaired`) lands once in a history shared with the login node.
    Whether a row was written."""
    text = repair.text[:MAX_REPAIR_TEXT]
    cur = db.execute("INSERT INTO repairs (node, at, text, by) SELECT ?, ?, ?, ? WHERE NOT EXISTS "
                     "(SELECT 1 FROM repairs WHERE node = ? AND at = ? AND text = ?)",
                     (repair.node, repair.at, text, repair.by, repair.node, repair.at, text))
    return bool(cur.rowcount)


def last_repair_at(db: sqlite3.Connection, node: str) -> str:
    row = db.execute("SELECT max(at) FROM repairs WHERE node = ?", (node,)).fetchone()
    return row[0] or "" if row else ""


def last_repairs(db: sqlite3.Connection, before: str | None = None) -> dict[str, str]:
    """node -> when its newest repair put on record (before `before`, where given) was, as reports
    write times: where counter rates and trends start again (orchestrate/over_time.py)."""
    if before is None:
        rows = db.execute("SELECT node, max(at) FROM repairs GROUP BY node").fetchall()
    else:
        rows = db.execute("SELECT node, max(at) FROM repairs WHERE at < ? GROUP BY node", (before,)).fetchall()
    return {node: at for node, at in rows if at}


def repair_times(db: sqlite3.Connection) -> dict[str, float]:
    """node -> when its last repair was put on record (epoch seconds), for every node with one."""
    return {node: when.timestamp() for node, at in last_repairs(db).items() if (when := _when(at)) is not None}


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
