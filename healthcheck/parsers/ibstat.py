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
from healthcheck.parsers.ib_common import IbCa, IbPort, IbPorts, phys_state, port_state, rate_gbps
from healthcheck.parsers.lines import UnrecognizedLines, flat_field
from healthcheck.parsers.unread import mended_numbered

# Every pattern has one way to match a line (no two adjacent quantifiers that can take
# the same characters), so a hostile line costs its length, not its length squared;
# values are taken whole and stripped in code rather than by a lazy `.*?\s*$`.
# a CA line indented (a document's code block indents its first lines, a list item all of them)
# is still one: nothing else ibstat prints starts with `CA '`
_CA = re.compile(r"^[ \t]*CA '(?P<name>[^']*)'\s*$")
_PORT = re.compile(r"^\s*Port (?P<num>[0-9]{1,9}):\s*$")
_FIELD = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z ]*):(?P<value>.*)$")
# a port's field with no CA above it: `ibstat CA PORT` prints the port alone, unindented, and a
# paste can keep only a port's lines (`Port 1:` / `State: Down` / `Physical state: Polling`)
_LOOSE_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z ]*):(?P<value>.*)$")
# the fields ibstat prints (real outputs: tests/fixtures/corpus/ibstat, field/repos/ibstat): a
# line of one at the left margin is the tool's whose indentation a paste lost (`flat_field`)
_KEYS = frozenset({
    "CA type", "Number of ports", "Firmware version", "Hardware version", "Node GUID", "System image GUID",
    "State", "Physical state", "Rate", "Base lid", "LMC", "SM lid", "Capability mask", "Port GUID", "Link layer",
})
_NO_CA = {"name": ""}  # the CA of a port no `CA '...'` line names: unknown
_LID = re.compile(r"[0-9]{1,9}")


# A port block's fields, as ibstat prints them: the first three say its state; "Link
# layer" is the last, so a block without it at the end of the text was cut there.
_STATE_FIELDS = ("State", "Physical state", "Rate")
_LAST_FIELD = "Link layer"


class _Reading:
    """The CAs and ports read so far."""

    def __init__(self) -> None:
        self.ports: list[IbPort] = []
        self.errors: list[str] = []
        self.cas: list[dict[str, str]] = []
        self.port: dict[str, Any] | None = None
        self.ported: set[str] = set()  # CAs with a port block

    def flush_port(self, *, at_end: bool = False) -> None:
        ca = self.cas[-1] if self.cas else _NO_CA
        # a port with no CA is one only where it says a state (a `Port 1:` line alone is no port)
        if self.port is not None and (self.cas or any(k in self.port for k in _STATE_FIELDS)):
            missing = [k for k in _STATE_FIELDS if k not in self.port]
            cut = bool(missing) or (at_end and _LAST_FIELD not in self.port)
            self.ports.append(_port(ca, self.port, cut=cut))
            self.ported.add(ca["name"])
        self.port = None

    def read(self, line: str) -> bool:
        """Read one line; False where it is none of ibstat's (no CA, port, field or error)."""
        m = _CA.match(line)
        if m:
            self.flush_port()
            self.cas.append({"name": m.group("name")})
        elif line.startswith(("ibpanic:", "ibwarn:", "ibstat:")):
            self.errors.append(line.strip())
        elif not self.cas:
            return self._loose(line)
        elif m := _PORT.match(line):
            self.flush_port()
            self.port = {"num": int(m.group("num"))}
        elif kv := _field(line):
            (self.port if self.port is not None else self.cas[-1])[kv[0]] = kv[1]
        else:
            return False
        return True

    def _loose(self, line: str) -> bool:
        """A port's lines with no `CA '...'` line above them (see _LOOSE_FIELD): its CA unknown."""
        if m := _PORT.match(line):
            self.flush_port()
            self.port = {"num": int(m.group("num"))}
        elif self.port is not None and (m := _LOOSE_FIELD.match(line)):
            self.port[m.group("key").strip()] = m.group("value").strip()
        else:
            return False
        return True

    def without_ports(self) -> list[IbCa]:
        return [IbCa(ca=ca["name"], ca_type=ca.get("CA type") or None, fw_ver=ca.get("Firmware version") or None,
                     port_count=int(n) if _LID.fullmatch(n := ca.get("Number of ports", "")) else None)
                for ca in self.cas if ca["name"] not in self.ported]


def _field(line: str) -> tuple[str, str] | None:
    """(key, value) of a CA's or a port's field: indented as ibstat prints it, or one of
    ibstat's own at the left margin (its indentation lost in a paste: `flat_field`)."""
    if m := _FIELD.match(line):
        return m.group("key").strip(), m.group("value").strip()
    return flat_field(line, _KEYS)


def parse_ibstat(text: str) -> IbPorts:
    """ibstat's CA blocks -> every port, each with its CA's type and firmware. A CA named
    with no port block (`ibstat | grep mlx5`, a paste cut after it) is listed in
    `cas_without_ports`; a port block the text ends inside is marked `cut`, its missing
    fields unknown, never invented. A port with no CA line above it (`ibstat CA PORT`'s
    port alone, a paste's fragment) is read with its CA unknown (`ca` ""), where it says
    its state."""
    reading = _Reading()
    unread = UnrecognizedLines()
    for line in mended_numbered(text):
        if line.text.strip() and not reading.read(line.text):
            unread.note(line)
    reading.flush_port(at_end=True)
    if not reading.cas and not reading.ports and text.strip() and not reading.errors:
        raise ParseError(f"ibstat: no \"CA '...'\" block in the output (starts with {clip(text.strip(), 60)!r})")
    return IbPorts(ports=reading.ports, errors=reading.errors, cas_without_ports=reading.without_ports(),
                   unrecognized=unread.frozen_or_nothing())


def _port(ca: dict[str, str], port: dict[str, Any], *, cut: bool = False) -> IbPort:
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
        cut=cut,
    )
