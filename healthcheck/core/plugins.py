"""Import the modules that register checks, analyses or fact providers, once, when first needed."""

from __future__ import annotations

import importlib
from typing import Iterable

# Modules that register analyses (work over many nodes' results); the check families
# are listed in healthcheck/checks/__init__.py.
ANALYSIS_MODULES = ("healthcheck.fleet",)

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


def load_declarations() -> None:
    """Import every check family and analysis module, so the catalogue knows every emitter."""
    from healthcheck.checks import load_all

    load_all()
    load_analyses()
