"""Saved runs as the `hc report` commands read them: a report file or stdin (an hc.report, or
a job's hc.diagnosis read as a report), two runs to compare, and the HTML page of one.

It sits above report/ and diagnose/ because reading a diagnosis as a report needs both.
Reads report files, stdin, the config and the run history; writes only the HTML page asked for.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from healthcheck.core.atomic import write_atomic
from healthcheck.core.config import load_config
from healthcheck.core.errors import HcError
from healthcheck.core.inputs import FLEET_REPORT_MAX_BYTES, REPORT_MAX_BYTES, InputTooLarge
from healthcheck.diagnose.verdict import decode as decode_diagnosis
from healthcheck.diagnose.verdict import job_result
from healthcheck.report import fleetread
from healthcheck.report.build import iso, job_report, utc_now
from healthcheck.report.diff import diff
from healthcheck.report.history import History, configured_history, newest_run
from healthcheck.report.html import config_floors, followed_nodes, merge_floors, render_html, report_floors
from healthcheck.report.jsonio import decode, encode, read_bytes, read_stdin_bytes, schema_of
from healthcheck.report.trend import from_history

if TYPE_CHECKING:
    from healthcheck.core.model import Report
    from healthcheck.diagnose.verdict import Verdict
    from healthcheck.report.diff import ReportDiff


def read_report(path: Path, stdin: BinaryIO | None = None) -> Report:
    """A report from a file, or from `stdin` (default: the process's) for '-': an hc.report, or an
    hc.diagnosis (a job's diagnosis, read as a report whose one result is the job: `diagnosis_report`)."""

    return _as_report(*_read(path, stdin, REPORT_MAX_BYTES), decode)


def read_report_as(path: Path, view: Callable[[bytes, str], Report], stdin: BinaryIO | None = None) -> Report:
    """`read_report` through `view` (fleetread.summary or fleetread.verdicts, which do not
    decode every node whole), up to FLEET_REPORT_MAX_BYTES: a fleet-size report."""

    return _as_report(*_read(path, stdin, FLEET_REPORT_MAX_BYTES), view)


def summary_report(path: Path, stdin: BinaryIO | None = None) -> Report:
    """The report `hc report show` tabulates: nodes as fleetread.summary reads them (name,
    fabric, status), except in a one-node report, whose checks the table shows."""

    data, source = _read(path, stdin, FLEET_REPORT_MAX_BYTES)
    report = _as_report(data, source, fleetread.summary)
    return _as_report(data, source, decode) if len(report.nodes) == 1 else report


def write_report_json(path: Path, out: BinaryIO, stdin: BinaryIO | None = None) -> None:
    """`hc report show --format json`: the report as hc writes it, one node decoded at a time."""

    data, source = _read(path, stdin, FLEET_REPORT_MAX_BYTES)
    if schema_of(data).startswith("hc.diagnosis/"):
        out.write(encode(_as_report(data, source, decode)))
    else:
        fleetread.write_json(fleetread.raw_nodes(data, source), out)


def _read(path: Path, stdin: BinaryIO | None, max_bytes: int) -> tuple[bytes, str]:
    if str(path) == "-":
        return read_stdin_bytes(stdin or sys.stdin.buffer, max_bytes), "stdin"
    return read_bytes(path, max_bytes), str(path)


def _as_report(data: bytes, source: str, view: Callable[[bytes, str], Report]) -> Report:
    if schema_of(data).startswith("hc.diagnosis/"):
        if len(data) > REPORT_MAX_BYTES:  # decoded whole: held to the bound of a whole decode
            raise InputTooLarge(f"{source}: diagnosis is larger than the {REPORT_MAX_BYTES} bytes hc reads")
        return diagnosis_report(decode_diagnosis(data, source))
    return view(data, source)


def diagnosis_report(verdict: Verdict) -> Report:
    """A job's diagnosis as a report: its findings (diag.E0xx) in one result of kind "job",
    which tickets, the HTML page and the Prometheus export read as they read a pair's."""

    return job_report(job_result(verdict), command="diagnose", started_at=verdict.collected_at,
                      hc_version=verdict.hc_version or "unknown")


def runs_to_compare(old: Path | None, new: Path | None, command: str | None,
                    config_path: Path | None) -> tuple[Report, Report]:
    """The two runs `hc report diff` compares, as named: two files; one file (the newer run)
    and the run before it in the history; or the history's newest run (of `command`) and the
    one before it. The config is read only where the history is."""

    if old is not None and new is not None:
        return read_report_as(old, fleetread.verdicts), read_report_as(new, fleetread.verdicts)
    with configured_history(load_config(config_path).main.history) as history:
        if old is not None:  # one file: it is the newer run
            newer = read_report_as(old, fleetread.verdicts)
        else:
            runs = history.last(1, command)
            if not runs:
                what = f"run of {command!r}" if command else "run"
                raise HcError(f"no {what} recorded in the history at {history.path}")
            newer = runs[0]
        older = history.previous(newer)
        if older is None:
            raise HcError(f"no earlier run of {newer.command!r} (tier {newer.tier}) than {newer.run_id} "
                          f"in the history at {history.path}")
    return older, newer


def diff_runs(old: Path | None, new: Path | None, command: str | None, config_path: Path | None) -> ReportDiff:
    """What changed between the runs `runs_to_compare` picks, in the order they ran."""

    older, newer = runs_to_compare(old, new, command, config_path)
    return diff(older, newer)  # in the order they ran, whatever order they were named in


def write_html(file: Path | None, output: Path, runs: int, config_path: Path | None) -> None:
    """Write the HTML page of the report in `file` (the history's newest run for None) to
    `output`: floors from the run and the config, history over the last `runs` runs."""

    history: History | None
    if file is None:
        config = load_config(config_path)
        history = configured_history(config.main.history)
        report = newest_run(history)
    else:
        report = read_report(file)  # before the config: an unreadable report is the error named
        config = load_config(config_path)
        history = History.from_settings(config.main.history)
    floors, notes = config_floors(config, {n.fabric for n in report.nodes})
    if floors and config.digest != report.config_digest:
        notes.append(f"floors the run's findings do not name are from the config at {config.path}, which is "
                     "not the one this run used (its digest differs)")
    trend = from_history(history, report, followed_nodes(report), runs)
    page = render_html(report, floors=merge_floors(report_floors(report), floors), trend=trend, notes=notes,
                       generated_at=iso(utc_now()))
    write_atomic(output, page.encode("utf-8"))
