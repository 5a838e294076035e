"""Fleet-size reports in bounded memory (issue 22): `hc report show`, `hc report diff` and
`hc baseline` read only what they use (report/fleetread.py), and what they print is what
reading the whole report printed."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import msgspec
import pytest
from big_reports import write_fleet_report
from click.testing import CliRunner
from support import run_hc

from healthcheck.cli import cli
from healthcheck.core import typed
from healthcheck.core.model import NodeResult, Report
from healthcheck.report.diff import diff, render_diff, to_json
from healthcheck.report.jsonio import decode, encode
from healthcheck.report.table import render

N = 300


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("fleet")
    older = write_fleet_report(base / "a.json", N, run=0, seed=0, slow={"gpu00007": 0.7})
    newer = write_fleet_report(base / "b.json", N, run=1, seed=1, slow={"gpu00011": 0.6})
    return older, newer


class Decodes:
    """Every type decoded whole through core.typed (the one way hc decodes), by name."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.types: list[str] = []
        real_decode, real_decoder = typed.decode_json, typed.decoder

        def decode_json(data: Any, tp: Any) -> Any:
            self.types.append(getattr(tp, "__name__", str(tp)))
            return real_decode(data, tp)

        def decoder(tp: Any) -> Any:
            inner = real_decoder(tp)
            name = getattr(tp, "__name__", str(tp))
            types = self.types

            class Counting:
                def decode(self, data: Any) -> Any:
                    types.append(name)
                    return inner.decode(data)

            return Counting()

        monkeypatch.setattr(typed, "decode_json", decode_json)
        monkeypatch.setattr(typed, "decoder", decoder)


def hc(*args: str) -> Any:
    return CliRunner().invoke(cli, list(args), env={"COLUMNS": None, "NO_COLOR": "1", "HC_CONFIG": None})


def test_show_as_a_table_reads_no_node_whole_and_prints_what_the_whole_report_does(runs, monkeypatch):
    older, _ = runs
    expected = render(decode(older.read_bytes(), str(older))) + "\n"
    decodes = Decodes(monkeypatch)
    shown = hc("report", "show", str(older))
    assert shown.exit_code == 0, shown.output
    assert shown.output == expected
    assert "Report" not in decodes.types and "NodeResult" not in decodes.types, decodes.types


def test_show_as_json_is_the_report_as_hc_wrote_it_decoded_one_node_at_a_time(runs, monkeypatch):
    older, _ = runs
    decodes = Decodes(monkeypatch)
    shown = hc("report", "show", "--format", "json", str(older))
    assert shown.exit_code == 0, shown.output
    assert shown.stdout_bytes == older.read_bytes()
    assert "Report" not in decodes.types and decodes.types.count("NodeResult") == 2 * N  # checked, then written


def test_show_as_json_of_a_report_without_nodes_and_of_an_old_one() -> None:
    from healthcheck.report import fleetread

    report = Report(run_id="r", hc_version="0", command="sweep", tier="deep", config_digest="", config_path="",
                    started_at="2026-11-01T02:00:00Z", finished_at="2026-11-01T02:00:00Z", duration_s=0.0,
                    host="h", status="SKIP", nodes=[])
    data = encode(report)
    out = io.BytesIO()
    fleetread.write_json(fleetread.raw_nodes(data, "r.json"), out)
    assert out.getvalue() == data
    old = data.replace(b'"hc.report/2"', b'"hc.report/1"')
    out = io.BytesIO()
    fleetread.write_json(fleetread.raw_nodes(old, "r.json"), out)
    assert out.getvalue() == data  # upgraded in memory, as `decode` does


def test_a_bad_node_is_one_line_naming_it_not_a_traceback(runs, tmp_path):
    older, _ = runs
    bad = tmp_path / "bad.json"
    bad.write_bytes(older.read_bytes().replace(b'"status": "PASS"', b'"status": "MAYBE"', 1))
    shown = run_hc("report", "show", "--format", "json", str(bad))
    assert shown.returncode == 4 and shown.stdout == b"", shown.stdout[:200]  # never half a report
    assert shown.stderr.decode().count("\n") == 1 and "$.nodes[0]" in shown.stderr.decode(), shown.stderr


def test_diff_reads_no_metrics_and_finds_every_change_the_whole_reports_do(runs, monkeypatch):
    older, newer = runs
    whole = diff(decode(older.read_bytes()), decode(newer.read_bytes()))
    assert whole.new_failures and whole.fixed  # the two runs differ
    decodes = Decodes(monkeypatch)
    shown = hc("report", "diff", "--format", "json", str(older), str(newer))
    assert shown.exception is None, shown.output  # (the exit code is hc main's: 2 for new failures)
    assert shown.stdout_bytes == to_json(whole)
    assert "Report" not in decodes.types and "NodeResult" not in decodes.types, decodes.types
    table = hc("report", "diff", str(newer), str(older))  # swapped: compared in time order, and said
    assert render_diff(diff(decode(newer.read_bytes()), decode(older.read_bytes()))) in table.output


def test_views_keep_what_they_read() -> None:
    from healthcheck.report import fleetread

    node = NodeResult(node="gpu01", fabric="f", status="FAIL", mode="agentless", error="unreachable")
    report = Report(run_id="r", hc_version="0", command="sweep", tier="deep", config_digest="", config_path="",
                    started_at="2026-11-01T02:00:00Z", finished_at="2026-11-01T02:00:00Z", duration_s=0.0,
                    host="h", status="FAIL", nodes=[node], summary={"FAIL": 1})
    data = encode(report)
    assert fleetread.summary(data, "r").nodes == [node]
    assert fleetread.verdicts(data, "r") == report
    assert msgspec.structs.asdict(fleetread.raw_nodes(data, "r").head) == {**msgspec.structs.asdict(report),
                                                                           "nodes": []}


def test_baseline_learns_node_by_node_what_it_learned_from_whole_reports(runs, tmp_path, monkeypatch):
    from healthcheck.report import baseline

    older, newer = runs
    config = older.parent / "a-config" / "hc.yaml"

    def learned(out: Path) -> list[str]:
        result = hc("baseline", str(older), str(newer), "--fabric", "sim-h100", "--config", str(config),
                    "-o", str(out))
        assert result.exception is None, result.output
        return [line for line in out.read_text().splitlines() if "written" not in line and " at 20" not in line]

    def whole(paths):  # what read_reports did: each report decoded whole
        for path in paths:
            yield str(path), decode(path.read_bytes(), str(path))

    with monkeypatch.context() as m:
        m.setattr(baseline, "read_reports", whole)
        expected = learned(tmp_path / "whole" / "sim-h100.yaml")
    decodes = Decodes(monkeypatch)
    assert learned(tmp_path / "streamed" / "sim-h100.yaml") == expected
    assert "Report" not in decodes.types and decodes.types.count("NodeResult") == 2 * N, decodes.types
