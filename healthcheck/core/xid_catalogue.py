"""What each Xid and SXid hc knows means, and what NVIDIA recommends doing about it.

One row per code: NVIDIA's short meaning and the immediate action of its resolution
bucket, in hc's words (RESTART_APP -> restart-app, RESET_GPU -> reset-gpu, RESTART_BM ->
reboot, CONTACT_SUPPORT or a hardware fault -> inspect-hardware, IGNORE -> none). The
severity a code gets on a node is the fabric's (gpu.xid.severity); this table says what an
operator does about it, in the finding and in `hc checks list`.

An Xid whose action depends on its message (154 names the recovery action the driver
wants) is read by `action_of`.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.lazyre import lazy_compile

# NVIDIA's Xid catalogue (Ampere and newer), "Resolution Bucket (Immediate Action)" column;
# also listed in docs/findings.md by the docs generator
SOURCE_URL = "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"

# hc's names for NVIDIA's resolution buckets, mildest first
RESTART_APP = "restart-app"
RESET_GPU = "reset-gpu"
REBOOT = "reboot"
INSPECT = "inspect-hardware"
NONE = "none"
ACTIONS = (NONE, RESTART_APP, RESET_GPU, REBOOT, INSPECT)

ACTION_TEXT = {
    NONE: "no action (informational)",
    RESTART_APP: "restart the application",
    RESET_GPU: "reset the GPU (nvidia-smi -r) or reboot the node",
    REBOOT: "reboot the node",
    INSPECT: "drain the node for hardware inspection",
}


class XidInfo(msgspec.Struct, frozen=True):  # a Struct, not a dataclass: a prologue imports no dataclasses
    code: int
    meaning: str
    action: str  # one of ACTIONS


def _rows(action: str, rows: dict[int, str]) -> dict[int, XidInfo]:
    return {code: XidInfo(code, meaning, action) for code, meaning in rows.items()}


XIDS: dict[int, XidInfo] = {
    **_rows(RESTART_APP, {
        8: "GPU stopped processing (channel idle timeout)", 13: "graphics engine exception",
        31: "GPU memory page fault", 32: "invalid or corrupted push buffer stream",
        43: "GPU stopped processing", 68: "video processor exception", 69: "graphics engine class error",
        94: "contained ECC error (the application was stopped)", 109: "context switch timeout",
    }),
    **_rows(NONE, {
        45: "preemptive cleanup after earlier errors", 63: "row remapping recorded (applies at the next reset)",
        92: "high single-bit ECC error rate",
    }),
    **_rows(RESET_GPU, {
        38: "driver firmware error", 48: "double-bit ECC error", 61: "internal micro-controller breakpoint",
        62: "internal micro-controller halt", 74: "NVLink error", 95: "uncontained ECC error",
        119: "GSP RPC timeout", 120: "GSP error", 121: "C2C link error", 140: "unrecovered ECC error",
        144: "NVLink SAW error", 145: "NVLink RLW error", 146: "NVLink TLW error", 147: "NVLink TREX error",
        148: "NVLink NVLPW error", 149: "NVLink NETIR error", 150: "NVLink MSE error",
        154: "GPU recovery action changed",
    }),
    **_rows(REBOOT, {79: "GPU has fallen off the bus"}),
    **_rows(INSPECT, {64: "row remapping failure (no spare rows left)"}),
}

# SXids are judged by the severity the NVSwitch driver prints beside them: a fatal one takes
# the NVLink fabric down until the switches are reset (a reboot, fabric manager restarted)
SXID_ACTIONS = {"fatal": REBOOT, "non-fatal": NONE}

UNKNOWN = XidInfo(0, "not in hc's Xid catalogue: see NVIDIA's", RESET_GPU)

# Xid 154's message names the recovery action: "GPU recovery action changed from 0x0 (None)
# to 0x1 (GPU Reset Required)"; the words after the last "to" decide
_RECOVERY_WORDS = (("drain and reset", RESET_GPU), ("node reboot", REBOOT), ("gpu reset", RESET_GPU),
                   ("none", NONE))


# Xid 74 on Hopper: "NVLink: fatal error detected on link 14(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",
# seven error registers of which the first, third, fourth and fifth are valid; what each bit means
# and what to do is NVIDIA's WORKFLOW_NVLINK_ERR in the Xid catalogue (SOURCE_URL), as groups of
# (register number from 1, bits, what it means, the action it asks for: None where it asks none
# of its own). A bit no group names is to be reported to NVIDIA, as the workflow says.
_XID74 = lazy_compile(r"[Ll]ink (?P<link>\d{1,3}) ?\((?P<words>0x[0-9A-Fa-f]{1,16}(?:, ?0x[0-9A-Fa-f]{1,16}){0,15})\)",
                      re.ASCII)
ECC_PARITY = "likely an ECC/parity hardware fault (inspect the link if seen more than twice on it)"
SECONDARY = "a secondary error (follow the other Xids/SXids logged with it)"
XID74_BITS: tuple[tuple[int, frozenset[int], str, str | None], ...] = (
    (1, frozenset({0, 23, 30}), "can be ignored", NONE),
    (1, frozenset({1, 20}), SECONDARY, None),
    (1, frozenset({4, 5}), ECC_PARITY, RESET_GPU),
    (1, frozenset({8, 9, 12, 16, 17, 24, 28}), "possibly hardware: check the link's mechanical connections, "
     "reseat, run field diagnostics", INSPECT),
    (1, frozenset({21, 22}), "marginal channel signal integrity: check the link's mechanical connections, "
     "run field diagnostics", INSPECT),
    (1, frozenset({27, 29}), "report to NVIDIA if seen repeatedly", RESET_GPU),
    (3, frozenset({0, 1, 2, 6}), ECC_PARITY, RESET_GPU),
    (3, frozenset({13}), "not expected in production: report to NVIDIA", RESET_GPU),
    (3, frozenset({16, 19}), "run field diagnostics if seen repeatedly", RESET_GPU),
    (3, frozenset({17, 18}), "report to NVIDIA if seen repeatedly", RESET_GPU),
    (4, frozenset({16, 17}), SECONDARY, None),
    (4, frozenset({18}), SECONDARY + "; the fabric needs a reset", RESET_GPU),
    (5, frozenset({18, 19, 21, 22, 24, 25, 27, 28}), ECC_PARITY, RESET_GPU),
    (5, frozenset({20, 23, 26, 29}), "an ECC error threshold was exceeded, with no uncorrectable error: "
     "operation can continue", NONE),
)
_VALID_REGISTERS = (1, 3, 4, 5)


class NvlinkBits(msgspec.Struct, frozen=True):
    """What an Xid 74's register bits say: per set bit, its meaning; the action they ask for."""

    link: int
    meanings: list[str]  # "reg3 bit 16: run field diagnostics if seen repeatedly"
    action: str | None  # the strongest action a bit asks for; None: none asks one of its own


def xid74_bits(message: str) -> NvlinkBits | None:
    """The Hopper NVLink error registers of an Xid 74 message decoded; None where it prints none."""
    m = _XID74.search(message[-400:])
    if not m:
        return None
    words = [int(w, 16) for w in m.group("words").replace(" ", "").split(",")]
    meanings: list[str] = []
    asked: list[str] = []
    for register in _VALID_REGISTERS:
        value = words[register - 1] if register <= len(words) else 0
        for bit in range(64):
            if not value >> bit & 1:
                continue
            group = next((g for g in XID74_BITS if g[0] == register and bit in g[1]), None)
            meaning, action = (group[2], group[3]) if group else ("not in NVIDIA's workflow: report it", RESET_GPU)
            meanings.append(f"reg{register} bit {bit}: {meaning}")
            if action is not None:
                asked.append(action)
    strongest = max(asked, key=ACTIONS.index) if asked else None
    return NvlinkBits(int(m.group("link")), meanings, strongest)


def info(code: int) -> XidInfo:
    """The catalogue's row for `code`; an unknown code's meaning points at NVIDIA's catalogue."""
    return XIDS.get(code) or XidInfo(code, UNKNOWN.meaning, UNKNOWN.action)


def action_of(code: int, message: str = "") -> str:
    """The action for one Xid: the catalogue's, for Xid 154 the one its message names, for Xid 74
    the strongest its NVLink register bits ask for (where the message prints them)."""
    if code == 74:
        bits = xid74_bits(message)
        if bits is not None and bits.action is not None:
            return bits.action
    if code == 154:
        tail = message.lower()[-200:].rpartition(" to ")[2]
        for words, action in _RECOVERY_WORDS:
            if words in tail:
                return action
    return info(code).action


def sxid_action(severity: str | None) -> str:
    """A fatal SXid's action (reboot); any other severity's (none)."""
    return SXID_ACTIONS["fatal"] if (severity or "").lower() == "fatal" else NONE
