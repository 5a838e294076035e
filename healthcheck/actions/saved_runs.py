"""Saved runs as the `hc report` commands read them: a report file or stdin (an hc.report, or
a job's hc.diagnosis read as a report), two runs to compare, and the HTML page of one.

It sits above report/ and diagnose/ because reading a diagnosis as a report needs both.
Reads report files, stdin, the config and the run history; writes only the HTML page asked for.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from healthcheck.core.atomic import write_atomic
from healthcheck.core.config import load_config
from healthcheck.core.errors import HcError
from healthcheck.diagnose.verdict import decode as decode_diagnosis
from healthcheck.diagnose.verdict import job_result
from healthcheck.report.build import iso, job_report, utc_now
from healthcheck.report.diff import diff
from healthcheck.report.history import History, configured_history, newest_run
from healthcheck.report.html import config_floors, followed_nodes, merge_floors, render_html, report_floors
from healthcheck.report.jsonio import decode, read_bytes, read_stdin_bytes, schema_of
from healthcheck.report.trend import from_history

if TYPE_CHECKING:
    from healthcheck.core.model import Report
    from healthcheck.diagnose.verdict import Verdict
    from healthcheck.report.diff import ReportDiff


def read_report(path: Path, stdin: BinaryIO | None = None) -> Report:
    """A report from a file, or from `stdin` (default: the process's) for '-': an hc.report, or an
    hc.diagnosis (a job's diagnosis, read as a report whose one result is the job: `diagnosis_report`)."""

    from_stdin = str(path) == "-"
    data = read_stdin_bytes(stdin or sys.stdin.buffer) if from_stdin else read_bytes(path)
    source = "stdin" if from_stdin else str(path)
    if schema_of(data).startswith("hc.diagnosis/"):
        return diagnosis_report(decode_diagnosis(data, source))
    return decode(data, source)


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
        return read_report(old), read_report(new)
    with configured_history(load_config(config_path).main.history) as history:
        if old is not None:  # one file: it is the newer run
            newer = read_report(old)
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
