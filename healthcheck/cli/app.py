"""The App object every command uses: loads config once, owns output and exit codes.

No click here: the hooks and `hc node --local` use App without it (cli/lean.py); the
shared click options are in cli/options.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgspec

from healthcheck.cli.echo import echo
from healthcheck.core import catalogue
from healthcheck.core.config import Config, load_config
from healthcheck.core.errors import ExitCode, HcError
from healthcheck.core.model import Report
from healthcheck.core.nodes import (
    fold,
    this_node_name,  # noqa: F401 -- the CLI's name for it
)
from healthcheck.core.status import Status
from healthcheck.report import check_textfile_dir, render_table
from healthcheck.report import export_prometheus as write_prometheus
from healthcheck.report.build import run_finding, with_run_finding
from healthcheck.report.jsonio import encode, write_atomic

# the width tables are fitted to is kept within these: a terminal reporting 0 or 20 columns
# would wrap every cell into a column of letters, a $COLUMNS of 10**9 is no width at all
MIN_WIDTH, MAX_WIDTH = 40, 1000


def exit_code_for(status: Status, fail_level: str = "fail") -> ExitCode:
    if status is Status.FAIL:
        return ExitCode.FAIL
    if status is Status.ERROR:
        return ExitCode.ERROR
    if status is Status.WARN and fail_level == "warn":
        return ExitCode.WARN
    return ExitCode.OK


class App:
    def __init__(self, config_path: Path | None = None, fmt: str = "table") -> None:
        self.config_path = config_path
        self.format = fmt

    @cached_property
    def config(self) -> Config:
        return load_config(self.config_path)

    def echo(self, text: str = "") -> None:
        echo(text)

    @cached_property
    def width(self) -> int | None:
        return output_width()

    @cached_property
    def colour(self) -> bool:
        return use_colour()

    def emit_json(self, data: Any) -> None:
        sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(data), indent=2) + b"\n")
        sys.stdout.flush()

    def emit_report(self, report: Report, *, output: Path | None = None,
                    lost: Sequence[HcError] = ()) -> Report:
        """Write the JSON report to `output`, show it on stdout in the chosen format, and
        return it as shown: the report, plus one hc.E008 run finding (ERROR) for each
        side output that could not be written (`output`, and the failures in `lost`: an
        explicit --prometheus export).

        `output` goes through core.atomic.write_atomic: atomic for a regular file or a new
        path, written in place for a device or FIFO (a link or directory was refused
        before the run: `check_output`). A failed write is a warning on stderr and a run
        finding, never the end of the command: the checks ran and their verdict stands
        (a FAIL exits 2, and its drain happened already). The exit code comes from the
        status of the report returned, so a run whose --output was lost never exits 0:
        a PASS or WARN becomes ERROR (exit 3), a FAIL stays FAIL (exit 2).
        """

        data = encode(report)
        failures = list(lost)
        if output is not None:
            try:
                write_atomic(output, data)
            except HcError as exc:
                failures.append(HcError(f"--output {exc}"))
        if failures:
            report = report_not_written(report, failures)
            data = encode(report)
        if self.format == "json":
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            echo(render_table(report, width=self.width, colour=self.colour))
        return report


def output_width(environ: Mapping[str, str] = os.environ, stdout: IO[Any] | None = None) -> int | None:
    """How wide the tables may be, on a terminal only: $COLUMNS where it is a number, else the
    terminal's width. Off a terminal None (no wrapping), whatever $COLUMNS says: what a script
    reads from a pipe stays as it always was, and COLUMNS is often exported where nobody
    asked for narrow output (pytest-xdist's workers set it to 80)."""
    if not _is_terminal(stdout):
        return None
    columns = environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return min(int(columns), MAX_WIDTH)

    return min(max(terminal_columns(), MIN_WIDTH), MAX_WIDTH)


def terminal_columns() -> int:
    """shutil.get_terminal_size().columns, without importing shutil (2 ms, and its
    compression modules, of every hook's start-up; nothing else there needs it): $COLUMNS
    where it is a positive integer, else the width of the terminal on the process's
    stdout, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns > 0:
        return columns
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns or 80  # type: ignore[union-attr]
    except (AttributeError, ValueError, OSError):
        return 80


def use_colour(environ: Mapping[str, str] = os.environ, stdout: IO[Any] | None = None) -> bool:
    """Colour on a terminal only, and never where $NO_COLOR is set (to anything but "": no-color.org)."""
    return not environ.get("NO_COLOR") and _is_terminal(stdout)


def _is_terminal(stdout: IO[Any] | None) -> bool:
    out = sys.stdout if stdout is None else stdout
    try:
        return bool(out.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def report_not_written(report: Report, failures: Sequence[HcError]) -> Report:
    """The report with hc.E008 for each output that could not be written, each said on stderr."""

    scope = fold(n.node for n in report.nodes) or "run"
    for exc in failures:
        echo(f"hc: warning: not written: {exc}; the verdict stands", err=True)
        report = with_run_finding(report, run_finding(catalogue.NOT_WRITTEN, f"not written: {exc}",
                                                      scope=scope, evidence=str(exc)))
    return report


class PrometheusTarget(NamedTuple):
    """Where a run exports for Prometheus, and whether the operator asked on the command line."""

    directory: Path
    explicit: bool  # --prometheus DIR: a failure is the run's; from the config: a warning


def prometheus_dir(app: App, flag: Path | None, command: str) -> PrometheusTarget | None:
    """Where this run exports for Prometheus: --prometheus, else the config's textfile_dir
    when its `commands` name this one, else nowhere. An explicit DIR that cannot be used
    is an error now (not after a run that may take an hour); the config's is a warning: a
    metrics side-output must not stop a sweep (and its drains) on a host without it."""
    settings = app.config.main.prometheus

    if flag is not None:
        return PrometheusTarget(check_textfile_dir(flag), True)
    if settings.textfile_dir is None or command not in settings.commands:
        return None
    try:
        return PrometheusTarget(check_textfile_dir(Path(settings.textfile_dir)), False)
    except HcError as exc:
        echo(f"hc: warning: prometheus.textfile_dir: {exc}: no Prometheus export this run", err=True)
        return None


def export_prometheus(app: App, report: Report, target: PrometheusTarget | None) -> HcError | None:
    """Write the Prometheus textfile; the error, for `App.emit_report(lost=...)` (a run
    finding, as a failed --output is: the verdict stands, and the run does not exit 0),
    where the operator asked for it with --prometheus; a warning where the config asked."""
    if target is None:
        return None

    try:
        write_prometheus(report, target.directory, app.config.main.prometheus)
    except HcError as exc:
        if target.explicit:
            return HcError(f"--prometheus {exc}")
        echo(f"hc: warning: Prometheus textfile not written: {exc}", err=True)
    return None
