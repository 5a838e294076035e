"""`ibstat` (all CAs, or one CA) text -> IbPorts.

An empty output with exit 0 is what ibstat prints on a machine with no HCA: it parses
to zero ports, which the checks treat as "no HCA", never as healthy where HCAs are
expected.
"""

from __future__ import annotations

import re
from typing import Any

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.ib_common import IbPort, IbPorts, phys_state, port_state, rate_gbps
from healthcheck.parsers.lines import mended_lines

# Every pattern has one way to match a line (no two adjacent quantifiers that can take
# the same characters), so a hostile line costs its length, not its length squared;
# values are taken whole and stripped in code rather than by a lazy `.*?\s*$`.
_CA = re.compile(r"^CA '(?P<name>[^']*)'\s*$")
_PORT = re.compile(r"^\s+Port (?P<num>[0-9]{1,9}):\s*$")
_FIELD = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z ]*):(?P<value>.*)$")
_LID = re.compile(r"[0-9]{1,9}")


def parse_ibstat(text: str) -> IbPorts:
    ports: list[IbPort] = []
    errors: list[str] = []
    ca: dict[str, str] | None = None
    port: dict[str, Any] | None = None
    saw_ca = False

    def flush_port() -> None:
        nonlocal port
        if port is not None and ca is not None:
            ports.append(_port(ca, port))
        port = None

    for line in mended_lines(text):
        if not line.strip():
            continue
        m = _CA.match(line)
        if m:
            flush_port()
            ca = {"name": m.group("name")}
            saw_ca = True
            continue
        if line.startswith(("ibpanic:", "ibwarn:", "ibstat:")):
            errors.append(line.strip())
            continue
        if ca is None:
            continue
        m = _PORT.match(line)
        if m:
            flush_port()
            port = {"num": int(m.group("num"))}
            continue
        m = _FIELD.match(line)
        if m:
            (port if port is not None else ca)[m.group("key").strip()] = m.group("value").strip()
    flush_port()
    if not saw_ca and text.strip() and not errors:
        raise ParseError(f"ibstat: no \"CA '...'\" block in the output (starts with {clip(text.strip(), 60)!r})")
    return IbPorts(ports=ports, errors=errors)


def _port(ca: dict[str, str], port: dict[str, Any]) -> IbPort:
    lid = port.get("Base lid", "")
    return IbPort(
        ca=ca["name"],
        port=port["num"],
        state=port_state(port.get("State", "")),
        phys_state=phys_state(port.get("Physical state", "")),
        rate_gbps=rate_gbps(port.get("Rate", "")),
        link_layer=port.get("Link layer") or None,
        ca_type=ca.get("CA type") or None,
        fw_ver=ca.get("Firmware version") or None,
        lid=int(lid) if _LID.fullmatch(lid) else None,
        port_guid=port.get("Port GUID") or None,
    )
