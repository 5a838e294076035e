"""InfiniBand ports and counters on a node reached without hc (agentless, over SSH):
`ibstat`, and `perfquery -x` per port with sysfs over the shell where perfquery cannot
reach the MAD layer. Loaded only when a run gathers these facts over SSH
(probes.TRANSPORT_MODULES): a local run never imports their parsers.
"""

from __future__ import annotations

import functools

from healthcheck.core.facts import ProbeContext, provides, timeout_error
from healthcheck.parsers.ib_common import IbCounters, IbPortCounters, IbPorts
from healthcheck.parsers.ibstat import parse_ibstat
from healthcheck.parsers.perfquery import parse_perfquery
from healthcheck.probes.ib import IBSTAT, sysfs_counters_over_shell


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
    return IbCounters(ports=out)
