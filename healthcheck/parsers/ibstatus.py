"""`ibstatus` text -> IbPorts. "Fatal error:  No devices" means no HCA (zero ports)."""

from __future__ import annotations

import re
from typing import Any

from healthcheck.core.errors import FragmentError, ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.ib_common import IbPort, IbPorts, phys_state, port_state, rate_gbps
from healthcheck.parsers.lines import UnrecognizedLines, flat_field
from healthcheck.parsers.unread import mended_numbered

# One way to match each line (see ibstat.py): the key starts with a letter, so the
# leading whitespace and the key never compete for the same spaces.
_HEAD = re.compile(r"^Infiniband device '(?P<ca>[^']*)' port (?P<port>[0-9]{1,9}) status:\s*$")
_FIELD = re.compile(r"^\s+(?P<key>[a-z_][a-z_ ]*):(?P<value>.*)$")
# the fields ibstatus prints (tests/fixtures/corpus/ibstatus): one at the left margin is the
# tool's whose indentation a paste lost (`flat_field`)
_KEYS = frozenset({"default gid", "base lid", "sm lid", "state", "phys state", "rate", "link_layer"})
_NO_DEVICES = "No devices"  # `Fatal error:  No devices`: no HCA
_HEX = re.compile(r"0x[0-9a-fA-F]{1,16}")


def _field(line: str) -> tuple[str, str] | None:
    """(key, value) of a port's field: indented as ibstatus prints it, or one of its own at
    the left margin (its indentation lost in a paste: `flat_field`)."""
    if m := _FIELD.match(line):
        return m.group("key").rstrip(), m.group("value").strip()
    return flat_field(line, _KEYS)


def parse_ibstatus(text: str) -> IbPorts:
    ports: list[IbPort] = []
    current: dict[str, Any] | None = None

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
                    lid=int(lid, 16) if _HEX.fullmatch(lid) else None,
                )
            )

    unread = UnrecognizedLines()
    fields = 0  # a port's fields read or not: with no port line above them, whose they are is cut
    for numbered in mended_numbered(text, cut_end=True):  # `rate: 20` of 200 Gb/sec: the word the text ends in
        line = numbered.text
        m = _HEAD.match(line)
        if m:
            flush()
            current = {"ca": m.group("ca"), "port": int(m.group("port"))}
            continue
        kv = _field(line)
        fields += kv is not None and kv[0] in _KEYS
        if kv and current is not None:
            current[kv[0]] = kv[1]
        elif _NO_DEVICES not in line:
            unread.note(numbered)  # a blank is no line left unread
    flush()
    if not ports:
        if _NO_DEVICES in text:
            return IbPorts(ports=[], unrecognized=unread.frozen_or_nothing())
        if fields:
            raise FragmentError(f"ibstatus: {fields} port field(s) with no \"Infiniband device ... port N status:\" "
                                "line above them: which device's port they are is not in the text")
        raise ParseError(
            f"ibstatus: no \"Infiniband device ... status:\" block (starts with {clip(text.strip(), 60)!r})")
    return IbPorts(ports=ports, unrecognized=unread.frozen_or_nothing())
