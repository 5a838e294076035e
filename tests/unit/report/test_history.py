"""Run history in SQLite: round trip, previous run, node statuses, concurrency, pruning, bad files."""

from __future__ import annotations

import datetime as dt
import multiprocessing
import sqlite3
import zlib

import msgspec
import pytest

from healthcheck.core.config.schema import HistorySettings
from healthcheck.core.errors import HcError
from healthcheck.core.model import NodeResult, Report
from healthcheck.core.status import Status, worst
from healthcheck.report.history import History, record_run

T0 = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)


def make(k: int, statuses: dict[str, Status], command: str = "sweep", tier: str = "quick") -> Report:
    """Run number k (one minute apart), with these node statuses."""
    start = T0 + dt.timedelta(minutes=k)
    stamp = start.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    nodes = [NodeResult(node=n, fabric="f1", status=s) for n, s in sorted(statuses.items())]
    return Report(run_id=start.strftime("%Y%m%dT%H%M%SZ") + f"-{k:06x}", hc_version="0.1", command=command, tier=tier,
                  config_digest="sha256:" + "0" * 64, config_path="/x", started_at=stamp, finished_at=stamp,
                  duration_s=1.0, host="mgmt1", status=worst((n.status for n in nodes), default=Status.SKIP),
                  nodes=nodes, summary={"PASS": sum(s is Status.PASS for s in statuses.values())})


def test_round_trip_and_last(tmp_path):
    path = tmp_path / "sub" / "dir" / "history.sqlite"  # parents are created
    with History(path) as h:
        r1 = make(1, {"n1": Status.PASS, "n2": Status.FAIL})
        r2 = make(2, {"n1": Status.PASS}, command="node")
        h.record(r1)
        h.record(r2)
        h.record(r2)  # recording a run twice keeps one
        assert h.last(5) == [r2, r1]
        assert h.last(5, command="sweep") == [r1]
        assert h.last(1) == [r2]
        assert h.get(r1.run_id) == r1
        infos = h.runs(10)
        assert [i.run_id for i in infos] == [r2.run_id, r1.run_id]
        assert infos[1].node_count == 2 and infos[1].status == "FAIL" and infos[1].summary == {"PASS": 1}
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "1"
    blob = db.execute("SELECT report FROM runs LIMIT 1").fetchone()[0]
    assert zlib.decompress(blob).startswith(b'{"schema":"hc.report/2"')


def test_previous_same_command_and_tier(tmp_path):
    with History(tmp_path / "h.sqlite") as h:
        a = make(1, {"n1": Status.PASS})
        b = make(2, {"n1": Status.PASS}, tier="standard")
        c = make(3, {"n1": Status.PASS}, command="node")
        d = make(4, {"n1": Status.FAIL})
        for r in (d, c, b, a):  # recorded out of order: time decides, not insertion
            h.record(r)
        assert h.previous(d) == a
        assert h.previous(a) is None
        assert h.previous(b) is None and h.previous(c) is None
        later = make(9, {"n1": Status.PASS})  # not recorded: previous is still the latest before it
        assert h.previous(later) == d


def test_node_statuses_oldest_first_limited(tmp_path):
    seq = [Status.PASS, Status.FAIL, Status.PASS, Status.FAIL, Status.WARN, Status.PASS]
    with History(tmp_path / "h.sqlite") as h:
        for k, s in enumerate(seq):
            h.record(make(k, {"n1": s, "n2": Status.PASS, **({"n3": Status.FAIL} if k == 0 else {})}))
        h.record(make(10, {"n1": Status.FAIL}, command="node"))
        got = h.node_statuses(["n1", "n2", "n3", "nope"], 4)
        assert got == {"n1": ["PASS", "FAIL", "WARN", "PASS", "FAIL"][-4:], "n2": ["PASS"] * 4, "n3": ["FAIL"]}
        assert h.node_statuses(["n1"], 3, command="sweep") == {"n1": ["FAIL", "WARN", "PASS"]}
        assert h.node_statuses(["n1"], 0) == {} and h.node_statuses([], 5) == {}
        assert [r.status for r in h.node_runs("n1", 2)] == ["FAIL", "PASS"]


def test_node_statuses_for_many_nodes_cost_linear_time(tmp_path):
    """One query for any number of nodes: 10,000 cost about ten times what 1,000 do (no
    absolute time is asserted on a shared machine; a query per node would still be linear,
    but a scan of the history per node is quadratic and fails)."""
    from support import assert_linear

    names = [f"gpu{i:05d}" for i in range(10_000)]
    with History(tmp_path / "h.sqlite") as h:
        for k in range(6):
            h.record(make(k, {n: (Status.FAIL if (k + i) % 7 == 0 else Status.PASS) for i, n in enumerate(names)}))
        got = h.node_statuses(names, 5)
        assert_linear(lambda ns: h.node_statuses(ns, 5), names[:1_000], names, what="History.node_statuses")
    assert len(got) == 10_000 and all(len(v) == 5 for v in got.values())
    assert got["gpu00000"] == ["PASS", "PASS", "PASS", "PASS", "PASS"]
    assert got["gpu00002"] == ["PASS", "PASS", "PASS", "PASS", "FAIL"]


def test_prune_keeps_the_newest(tmp_path):
    with History(tmp_path / "h.sqlite") as h:
        reports = [make(k, {"n1": Status.PASS}) for k in range(6)]
        for r in reports:
            h.record(r)
        assert h.prune(4) == 2
        assert [r.run_id for r in h.last(10)] == [r.run_id for r in reversed(reports[2:])]
        assert h.node_statuses(["n1"], 10) == {"n1": ["PASS"] * 4}
        assert h.prune(4) == 0
        assert h.prune(0) == 4 and h.last(10) == []


def _writer(path: str, base: int, count: int) -> None:
    h = History(path)
    for k in range(base, base + count):
        h.record(make(k, {f"n{k % 5}": Status.PASS, "shared": Status.FAIL}))
    h.close()


def test_two_processes_write_at_once(tmp_path):
    path = str(tmp_path / "h.sqlite")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, base, 40)) for base in (0, 1000)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with History(path) as h:
        assert len(h.runs(1000)) == 80
        assert len(h.node_statuses(["shared"], 100)["shared"]) == 80


def test_corrupt_file_is_a_one_line_error(tmp_path):
    path = tmp_path / "h.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(HcError) as exc:
        History(path).record(make(1, {"n1": Status.PASS}))
    assert "\n" not in str(exc.value) and str(path) in str(exc.value)


def test_unwritable_path_is_an_error_and_record_run_warns(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(HcError):
        History(blocker / "sub" / "h.sqlite").last(1)
    warning = record_run(make(1, {"n1": Status.PASS}), HistorySettings(path=str(blocker / "h.sqlite")))
    assert warning and "history" in warning
    assert record_run(make(1, {"n1": Status.PASS}), HistorySettings(path=None)) is None


def test_record_run_prunes(tmp_path):
    settings = HistorySettings(path=str(tmp_path / "h.sqlite"), keep_runs=3)
    for k in range(5):
        assert record_run(make(k, {"n1": Status.PASS}), settings) is None
    with History(tmp_path / "h.sqlite") as h:
        assert len(h.runs(10)) == 3


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "h.sqlite"
    History(path).last(1)
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(HcError, match="schema version 99"):
        History(path).last(1)


def test_damaged_report_blob_is_an_error(tmp_path):
    path = tmp_path / "h.sqlite"
    with History(path) as h:
        h.record(make(1, {"n1": Status.PASS}))
    db = sqlite3.connect(path)
    db.execute("UPDATE runs SET report = x'00112233'")
    db.commit()
    db.close()
    with pytest.raises(HcError, match="damaged"):
        History(path).last(1)


# ------------------------------------------------ first open of a brand-new database


def test_first_open_waits_for_a_concurrent_first_open(tmp_path):
    """Another process in the middle of creating the database holds its write lock. The
    WAL switch needs that lock while holding a read lock, a conflict SQLite reports at
    once ("database is locked") instead of waiting the busy timeout: hc must wait."""
    import threading

    path = tmp_path / "h.sqlite"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # as a concurrent first open does (rollback mode still)
    release = threading.Timer(0.5, lambda: other.execute("COMMIT"))
    release.start()
    try:
        with History(path) as h:
            h.record(make(1, {"n1": Status.PASS}))
            assert [r.run_id for r in h.last(5)] == [make(1, {}).run_id]
    finally:
        release.join()
        other.close()


def _first_opener(path_pattern: str, rounds: int, index: int, barrier, failures) -> None:
    reports = [make(index * 1000, {f"n{index}": Status.PASS, "shared": Status.FAIL})]
    for round_ in range(rounds):
        barrier.wait(60)  # every process opens the brand-new file at the same moment
        try:
            with History(path_pattern.format(round_)) as h:
                h.runs(1)  # open first, as the flap query of a run does, before anything else
                for r in reports:
                    h.record(r)
        except Exception as exc:
            failures.put(f"round {round_}: {exc}")


def test_many_processes_create_and_write_a_new_database_at_once(tmp_path):
    """Many processes, started together through a barrier, each opening (creating) a
    brand-new database and writing to it; several rounds, a new file each."""
    procs_n, rounds = 12, 25
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(procs_n)
    failures = ctx.Queue()
    pattern = str(tmp_path / "h{}.sqlite")
    procs = [ctx.Process(target=_first_opener, args=(pattern, rounds, i, barrier, failures)) for i in range(procs_n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
        assert p.exitcode == 0
    errors = []
    while not failures.empty():
        errors.append(failures.get())
    assert errors == []
    for round_ in range(rounds):
        with History(pattern.format(round_)) as h:
            assert len(h.runs(1000)) == procs_n


def test_counter_readings_decode_each_run_once_for_every_node(tmp_path, monkeypatch):
    from healthcheck.core.model import Metric

    nodes = [f"n{i}" for i in range(50)]
    with History(tmp_path / "h.sqlite") as h:
        for k in range(3):
            r = make(k, {n: Status.PASS for n in nodes})
            h.record(msgspec.structs.replace(r, nodes=[msgspec.structs.replace(
                n, metrics=[Metric("symbol_error", 10 * k, component="mlx5_0/1"), Metric("other", 1)])
                for n in r.nodes]))
        reads = []
        real = h.report_json
        monkeypatch.setattr(h, "report_json", lambda run_id: reads.append(run_id) or real(run_id))
        got = h.counter_readings(nodes, frozenset({"symbol_error"}), "2027-01-01T00:00:00.000Z", 2)
    assert len(reads) == 3  # not 3 x 50
    assert set(got) == set(nodes)
    assert [r.values for r in got["n7"]] == [{("mlx5_0/1", "symbol_error"): 10.0}, {("mlx5_0/1", "symbol_error"): 20.0}]
    assert got["n7"][0].started_at < got["n7"][1].started_at  # oldest first, the newest 2
