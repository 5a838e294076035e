"""Probes talk to the system (commands, sysfs, /proc, NVML) and hand raw output to parsers.

Each module registers fact providers with `healthcheck.core.facts.provides`.
"""

from __future__ import annotations

from healthcheck.core.plugins import load

MODULES = ("net", "ib", "sysinfo", "gpu", "bw", "ib_write_bw", "dcgm")


def load_all() -> None:
    load(__name__, MODULES)
