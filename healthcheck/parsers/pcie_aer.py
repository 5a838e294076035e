"""PCIe AER (Advanced Error Reporting) events in a kernel log: what the PCIe port or the
device said around an Xid.

The kernel's AER driver logs one error as a few lines, each prefixed by the driver and
the device it is about (real lines, tests/fixtures/field/issues/xid/):

    pcieport 0000:00:02.0: AER: Uncorrected (Fatal) error received: id=0010
    pcieport 0000:00:02.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, id=0010(Receiver ID)
    pcieport 0000:00:02.0:   device [8086:6f04] error status/mask=00000020/00000000
    pcieport 0000:00:02.0:    [ 5] Surprise Down Error    (First)

(newer kernels name the source as a bus id, `AER: Corrected error received: 0000:00:00.0`).
The "received" or the "PCIe Bus Error" line opens an event; the lines after it from the
same device add the device id, the status and mask words and the error names. The
severity is kept as printed (Corrected, Uncorrected (Non-Fatal), Uncorrected (Fatal)):
these are facts beside the Xids, never a verdict of their own.

After an uncorrected error the kernel says how recovery went, per device it touched
(real lines, tests/fixtures/field/issues/xid/):

    nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)
    nvidia 0000:02:00.0: device has no AER-aware driver          (a 4.x kernel's words for it)
    pcieport 0000:00:03.0: AER: Root Port link has been reset (0)
    pcieport 0000:00:03.0: AER: device recovery failed

each an `AerRecovery`: the GPU behind a root port names itself only there.

Linear: every pattern is anchored or bounded; an event takes at most DETAIL_LINES
detail lines and ERROR_NAMES names; at most RECOVERY_MAX recovery lines are kept.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.gpu_common import normalize_pci
from healthcheck.parsers.kernlog import Stamp

DETAIL_REACH = 16  # lines after an event's first line its detail lines may come
ERROR_NAMES = 32  # error names kept per event
RECOVERY_MAX = 1024  # recovery lines kept (the first ones: a flood repeats them)


class AerEvent(msgspec.Struct, frozen=True, omit_defaults=True):
    """One PCIe AER error as the kernel logged it."""

    severity: str  # as printed: "Corrected", "Uncorrected (Non-Fatal)", "Uncorrected (Fatal)"
    pci_bus_id: str | None  # the device the lines are about (a port or the GPU), normalised
    line: str  # the first line of the event, as logged
    driver: str | None = None  # "pcieport", "nvidia"
    type: str | None = None  # "Transaction Layer", "Data Link Layer", "Physical Layer"
    source: str | None = None  # who reported it: "id=0010" or a bus id, as printed
    pci_device_id: str | None = None  # "8086:6f04" from the "device [...]" line
    status: str | None = None  # the error status word, hex as printed
    mask: str | None = None
    errors: list[str] = []  # "Surprise Down Error", "Replay Timer Timeout"
    first_error: str | None = None  # the one marked "(First)"
    time: float | None = None
    uptime_s: float | None = None


# a bus id, or one redacted in a paste ("...", "0000:XX:00.0"; x is no hex digit): read as None
REDACTABLE_BUS = (r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-9A-Fa-f])?|\.{3}"
                  r"|[0-9A-Fa-fxX]{4,8}:[0-9A-Fa-fxX]{2}:[0-9A-Fa-fxX]{2}(?:\.[0-9A-Fa-fxX])?")
_REAL_BUS = lazy_compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")
_DEVICE = r"(?P<driver>[\w.-]{1,32}) (?:PCI:)?(?P<dev>" + REDACTABLE_BUS + "):"
_RECEIVED = lazy_compile(_DEVICE + r" AER: (?P<sev>[A-Za-z][\w ()-]{0,40}?) error (?:message )?received(?: from)?:?"
                       r"\s{0,4}(?P<src>\S{0,40})", re.ASCII)
_BUS_ERROR = lazy_compile(_DEVICE + r" (?:AER: )?PCIe Bus Error: severity=(?P<sev>[^,]{1,40}),"
                        r"\s{0,4}type=(?P<type>[^,]{1,40})(?:,\s{0,4}(?P<src>\S{1,60}))?", re.ASCII)
_STATUS = lazy_compile(_DEVICE + r"\s{1,8}device \[(?P<id>[0-9A-Fa-f]{4}:[0-9A-Fa-f]{4})\] error status/mask="
                     r"(?P<status>[0-9A-Fa-f]{1,16})/(?P<mask>[0-9A-Fa-f]{1,16})", re.ASCII)
_NAME = lazy_compile(_DEVICE + r"\s{1,8}\[\s{0,2}\d{1,2}\] (?P<name>[A-Za-z][\w /-]{0,60}?)\s{0,40}"
                   r"(?P<first>\(First\))?\s*$", re.ASCII)
# older kernels (4.x) say a device cannot recover without `AER: `, as `device has no AER-aware
# driver` (real: field/issues/xid/aer-surprise-down-then-xid79-tesla.txt), the outcome newer ones
# print as `AER: can't recover (no error_detected callback)`
_RECOVERY = lazy_compile(_DEVICE + r" (?:AER: )?(?P<outcome>can't recover|device recovery failed"
                       r"|Root Port link has been reset|device has no AER-aware driver)(?P<more>[^\n]{0,80})",
                       re.ASCII)
MARKERS = ("AER", "PCIe Bus Error")  # a line with neither opens no event


class AerRecovery(msgspec.Struct, frozen=True, omit_defaults=True):
    """How the kernel's recovery from an uncorrected AER error went for one device."""

    outcome: str  # as printed: "can't recover (no error_detected callback)", "device recovery failed"
    pci_bus_id: str | None  # the device (a GPU, a port), normalised
    line: str
    driver: str | None = None  # "nvidia", "pcieport"
    time: float | None = None
    uptime_s: float | None = None


def bus_id(text: str) -> str | None:
    """A bus id normalised ("0000:00:02.0"); None when it was redacted."""
    bus = normalize_pci(text)
    return bus if _REAL_BUS.fullmatch(bus) else None


class _Open:
    """An event still taking its detail lines."""

    def __init__(self, number: int, fields: dict[str, object]) -> None:
        self.number = number
        self.fields = fields
        self.errors: list[str] = []


class AerReader:
    """Reads AER lines one by one (`read`) and hands the events (`events`) in log order."""

    def __init__(self) -> None:
        self._done: list[_Open] = []
        self._open: dict[str, _Open] = {}  # device -> its newest event
        self.last = -DETAIL_REACH - 1  # line number of the newest event
        self.recovery: list[AerRecovery] = []

    def expects_detail(self, number: int) -> bool:
        """An event is open near this line: its detail lines name no AER marker."""
        return number - self.last <= DETAIL_REACH

    def read(self, number: int, body: str, line: str, stamp: Stamp) -> bool:
        """Read one message; True when it was an AER line."""
        if "AER" in body or "PCIe Bus Error" in body:
            return self._opening(number, body, line, stamp)
        if not self.expects_detail(number):
            return False
        return self._detail(number, body)

    def _opening(self, number: int, body: str, line: str, stamp: Stamp) -> bool:
        m = _BUS_ERROR.search(body)
        if m:
            event = self._open.get(m.group("dev").lower())
            if event is not None and number - event.number <= DETAIL_REACH and "type" not in event.fields:
                event.fields.update(type=m.group("type").strip(), severity=m.group("sev").strip())
                if m.group("src") and "source" not in event.fields:
                    event.fields["source"] = m.group("src")
                return True
            self._start(number, m, line, stamp, type=m.group("type").strip(), source=m.group("src"))
            return True
        m = _RECEIVED.search(body)
        if m:
            self._start(number, m, line, stamp, source=m.group("src") or None)
            return True
        return self._recovery(body, line, stamp)

    def _recovery(self, body: str, line: str, stamp: Stamp) -> bool:
        m = _RECOVERY.search(body)
        if m is None:
            return False
        if len(self.recovery) >= RECOVERY_MAX:
            return True
        self.recovery.append(AerRecovery(outcome=(m.group("outcome") + m.group("more")).strip(),
                                         pci_bus_id=bus_id(m.group("dev")), line=line, driver=m.group("driver"),
                                         time=stamp.time, uptime_s=stamp.uptime_s))
        return True

    def _start(self, number: int, m: re.Match[str], line: str, stamp: Stamp, **more: object) -> None:
        fields: dict[str, object] = dict(severity=m.group("sev").strip(), pci_bus_id=bus_id(m.group("dev")),
                                         driver=m.group("driver"), line=line, time=stamp.time,
                                         uptime_s=stamp.uptime_s)
        fields.update({k: v for k, v in more.items() if v is not None})
        event = _Open(number, fields)
        self._done.append(event)
        self._open[m.group("dev").lower()] = event
        self.last = number

    def _detail(self, number: int, body: str) -> bool:
        m = _STATUS.search(body) or _NAME.search(body)
        if not m:
            return False
        event = self._open.get(m.group("dev").lower())
        if event is None or number - event.number > DETAIL_REACH:
            return False
        if "status" in m.groupdict():
            event.fields.update(pci_device_id=m.group("id").lower(), status=m.group("status"), mask=m.group("mask"))
        elif len(event.errors) < ERROR_NAMES:
            event.errors.append(m.group("name").strip())
            if m.group("first") and "first_error" not in event.fields:
                event.fields["first_error"] = m.group("name").strip()
        return True

    def events(self) -> list[AerEvent]:
        return [AerEvent(errors=list(e.errors), **e.fields) for e in self._done]  # type: ignore[arg-type]
