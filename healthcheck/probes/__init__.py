"""Probes talk to the system (commands, sysfs, /proc, NVML) and hand raw output to parsers.

Each module registers fact providers with `healthcheck.core.facts.provides`.
"""

from __future__ import annotations

_MODULES = ("net", "ib", "sysinfo", "gpu")
_loaded = False


def load_all() -> None:
    global _loaded
    if _loaded:
        return
    import importlib

    for name in _MODULES:
        importlib.import_module(f"healthcheck.probes.{name}")
    _loaded = True
