"""`ibv_devinfo` (rdma-core's libibverbs/examples/devinfo.c, and MLNX_OFED's build of
it) -> IbvDevinfo.

Input: one block per device ("hca_id:\tmlx5_0", then "\tkey:\t\tvalue" lines), its
ports last ("\t\tport:\t1" and the port's lines); `-v` adds device limits, capability
flag lists (a key, then one name per line) and per-port GIDs; `-l` prints
"N HCAs found:" and the names. Keys are found by name, not by indentation: copies
with tabs expanded to spaces read the same. MLNX_OFED adds a "Device ports:" line and
lines without a colon ("ooo_rc_caps  = 0x0", "log max atomic inline\t3"); they are
kept in `fields` where they have a value.

Values are typed where a check uses them: port state and physical state (names as
printed, "PORT_ACTIVE", "LINK_UP"), MTUs in bytes, LIDs, link layer, width and speed
(lanes x per-lane Gb/s = the port's rate), firmware, GUIDs. What ibv_devinfo prints
instead of devices ("No IB devices found", "Failed to get IB devices list: Function
not implemented" on a kernel without RDMA, "IB device 'x' wasn't found") is a fact.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import NOTHING_UNREAD, Unrecognized, UnrecognizedLines
from healthcheck.parsers.unread import mended_numbered

SOURCE = "ibv_devinfo"
VALUE_MAX = 256
FLAGS_MAX = 256  # capability names listed under one key (a few dozen exist)

_NAMED = re.compile(r"^(?P<name>[A-Za-z0-9_][A-Za-z0-9_ .-]{0,63}?)\s*\((?P<num>-?[0-9]{1,6})\)$")
_SPEED = re.compile(r"^(?P<gbps>[0-9]{1,4}(?:\.[0-9]{1,4})?) Gbps")
_WIDTH = re.compile(r"^(?P<lanes>[0-9]{1,2})X")
_GID = re.compile(r"^GID\[\s*(?P<index>[0-9]{1,6})\]:?\s*(?P<gid>\S{1,64})")
_HCAS_FOUND = re.compile(r"^[0-9]{1,6} HCAs? found:$")
_TAB_VALUE = re.compile(r"^(?P<key>[^\t=:]{1,64}?)(?:\t+|\s*=\s*)(?P<value>\S.*)$")
_ERRORS = (
    "Failed to get IB devices list",
    "Failed to open device",
    "Failed to query device props",
    "Failed to query port",
    "Failed to query gid",
    "Invalid port requested for device",
)
_NOT_FOUND = re.compile(r"^IB device '(?P<name>[^']{0,256})' wasn't found$")


class IbvGid(msgspec.Struct, frozen=True):
    index: int
    gid: str


class IbvPort(msgspec.Struct, frozen=True, omit_defaults=True):
    port: int
    state: str | None = None  # "PORT_ACTIVE", "PORT_DOWN", "PORT_INIT", "PORT_ARMED"
    max_mtu: int | None = None  # bytes
    active_mtu: int | None = None
    sm_lid: int | None = None
    port_lid: int | None = None
    port_lmc: int | None = None
    link_layer: str | None = None  # "InfiniBand", "Ethernet"
    # with -v
    phys_state: str | None = None  # "LINK_UP", "POLLING", "DISABLED"
    active_width: str | None = None  # "4X"
    active_speed: str | None = None  # per lane, as printed: "50.0 Gbps"
    rate_gbps: float | None = None  # lanes x per-lane speed: 4X at 50.0 Gbps = 200
    gids: list[IbvGid] = []
    fields: dict[str, str] = {}  # every "key: value" of the port, as printed


class IbvDevice(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str  # hca_id; "" where a paste cut the block's `hca_id:` line off (the device unknown)
    transport: str | None = None  # "InfiniBand", "iWARP"
    fw_ver: str | None = None
    node_guid: str | None = None  # "88e9:a4ff:ff25:a462"
    sys_image_guid: str | None = None
    vendor_id: str | None = None  # "0x02c9"
    vendor_part_id: int | None = None  # 4123 (ConnectX-6)
    hw_ver: str | None = None
    board_id: str | None = None
    phys_port_cnt: int | None = None
    ports: list[IbvPort] = []
    fields: dict[str, str] = {}  # every "key: value" of the device, as printed
    flags: dict[str, list[str]] = {}  # -v: "device_cap_flags" -> ["BAD_PKEY_CNTR", ...]
    notes: list[str] = []  # -v: lines such as "tag matching not supported"


class IbvDevinfo(msgspec.Struct, frozen=True, omit_defaults=True):
    source: str = SOURCE
    devices: list[IbvDevice] = []
    listed: list[str] | None = None  # `ibv_devinfo -l`: the device names
    no_devices: bool = False  # "No IB devices found" (the verbs stack works, no device)
    error: str | None = None  # no device list at all, a device not found, a failed query
    # why what was read is partial: a paste cut below its `hca_id:` line, the device's block (or
    # a port's) read with the device unnamed (`name` ""); None when nothing was missing
    incomplete: str | None = None
    # lines outside every device block that are none of ibv_devinfo's (inside one, every
    # line is kept: a field, a capability name or a note)
    unrecognized: Unrecognized = NOTHING_UNREAD


def _named(value: str | None) -> str | None:
    """ "PORT_ACTIVE (4)" -> "PORT_ACTIVE"; "4096 (5)" -> "4096"."""
    if value is None:
        return None
    m = _NAMED.match(value)
    return m.group("name") if m else value


def _int(value: str | None) -> int | None:
    text = _named(value)
    if text is None:
        return None
    text = text.strip()
    try:
        return int(text, 16) if text.lower().startswith("0x") and len(text) <= 18 else (
            int(text) if text.isdigit() and len(text) <= 18 else None)
    except ValueError:
        return None


def _split(line: str) -> tuple[str, str] | None:
    """ "\\t\\t\\tstate:\\t\\t\\tPORT_ACTIVE (4)" -> ("state", "PORT_ACTIVE (4)")."""
    key, sep, value = line.partition(":")
    if not sep or len(key) > 64:
        m = _TAB_VALUE.match(line)  # MLNX_OFED: "log max atomic inline\t\t3", "ooo_rc_caps  = 0x0"
        return (m.group("key").strip(), m.group("value").strip()) if m else None
    return key.strip(), value.strip()


# a device's own fields, as ibv_devinfo prints them (tests/fixtures/ibv_devinfo, the field's):
# one before any `hca_id:` line opens the block of a device whose name the paste cut off
_DEVICE_KEYS = frozenset({"transport", "fw_ver", "node_guid", "sys_image_guid", "vendor_id", "vendor_part_id",
                          "hw_ver", "board_id", "phys_port_cnt"})


class _Block:
    def __init__(self, name: str) -> None:
        self.name = name
        self.fields: dict[str, str] = {}
        self.flags: dict[str, list[str]] = {}
        self.last: str | None = None  # the key bare lines (flag names) belong to
        self.gids: list[IbvGid] = []
        self.notes: list[str] = []

    def add(self, key: str, value: str) -> None:
        self.fields[key] = clip(value, VALUE_MAX)
        self.last = key

    def flag(self, line: str) -> None:
        """A line with no value: a capability name under a list key ("rc_odp_caps:" or
        "device_cap_flags: 0x..."), else a note ("core clock not supported")."""
        value = self.fields.get(self.last, "") if self.last is not None else None
        if self.last is None or line.endswith("supported") and line != "NO SUPPORT" or (
                value and not value.lower().startswith("0x")):
            if len(self.notes) < FLAGS_MAX:
                self.notes.append(clip(line, VALUE_MAX))
            return
        names = self.flags.setdefault(self.last, [])
        if len(names) < FLAGS_MAX:
            names.append(clip(line, VALUE_MAX))


def _port(block: _Block) -> IbvPort:
    f = block.fields
    width = _named(f.get("active_width"))
    speed = _named(f.get("active_speed"))
    mw = _WIDTH.match(width) if width else None
    ms = _SPEED.match(speed) if speed else None
    rate = int(mw.group("lanes")) * float(ms.group("gbps")) if mw and ms else None
    return IbvPort(
        port=int(block.name),
        state=_named(f.get("state")),
        max_mtu=_int(f.get("max_mtu")),
        active_mtu=_int(f.get("active_mtu")),
        sm_lid=_int(f.get("sm_lid")),
        port_lid=_int(f.get("port_lid")),
        port_lmc=_int(f.get("port_lmc")),
        link_layer=f.get("link_layer") or None,
        phys_state=_named(f.get("phys_state")),
        active_width=width if mw else None,
        active_speed=f"{ms.group('gbps')} Gbps" if ms else None,
        rate_gbps=rate,
        gids=block.gids,
        fields=f,
    )


def _device(block: _Block, ports: list[IbvPort]) -> IbvDevice:
    f = block.fields
    return IbvDevice(
        name=block.name,
        transport=_named(f.get("transport")),
        fw_ver=f.get("fw_ver") or None,
        node_guid=f.get("node_guid") or None,
        sys_image_guid=f.get("sys_image_guid") or None,
        vendor_id=f.get("vendor_id") or None,
        vendor_part_id=_int(f.get("vendor_part_id")),
        hw_ver=f.get("hw_ver") or None,
        board_id=f.get("board_id") or None,
        phys_port_cnt=_int(f.get("phys_port_cnt")),
        ports=ports,
        fields=f,
        flags=block.flags,
        notes=block.notes,
    )


_TRANSPORTS = ("InfiniBand", "iWARP")  # `transport:` values a device block opens with (IbvDevice.transport)
UNNAMED_DEVICE = "cut below its hca_id line: a device block read without the device's name (name \"\")"


def _opens_a_block(key: str, value: str) -> bool:
    """The first line of a device's block after its `hca_id:` (`transport: InfiniBand (0)`),
    or a port's (`port: 1`): where a paste that cut the `hca_id:` line starts."""
    return (key == "transport" and _named(value) in _TRANSPORTS) or (
        key == "port" and value.isdigit() and len(value) <= 6)


class _Scan:
    def __init__(self) -> None:
        self.devices: list[IbvDevice] = []
        self.device: _Block | None = None
        self.ports: list[IbvPort] = []
        self.port: _Block | None = None
        self.listed: list[str] | None = None
        self.no_devices = False
        self.error: str | None = None

    def end_port(self) -> None:
        if self.port is not None:
            self.ports.append(_port(self.port))
            self.port = None

    def end_device(self) -> None:
        self.end_port()
        if self.device is not None:
            self.devices.append(_device(self.device, self.ports))
        self.device, self.ports = None, []

    def line(self, raw: str) -> bool:
        """Read one line; False where it is none of ibv_devinfo's (outside every block)."""
        line = raw.replace("\x00", "").strip()
        if not line or self._message(line):
            return True
        if self.listed is not None and self.device is None and raw[:1].isspace():
            self.listed.append(clip(line, VALUE_MAX))  # `-l`: "\tmlx5_0"
            return True
        m = _GID.match(line)
        if m:
            block = self.port or self.device
            if block is not None:
                block.gids.append(IbvGid(int(m.group("index")), m.group("gid")))
            return block is not None
        pair = _split(line)
        key, value = pair if pair is not None else ("", "")
        if key == "hca_id":
            self.end_device()
            self.device = _Block(clip(value, VALUE_MAX))
        elif self.device is None and not self.devices and key in _DEVICE_KEYS:
            self.device = _Block("")  # a fragment from inside the first device's block: its hca_id cut off
            self.device.add(key, value)
        elif key == "port" and self.device is not None and value.isdigit() and len(value) <= 6:
            self.end_port()
            self.port = _Block(value)
        elif self.device is None and _opens_a_block(key, value):
            # a paste cut below its `hca_id:` line: the block is read, its device unnamed ("")
            self.device = _Block("")
            return self.line(raw)
        elif self.device is None:
            return False  # a line outside any device block (a banner, another program's)
        elif pair is None or key == "Unknown flags":
            (self.port or self.device).flag(line)  # a capability name under the last key
        elif not (key == "Device ports" and not value):  # MLNX_OFED's line before the ports
            (self.port or self.device).add(key, value)
        return True

    def _message(self, line: str) -> bool:
        if line == "No IB devices found":
            self.no_devices = True
        elif line.startswith(_ERRORS):
            self.error = self.error or clip(line)
        elif _NOT_FOUND.match(line):
            self.error = self.error or clip(line)
        elif _HCAS_FOUND.match(line):
            self.listed = []
        else:
            return False
        return True


def parse_ibv_devinfo(text: str) -> IbvDevinfo:
    """`ibv_devinfo` [-v] [-l] output (stderr mixed in or not) -> IbvDevinfo. ParseError on garbage."""
    if not text or not text.strip():
        raise ParseError("ibv_devinfo: empty output")
    scan = _Scan()
    unread = UnrecognizedLines()
    for line in mended_numbered(text, cut_end=True):  # `fw_ver: 22.3` of 22.36.1010: the word the text ends in
        if not scan.line(line.text):
            unread.note(line)
    scan.end_device()
    if not scan.devices and scan.listed is None and not scan.no_devices and scan.error is None:
        raise ParseError(f"ibv_devinfo: no hca_id block (starts {clip(text.strip(), 60)!r})")
    return IbvDevinfo(devices=scan.devices, listed=scan.listed, no_devices=scan.no_devices, error=scan.error,
                      incomplete=UNNAMED_DEVICE if any(d.name == "" for d in scan.devices) else None,
                      unrecognized=unread.frozen_or_nothing())
