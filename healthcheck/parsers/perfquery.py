"""`perfquery [-x|-E] [...]` text -> IbCounters, counter names as in sysfs `counters/`."""

from __future__ import annotations

import re

from healthcheck.core.errors import FragmentError, ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.ib_common import IbCounters, IbPortCounters
from healthcheck.parsers.lines import UnrecognizedLines, without_cut_end
from healthcheck.parsers.unread import mended_numbered

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


class _Block:
    """One port's counters: its header's LID and port, or (a block whose '# ... counters'
    header line a paste lost) the port its PortSelect line names and no LID."""

    def __init__(self, lid: int | None, port: int | None) -> None:
        self.lid = lid
        self.port = port
        self.counters: dict[str, int] = {}

    def read(self, name: str, value: str) -> None:
        try:
            number = int(value, 0)
        except ValueError:
            return
        if name == "PortSelect":
            if self.port is None:
                self.port = number
        elif name not in _SKIP:
            self.counters[CANONICAL.get(name, name)] = number


def parse_perfquery(text: str, ca: str = "") -> IbCounters:
    """Parse one or more counter blocks; `ca` names the HCA when the caller knows it.

    A block whose header line is missing (a paste that starts at its first counter, a
    prompt before it) is read by its PortSelect line, with no LID: the counters are
    perfquery's whatever the header said; without PortSelect its port is unknown and
    the block is not read: counters alone, none of them read, are a FragmentError (which port's
    they are, the cut took). A text that ends mid-line may end inside its last value
    (`PortXmitData:....3710` of 37108676853855): that line is not read."""
    text, _ = without_cut_end(text)
    blocks: dict[tuple[int | None, int | None], _Block] = {}
    current: _Block | None = None
    unread = UnrecognizedLines()
    for numbered in mended_numbered(text):
        line = numbered.text
        m = _HEAD.match(line.strip())
        if m:
            key = (int(m.group("lid")), int(m.group("port")))
            current = blocks.setdefault(key, _Block(*key))  # -x and -E blocks of one port merge
            continue
        if "iberror" in line or line.startswith("ibwarn"):
            raise ParseError(f"perfquery: {clip(line.strip())}")
        m = _FIELD.match(line.strip())
        if m is None:
            unread.note(numbered)  # a blank is no line left unread
            continue
        if current is None or (m.group("name") == "PortSelect" and current.lid is None and current.counters):
            current = blocks.setdefault((None, len(blocks)), _Block(None, None))  # a block without its header
        current.read(m.group("name"), m.group("value"))
    ports = [IbPortCounters(ca=ca, port=b.port, lid=b.lid, counters=b.counters)
             for b in blocks.values() if b.port is not None]
    if not ports and any(b.counters for b in blocks.values()):
        raise FragmentError("perfquery: counters with no \"# ... counters: Lid N port N\" line and no PortSelect: "
                            f"which port's they are is not in the text (starts with {clip(text.strip(), 60)!r})")
    if not ports:
        raise ParseError(
            f"perfquery: no \"# ... counters: Lid N port N\" block (starts with {clip(text.strip(), 60)!r})")
    return IbCounters(ports=ports, unrecognized=unread.frozen_or_nothing())
