"""Run history: every report hc produced, in one SQLite file, for diffs and flap detection.

Several hc runs may write at once (cron health checks, an operator's ad hoc run), so the
database runs in WAL mode with a busy timeout, the first open (WAL switch and schema,
where the busy timeout does not cover every conflict) is retried on SQLITE_BUSY, and each
run is recorded in one transaction: a reader sees a run whole or not at all. The whole report is kept
(zlib-compressed JSON), plus one row per node (status, fabric) indexed by node, so a
node's recent statuses come back in one query for 10,000 nodes.
"""

from __future__ import annotations

import contextlib
import json
import random
import sqlite3
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from healthcheck.core import typed
from healthcheck.core.atomic import check_database_path
from healthcheck.core.config.schema import HistorySettings
from healthcheck.core.errors import HcError
from healthcheck.core.model import Finding, Metric, Report
from healthcheck.core.status import Status
from healthcheck.report import recurrence
from healthcheck.report.jsonio import decode, encode
from healthcheck.report.recurrence import GpuReset, Repair

SCHEMA_VERSION = 1
BUSY_TIMEOUT_S = 30.0  # a concurrent writer holds the lock for one run's insert: well under this

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL UNIQUE,
    started_at TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    command TEXT NOT NULL,
    tier TEXT NOT NULL,
    config_digest TEXT NOT NULL,
    status TEXT NOT NULL,
    host TEXT NOT NULL,
    node_count INTEGER NOT NULL,
    summary TEXT NOT NULL,
    report BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_command ON runs (command, tier, started_at);
CREATE INDEX IF NOT EXISTS runs_by_time ON runs (started_at);
CREATE TABLE IF NOT EXISTS run_nodes (
    node TEXT NOT NULL,
    started_at TEXT NOT NULL,
    run INTEGER NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    status TEXT NOT NULL,
    fabric TEXT NOT NULL,
    PRIMARY KEY (node, started_at, run)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS run_nodes_by_run ON run_nodes (run);
"""


@dataclass(frozen=True)
class RunInfo:
    """One recorded run, without its report (listing runs must not decode every report)."""

    run_id: str
    started_at: str
    finished_at: str
    command: str
    tier: str
    status: str
    host: str
    node_count: int
    summary: dict[str, int]


@dataclass(frozen=True)
class NodeRun:
    """One node's result in one recorded run."""

    run_id: str
    started_at: str
    command: str
    tier: str
    status: str
    fabric: str


@dataclass(frozen=True)
class NodeFailure:
    """One recorded run that FAILed a node, and the node's FAIL findings in it."""

    run_id: str
    command: str
    node: str
    started_at: str
    findings: list[Finding]


class _FailedNode(msgspec.Struct):
    node: str
    findings: list[Finding] = []


class _FailedRun(msgspec.Struct):
    """A recorded report, decoded only as far as its nodes' findings."""

    nodes: list[_FailedNode] = []


@dataclass(frozen=True)
class CounterRise:
    """An error counter of a node's component that rose between two recorded runs."""

    node: str
    component: str  # "mlx5_0/1"
    name: str  # "symbol_error"
    before: float
    after: float
    before_at: str  # started_at of the run that read `before`
    after_at: str


@dataclass(frozen=True)
class CounterReading:
    """A node's counters as one recorded run read them: (component, name) -> value."""

    started_at: str  # as reports write it
    values: dict[tuple[str, str], float]


class _MetricNode(msgspec.Struct):
    node: str
    metrics: list[Metric] = []


class _MetricRun(msgspec.Struct):
    """A recorded report, decoded only as far as its nodes' metrics."""

    nodes: list[_MetricNode] = []


class History:
    """The run history in one SQLite file; every error is an HcError with a one-line message."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path).expanduser()
        self._db: sqlite3.Connection | None = None
        self._unusable: HcError | None = None  # why it could not be opened: not tried again by this object

    @classmethod
    def from_settings(cls, settings: HistorySettings) -> History | None:
        """The configured history, or None where `history.path` is null (keep none)."""
        return None if settings.path is None else cls(Path(settings.path))

    # ------------------------------------------------------------------ connection

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            if self._unusable is not None:  # a run's steps share one object: a locked file costs one wait
                raise self._unusable
            try:
                self._db = self._open()
            except HcError as exc:
                self._unusable = exc
                raise
        return self._db

    def _open(self) -> sqlite3.Connection:
        # SQLite follows a link at the path and, on a device or FIFO, writes its journal
        # files next to it: only a regular file (or none yet) is a history
        check_database_path(self.path, "history")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HcError(f"history {self.path}: cannot create its directory: {exc.strerror or exc}") from None
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        try:
            # isolation_level None: transactions are explicit (BEGIN IMMEDIATE), never implicit.
            # timeout= sets SQLite's busy timeout before any statement runs.
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise HcError(f"history {self.path}: cannot open: {exc}") from None
        try:
            _retry_busy(lambda: self._initialise(db), deadline)
        except sqlite3.Error as exc:
            db.close()
            raise HcError(f"history {self.path}: not a usable hc history database: {exc}") from None
        except BaseException:
            db.close()
            raise
        return db

    def _initialise(self, db: sqlite3.Connection) -> None:
        """Pragmas and schema; safe to run again after SQLITE_BUSY (every step is idempotent)."""
        db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")  # a recorded run survives a power cut, not only a crash
        db.execute("PRAGMA foreign_keys = ON")
        self._migrate(db)

    def _migrate(self, db: sqlite3.Connection) -> None:
        """Create the schema, or refuse a database written by a newer hc."""
        with _write_transaction(db):
            # statement by statement: executescript() would commit the transaction first
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            recurrence.create_tables(db)  # Xids by boot and repairs: additive, no version bump
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                db.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise HcError(f"history {self.path}: schema version {row[0]} is newer than this hc reads "
                              f"({SCHEMA_VERSION}); use a newer hc or another history.path")

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _fail(self, what: str, exc: sqlite3.Error) -> HcError:
        return HcError(f"history {self.path}: cannot {what}: {exc}")

    # ---------------------------------------------------------------------- write

    def record(self, report: Report) -> None:
        """Record a run and its nodes in one transaction; a run already recorded is left as it is."""

        blob = zlib.compress(encode(report, indent=0), 6)
        run_row = (
            report.run_id, report.started_at, report.finished_at, report.command, report.tier,
            report.config_digest, report.status.value, report.host, len(report.nodes),
            json.dumps(report.summary, sort_keys=True), blob,
        )
        try:
            db = self.db
            with _write_transaction(db):
                cur = db.execute(
                    "INSERT OR IGNORE INTO runs (run_id, started_at, finished_at, command, tier, config_digest, "
                    "status, host, node_count, summary, report) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    run_row,
                )
                if cur.rowcount:
                    run = cur.lastrowid
                    db.executemany(
                        "INSERT OR REPLACE INTO run_nodes (node, started_at, run, status, fabric) "
                        "VALUES (?, ?, ?, ?, ?)",
                        ((n.node, report.started_at, run, n.status.value, n.fabric) for n in report.nodes),
                    )
                    if run is not None:
                        recurrence.insert_xids(db, report, run)
        except sqlite3.Error as exc:
            raise self._fail("record the run", exc) from None

    def prune(self, keep: int) -> int:
        """Delete all but the newest `keep` runs; returns how many were deleted."""
        if keep < 0:
            raise HcError(f"history: cannot keep {keep} runs")
        try:
            db = self.db
            with _write_transaction(db):
                old = "SELECT id FROM runs ORDER BY started_at DESC, id DESC LIMIT -1 OFFSET ?"
                db.execute(f"DELETE FROM run_nodes WHERE run IN ({old})", (keep,))
                deleted = db.execute(f"DELETE FROM runs WHERE id IN ({old})", (keep,)).rowcount
        except sqlite3.Error as exc:
            raise self._fail("prune", exc) from None
        return deleted

    # ----------------------------------------------------------------------- read

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self.db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._fail("read", exc) from None

    def _report(self, run_id: str, blob: bytes) -> Report:
        try:
            data = zlib.decompress(blob)
        except zlib.error as exc:
            raise HcError(f"history {self.path}: run {run_id} is damaged: {exc}") from None
        return decode(data, f"history {self.path} run {run_id}")

    def previous(self, report: Report) -> Report | None:
        """The latest run of the same command and tier that started before `report`."""
        rows = self._rows(
            "SELECT run_id, report FROM runs WHERE command = ? AND tier = ? AND run_id != ? "
            "AND (started_at < ? OR (started_at = ? AND run_id < ?)) "
            "ORDER BY started_at DESC, run_id DESC LIMIT 1",
            (report.command, report.tier, report.run_id, report.started_at, report.started_at, report.run_id),
        )
        return self._report(*rows[0]) if rows else None

    def last(self, n: int, command: str | None = None) -> list[Report]:
        """The newest `n` runs (of `command`, where given), newest first."""
        where, params = ("WHERE command = ?", (command,)) if command else ("", ())
        rows = self._rows(f"SELECT run_id, report FROM runs {where} ORDER BY started_at DESC, id DESC LIMIT ?",
                          (*params, max(n, 0)))
        return [self._report(*row) for row in rows]

    def get(self, run_id: str) -> Report | None:
        """One recorded run by its run ID."""
        rows = self._rows("SELECT run_id, report FROM runs WHERE run_id = ?", (run_id,))
        return self._report(*rows[0]) if rows else None

    def raw_reports(self, command: str, tier: str, until: str, limit: int) -> list[tuple[str, bytes]]:
        """The newest `limit` runs of `command` and `tier` that started at or before `until`,
        newest first, as (run_id, report JSON) not decoded: a reader that needs a few fields
        of 2,000-node reports (the HTML report's trends) decodes only those."""
        rows = self._rows(
            "SELECT run_id, report FROM runs WHERE command = ? AND tier = ? AND started_at <= ? "
            "ORDER BY started_at DESC, id DESC LIMIT ?", (command, tier, until, max(limit, 0)))
        out = []
        for run_id, blob in rows:
            try:
                out.append((run_id, zlib.decompress(blob)))
            except zlib.error as exc:
                raise HcError(f"history {self.path}: run {run_id} is damaged: {exc}") from None
        return out

    def runs(self, limit: int, command: str | None = None) -> list[RunInfo]:
        """The newest `limit` runs' summaries, newest first, without decoding their reports."""
        where, params = ("WHERE command = ?", (command,)) if command else ("", ())
        rows = self._rows(
            "SELECT run_id, started_at, finished_at, command, tier, status, host, node_count, summary "
            f"FROM runs {where} ORDER BY started_at DESC, id DESC LIMIT ?",
            (*params, max(limit, 0)),
        )
        return [RunInfo(run_id, started_at, finished_at, cmd, tier, status, host, node_count, json.loads(summary))
                for run_id, started_at, finished_at, cmd, tier, status, host, node_count, summary in rows]

    def node_runs(self, node: str, limit: int, command: str | None = None) -> list[NodeRun]:
        """A node's newest `limit` results (in `command`'s runs, where given), newest first."""
        where, params = ("AND r.command = ?", (command,)) if command else ("", ())
        rows = self._rows(
            "SELECT r.run_id, n.started_at, r.command, r.tier, n.status, n.fabric FROM run_nodes n "
            f"JOIN runs r ON r.id = n.run WHERE n.node = ? {where} ORDER BY n.started_at DESC, n.run DESC LIMIT ?",
            (node, *params, max(limit, 0)),
        )
        return [NodeRun(*row) for row in rows]

    def node_statuses(self, nodes: list[str], limit: int, command: str | None = None) -> dict[str, list[str]]:
        """Each node's last `limit` statuses, oldest first (of `command`'s runs, where given).

        One query for all nodes: the names go into a temporary table, and for each the
        index on (node, started_at) is entered at its `limit`-th newest row (CROSS JOIN
        keeps the names as the outer loop; the planner would otherwise scan every row).
        """
        if limit <= 0 or not nodes:
            return {}
        cmd_filter = "AND run IN (SELECT id FROM runs WHERE command = :command)" if command else ""
        sql = f"""
            SELECT n.node, n.started_at, n.run, n.status FROM temp.hc_wanted w
            CROSS JOIN run_nodes n ON n.node = w.name AND n.started_at >= coalesce((
                SELECT started_at FROM run_nodes WHERE node = w.name {cmd_filter}
                ORDER BY started_at DESC LIMIT 1 OFFSET :skip), '')
            {"WHERE n.run IN (SELECT id FROM runs WHERE command = :command)" if command else ""}
        """
        try:
            db = self.db
            db.execute("CREATE TEMP TABLE IF NOT EXISTS hc_wanted (name TEXT PRIMARY KEY)")
            db.execute("DELETE FROM temp.hc_wanted")
            db.executemany("INSERT OR IGNORE INTO temp.hc_wanted (name) VALUES (?)", ((n,) for n in nodes))
            rows = db.execute(sql, {"skip": limit - 1, "command": command}).fetchall()
        except sqlite3.Error as exc:
            raise self._fail("read node statuses", exc) from None
        per_node: dict[str, list[tuple[str, int, str]]] = {}
        for node, started_at, run, status in rows:
            per_node.setdefault(node, []).append((started_at, run, status))
        # runs that started in the same millisecond can put more than `limit` rows past the bound
        return {node: [s for _, _, s in sorted(items)[-limit:]] for node, items in per_node.items()}

    def earlier(self, report: Report, nodes: list[str], limit: int) -> list[str]:
        """The run IDs of the newest `limit` runs (any command) that started before `report`
        and checked any of `nodes`, oldest first (read each with `report_json`).

        Each node's index is entered at its (limit + 1)-th newest row at or before the
        report's start, so a long history is not scanned whole for a few nodes.
        """
        if limit <= 0 or not nodes:
            return []
        sql = """
            SELECT run_id FROM runs WHERE id IN (
                SELECT n.run FROM temp.hc_wanted w
                CROSS JOIN run_nodes n ON n.node = w.name AND n.started_at <= :started AND n.started_at >= coalesce((
                    SELECT started_at FROM run_nodes WHERE node = w.name AND started_at <= :started
                    ORDER BY started_at DESC LIMIT 1 OFFSET :skip), ''))
            AND run_id != :run_id AND (started_at < :started OR (started_at = :started AND run_id < :run_id))
            ORDER BY started_at DESC, run_id DESC LIMIT :limit
        """
        try:
            db = self.db
            db.execute("CREATE TEMP TABLE IF NOT EXISTS hc_wanted (name TEXT PRIMARY KEY)")
            db.execute("DELETE FROM temp.hc_wanted")
            db.executemany("INSERT OR IGNORE INTO temp.hc_wanted (name) VALUES (?)", ((n,) for n in nodes))
            rows = db.execute(sql, {"started": report.started_at, "run_id": report.run_id, "skip": limit + 1,
                                    "limit": limit}).fetchall()
        except sqlite3.Error as exc:
            raise self._fail("read earlier runs", exc) from None
        return [run_id for (run_id,) in reversed(rows)]

    def node_failures(self, nodes: list[str], since: str, until: str, limit: int = 50) -> list[NodeFailure]:
        """The runs that FAILed any of `nodes` between `since` and `until` (timestamps as
        reports write them), oldest first, at most `limit`, with each node's FAIL findings:
        what a job's diagnosis says of its culprits' hosts (diagnose/health.py)."""
        if limit <= 0 or not nodes:
            return []
        marks = ",".join("?" * len(nodes))
        rows = self._rows(
            "SELECT r.run_id, r.command, n.node, n.started_at FROM run_nodes n JOIN runs r ON r.id = n.run "
            f"WHERE n.node IN ({marks}) AND n.status = 'FAIL' AND n.started_at >= ? AND n.started_at <= ? "
            "ORDER BY n.started_at, n.run LIMIT ?", (*nodes, since, until, limit))
        out: list[NodeFailure] = []
        for run_id, command, node, started_at in rows:
            data = self.report_json(run_id)
            if data is None:  # pruned since it was listed
                continue
            try:
                run = typed.decode_json(data, _FailedRun)
            except msgspec.DecodeError as exc:
                raise HcError(f"history {self.path}: run {run_id} is not a report hc reads: {exc}") from None
            findings = [f for n in run.nodes if n.node == node for f in n.findings if f.status is Status.FAIL]
            out.append(NodeFailure(run_id, command, node, started_at, findings))
        return out

    def counter_rises(self, node: str, start: str, end: str, names: frozenset[str], *,
                      allowed: dict[str, int] | None = None, lookback: str = "") -> list[CounterRise]:
        """The error counters (metrics named `names`, per component) that rose on `node` over a
        job's window: its last reading at or before `start` (from `lookback` on, timestamps as
        reports write them) against its last one in [start, end], a rise above `allowed[name]`
        (0 where unset). A counter that went down (reset, a new HCA) is not a rise."""
        rows = self._rows(
            "SELECT r.run_id, n.started_at FROM run_nodes n JOIN runs r ON r.id = n.run "
            "WHERE n.node = ? AND n.started_at >= ? AND n.started_at <= ? ORDER BY n.started_at, n.run LIMIT 500",
            (node, lookback, end))
        before: tuple[str, dict[tuple[str, str], float]] | None = None
        after: tuple[str, dict[tuple[str, str], float]] | None = None
        for run_id, started_at in rows:
            values = self._counters(run_id, frozenset((node,)), names).get(node)
            if not values:
                continue
            if started_at <= start:
                before = (started_at, values)
            else:
                after = (started_at, values)
        if before is None or after is None:
            return []
        out = []
        for key, then in before[1].items():
            now = after[1].get(key)
            component, name = key
            if now is not None and now - then > (allowed or {}).get(name, 0):
                out.append(CounterRise(node, component, name, then, now, before[0], after[0]))
        return out

    def counter_readings(self, nodes: list[str], names: frozenset[str], before: str, limit: int
                         ) -> dict[str, list[CounterReading]]:
        """Each node's readings of the metrics named `names` in its newest `limit` recorded
        runs (any command) that started before `before`, oldest first; a run that read none
        of them is passed over. What the rates and trends between runs are judged on
        (analyses/over_time.py): the history is a file, so they survive hc's restarts.

        Each run is decompressed and decoded once, whichever of the nodes it holds: a
        sweep's nodes share its runs, so judging 2,000 nodes decodes each run once, not
        once per node."""
        if limit <= 0 or not nodes:
            return {}
        started: dict[str, str] = {}
        runs_of: dict[str, list[str]] = {}
        for node in dict.fromkeys(nodes):
            # a few more rows than asked: runs that read none of the counters are passed over
            rows = self._rows(
                "SELECT r.run_id, n.started_at FROM run_nodes n JOIN runs r ON r.id = n.run "
                "WHERE n.node = ? AND n.started_at < ? ORDER BY n.started_at DESC, n.run DESC LIMIT ?",
                (node, before, 2 * limit))
            runs_of[node] = [run_id for run_id, _ in rows]
            started.update(rows)
        wanted = frozenset(runs_of)
        values = {run_id: self._counters(run_id, wanted, names) for run_id in started}
        out: dict[str, list[CounterReading]] = {}
        for node, run_ids in runs_of.items():
            readings = [CounterReading(started[r], values[r][node]) for r in run_ids if values[r].get(node)]
            out[node] = readings[:limit][::-1]
        return out

    def _counters(self, run_id: str, nodes: frozenset[str], names: frozenset[str]
                  ) -> dict[str, dict[tuple[str, str], float]]:
        """The metrics named `names` of each of `nodes` in one recorded run, by (component, name)."""
        data = self.report_json(run_id)
        if data is None:
            return {}
        try:
            run = typed.decode_json(data, _MetricRun)
        except msgspec.DecodeError as exc:
            raise HcError(f"history {self.path}: run {run_id} is not a report hc reads: {exc}") from None
        return {n.node: {(m.component, m.name): float(m.value) for m in n.metrics
                         if m.name in names and isinstance(m.value, (int, float)) and not isinstance(m.value, bool)}
                for n in run.nodes if n.node in nodes}

    # ------------------------------------------------------- Xid recurrences, repairs

    def record_repair(self, repair: Repair) -> bool:
        """Put a repair of a node on record: Xid recurrences, counter rates and trends start again
        from it. False where the same repair (node, time, words) was on record already."""
        try:
            db = self.db
            with _write_transaction(db):
                return recurrence.insert_repair(db, repair)
        except sqlite3.Error as exc:
            raise self._fail("record the repair", exc) from None

    def record_gpu_reset(self, reset: GpuReset) -> None:
        """Put a GPU reset on record: an Xid of that GPU logged after it is a recurrence, as after a reboot."""
        try:
            db = self.db
            with _write_transaction(db):
                recurrence.insert_gpu_reset(db, reset)
        except sqlite3.Error as exc:
            raise self._fail("record the GPU reset", exc) from None

    def gpu_resets(self, node: str) -> list[GpuReset]:
        """`node`'s GPU resets on record, oldest first (the newest 512)."""
        try:
            return recurrence.gpu_resets_of(self.db, node)
        except sqlite3.Error as exc:
            raise self._fail("read GPU resets", exc) from None

    def xid_boots(self, node: str) -> dict[tuple[str, int], list[str]]:
        """(GPU, Xid code) -> the epochs (boot ids, or a boot after a GPU reset: recurrence.epoch_of), oldest
        first, in which `node` reported it since its last repair."""
        try:
            db = self.db
            return recurrence.xid_boots(db, node, recurrence.last_repair_at(db, node))
        except sqlite3.Error as exc:
            raise self._fail("read Xid recurrences", exc) from None

    def last_repairs(self, before: str) -> dict[str, str]:
        """node -> its newest repair on record before `before` (a run's start, as reports write it)."""
        try:
            return recurrence.last_repairs(self.db, before)
        except sqlite3.Error as exc:
            raise self._fail("read repairs", exc) from None

    def repair_times(self) -> dict[str, float]:
        """node -> epoch of its last repair on record: what resumes a drain the policy resumes only after one."""
        try:
            return recurrence.repair_times(self.db)
        except sqlite3.Error as exc:
            raise self._fail("read repairs", exc) from None

    def repair_times_noted(self, notes: list[str]) -> dict[str, float]:
        """repair_times(), or none and a note where they cannot be read: a drain that only a
        repair resumes then stays, and the operator is told why."""
        try:
            return self.repair_times()
        except HcError as exc:
            notes.append(f"repairs not read: {exc}")
            return {}

    def xid_rows(self, node: str, limit: int) -> list[dict[str, Any]]:
        """`node`'s newest `limit` recorded Xids (GPU, code, run, boot id), oldest first."""
        try:
            return recurrence.xid_rows(self.db, node, limit)
        except sqlite3.Error as exc:
            raise self._fail("read Xid recurrences", exc) from None

    def last_repair_at(self, node: str) -> str:
        """When `node`'s newest repair was put on record ("" where none was)."""
        try:
            return recurrence.last_repair_at(self.db, node)
        except sqlite3.Error as exc:
            raise self._fail("read repairs", exc) from None

    def repairs(self, node: str, limit: int) -> list[Repair]:
        try:
            return recurrence.repairs_of(self.db, node, limit)
        except sqlite3.Error as exc:
            raise self._fail("read repairs", exc) from None

    def report_json(self, run_id: str) -> bytes | None:
        """One recorded run's report as JSON, undecoded (for readers that need only part of it)."""
        rows = self._rows("SELECT report FROM runs WHERE run_id = ?", (run_id,))
        if not rows:
            return None
        try:
            return zlib.decompress(rows[0][0])
        except zlib.error as exc:
            raise HcError(f"history {self.path}: run {run_id} is damaged: {exc}") from None

def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (and their extended codes)
    return "locked" in str(exc) or "busy" in str(exc)


def _retry_busy(step: Callable[[], None], deadline: float) -> None:
    """Run `step` until it does not fail with SQLITE_BUSY, or until `deadline`.

    The busy timeout does not cover every lock conflict: two connections that both hold
    a read lock and want to write (two processes switching a brand-new database to WAL
    at once, or creating its schema) would deadlock, so SQLite fails one of them at once
    with "database is locked" without waiting. Retrying from the start after a short,
    jittered sleep lets the other finish first.
    """
    delay = 0.005
    while True:
        try:
            step()
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.25)


@contextlib.contextmanager
def _write_transaction(db: sqlite3.Connection) -> Iterator[None]:
    """BEGIN IMMEDIATE (take the write lock now, not at the first write), then COMMIT, or
    ROLLBACK on any exception: a run is recorded whole or not at all."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def configured_history(settings: HistorySettings, *, must_exist: bool = True) -> History:
    """The configured run history; an HcError where none is kept, or (`must_exist`) none recorded yet."""
    history = History.from_settings(settings)
    if history is None:
        raise HcError("no run history is kept (history.path is null in the config)")
    if must_exist and not history.path.exists():
        raise HcError(f"no run history yet at {history.path}")
    return history


def newest_run(history: History) -> Report:
    """The newest run the history holds (what a report command reads without a REPORT)."""
    with history:
        newest = history.last(1)
    if not newest:
        raise HcError(f"no run recorded in the history at {history.path}")
    return newest[0]


@dataclass(frozen=True)
class HistoryListing:
    """What `hc report history` lists: the recent runs, or one node's recent results."""

    path: Path
    node: str | None  # one node's results (node_runs) rather than the runs
    recorded: bool  # whether the history file exists yet
    runs: list[RunInfo]
    node_runs: list[NodeRun]
    repairs: list[Repair] = field(default_factory=list)  # the node's repairs on record, newest first


def history_listing(settings: HistorySettings, node: str | None, command: str | None, limit: int) -> HistoryListing:
    """The `limit` newest runs (of `command`, where given), or `node`'s newest results in them."""
    history = configured_history(settings, must_exist=False)
    if not history.path.exists():
        return HistoryListing(history.path, node, False, [], [])
    with history:
        if node is not None:
            return HistoryListing(history.path, node, True, [], history.node_runs(node, limit, command),
                                  history.repairs(node, limit))
        return HistoryListing(history.path, None, True, history.runs(limit, command), [])


def history_json(listing: HistoryListing) -> list[dict[str, Any]]:
    """`hc report history --format json`: one object per run (or per node result), newest first."""

    if listing.node is not None:  # the node's results and its repairs, newest first
        return [row for _, row in sorted(
            [(i.started_at, asdict(i)) for i in listing.node_runs]
            + [(r.at, recurrence.repair_entry(r)) for r in listing.repairs], key=lambda kv: kv[0], reverse=True)]
    return [asdict(i) for i in listing.runs]


def history_table(listing: HistoryListing) -> str:
    """`hc report history`: a table of the runs or the node's results, or a line saying there are none."""
    from tabulate import tabulate

    if not listing.recorded:
        return f"no runs recorded yet in {listing.path}"
    if listing.node is not None:
        return _node_table(listing)
    rows = [[r.started_at, r.status, r.command, r.tier, r.node_count,
             ", ".join(f"{n} {s}" for s, n in r.summary.items() if n) or "-", r.host, r.run_id]
            for r in listing.runs]
    return tabulate(rows, headers=["STARTED", "STATUS", "COMMAND", "TIER", "NODES", "COUNTS", "HOST", "RUN"],
                    tablefmt="simple") if rows else "no runs recorded"


def _node_table(listing: HistoryListing) -> str:
    """One node's results with its repairs among them (newest first), then its mean time between failures."""
    from tabulate import tabulate

    rows: list[tuple[str, list[object]]] = [
        (i.started_at, [i.started_at, i.status, i.command, i.tier, i.fabric, i.run_id]) for i in listing.node_runs]
    rows += [(r.at, [r.at, "REPAIR", f"by {r.by}", "", "", r.text]) for r in listing.repairs]
    if not rows:
        return f"no runs of {listing.node} recorded"
    table = tabulate([row for _, row in sorted(rows, key=lambda kv: kv[0], reverse=True)],
                     headers=["STARTED", "STATUS", "COMMAND", "TIER", "FABRIC", "RUN"], tablefmt="simple",
                     maxcolwidths=[None, None, None, None, None, 60])
    return f"{table}\n{recurrence.mtbf_line([(i.started_at, i.status) for i in listing.node_runs])}"


def record_run(report: Report, settings: HistorySettings, history: History | None = None) -> str | None:
    """Record `report` and prune to `keep_runs`, in `history` where the run opened it already
    (closed after), else in the configured one; a warning for the operator instead of raising."""
    history = history if history is not None else History.from_settings(settings)
    if history is None:
        return None
    try:
        with history:
            history.record(report)
            history.prune(settings.keep_runs)
    except HcError as exc:
        return f"run not recorded in history: {exc}"
    return None
