"""InfiniBand checks: the compute HCAs are all there, Active/LinkUp at full rate, with clean counters.

What could not be read (an HCA the tool or sysfs could not read, a rate or a counter the
fabric sets a limit for and the port does not give) is an ERROR, never a PASS, and
never the FAIL of a count it could have made up.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import msgspec

from healthcheck.core import catalogue
from healthcheck.core.catalogue import finding
from healthcheck.core.config.schema import Fabric, IbLimits
from healthcheck.core.model import Limit, Metric
from healthcheck.core.registry import CheckOutput, NotApplicable, check
from healthcheck.core.status import Status, against_limits
from healthcheck.parsers.ib_common import IbCounters, IbPort, IbPorts, is_compute

HCA_COUNT = finding(
    "ib.E001",
    "the number of compute HCAs differs from the fabric's count",
    "A missing HCA is a dead card, a PCIe link that did not train, a driver that did not bind or a port "
    "in the wrong link layer: check lspci, dmesg and ibstat; reseat, then RMA the HCA.",
    action="rma",
)
PORT_NOT_ACTIVE = finding(
    "ib.E002",
    "a compute HCA port is not Active",
    "Down/Polling: no link partner; reseat the cable, then replace cable or transceiver, then check the "
    "switch port. Init/Armed: the subnet manager has not brought the port up; check opensm/UFM.",
    action="reseat-cable",
)
PORT_PHYS_STATE = finding(
    "ib.E003",
    "an Active port's physical state is not LinkUp",
    "The link is retraining or in error recovery: reseat or replace the cable or transceiver and watch "
    "the port's error counters.",
    action="reseat-cable",
)
PORT_RATE = finding(
    "ib.E004",
    "a port trained below the fabric's rate",
    "A port at a lower rate (200 instead of 400) has a bad cable, transceiver or lane: reseat, then "
    "replace the cable; mlxlink shows the lanes.",
    action="replace-cable",
)
COUNTER_HIGH = finding(
    "ib.E005",
    "a port error counter is above its limit",
    "Rising symbol or link-recovery errors point at a cable or transceiver: reseat or replace it, clear "
    "the counters (perfquery -R) and watch them; link_downed means the link flapped.",
    action="replace-cable",
)


def _is_compute(port: IbPort, ib: IbLimits) -> bool:
    return is_compute(port, ib.hcas, ib.hca_types, ib.link_layer)


@check(
    "ib.port_state",
    evidence_metrics=("rate_gbps",),
    tier="quick",
    needs=("ib_ports",),
    findings=(HCA_COUNT, PORT_NOT_ACTIVE, PORT_PHYS_STATE, PORT_RATE, catalogue.TOOL_FAILED, catalogue.TOOL_MISSING),
    budget_s=3.0,
)
def port_state(ib_ports: IbPorts, limits: Fabric) -> CheckOutput:
    """The fabric's compute HCAs are all present and every port of them is Active/LinkUp at the expected rate."""
    ib = limits.ib
    if not ib_ports.ports and not ib_ports.errors and not ib_ports.cas_without_ports and ib.hca_count is None:
        raise NotApplicable("no InfiniBand HCA found and the fabric expects none")
    if ib_ports.cas_without_ports:  # named, but the output shows none of their ports: unread, not absent
        named = [c.ca for c in ib_ports.cas_without_ports]
        yield catalogue.TOOL_FAILED(Status.ERROR, "InfiniBand HCAs listed without their ports: " + ", ".join(named[:8]),
                                    value=len(named))
    if ib_ports.errors:
        yield catalogue.TOOL_FAILED(Status.ERROR, "InfiniBand HCAs or ports could not be read: "
                                    + "; ".join(ib_ports.errors[:5]), value=len(ib_ports.errors),
                                    evidence="\n".join(ib_ports.errors)[-2000:])
    compute = [p for p in ib_ports.ports if _is_compute(p, ib)]
    others = [p for p in ib_ports.ports if not _is_compute(p, ib)]
    hcas = sorted({p.ca for p in compute})
    unread = bool(ib_ports.errors or ib_ports.cas_without_ports)
    if unread and ib.hca_count is not None and len(hcas) < ib.hca_count:
        pass  # the HCAs not counted may be the ones that could not be read: the ERROR above says so
    elif ib.hca_count is not None and len(hcas) != ib.hca_count:
        message = f"{len(hcas)} compute HCAs found, expected {ib.hca_count}"
        if others:
            message += "; not counted: " + ", ".join(
                f"{p.name} ({p.ca_type or '?'}, {p.link_layer or '?'})" for p in others
            )
        yield HCA_COUNT.fail(message, value=len(hcas), limit=Limit("==", ib.hca_count, "ib.hca_count"))
    for p in compute:
        yield Metric("rate_gbps", p.rate_gbps, "Gb/s", component=p.name)
        if p.fw_ver:
            yield Metric("fw_ver", p.fw_ver, component=p.name)
        if p.phys_state == "Disabled" and ib.allow_disabled:
            continue
        if p.state != "Active":
            yield PORT_NOT_ACTIVE.fail(
                f"{p.name} is {p.state}/{p.phys_state} (expected Active/LinkUp)", component=p.name, value=p.state
            )
        elif p.phys_state != "LinkUp":
            yield PORT_PHYS_STATE.fail(
                f"{p.name} is Active but its physical state is {p.phys_state}", component=p.name, value=p.phys_state
            )
        elif ib.rate_gbps is not None and p.rate_gbps is None:
            yield catalogue.TOOL_MISSING(Status.ERROR, f"{p.name} rate is unknown, so ib.rate_gbps cannot be judged",
                                         component=p.name)
        elif ib.rate_gbps is not None and p.rate_gbps is not None and p.rate_gbps < ib.rate_gbps:
            yield PORT_RATE.fail(
                f"{p.name} runs at {p.rate_gbps:g} Gb/s, expected {ib.rate_gbps:g}",
                component=p.name,
                value=p.rate_gbps,
                unit="Gb/s",
                limit=Limit(">=", ib.rate_gbps, "ib.rate_gbps"),
            )


def _not_compute(ib_ports: IbPorts | None, ib: IbLimits) -> set[tuple[str, int]]:
    """The ports the fabric does not select as compute by CA type or link layer (a frontend
    Ethernet port on an InfiniBand node), as ib.port_state reads them; none where the ports
    could not be read (the name globs still apply)."""
    if ib_ports is None:
        return set()
    return {(p.ca, p.port) for p in ib_ports.ports if not _is_compute(p, ib)}


@check("ib.counters", tier="quick", needs=("ib_counters",), optional=("ib_ports",),
       findings=(COUNTER_HIGH, catalogue.TOOL_MISSING), budget_s=3.0,
       evidence_metrics=("symbol_error", "link_downed"))
def counters(ib_counters: IbCounters, limits: Fabric, ib_ports: IbPorts | None = None) -> CheckOutput:
    """No error counter of a compute HCA port is above the fabric's warn or fail limit."""
    ib = limits.ib
    if not ib_counters.ports:
        raise NotApplicable("no InfiniBand HCA found")
    fail_limits = msgspec.structs.asdict(ib.counters_fail)
    warn_limits = msgspec.structs.asdict(ib.counters_warn)
    others = _not_compute(ib_ports, ib)
    for port in ib_counters.ports:
        if port.ca and not any(fnmatchcase(port.ca, pattern) for pattern in ib.hcas):
            continue
        if (port.ca, port.port) in others:
            continue
        missing = [name for name in fail_limits if port.counters.get(name) is None
                   and (fail_limits[name] is not None or warn_limits[name] is not None)]
        if missing:
            # a counter with a limit that the port does not give is unknown, not zero
            yield catalogue.TOOL_MISSING(
                Status.ERROR, f"{port.name}: {len(missing)} counter(s) with a limit could not be read "
                f"({', '.join(missing)})", component=f"{port.name}:counters", value=missing)
        for name in fail_limits:
            value = port.counters.get(name)
            if value is None:
                continue
            yield Metric(name, value, component=port.name)
            crossed = against_limits(value, fail_limits[name], warn_limits[name])
            if crossed is not None:
                status, at, which = crossed
                yield COUNTER_HIGH(
                    status,
                    f"{port.name} {name} is {value}, above {at}",
                    component=f"{port.name}:{name}",
                    value=value,
                    limit=Limit("<=", at, f"ib.counters_{which}.{name}"),
                )
