"""`hc baseline`: learn a fabric's thresholds from sweep reports and write them as a fabric file."""

from __future__ import annotations

from pathlib import Path

import click

from healthcheck.cli.app import App, config_option, format_option
from healthcheck.cli.params import integer, number

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
    import datetime as dt
    import re
    import tempfile

    import msgspec
    import yaml

    from healthcheck import __version__
    from healthcheck.core.atomic import write_atomic
    from healthcheck.core.config.loader import FABRIC_NAME_RE, ExtendsCycle
    from healthcheck.core.errors import HcError
    from healthcheck.report.baseline import learn, read_reports, render, rows, safe

    if output.suffix != ".yaml" or not re.fullmatch(FABRIC_NAME_RE, output.stem):
        raise HcError(f"{safe(output, 200)}: the output must be NAME.yaml with a fabric name "
                      "(letters, digits, '.', '_', '-'): fabrics are looked up as <name>.yaml")
    app = App(config_path, fmt)
    cfg = app.config
    below = output if output.stem == fabric else None  # the output will refine the fabric of its own name
    try:  # as it will be looked up once installed: fabric <output's name>, extending --fabric
        _, prov = cfg.fabric_raw(fabric, key="--fabric", below=below, child=(output.stem, output))
    except ExtendsCycle as exc:
        raise HcError(f"{safe(output, 200)}: not written: installed as fabric {output.stem}, extending {fabric}, "
                      f"it would be an extends cycle ({' -> '.join(exc.chain)}) and no node of these fabrics "
                      f"could be checked; name it {fabric}.yaml (it then refines {fabric}) or after a new "
                      "fabric") from None
    base = cfg.fabric(fabric, below=below)
    given = {"min_nodes": min_nodes, "percentile": percentile, "margin": margin, "temp_margin_c": temp_margin_c,
             "max_spread": max_spread, "outlier_z": outlier_z}
    settings = msgspec.structs.replace(cfg.main.baseline, **{k: v for k, v in given.items() if v is not None})

    result = learn(read_reports(reports), fabric, base, settings, prov)
    for refusal in result.refused:
        click.echo(f"hc: refused: {refusal.target.dotted}: {refusal.reason}", err=True)
    if not result.written:
        for item in result.learned:
            click.echo(f"hc: kept: {item.target.dotted}: {item.note}", err=True)
        raise HcError(f"nothing learned for fabric {fabric} from {len(result.runs)} report(s) "
                      f"({result.nodes_used} nodes used, {result.nodes_dropped} dropped): "
                      + ("every key was refused (above)" if result.refused or result.learned
                         else "they hold no busbw, ib_write_bw or GPU temperature of its nodes (a deep sweep "
                              "records bandwidth)") + f"; {safe(output, 200)} not written")
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    text, expected = render(result, name=output.stem, extends=fabric, written_at=now, hc_version=__version__)
    # usable as-is: the text reads back as the data meant, and the loader accepts it as it
    # will be found at the output's path
    if yaml.safe_load(text) != expected:
        raise HcError("internal error: the baseline file would not read back as written (HC_DEBUG=1 for more)")
    with tempfile.TemporaryDirectory(prefix="hc-baseline-") as tmp:
        check = Path(tmp) / output.name
        check.write_text(text)
        cfg.fabric_file(check, instead_of=output)
    write_atomic(output, text.encode())

    table = rows(result)
    if fmt == "json":
        app.emit_json({"output": str(output), "fabric": fabric, "runs": [r.run_id for r in result.runs],
                       "nodes_used": result.nodes_used, "nodes_dropped": result.nodes_dropped, "keys": table})
        return 0
    from tabulate import tabulate

    def show(value: object) -> str:
        return "-" if value is None else f"{value:.6g}" if isinstance(value, float) else str(value)

    app.echo(tabulate([[r["key"], r["status"], show(r["value"]), show(r["previous"]), show(r["count"]),
                        show(r["median"]), show(r["mad"]), safe(r["part"], 24), safe(r["reason"], 80)]
                       for r in table],
                      headers=["KEY", "STATUS", "VALUE", "WAS", "NODES", "MEDIAN", "MAD", "PART", "NOTE"],
                      tablefmt="simple"))
    app.echo(f"wrote {output}: {len(result.written)} keys learned, {len(result.refused)} refused, from "
             f"{len(result.runs)} run(s) and {result.nodes_used} nodes of {fabric} "
             f"({result.nodes_dropped} dropped); fabric {output.stem} once its directory is in fabric_dirs")
    return 0
