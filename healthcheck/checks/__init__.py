"""Check families: facts + limits -> findings. No I/O here.

Each family module registers its checks with `healthcheck.core.registry.check` and
declares its finding IDs with `healthcheck.core.catalogue.finding`. This list is the
only place a family is named (`dcgm` holds the gpu family's DCGM diagnostic checks).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from healthcheck.core.plugins import load

FAMILIES = ("net", "ib", "sys", "gpu", "bw", "dcgm")

# The modules that register checks of each tier or context, and those holding each
# family's checks, so a run imports only the families it can select: a prologue needs
# neither the bandwidth checks (and perftest's parser) nor DCGM's. The test
# tests/unit/checks/test_check_modules.py holds both tables to what the modules register.
TIER_MODULES: dict[str, tuple[str, ...]] = {
    "quick": ("net", "ib", "sys", "gpu"),
    "standard": ("net", "ib", "sys", "gpu", "dcgm"),
    "deep": FAMILIES,
    "epilogue": ("gpu",),
}
FAMILY_MODULES: dict[str, tuple[str, ...]] = {
    "net": ("net",), "ib": ("ib",), "sys": ("sys",), "gpu": ("gpu", "dcgm"), "bw": ("bw",),
}


def load_all() -> None:
    load(__name__, FAMILIES)


def modules_for(tier: str, names: Iterable[str] = ()) -> tuple[str, ...] | None:
    """The family modules holding every check `tier` runs, or with `names` (a family or
    family.check each) those of the named families, whatever the tier, so every name
    is judged known or unknown as a full load would judge it. None when the tables
    cannot say (an unknown tier or family): then every module is loaded."""
    wanted = list(names)
    if not wanted:
        return TIER_MODULES.get(tier)
    families = {name.split(".", 1)[0] for name in wanted}
    if not families <= set(FAMILY_MODULES):
        return None
    modules = {m for family in families for m in FAMILY_MODULES[family]}
    return tuple(m for m in FAMILIES if m in modules)


def load_for(tier: str, names: Iterable[str] = ()) -> bool:
    """Import only the modules `modules_for` names; False (nothing loaded) when it cannot say."""
    modules = modules_for(tier, names)
    if modules is None:
        return False
    for name in modules:
        importlib.import_module(f"{__name__}.{name}")
    return True
