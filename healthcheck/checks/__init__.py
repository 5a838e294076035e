"""Check families: facts + limits -> findings. No I/O here.

Each family module registers its checks with `healthcheck.core.registry.check` and
declares its finding IDs with `healthcheck.core.catalogue.finding`. This list is the
only place a family is named.
"""

from __future__ import annotations

FAMILIES = ("net", "ib", "sys", "gpu")
_loaded = False


def load_all() -> None:
    global _loaded
    if _loaded:
        return
    import importlib

    for name in FAMILIES:
        importlib.import_module(f"healthcheck.checks.{name}")
    _loaded = True
