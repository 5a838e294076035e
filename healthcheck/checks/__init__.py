"""Check families: facts + limits -> findings. No I/O here.

Each family module registers its checks with `healthcheck.core.registry.check` and
declares its finding IDs with `healthcheck.core.catalogue.finding`. This list is the
only place a family is named (`dcgm` holds the gpu family's DCGM diagnostic checks).
"""

from __future__ import annotations

from healthcheck.core.plugins import load

FAMILIES = ("net", "ib", "sys", "gpu", "bw", "dcgm")


def load_all() -> None:
    load(__name__, FAMILIES)
