"""InfiniBand HCA ports and their error counters, from /sys/class/infiniband.

Ports are discovered (never assume port 1); a missing /sys/class/infiniband means no
HCA, which the checks judge against the fabric's expectations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from healthcheck.core.facts import ProbeContext, ProbeError, provides
from healthcheck.parsers.ib_common import (
    IbCounters,
    IbPort,
    IbPortCounters,
    IbPorts,
    phys_state,
    port_state,
    rate_gbps,
)

SYSFS_IB = "/sys/class/infiniband"


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        # Some attributes are absent on some drivers, some counters return EINVAL.
        return None


def _port_dirs(ctx: ProbeContext) -> list[tuple[Path, str, int]]:
    base = ctx.path(SYSFS_IB)
    try:
        cas = sorted(base.iterdir(), key=lambda p: p.name)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise ProbeError("unreadable", f"{base}: {exc.strerror or exc}") from None
    found = []
    for ca in cas:
        try:
            ports = [p for p in (ca / "ports").iterdir() if p.name.isdigit()]
        except OSError:
            continue
        for port in sorted(ports, key=lambda p: int(p.name)):
            found.append((port, ca.name, int(port.name)))
    return found


@provides("ib_ports", "local")
def ib_ports_sysfs(ctx: ProbeContext) -> IbPorts:
    ports = []
    for port_dir, ca, num in _port_dirs(ctx):
        ca_dir = port_dir.parent.parent
        lid = _read(port_dir / "lid")
        ports.append(
            IbPort(
                ca=ca,
                port=num,
                state=port_state(_read(port_dir / "state") or "Unknown"),
                phys_state=phys_state(_read(port_dir / "phys_state") or "Unknown"),
                rate_gbps=rate_gbps(_read(port_dir / "rate") or ""),
                link_layer=_read(port_dir / "link_layer"),
                ca_type=_read(ca_dir / "hca_type"),
                fw_ver=_read(ca_dir / "fw_ver"),
                lid=int(lid, 16) if lid and lid.startswith("0x") else None,
            )
        )
    return IbPorts(ports=ports)


@provides("ib_counters", "local")
def ib_counters_sysfs(ctx: ProbeContext) -> IbCounters:
    out = []
    for port_dir, ca, num in _port_dirs(ctx):
        counters: dict[str, int] = {}
        try:
            files = list((port_dir / "counters").iterdir())
        except OSError:
            files = []
        for f in files:
            value = _read(f)
            if value is not None and value.isdigit():
                counters[f.name] = int(value)
        out.append(IbPortCounters(ca=ca, port=num, counters=counters))
    return IbCounters(ports=out)
