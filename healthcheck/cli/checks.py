"""`hc checks list`: the catalogue of checks, analyses and finding IDs."""

from __future__ import annotations

import click

from healthcheck.cli.app import App, format_option
from healthcheck.core.tiers import ALL


@click.group()
def checks() -> None:
    """The catalogue of checks and the finding IDs they emit."""


@checks.command("list")
@click.option("--tier", type=click.Choice(list(ALL)), default=None,
              help="Only the checks that run in this tier or context.")
@format_option
def list_checks(tier: str | None, fmt: str) -> int:
    """List every check and analysis (name, scope, tiers, budget, invariant) and every finding ID (meaning, hint)."""
    from healthcheck.core import catalogue
    from healthcheck.core.registry import current

    registry = current()  # checks and analyses come from the registries, each loading its modules
    specs = [s for s in sorted(registry.all_checks().values(), key=lambda s: s.name)
             if tier is None or tier in s.tiers]
    analyses = [a for a in sorted(registry.all_analyses().values(), key=lambda a: a.name)
                if tier is None or tier in a.tiers]
    producers = [*specs, *analyses]
    ids_in_view = {spec.id for s in producers for spec in s.findings}
    # IDs no check or analysis emits (could-not-run, actions): always listed
    emitted = {spec.id for s in [*registry.all_checks().values(), *registry.all_analyses().values()]
               for spec in s.findings}
    core_ids = {i for i in catalogue.CATALOGUE if i not in emitted}
    emitted_by: dict[str, list[str]] = {}
    for s in producers:
        for spec in s.findings:
            emitted_by.setdefault(spec.id, []).append(s.name)
    findings = [
        f for fid, f in sorted(catalogue.CATALOGUE.items()) if fid in ids_in_view or fid in core_ids
    ]
    order: dict[str, int] = {t: i for i, t in enumerate(ALL)}
    rank = order.__getitem__  # registration admits only the names in ALL
    app = App(fmt=fmt)
    if fmt == "json":
        app.emit_json(
            {
                "checks": [
                    {
                        "name": s.name,
                        "scope": "node",
                        "tiers": sorted(s.tiers, key=rank),
                        "budget_s": s.budget_s,
                        "needs": list(s.needs),
                        "summary": s.summary,
                        "findings": [f.id for f in s.findings],
                    }
                    for s in specs
                ],
                "analyses": [
                    {
                        "name": a.name,
                        "scope": a.scope,
                        "tiers": sorted(a.tiers, key=rank),
                        "summary": a.summary,
                        "findings": [f.id for f in a.findings],
                    }
                    for a in analyses
                ],
                "findings": [
                    {
                        "id": f.id,
                        "title": f.title,
                        "hint": f.hint,
                        "suggested_action": f.action,
                        "checks": emitted_by.get(f.id, [f"({f.id.split('.')[0]})"]),
                        "retired": f.retired,
                    }
                    for f in findings
                ],
            }
        )
        return 0
    from tabulate import tabulate

    rows = [[s.name, "node", ",".join(sorted(s.tiers, key=rank)), f"{s.budget_s:g}s", s.summary] for s in specs]
    rows += [[a.name, a.scope, ",".join(sorted(a.tiers, key=rank)), "", a.summary] for a in analyses]
    app.echo(tabulate(rows, headers=["CHECK", "SCOPE", "TIERS", "BUDGET", "INVARIANT"], tablefmt="simple",
                      maxcolwidths=[None, None, None, None, 70]))
    app.echo()
    rows = [[f.id, f.title, f.action, f.hint] for f in findings]
    app.echo(tabulate(rows, headers=["ID", "MEANING", "ACTION", "HINT"], tablefmt="simple",
                      maxcolwidths=[None, 40, None, 60]))
    return 0
