"""`perfquery [-x|-E] [...]` text -> IbCounters, counter names as in sysfs `counters/`."""

from __future__ import annotations

import re

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.ib_common import IbCounters, IbPortCounters
from healthcheck.parsers.lines import mended_lines

# perfquery's names -> the kernel's sysfs names, so limits have one vocabulary
CANONICAL = {
    "SymbolErrorCounter": "symbol_error",
    "LinkErrorRecoveryCounter": "link_error_recovery",
    "LinkDownedCounter": "link_downed",
    "PortRcvErrors": "port_rcv_errors",
    "PortRcvRemotePhysicalErrors": "port_rcv_remote_physical_errors",
    "PortRcvSwitchRelayErrors": "port_rcv_switch_relay_errors",
    "PortXmitDiscards": "port_xmit_discards",
    "PortXmitConstraintErrors": "port_xmit_constraint_errors",
    "PortRcvConstraintErrors": "port_rcv_constraint_errors",
    "LocalLinkIntegrityErrors": "local_link_integrity_errors",
    "ExcessiveBufferOverrunErrors": "excessive_buffer_overrun_errors",
    "VL15Dropped": "VL15_dropped",
    "PortXmitWait": "port_xmit_wait",
    "PortXmitData": "port_xmit_data",
    "PortRcvData": "port_rcv_data",
    "PortXmitPkts": "port_xmit_packets",
    "PortRcvPkts": "port_rcv_packets",
    "PortUnicastXmitPkts": "unicast_xmit_packets",
    "PortUnicastRcvPkts": "unicast_rcv_packets",
    "PortMulticastXmitPkts": "multicast_xmit_packets",
    "PortMulticastRcvPkts": "multicast_rcv_packets",
}
_SKIP = {"PortSelect", "CounterSelect", "CounterSelect2"}
# Possessive quantifiers (*+, ++) where two neighbours could share characters ("# " then
# any text; the dots then the value): without them a long hostile line backtracks
# through every split of the run, quadratic in its length. Numbers are bounded: int()
# refuses more than 4,300 digits.
_HEAD = re.compile(
    r"^#\s*+(?P<what>.*?)counters:\s*+Lid\s++(?P<lid>[0-9]{1,9})\s++port\s++(?P<port>[0-9]{1,9})", re.IGNORECASE
)
_FIELD = re.compile(r"^(?P<name>[A-Za-z][A-Za-z0-9]*+):\.*+(?P<value>\S+)\s*$")


def parse_perfquery(text: str, ca: str = "") -> IbCounters:
    """Parse one or more counter blocks; `ca` names the HCA when the caller knows it."""
    ports: list[IbPortCounters] = []
    blocks: dict[tuple[int, int], dict[str, int]] = {}
    order: list[tuple[int, int]] = []
    current: dict[str, int] | None = None
    for line in mended_lines(text):
        m = _HEAD.match(line.strip())
        if m:
            key = (int(m.group("lid")), int(m.group("port")))
            if key not in blocks:  # -x and -E blocks of one port merge
                blocks[key] = {}
                order.append(key)
            current = blocks[key]
            continue
        if "iberror" in line or line.startswith("ibwarn"):
            raise ParseError(f"perfquery: {clip(line.strip())}")
        m = _FIELD.match(line.strip())
        if m and current is not None:
            name, value = m.group("name"), m.group("value")
            if name in _SKIP:
                continue
            try:
                number = int(value, 0)
            except ValueError:
                continue
            current[CANONICAL.get(name, name)] = number
    for lid, port in order:
        ports.append(IbPortCounters(ca=ca, port=port, lid=lid, counters=blocks[(lid, port)]))
    if not ports:
        raise ParseError(
            f"perfquery: no \"# ... counters: Lid N port N\" block (starts with {clip(text.strip(), 60)!r})")
    return IbCounters(ports=ports)
