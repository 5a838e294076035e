"""Import the modules that register checks, analyses or fact providers, once, when first needed.

Plugins are named here, not imported: the kernel loads the packages that fill its
registries by name, as entry points would, so it does not depend on their code (the
import contract in pyproject.toml keeps `healthcheck.core` below checks and probes).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

# Packages whose load_all() registers their check families and fact providers (each
# lists its own modules), and the modules that register analyses.
CHECK_PACKAGE = "healthcheck.checks"
PROBE_PACKAGE = "healthcheck.probes"
ANALYSIS_MODULES = ("healthcheck.analyses.fleet", "healthcheck.analyses.pairs", "healthcheck.analyses.over_time")

_loaded: set[str] = set()


def load(package: str, modules: Iterable[str]) -> None:
    """Import package.module for each module (registering what it declares), once per process."""
    if package in _loaded:
        return
    for name in modules:
        importlib.import_module(f"{package}.{name}")
    _loaded.add(package)


def load_analyses() -> None:
    """Import every module that registers analyses, once per process."""
    if "<analyses>" in _loaded:
        return
    for module in ANALYSIS_MODULES:
        importlib.import_module(module)
    _loaded.add("<analyses>")


def load_checks() -> None:
    """Import every check family, once per process."""
    importlib.import_module(CHECK_PACKAGE).load_all()


def load_checks_for(tier: str, names: Iterable[str] = ()) -> bool:
    """Import the check families that hold `tier`'s checks (or the named ones'); False
    when the package's tables cannot say which, and nothing was loaded."""
    return bool(importlib.import_module(CHECK_PACKAGE).load_for(tier, names))


def load_probes() -> None:
    """Import every fact provider module, once per process."""
    importlib.import_module(PROBE_PACKAGE).load_all()


def load_probes_for(fact: str, transport: str) -> None:
    """Import the fact provider module that gathers `fact` over `transport` (the probe
    package's tables say which), so a run loads only the probes of the facts it needs."""
    importlib.import_module(PROBE_PACKAGE).load_for(fact, transport)


def load_declarations() -> None:
    """Import every check family and analysis module, so the catalogue knows every emitter."""
    load_checks()
    load_analyses()
