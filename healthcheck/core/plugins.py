"""Import the modules that register checks or fact providers, once, when first needed."""

from __future__ import annotations

import importlib
from typing import Iterable

_loaded: set[str] = set()


def load(package: str, modules: Iterable[str]) -> None:
    """Import package.module for each module (registering what it declares), once per process."""
    if package in _loaded:
        return
    for name in modules:
        importlib.import_module(f"{package}.{name}")
    _loaded.add(package)
