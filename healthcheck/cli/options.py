"""The click options several commands share (--config, --format, --tier, --fail-level,
--output, --prometheus): one definition each, so every command spells them alike."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click

from healthcheck.core.atomic import classify
from healthcheck.core.tiers import TIERS


def check_output(ctx: click.Context, param: click.Parameter, value: Path | None) -> Path | None:
    """--output refused before anything runs where it can never be written: a symbolic
    link, a directory, a block device or a socket (exit 4); a sweep may take an hour."""
    if value is not None:
        classify(value)  # WriteError (exit 4, one line) for what write_atomic would refuse
    return value


# ------------------------------------------------------------ shared options


def config_option(fn: Callable) -> Callable:
    return click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path, dir_okay=False),
        envvar="HC_CONFIG",
        help="Main config file [env HC_CONFIG; default /etc/hc/hc.yaml, else the embedded default].",
    )(fn)


def format_option(fn: Callable) -> Callable:
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(["table", "json"]),
        default="table",
        envvar="HC_FORMAT",
        show_default=True,
        help="Output format on stdout [env HC_FORMAT].",
    )(fn)


def tier_option(default: str = "quick") -> Callable[[Callable], Callable]:
    return click.option(
        "--tier",
        type=click.Choice(list(TIERS)),
        default=default,
        envvar="HC_TIER",
        show_default=True,
        help="quick: prologue-safe; standard: ad hoc and epilogue; deep: invasive bandwidth tests [env HC_TIER].",
    )


def fail_level_option(fn: Callable) -> Callable:
    return click.option(
        "--fail-level",
        type=click.Choice(["warn", "fail"]),
        default="fail",
        envvar="HC_FAIL_LEVEL",
        show_default=True,
        help="Lowest status that makes the exit code non-zero (ERROR always exits 3).",
    )(fn)


def output_option(fn: Callable) -> Callable:
    return click.option(
        "--output",
        "-o",
        type=click.Path(path_type=Path, dir_okay=False),
        callback=check_output,
        help="Also write the JSON report to this file (atomically; a device or FIFO such as /dev/null is "
             "written in place; a symbolic link or directory is refused before the run). A write that fails "
             "after the run is a warning and an hc.E008 run finding: a FAIL still exits 2, a PASS exits 3.",
    )(fn)


def prometheus_option(fn: Callable) -> Callable:
    return click.option(
        "--prometheus",
        "prometheus_to",
        type=click.Path(path_type=Path, file_okay=False),
        help="Also write the run's series for node_exporter's textfile collector to DIR/hc-<command>.prom "
             "(atomically; DIR must exist) [default: prometheus.textfile_dir in the config, for the commands "
             "prometheus.commands names].",
        metavar="DIR",
    )(fn)
