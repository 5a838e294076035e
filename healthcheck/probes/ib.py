"""InfiniBand HCA ports and their error counters, from /sys/class/infiniband, with each
port's netdev's carrier_changes (/sys/class/net) among them.

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
SYSFS_NET = "/sys/class/net"
# the netdev counter read beside a port's own (ib.counters_fail's name for it)
CARRIER_CHANGES = "carrier_changes"
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


def _dev_port(netdev: Path) -> int:
    value = _read(netdev / "dev_port")
    return int(value) if value is not None and value.isdigit() and len(value) < 6 else 0


def port_netdev(ctx: ProbeContext, port_dir: Path, num: int) -> Path | None:
    """The /sys/class/net directory of an HCA port's netdev (its RoCE interface or IPoIB
    parent), or None: the RoCE port's GID table names it (`gid_attrs/ndevs/0`), else the
    HCA's PCI function lists its netdevs (`device/net/`), the one whose `dev_port` is the
    port's (0-based), a parent before its pkey children (`ib0` before `ib0.8001`)."""
    name = _read(port_dir / "gid_attrs" / "ndevs" / "0")
    if name and "/" not in name and name not in (".", ".."):
        found = ctx.path(SYSFS_NET) / name
        if found.is_dir():
            return found
    try:
        netdevs = sorted((port_dir.parent.parent / "device" / "net").iterdir(),
                         key=lambda p: ("." in p.name, p.name))
    except OSError:
        return None
    return next((n for n in netdevs if _dev_port(n) == num - 1), None)


def carrier_changes(ctx: ProbeContext, port_dir: Path, num: int) -> int | None:
    """The port's netdev's carrier_changes (how often the OS saw its link go up or down), or
    None where the port has no netdev or the kernel gives none."""
    netdev = port_netdev(ctx, port_dir, num)
    value = _read(netdev / "carrier_changes") if netdev is not None else None
    return int(value) if value is not None and value.isdigit() and len(value) < 20 else None


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
        changes = carrier_changes(ctx, port_dir, num)
        if changes is not None:
            counters[CARRIER_CHANGES] = changes
        out.append(IbPortCounters(ca=ca, port=num, counters=counters))
    return IbCounters(ports=out)


def carrier_by_port(text: str) -> dict[int, int]:
    """`grep -rH "" --include=carrier_changes --include=dev_port .../device/net/` (an HCA's
    netdevs, read over the shell) -> each port's netdev's carrier_changes, by port number: the
    netdev whose `dev_port` is the port's (0-based; none given: port 1), a parent before its
    pkey children, as `port_netdev` picks them."""
    netdevs: dict[str, dict[str, int]] = {}
    for line in text.splitlines():
        path, _, value = line.rpartition(":")
        parts = path.split("/")
        if len(parts) < 3 or parts[-3] != "net" or parts[-1] not in (CARRIER_CHANGES, "dev_port"):
            continue
        value = value.strip()
        if value.isdigit() and len(value) < 20:
            netdevs.setdefault(parts[-2], {})[parts[-1]] = int(value)
    out: dict[int, int] = {}
    for name in sorted(netdevs, key=lambda n: ("." in n, n)):
        files = netdevs[name]
        if CARRIER_CHANGES in files:
            out.setdefault(files.get("dev_port", 0) + 1, files[CARRIER_CHANGES])
    return out


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
