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

from dataclasses import dataclass

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


@dataclass(frozen=True)
class XidInfo:
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


def info(code: int) -> XidInfo:
    """The catalogue's row for `code`; an unknown code's meaning points at NVIDIA's catalogue."""
    return XIDS.get(code) or XidInfo(code, UNKNOWN.meaning, UNKNOWN.action)


def action_of(code: int, message: str = "") -> str:
    """The action for one Xid: the catalogue's, or for Xid 154 the one its message names."""
    if code == 154:
        tail = message.lower()[-200:].rpartition(" to ")[2]
        for words, action in _RECOVERY_WORDS:
            if words in tail:
                return action
    return info(code).action


def sxid_action(severity: str | None) -> str:
    """A fatal SXid's action (reboot); any other severity's (none)."""
    return SXID_ACTIONS["fatal"] if (severity or "").lower() == "fatal" else NONE
