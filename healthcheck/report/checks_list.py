"""The catalogue as `hc checks list` shows it: checks, analyses and finding IDs, as JSON or tables.

Reads the registries (which load the check and analysis modules) and core/catalogue.py;
writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from healthcheck.core import catalogue, xid_catalogue
from healthcheck.core.catalogue import FindingSpec
from healthcheck.core.registry import AnalysisSpec, CheckSpec, current
from healthcheck.core.tiers import ALL

_ORDER: dict[str, int] = {t: i for i, t in enumerate(ALL)}


def _tiers(tiers: Any) -> list[str]:
    """Tiers in their declared order (registration admits only the names in ALL)."""
    return sorted(tiers, key=_ORDER.__getitem__)


@dataclass(frozen=True)
class CatalogueView:
    """The checks and analyses of one tier (or all), and the finding IDs in view with who emits them."""

    checks: list[CheckSpec]
    analyses: list[AnalysisSpec]
    findings: list[FindingSpec]
    emitted_by: dict[str, list[str]]


def catalogue_view(tier: str | None = None) -> CatalogueView:
    """What `hc checks list` lists: the checks and analyses running in `tier` (every one for
    None), the findings they emit, and the IDs no check or analysis emits (always listed)."""
    registry = current()  # checks and analyses come from the registries, each loading its modules
    specs = [s for s in sorted(registry.all_checks().values(), key=lambda s: s.name)
             if tier is None or tier in s.tiers]
    analyses = [a for a in sorted(registry.all_analyses().values(), key=lambda a: a.name)
                if tier is None or tier in a.tiers]
    producers: list[CheckSpec | AnalysisSpec] = [*specs, *analyses]
    ids_in_view = {spec.id for s in producers for spec in s.findings}
    # IDs no check or analysis emits (could-not-run, actions): always listed
    every: list[CheckSpec | AnalysisSpec] = [*registry.all_checks().values(), *registry.all_analyses().values()]
    emitted = {spec.id for s in every for spec in s.findings}
    core_ids = {i for i in catalogue.CATALOGUE if i not in emitted}
    emitted_by: dict[str, list[str]] = {}
    for s in producers:
        for spec in s.findings:
            emitted_by.setdefault(spec.id, []).append(s.name)
    findings = [f for fid, f in sorted(catalogue.CATALOGUE.items()) if fid in ids_in_view or fid in core_ids]
    return CatalogueView(specs, analyses, findings, emitted_by)


def catalogue_json(tier: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """`hc checks list --format json`: the view as one document of checks, analyses and findings."""
    view = catalogue_view(tier)
    return {
        "checks": [
            {"name": s.name, "scope": "node", "tiers": _tiers(s.tiers), "budget_s": s.budget_s,
             "needs": list(s.needs), "summary": s.summary, "findings": [f.id for f in s.findings]}
            for s in view.checks
        ],
        "analyses": [
            {"name": a.name, "scope": a.scope, "tiers": _tiers(a.tiers), "summary": a.summary,
             "findings": [f.id for f in a.findings]}
            for a in view.analyses
        ],
        "findings": [
            {"id": f.id, "title": f.title, "hint": f.hint, "suggested_action": f.action,
             "checks": view.emitted_by.get(f.id, [f"({f.id.split('.')[0]})"]), "retired": f.retired}
            for f in view.findings
        ],
        "xids": xid_rows(),
    }


def xid_rows() -> list[dict[str, Any]]:
    """Every Xid code hc knows with NVIDIA's meaning and recommended action (gpu.E020's messages say the same)."""
    return [{"code": x.code, "mnemonic": x.mnemonic, "meaning": x.meaning, "nvidia_bucket": x.bucket,
             "action": x.action, "source": xid_catalogue.SOURCE_URL}
            for x in sorted(xid_catalogue.XIDS.values(), key=lambda x: x.code)]


def catalogue_table(tier: str | None = None) -> str:
    """`hc checks list`: a table of the checks and analyses, a blank line, a table of the finding IDs."""
    from tabulate import tabulate

    view = catalogue_view(tier)
    rows = [[s.name, "node", ",".join(_tiers(s.tiers)), f"{s.budget_s:g}s", s.summary] for s in view.checks]
    rows += [[a.name, a.scope, ",".join(_tiers(a.tiers)), "", a.summary] for a in view.analyses]
    producers = tabulate(rows, headers=["CHECK", "SCOPE", "TIERS", "BUDGET", "INVARIANT"], tablefmt="simple",
                         maxcolwidths=[None, None, None, None, 70])
    ids = tabulate([[f.id, f.title, f.action, f.hint] for f in view.findings],
                   headers=["ID", "MEANING", "ACTION", "HINT"], tablefmt="simple", maxcolwidths=[None, 40, None, 60])
    xids = tabulate([[x["code"], x["meaning"], x["nvidia_bucket"], x["action"]] for x in xid_rows()],
                    headers=["XID", "MEANING (NVIDIA)", "NVIDIA BUCKET", "ACTION"], tablefmt="simple")
    return f"{producers}\n\n{ids}\n\n{xids}\n(Xid actions: {xid_catalogue.SOURCE_URL})"
