"""InfiniBand ports and counters on a node reached without hc (agentless, over SSH):
`ibstat`, and `perfquery -x` per port with sysfs over the shell where perfquery cannot
reach the MAD layer, and each port's netdev's carrier_changes from sysfs over the shell.
Loaded only when a run gathers these facts over SSH (probes.TRANSPORT_MODULES): a local run
never imports their parsers.
"""

from __future__ import annotations

import functools

import msgspec

from healthcheck.core.facts import ProbeContext, provides, timeout_error
from healthcheck.parsers.ib_common import IbCounters, IbPortCounters, IbPorts
from healthcheck.parsers.ibstat import parse_ibstat
from healthcheck.parsers.perfquery import parse_perfquery
from healthcheck.probes.ib import CARRIER_CHANGES, IBSTAT, SYSFS_IB, carrier_by_port, sysfs_counters_over_shell


@provides("ib_ports", "ssh", prefetch=lambda ctx: [IBSTAT])
def ib_ports_ibstat(ctx: ProbeContext) -> IbPorts:
    # Empty output with exit 0 is ibstat's "no HCA": parsed to zero ports, never healthy
    # where the fabric expects HCAs.
    result = ctx.run_checked(IBSTAT)
    return ctx.parse(parse_ibstat, result.stdout, "ibstat")


@provides("ib_counters", "ssh", prefetch=lambda ctx: [IBSTAT])
def ib_counters_perfquery(ctx: ProbeContext) -> IbCounters:
    """`perfquery -x -C CA -P PORT` per port ibstat lists; where perfquery cannot reach
    the MAD layer (no umad access), the same counters from sysfs."""
    ports = ib_ports_ibstat(ctx).ports
    out: list[IbPortCounters] = []
    for port in ports:
        result = ctx.runner.run(("perfquery", "-x", "-C", port.ca, "-P", str(port.port)), timeout_s=ctx.timeout_s)
        if result.ok:
            parsed: IbCounters = ctx.parse(functools.partial(parse_perfquery, ca=port.ca), result.stdout,
                                           "perfquery -x")
            out.extend(IbPortCounters(ca=port.ca, port=port.port, lid=p.lid, counters=p.counters) for p in parsed.ports)
            continue
        if result.timed_out:
            raise timeout_error(result, f"perfquery -x -C {port.ca} -P {port.port}", ctx.timeout_s)
        out.append(sysfs_counters_over_shell(ctx, port.ca, port.port, result.stdout + result.stderr))
    return IbCounters(ports=with_carrier_changes(ctx, out))


def with_carrier_changes(ctx: ProbeContext, ports: list[IbPortCounters]) -> list[IbPortCounters]:
    """`ports` with each one's netdev's carrier_changes among its counters, read over the shell
    from each HCA's `device/net/` (one command per HCA); a port without one is left as it is."""
    out = []
    by_ca: dict[str, dict[int, int]] = {}
    for port in ports:
        if port.ca and port.ca not in by_ca:
            directory = f"{SYSFS_IB}/{port.ca}/device/net/"
            result = ctx.runner.run(("grep", "-rH", f"--include={CARRIER_CHANGES}", "--include=dev_port", "",
                                     directory), timeout_s=ctx.timeout_s)
            by_ca[port.ca] = carrier_by_port(result.stdout) if result.ok else {}
        changes = by_ca.get(port.ca, {}).get(port.port)
        out.append(port if changes is None else
                   msgspec.structs.replace(port, counters={**port.counters, CARRIER_CHANGES: changes}))
    return out
