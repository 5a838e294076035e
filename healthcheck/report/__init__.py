"""Reports: the versioned JSON document, atomic writes, tables for humans.

The back-ends a run writes to only when it chooses them are loaded here by import path,
at the call that needs them: the table (printed only when the run prints one; the hooks
print none unless --format is given), the Prometheus textfile (when the config or
--prometheus names a directory) and the run history (a SQLite file, when the config names
one and the run records). So a prologue that does none of these imports none of them
(their import costs more than a quick tier's checks). `BACKENDS` names them, as
cli.COMMANDS names the subcommands; the functions below are the typed entry points.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from healthcheck.core.config.schema import HistorySettings, PrometheusSettings
    from healthcheck.core.model import Report
    from healthcheck.report.history import History

BACKENDS: dict[str, str] = {
    "table": "healthcheck.report.table",
    "prometheus": "healthcheck.report.prometheus",
    "history": "healthcheck.report.history",
}


def backend(name: str) -> ModuleType:
    """The module of back-end `name`, imported on first use."""
    return importlib.import_module(BACKENDS[name])


def render_table(report: Report, *, width: int | None = None, colour: bool = False) -> str:
    """report.table.render: the report for a person."""
    text: str = backend("table").render(report, width=width, colour=colour)
    return text


def check_textfile_dir(directory: str | os.PathLike[str]) -> Path:
    """report.prometheus.check_directory: the textfile directory, or WriteError."""
    path: Path = backend("prometheus").check_directory(directory)
    return path


def export_prometheus(report: Report, directory: str | os.PathLike[str], settings: PrometheusSettings | None = None,
                      command: str | None = None) -> Path:
    """report.prometheus.export: `<directory>/hc-<command>.prom`, written atomically."""
    path: Path = backend("prometheus").export(report, directory, settings, command=command)
    return path


def open_history(path: Path) -> History:
    """report.history.History: the run history in `path` (an HcError if it cannot be opened;
    an ImportError where this Python has no sqlite3)."""
    history: History = backend("history").History(path)
    return history


def record_run(report: Report, settings: HistorySettings, history: History | None = None) -> str | None:
    """report.history.record_run: record the run (in `history` where the run opened it); a
    warning for the operator, never a raise."""
    warning: str | None = backend("history").record_run(report, settings, history)
    return warning
