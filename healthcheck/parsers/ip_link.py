"""`ip -j [-d] link` (JSON) and `ip [-d] link` (text) -> interface facts."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.lines import NOTHING_UNREAD, Unrecognized, UnrecognizedLines, is_prompt
from healthcheck.parsers.unread import mended_numbered


class Link(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str
    mtu: int | None
    flags: list[str] = []
    operstate: str = "UNKNOWN"  # UP, DOWN, UNKNOWN, LOWERLAYERDOWN, ...
    link_type: str = ""  # ether, infiniband, loopback, none
    ifindex: int | None = None
    kind: str | None = None  # veth, ipoib, bridge, vlan, ... (from -d)

    @property
    def admin_up(self) -> bool:
        return "UP" in self.flags

    @property
    def carrier(self) -> bool:
        return "LOWER_UP" in self.flags


class IpLinks(msgspec.Struct, frozen=True, omit_defaults=True):
    links: list[Link]
    # text: lines that are neither an interface's header nor an indented line of its block
    unrecognized: Unrecognized = NOTHING_UNREAD

    def by_name(self) -> dict[str, Link]:
        return {link.name: link for link in self.links}


def parse_ip_link(text: str) -> IpLinks:
    """Either format: JSON if it looks like JSON, else the text of `ip [-d] link`."""
    stripped = text.strip()
    if not stripped:
        raise ParseError("empty output: expected `ip link` text or `ip -j link` JSON")
    if stripped[0] in "[{" and not is_prompt(stripped[:256].split("\n", 1)[0]):  # `[root@h ~]# ip link` first
        return parse_ip_link_json(stripped)
    return parse_ip_link_text(text)


def parse_ip_link_json(text: str) -> IpLinks:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ParseError(f"ip -j link: not valid JSON ({clip(str(exc))})") from None
    except RecursionError:
        # json's C decoder guards its recursion: 100,000 "[" end here, not in a crash.
        # `ip -j link` nests four levels deep.
        raise ParseError("ip -j link: JSON nested too deeply") from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise ParseError("ip -j link: expected a JSON array of interfaces")
    links = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict):
            raise ParseError(f"ip -j link: entry {i} is not an object")
        name = entry.get("ifname")
        if not isinstance(name, str) or not name:
            raise ParseError(f"ip -j link: entry {i} has no ifname")
        flags = entry.get("flags")
        linkinfo = entry.get("linkinfo")
        links.append(
            Link(
                name=name,
                mtu=_int_or_none(entry.get("mtu")),
                flags=[str(f) for f in flags] if isinstance(flags, list) else [],
                operstate=str(entry.get("operstate", "UNKNOWN")),
                link_type=str(entry.get("link_type", "")),
                ifindex=_int_or_none(entry.get("ifindex")),
                kind=str(linkinfo["info_kind"]) if isinstance(linkinfo, dict) and "info_kind" in linkinfo else None,
            )
        )
    return IpLinks(links)


# "2: eth0@if6: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc noqueue state UP ..."
# The kernel refuses ":" and white space in interface names, so the name is one run of
# other characters: a lazy `.+?` there made a hostile line (": <" repeated, or a long
# run of spaces) quadratic.
_HEADER = lazy_compile(r"^(?P<index>[0-9]{1,9}):\s++(?P<name>[^:\s]++):\s++<(?P<flags>[^>]*+)>(?P<rest>.*)$")
_LINK = lazy_compile(r"^\s+link/(?P<type>\S+)")
# lines after link/... that are attributes, not the device kind
_NOT_KIND = {"altname", "prop", "link-netnsid", "link-netns", "vf", "alias", "inet", "inet6"}


def parse_ip_link_text(text: str) -> IpLinks:
    links: list[Link] = []
    current: dict[str, Any] | None = None
    saw_link_line = False
    unread = UnrecognizedLines()

    def flush() -> None:
        if current is not None:
            links.append(Link(**current))

    for numbered in mended_numbered(text, one_task=False):  # its own lines start `2: eth0:`
        line = numbered.text
        m = _HEADER.match(line)
        if m:
            flush()
            rest = m.group("rest").split()
            attrs = dict(zip(rest[::2], rest[1::2], strict=False))
            name = m.group("name")
            # "eth0@if6" / "eth0@NONE": the peer after @ is not part of the name
            if "@" in name:
                name = name.split("@", 1)[0]
            current = {
                "name": name,
                "ifindex": int(m.group("index")),
                "flags": [f for f in m.group("flags").split(",") if f],
                "mtu": _int_or_none(attrs.get("mtu")),
                "operstate": attrs.get("state", "UNKNOWN"),
            }
            saw_link_line = False
            continue
        if current is None or not line[:1].isspace():
            unread.note(numbered)  # outside a block, or not indented as ip indents a block's lines
            continue
        lm = _LINK.match(line)
        if lm:
            current["link_type"] = lm.group("type")
            saw_link_line = True
            continue
        if saw_link_line and line[:1].isspace() and "kind" not in current:
            word = line.split(maxsplit=1)[0] if line.strip() else ""
            if word and word not in _NOT_KIND and not word.startswith(("link/", "numtxqueues")):
                current["kind"] = word
    flush()
    if not links:
        raise ParseError(f"ip link: no interface found in the output (starts with {clip(text.strip(), 80)!r})")
    return IpLinks(links, unrecognized=unread.frozen_or_nothing())


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _UINT.fullmatch(value):
        return int(value)
    return None


_UINT = lazy_compile(r"[0-9]{1,18}")  # not str.isdigit(): int() refuses "²" and 4,301 digits
