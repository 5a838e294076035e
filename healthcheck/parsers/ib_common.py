"""InfiniBand facts shared by the sysfs, ibstat, ibstatus and perfquery parsers."""

from __future__ import annotations

import re
from collections.abc import Iterable
from fnmatch import fnmatchcase

import msgspec

from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.lines import NOTHING_UNREAD, Unrecognized

# IBTA PortState and PortPhysicalState, by number (sysfs and ibstatus print "4: ACTIVE")
_STATES = {1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "ActiveDefer"}
_PHYS = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "PortConfigurationTraining",
    5: "LinkUp",
    6: "LinkErrorRecovery",
    7: "PhyTest",
}
_STATE_NAMES = {v.lower(): v for v in _STATES.values()} | {"initializing": "Init", "active_defer": "ActiveDefer"}
_PHYS_NAMES = {v.lower(): v for v in _PHYS.values()} | {"portconfigurationtraining": "PortConfigurationTraining"}
# A bounded digit run: int() refuses more than 4,300 digits, and no state number has 10.
_NUMBERED = lazy_compile(r"^(\d{1,9})\s*:\s*(.*)$", re.ASCII)
_RATE = lazy_compile(r"^\s*(\d+(?:\.\d+)?)", re.ASCII)  # float() has no digit limit


class IbPort(msgspec.Struct, frozen=True, omit_defaults=True):
    ca: str
    port: int
    state: str  # Down, Init, Armed, Active, ActiveDefer (or the raw text if unknown)
    phys_state: str  # Sleep, Polling, Disabled, LinkUp, LinkErrorRecovery, ...
    rate_gbps: float | None = None
    link_layer: str | None = None  # InfiniBand, Ethernet
    ca_type: str | None = None  # MT4129
    fw_ver: str | None = None
    lid: int | None = None
    port_guid: str | None = None
    cut: bool = False  # the text ends inside this port's block (ibstat): the fields after the cut are unknown

    @property
    def name(self) -> str:
        return f"{self.ca}/{self.port}"


class IbCa(msgspec.Struct, frozen=True, omit_defaults=True):
    """A CA named with none of its ports shown: seen, its ports' state unknown."""

    ca: str
    ca_type: str | None = None
    fw_ver: str | None = None
    port_count: int | None = None  # ibstat's "Number of ports"


class IbPorts(msgspec.Struct, frozen=True, omit_defaults=True):
    """Every HCA port found. An empty list means no HCA: never healthy where HCAs are expected."""

    ports: list[IbPort]
    errors: list[str] = []  # e.g. ibstat's "ibpanic: ... stat of IB device 'mlx5_8' failed"
    cas_without_ports: list[IbCa] = []  # CAs the text names with no port block (`ibstat | grep mlx5`, a cut)
    unrecognized: Unrecognized = NOTHING_UNREAD  # lines no part of the parser read (omitted when none)

    @property
    def cas(self) -> list[str]:
        return sorted({p.ca for p in self.ports})


class IbPortCounters(msgspec.Struct, frozen=True, omit_defaults=True):
    ca: str  # "" where the tool names only a LID (perfquery)
    port: int
    counters: dict[str, int]
    lid: int | None = None

    @property
    def name(self) -> str:
        return f"{self.ca}/{self.port}" if self.ca else f"lid{self.lid}/{self.port}"


class IbCounters(msgspec.Struct, frozen=True, omit_defaults=True):
    ports: list[IbPortCounters]
    unrecognized: Unrecognized = NOTHING_UNREAD  # lines no part of the parser read (omitted when none)


def port_state(text: str) -> str:
    """"4: ACTIVE" / "ACTIVE" / "Active" / "Initializing" -> "Active" / "Init"."""
    return _decode(text, _STATES, _STATE_NAMES)


def phys_state(text: str) -> str:
    """"5: LinkUp" / "LinkUp" / "Polling" -> canonical name."""
    return _decode(text, _PHYS, _PHYS_NAMES)


def _decode(text: str, by_number: dict[int, str], by_name: dict[str, str]) -> str:
    text = text.strip()
    m = _NUMBERED.match(text)
    if m:
        number = int(m.group(1))
        if number in by_number:
            return by_number[number]
        text = m.group(2)
    return by_name.get(text.lower().replace(" ", ""), text)


def rate_gbps(text: str) -> float | None:
    """"400 Gb/sec (4X NDR)" / "400" / "2.5 Gb/sec (1X SDR)" -> 400.0 / 400.0 / 2.5."""
    m = _RATE.match(text)
    return float(m.group(1)) if m else None


def is_compute(port: IbPort, hcas: Iterable[str], hca_types: Iterable[str], link_layer: str | None) -> bool:
    """Whether `port` is a compute HCA's, as the fabric selects them (ib.hcas name globs,
    ib.hca_types, ib.link_layer): a frontend Ethernet port on an IB node is not."""
    types = list(hca_types)
    if not any(fnmatchcase(port.ca, pattern) for pattern in hcas):
        return False
    if types and port.ca_type not in types:
        return False
    return link_layer is None or port.link_layer is None or port.link_layer == link_layer
