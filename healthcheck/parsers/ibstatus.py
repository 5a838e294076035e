"""`ibstatus` text -> IbPorts. "Fatal error:  No devices" means no HCA (zero ports)."""

from __future__ import annotations

import re
from typing import Any, Optional

from healthcheck.core.errors import ParseError
from healthcheck.parsers.ib_common import IbPort, IbPorts, phys_state, port_state, rate_gbps

_HEAD = re.compile(r"^Infiniband device '(?P<ca>[^']*)' port (?P<port>\d+) status:\s*$")
_FIELD = re.compile(r"^\s+(?P<key>[a-z_ ]+?):\s*(?P<value>.*?)\s*$")


def parse_ibstatus(text: str) -> IbPorts:
    ports: list[IbPort] = []
    current: Optional[dict[str, Any]] = None

    def flush() -> None:
        if current is not None:
            lid = current.get("base lid", "")
            ports.append(
                IbPort(
                    ca=current["ca"],
                    port=current["port"],
                    state=port_state(current.get("state", "")),
                    phys_state=phys_state(current.get("phys state", "")),
                    rate_gbps=rate_gbps(current.get("rate", "")),
                    link_layer=current.get("link_layer") or None,
                    lid=int(lid, 16) if re.fullmatch(r"0x[0-9a-fA-F]+", lid) else None,
                )
            )

    for line in text.splitlines():
        m = _HEAD.match(line)
        if m:
            flush()
            current = {"ca": m.group("ca"), "port": int(m.group("port"))}
            continue
        if current is None:
            continue
        m = _FIELD.match(line)
        if m:
            current[m.group("key")] = m.group("value")
    flush()
    if not ports:
        if "No devices" in text:
            return IbPorts(ports=[])
        raise ParseError(f"ibstatus: no \"Infiniband device ... status:\" block (starts with {text.strip()[:60]!r})")
    return IbPorts(ports=ports)
