"""`hc baseline`: learn a fabric's thresholds from sweep reports and write them as a fabric file."""

from __future__ import annotations

from pathlib import Path

import click

from healthcheck.cli.app import App
from healthcheck.cli.options import config_option, format_option
from healthcheck.cli.params import integer, number
from healthcheck.report.baseline import baseline_json, baseline_table, write_baseline

_SETTINGS = "defaults from the config's baseline section"


@click.command()
@click.argument("reports", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--fabric", required=True, help="The fabric whose nodes are learned from, and which the output extends.")
@click.option("--output", "-o", required=True, type=click.Path(path_type=Path, dir_okay=False),
              help="The fabric file to write (atomically), NAME.yaml: fabric NAME. Named after --fabric and put "
                   "in a directory of fabric_dirs, it refines that fabric for all its nodes.")
@click.option("--min-nodes", type=integer(2, 1_000_000), default=None,
              help=f"Fewest nodes (pairs) a key is learned from [{_SETTINGS}: 8].")
@click.option("--percentile", type=number(0, 50), default=None,
              help="Floors from this low percentile; temperature ceilings from 100 minus it [5].")
@click.option("--margin", type=number(0, 1, high_open=True), default=None,
              help="A floor is the percentile x (1 - margin) [0.05].")
@click.option("--temp-margin", "temp_margin_c", type=number(0, 50), default=None,
              help="A temperature ceiling is the percentile + this many C [10].")
@click.option("--max-spread", type=number(0, 1, low_open=True), default=None,
              help="A key whose MAD/median is above this is refused as too noisy [0.1].")
@click.option("--outlier-z", type=number(0, 1000, low_open=True), default=None,
              help="Values beyond this modified z-score (MAD) are dropped before learning [3.5].")
@config_option
@format_option
def baseline(reports: tuple[Path, ...], fabric: str, output: Path, min_nodes: int | None, percentile: float | None,
             margin: float | None, temp_margin_c: float | None, max_spread: float | None, outlier_z: float | None,
             config_path: Path | None, fmt: str) -> int:
    """Learn thresholds from REPORT... (saved sweep reports of healthy-looking nodes) for --fabric.

    \b
    Per key: busbw floors per collective, scope and size (nodes and pair tests),
    ib_write_bw per HCA, GPU temperature ceilings. Nodes that FAILed or ERRORed are
    dropped (except when only below a threshold learned here), then outliers; a key
    with too few nodes or too much spread is refused and stays as the fabric sets it.
    The file's comments record the runs, node counts, dates and NCCL versions.

    \b
    Exit codes: 0 written (refused keys listed on stderr); 4 unreadable or unsupported
    report, bad option, or nothing learned (one line per reason).
    """

    overrides = {"min_nodes": min_nodes, "percentile": percentile, "margin": margin, "temp_margin_c": temp_margin_c,
                 "max_spread": max_spread, "outlier_z": outlier_z}
    done = write_baseline(reports, fabric, output, config_path, overrides, warn=lambda line: click.echo(line, err=True))
    app = App(config_path, fmt)
    if fmt == "json":
        app.emit_json(baseline_json(done))
    else:
        app.echo(baseline_table(done))
    return 0
