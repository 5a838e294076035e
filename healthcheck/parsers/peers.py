"""A peer's address and port as the tools print them: one reader for every parser.

Each library writes a socket's far end its own way, and every form carries IPv4, IPv6
and host names alike:

- gloo (`transport/tcp/address.cc`, its `peer_.str()`): `[10.1.3.122]:42916`,
  `[::1]:54172` (field/issues-9's gtest `writev [::1]:54172`), `[none]` where it knows no
  peer (`Connect timeout [none]`);
- NCCL (`ncclSocketToString`): `10.216.210.236<54862>`, `host<51159>`, a link-local IPv6
  with its zone `fe80::966d:ae03:8b:df78%ib0<53249>` (field/issues' H100 IB error), the
  IPv4-mapped `::ffff:10.1.1.1<port>`, also bracketed `[::ffff:10.1.1.1]<port>`;
- torch's c10d sockets: `[::ffff:127.0.0.1]:35790` (`SocketImpl(... remote=...)`),
  `host:port`.

`endpoint` reads one such token into an `Endpoint` (the address as printed, without its
brackets, a zone kept: it names the interface; the port where one is printed); `PEER`
is the token's pattern for a parser's own regex (bounded: linear time on any line).
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Endpoint(NamedTuple):
    address: str  # "10.1.3.122", "::1", "fe80::1%ib0", "node-3"
    port: int | None = None


# one token, the forms above: bracketed (gloo, torch) with `:PORT` or `<PORT>`, NCCL's
# `ADDR<PORT>` (colons allowed: IPv6), `HOST:PORT` (no colon in the host: a bare IPv6 with a
# `:PORT` after it cannot be told from its own last group), a bare address
# a host name character, or a placeholder a poster put for the part they hid
# (`<cluster_name>.ibnet<53735>`, field corpus): a letter after its `<`, where the port's is a digit
_HOST_PIECE = r"(?:<[A-Za-z_][A-Za-z0-9_]{0,62}>|[^\[\]\s<>])"
_FORMS = re.compile(
    r"\[(?P<bracketed>[^\[\]\s<>]{1,253})\](?::(?P<colon>\d{1,5})|<(?P<angle>\d{1,5})>)?"
    rf"|(?P<angled>{_HOST_PIECE}{{1,253}})<(?P<nccl>\d{{1,5}})>"
    r"|(?P<host>[^\[\]\s<>:]{1,253}):(?P<port>\d{1,5})"
    r"|(?P<bare>[^\[\]\s<>]{1,253})"
)
# the token inside a parser's regex (no groups of its own): bracketed, or NCCL's angled port
PEER = rf"(?:\[[^\[\]\s<>]{{1,253}}\](?::\d{{1,5}}|<\d{{1,5}}>)?|{_HOST_PIECE}{{1,253}}<\d{{1,5}}>)"
_NO_PEER = frozenset({"none", "unknown", ""})  # gloo's `[none]`: it knows no peer


def endpoint(token: str) -> Endpoint | None:
    """`token` (one of the forms above) as an Endpoint; None where it names no peer."""
    m = _FORMS.fullmatch(token.strip().rstrip(".,;"))
    if m is None:
        return None
    address = m.group("bracketed") or m.group("angled") or m.group("host") or m.group("bare") or ""
    if address.lower() in _NO_PEER:
        return None
    port = m.group("colon") or m.group("angle") or m.group("nccl") or m.group("port")
    return Endpoint(address, int(port) if port else None)


__all__ = ["PEER", "Endpoint", "endpoint"]
