"""A run of this one node against its recorded runs: `hc health` and `hc node --local`.

Its Xid recurrences across boots and GPU resets are escalated (escalate.py), its counters
judged by their rates and trends (over_time.py), and, once the caller has acted, the run is
recorded, all through one open of the run history (`open_for`): reading it for each step
opened and initialised the SQLite file once per step. Loaded by import path: a prologue or
epilogue neither reads nor writes the history, nor loads this; nor does a `hc node --local`
that another hc started (`localrun.AGENT_ENV`): the hc that started it judges and records
the whole run.
"""

from __future__ import annotations

from pathlib import Path

from healthcheck.core.config import Config
from healthcheck.core.model import Report
from healthcheck.orchestrate.escalate import escalated_report
from healthcheck.orchestrate.over_time import judge_report
from healthcheck.report import record_run
from healthcheck.report.history import History


def open_for(config: Config) -> History | None:
    """The configured history (opened at its first use, then kept), or None where none is kept."""
    path = config.main.history.path
    return None if path is None else History(Path(path))


def judged(config: Config, report: Report, history: History | None) -> tuple[Report, list[str]]:
    """`report` with its Xid recurrences escalated, then its counters judged against `history`,
    and the notes for the operator (a history that cannot be read: the run's verdicts stand)."""
    notes: list[str] = []
    report = escalated_report(report, history, notes)
    report, over_time_notes = judge_report(config, report, history)
    return report, [*over_time_notes, *notes]


def recorded(config: Config, report: Report, history: History | None) -> str | None:
    """Record the run in `history` (then closed) and prune it; a warning for the operator, never a raise."""
    return record_run(report, config.main.history, history)
