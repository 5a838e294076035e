"""Saved runs as `hc report` reads them (actions/saved_runs.py), and the history's listing
(report/history.py), in-process."""

from __future__ import annotations

import datetime as dt
import io
from pathlib import Path

import pytest
from support import FIXTURES

from healthcheck.actions.saved_runs import diagnosis_report, diff_runs, read_report, runs_to_compare, write_html
from healthcheck.core.config.schema import HistorySettings
from healthcheck.core.errors import HcError
from healthcheck.core.model import NodeResult, Report
from healthcheck.core.status import Status, worst
from healthcheck.diagnose.sources import collect
from healthcheck.diagnose.verdict import build
from healthcheck.diagnose.verdict import encode as encode_diagnosis
from healthcheck.report.history import (
    History,
    configured_history,
    history_json,
    history_listing,
    history_table,
    newest_run,
)
from healthcheck.report.jsonio import encode

T0 = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)


def run(k: int, statuses: dict[str, Status], command: str = "sweep") -> Report:
    """Run number k (one minute apart), with these node statuses."""
    start = T0 + dt.timedelta(minutes=k)
    stamp = start.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    nodes = [NodeResult(node=n, fabric="f1", status=s) for n, s in sorted(statuses.items())]
    return Report(run_id=start.strftime("%Y%m%dT%H%M%SZ") + f"-{k:06x}", hc_version="0.1", command=command,
                  tier="quick", config_digest="sha256:" + "0" * 64, config_path="/x", started_at=stamp,
                  finished_at=stamp, duration_s=1.0, host="mgmt1",
                  status=worst((n.status for n in nodes), default=Status.SKIP), nodes=nodes, summary={})


def history_with(path: Path, *reports: Report) -> HistorySettings:
    with History(path) as history:
        for report in reports:
            history.record(report)
    return HistorySettings(path=str(path))


def config_for(tmp_path: Path, history: Path) -> Path:
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"history:\n  path: {history}\n")
    return cfg


def test_read_report_reads_a_file_stdin_and_a_diagnosis(tmp_path: Path) -> None:
    report = run(1, {"gpu001": Status.FAIL})
    path = tmp_path / "r.json"
    path.write_bytes(encode(report))
    assert read_report(path).run_id == report.run_id
    assert read_report(Path("-"), io.BytesIO(encode(report))).run_id == report.run_id
    verdict = build(collect([FIXTURES / "diagnose-live" / "kill-torchrun"]))
    diag = tmp_path / "diag.json"
    diag.write_bytes(encode_diagnosis(verdict))
    as_report = read_report(diag)
    assert as_report.command == "diagnose" and [g.kind for g in as_report.groups] == ["job"]
    assert as_report == diagnosis_report(verdict)


def test_two_files_are_diffed_in_the_order_they_ran(tmp_path: Path) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_bytes(encode(run(1, {"gpu001": Status.PASS})))
    new.write_bytes(encode(run(2, {"gpu001": Status.FAIL})))
    never_read = tmp_path / "never-read.yaml"  # two files need no config
    older, newer = runs_to_compare(new, old, None, never_read)
    assert (older.run_id, newer.run_id) == (run(2, {}).run_id, run(1, {}).run_id)  # as named
    d = diff_runs(new, old, None, never_read)
    assert (d.old.run_id, d.new.run_id, d.swapped) == (run(1, {}).run_id, run(2, {}).run_id, True)


def test_one_file_or_none_is_compared_with_the_run_before_it_in_the_history(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    first, second = run(1, {"gpu001": Status.PASS}), run(2, {"gpu001": Status.PASS})
    history_with(db, first, second)
    cfg = config_for(tmp_path, db)
    older, newer = runs_to_compare(None, None, None, cfg)
    assert (older.run_id, newer.run_id) == (first.run_id, second.run_id)
    third = tmp_path / "third.json"
    third.write_bytes(encode(run(3, {"gpu001": Status.FAIL})))
    d = diff_runs(third, None, None, cfg)
    assert (d.old.run_id, d.new.run_id) == (second.run_id, run(3, {}).run_id)
    with pytest.raises(HcError, match="no run of 'node' recorded"):
        runs_to_compare(None, None, "node", cfg)
    lone = tmp_path / "lone.sqlite"
    history_with(lone, first)
    with pytest.raises(HcError, match="no earlier run of 'sweep'"):
        runs_to_compare(None, None, None, config_for(tmp_path, lone))


def test_write_html_writes_the_page_of_a_file_or_of_the_newest_run(tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    history_with(db, run(1, {"gpu001": Status.PASS}), run(2, {"gpu002": Status.FAIL}))
    cfg = config_for(tmp_path, db)
    page = tmp_path / "page.html"
    write_html(None, page, 10, cfg)
    assert page.read_text().startswith("<!DOCTYPE html>") and "gpu002" in page.read_text()
    file = tmp_path / "r.json"
    file.write_bytes(encode(run(3, {"gpu003": Status.PASS})))
    write_html(file, page, 10, cfg)
    assert "gpu003" in page.read_text()


def test_configured_history_and_newest_run(tmp_path: Path) -> None:
    with pytest.raises(HcError, match="no run history is kept"):
        configured_history(HistorySettings(path=None))
    missing = HistorySettings(path=str(tmp_path / "none.sqlite"))
    with pytest.raises(HcError, match="no run history yet at"):
        configured_history(missing)
    assert configured_history(missing, must_exist=False).path == tmp_path / "none.sqlite"
    settings = history_with(tmp_path / "h.sqlite", run(1, {"a": Status.PASS}), run(2, {"b": Status.PASS}))
    assert newest_run(configured_history(settings)).run_id == run(2, {}).run_id
    empty = History(tmp_path / "empty.sqlite")
    with empty:
        empty.runs(1)  # creates the file, records nothing
    with pytest.raises(HcError, match="no run recorded in the history"):
        newest_run(empty)


def test_history_listing_of_runs_of_a_node_and_of_nothing_yet(tmp_path: Path) -> None:
    none_yet = history_listing(HistorySettings(path=str(tmp_path / "none.sqlite")), None, None, 20)
    assert not none_yet.recorded and history_json(none_yet) == []
    assert history_table(none_yet) == f"no runs recorded yet in {tmp_path / 'none.sqlite'}"
    settings = history_with(tmp_path / "h.sqlite", run(1, {"a": Status.PASS}),
                            run(2, {"a": Status.FAIL}, command="node"), run(3, {"b": Status.PASS}))
    runs = history_listing(settings, None, None, 2)
    assert [r["run_id"] for r in history_json(runs)] == [run(3, {}).run_id, run(2, {}).run_id]
    assert history_table(runs).split()[:2] == ["STARTED", "STATUS"]
    node = history_listing(settings, "a", "node", 20)
    assert [(r["status"], r["command"]) for r in history_json(node)] == [("FAIL", "node")]
    assert history_table(history_listing(settings, "zz", None, 20)) == "no runs of zz recorded"
    assert history_table(history_listing(settings, None, "nope", 20)) == "no runs recorded"
