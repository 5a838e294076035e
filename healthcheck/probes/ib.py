"""InfiniBand HCA ports and their error counters, from /sys/class/infiniband.

Ports are discovered (never assume port 1); a missing /sys/class/infiniband means no
HCA, which the checks judge against the fabric's expectations. What is there but cannot
be read (an HCA's port list, a port's state) is an entry in IbPorts.errors, never a port
that is "Unknown" (which would FAIL) or silently left out (which could PASS).
"""

from __future__ import annotations

from pathlib import Path

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
IBSTAT = ("ibstat",)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace").strip()
    except OSError:
        # Some attributes are absent on some drivers, some counters return EINVAL: the
        # checks treat a missing value they need as unknown (ERROR), never as healthy.
        return None


def _required(path: Path, errors: list[str], what: str) -> str | None:
    """An attribute every port has (state, phys_state): its absence is an error to report."""
    try:
        return path.read_text(errors="replace").strip()
    except OSError as exc:
        errors.append(f"{what}: cannot read {path.name}: {exc.strerror or exc}")
        return None


def _port_dirs(ctx: ProbeContext, errors: list[str] | None = None) -> list[tuple[Path, str, int]]:
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
        except OSError as exc:
            # an HCA whose ports cannot be listed is not an HCA without ports
            if errors is not None:
                errors.append(f"{ca.name}: cannot list its ports: {exc.strerror or exc}")
            continue
        for port in sorted(ports, key=lambda p: int(p.name)):
            found.append((port, ca.name, int(port.name)))
    return found


@provides("ib_ports", "local")
def ib_ports_sysfs(ctx: ProbeContext) -> IbPorts:
    ports = []
    errors: list[str] = []
    for port_dir, ca, num in _port_dirs(ctx, errors):
        ca_dir = port_dir.parent.parent
        state = _required(port_dir / "state", errors, f"{ca}/{num}")
        phys = _required(port_dir / "phys_state", errors, f"{ca}/{num}")
        if state is None or phys is None:
            continue  # reported in errors: the check cannot judge this port
        lid = _read(port_dir / "lid")
        ports.append(
            IbPort(
                ca=ca,
                port=num,
                state=port_state(state),
                phys_state=phys_state(phys),
                rate_gbps=rate_gbps(_read(port_dir / "rate") or ""),
                link_layer=_read(port_dir / "link_layer"),
                ca_type=_read(ca_dir / "hca_type"),
                fw_ver=_read(ca_dir / "fw_ver"),
                lid=int(lid, 16) if lid and lid.startswith("0x") else None,
            )
        )
    return IbPorts(ports=ports, errors=errors)


@provides("ib_counters", "local")
def ib_counters_sysfs(ctx: ProbeContext) -> IbCounters:
    out = []
    for port_dir, ca, num in _port_dirs(ctx):
        counters: dict[str, int] = {}
        try:
            files = list((port_dir / "counters").iterdir())
        except OSError:
            files = []  # no counters: the check reports the port's counters as unknown
        for f in files:
            value = _read(f)
            if value is not None and value.isdigit():
                counters[f.name] = int(value)
        out.append(IbPortCounters(ca=ca, port=num, counters=counters))
    return IbCounters(ports=out)


def sysfs_counters_over_shell(ctx: ProbeContext, ca: str, port: int, why: str) -> IbPortCounters:
    directory = f"{SYSFS_IB}/{ca}/ports/{port}/counters"
    result = ctx.runner.run(("grep", "-rH", "", directory), timeout_s=ctx.timeout_s)
    counters: dict[str, int] = {}
    for line in result.stdout.splitlines():
        path, _, value = line.rpartition(":")
        if value.strip().isdigit():
            counters[path.rsplit("/", 1)[-1]] = int(value)
    if not counters:
        raise ProbeError("failed", f"no counters for {ca}/{port}: perfquery failed and {directory} is unreadable",
                         (why + result.stderr)[-2000:] or None)
    return IbPortCounters(ca=ca, port=port, counters=counters)
