"""Network interface checks: the interfaces a fabric names exist, are up, and have its MTU."""

from __future__ import annotations

from fnmatch import fnmatchcase

from healthcheck.core.catalogue import finding
from healthcheck.core.config.docs import key_str
from healthcheck.core.config.schema import Fabric
from healthcheck.core.model import Limit, Metric
from healthcheck.core.registry import CheckOutput, check
from healthcheck.parsers.ip_link import IpLinks

MTU_MISMATCH = finding(
    "net.E001",
    "an interface's MTU differs from the fabric's expected MTU",
    "Set the MTU where the interface is configured (netplan, NetworkManager, ifcfg, the IPoIB or RoCE "
    "setup) and re-apply; every node of a fabric must agree or large messages stall.",
    action="fix-config",
)
IFACE_MISSING = finding(
    "net.E002",
    "no interface matches a pattern the fabric requires",
    "Check that the NIC/HCA driver loaded (ip link, dmesg, ibstat) and that interface naming matches "
    "the fabric's pattern.",
    action="investigate",
)
IFACE_COUNT = finding(
    "net.E003",
    "the number of interfaces matching a pattern differs from the fabric's count",
    "A missing IPoIB or RoCE netdev usually means its HCA or driver is down: check ibstat, lspci and "
    "dmesg on the node.",
    action="investigate",
)
IFACE_DOWN = finding(
    "net.E004",
    "an interface the fabric names is down or has no carrier",
    "Administratively down: ip link set dev IF up and fix the network config. No carrier: reseat the "
    "cable or transceiver, then check the switch port.",
    action="reseat-cable",
)
MTU_OUT_OF_BOUNDS = finding(
    "net.E005",
    "an up interface has an MTU outside the sanity bounds",
    "An MTU below 1280 or above 65536 is almost certainly a typo in the network configuration.",
    action="fix-config",
)


@check(
    "net.mtu",
    evidence_metrics=("mtu",),
    tier="quick",
    needs=("ip_links",),
    findings=(MTU_MISMATCH, IFACE_MISSING, IFACE_COUNT, IFACE_DOWN, MTU_OUT_OF_BOUNDS),
    budget_s=2.0,
)
def mtu(ip_links: IpLinks, limits: Fabric) -> CheckOutput:
    """Every interface the fabric names exists, is up and has its MTU; every other up interface has a sane MTU."""
    net = limits.net
    claimed: set[str] = set()
    for pattern, spec in net.interfaces.items():
        key = key_str(("net", "interfaces", pattern))
        matched = [link for link in ip_links.links if fnmatchcase(link.name, pattern)]
        claimed.update(link.name for link in matched)
        if spec.count is not None and len(matched) != spec.count:
            names = ", ".join(sorted(link.name for link in matched)) or "none"
            yield IFACE_COUNT.fail(
                f"{len(matched)} interfaces match {pattern}, expected {spec.count} (found: {names})",
                component=pattern,
                value=len(matched),
                limit=Limit("==", spec.count, f"{key}.count"),
            )
        elif not matched and spec.required:
            yield IFACE_MISSING.fail(
                f"no interface matches {pattern}", component=pattern, value=0, limit=Limit("present", pattern, key)
            )
        for link in matched:
            yield Metric("mtu", link.mtu, "bytes", component=link.name)
            if not link.admin_up:
                yield IFACE_DOWN.fail(
                    f"{link.name} is administratively down", component=link.name, value=link.operstate
                )
            elif not link.carrier:
                yield IFACE_DOWN.fail(
                    f"{link.name} has no carrier (state {link.operstate})", component=link.name, value=link.operstate
                )
            if spec.mtu is not None and link.mtu != spec.mtu:
                yield MTU_MISMATCH.fail(
                    f"{link.name} MTU is {link.mtu}, expected {spec.mtu}",
                    component=link.name,
                    value=link.mtu,
                    unit="bytes",
                    limit=Limit("==", spec.mtu, f"{key}.mtu"),
                )
    for link in ip_links.links:
        if link.name in claimed or not link.admin_up or any(fnmatchcase(link.name, p) for p in net.ignore):
            continue
        yield Metric("mtu", link.mtu, "bytes", component=link.name)
        if link.mtu is None:
            continue
        for bound, op, word, key in ((net.mtu_min, ">=", "below", "net.mtu_min"),
                                     (net.mtu_max, "<=", "above", "net.mtu_max")):
            if bound is not None and (link.mtu < bound if op == ">=" else link.mtu > bound):
                yield MTU_OUT_OF_BOUNDS.warn(
                    f"{link.name} MTU is {link.mtu}, {word} {bound}",
                    component=link.name,
                    value=link.mtu,
                    unit="bytes",
                    limit=Limit(op, bound, key),
                )
