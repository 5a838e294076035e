"""`hc config validate` and `hc config show NODE`."""

from __future__ import annotations

from pathlib import Path

import click

from healthcheck.cli.app import App
from healthcheck.cli.completion import complete_nodes
from healthcheck.cli.options import config_option, format_option
from healthcheck.core.config.loader import is_fabric_file
from healthcheck.core.nodes import check_node_name
from healthcheck.report.layout import table, wrap_line
from healthcheck.report.table import printable


@click.group()
def config() -> None:
    """Validate the configuration; show the effective limits of a node."""


@config.command()
@click.argument("file", required=False, type=click.Path(path_type=Path, dir_okay=False))
@config_option
def validate(file: Path | None, config_path: Path | None) -> int:
    """Check FILE (default: the active config) and every fabric it can reach.

    FILE may also be a fabric file (one `hc baseline` wrote): it is then checked with what it
    extends, looked up in the fabric_dirs of the active config (--config)."""

    if file is not None and is_fabric_file(file):
        cfg = App(config_path).config
        limits, _ = cfg.fabric_file(file)
        extends = f" (extends {limits.extends})" if limits.extends else ""
        click.echo(f"ok: {file}: fabric {file.stem}{extends}, checked with the fabrics of {cfg.path} "
                   f"(fabric_dirs: {', '.join(dict.fromkeys(str(d) for d in cfg.fabric_dirs))})")
        return 0
    app = App(file or config_path)
    cfg = app.config
    notes = cfg.validate()
    for note in notes:
        click.echo(f"note: {note}", err=True)
    fabrics = cfg.fabric_names()
    app.echo(
        f"ok: {cfg.path}: {len(cfg.main.nodes)} node patterns, {len(cfg.main.overrides)} overrides, "
        f"{len(fabrics)} fabrics ({', '.join(fabrics)}), digest {cfg.digest[:19]}"
    )
    return 0


@config.command()
@click.argument("node", shell_complete=complete_nodes)
@config_option
@format_option
def show(node: str, config_path: Path | None, fmt: str) -> int:
    """The effective limits for NODE, and which file and line each came from."""

    check_node_name(node)
    app = App(config_path, fmt)
    nc = app.config.for_node(node)
    leaves = list(nc.leaves())
    if fmt == "json":
        app.emit_json(
            {
                "node": node,
                "fabric": nc.fabric_name,
                "config": str(app.config.path),
                "limits": [{"key": k, "value": v, "source": s} for k, v, s in leaves],
            }
        )
        return 0

    app.echo(wrap_line(f"{node}: fabric {nc.fabric_name} (config {app.config.path})", app.width))
    rows = [[printable(k), printable(_show(v)), printable(s)] for k, v, s in leaves]
    app.echo(table(rows, ["KEY", "VALUE", "SOURCE"], app.width, disable_numparse=True))
    return 0


def _show(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    if isinstance(value, dict) and not value:
        return "{}"
    return str(value)
