"""What each Xid and SXid hc knows means, and what NVIDIA recommends doing about it.

One row per code, as NVIDIA's Xid catalogue (SOURCE_URL) lists it: the mnemonic, the
description, and the bucket in its "Resolution Bucket (Immediate Action)" column, verbatim.
BUCKET_ACTIONS turns each bucket into hc's words for the action (restart-app, reset-gpu,
reboot, inspect-hardware, none). The severity a code gets on a node is the fabric's
(gpu.xid.severity); this table says what an operator does about it, in the finding and in
`hc checks list`.

An Xid whose action depends on its message (154 names the recovery action the driver
wants; 74 prints the NVLink error registers that decide it) is read by `action_of`.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.lazyre import lazy_compile

# NVIDIA's Xid catalogue (Ampere and newer): the "Xids" sheet's Code, Mnemonic, Description and
# "Resolution Bucket (Immediate Action)" columns; also listed in docs/findings.md by the docs generator
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

# NVIDIA's immediate-action buckets (the catalogue's "Fault Resolution Buckets" / Guidance Class
# sheet) in hc's words, for every bucket a row below uses. The plain ones map one to one; a
# WORKFLOW_* bucket is a procedure, and hc takes the action that procedure ends in:
BUCKET_ACTIONS = {
    "RESTART_APP": RESTART_APP,  # "the application should be restarted"
    "RESET_GPU": RESET_GPU,
    "RESTART_BM": REBOOT,  # "restart bare metal, system should be restarted"
    "IGNORE": NONE,  # "no action required"
    "CONTACT_SUPPORT": INSPECT,  # "contact your support organization": hc drains the node for that
    # Xid 45: "Solo: RESTART_FM; Not Solo: IGNORE (follow guidance in other Xid)". Xid 45 is the
    # cleanup after an earlier error (its description), so hc follows the other Xid and asks none
    "WORKFLOW_XID_45": NONE,
    # Xid 48: "Solo: RESET_GPU; w/ 63 or 64: DRAIN_AND_RESET": a GPU reset either way
    "WORKFLOW_XID_48": RESET_GPU,
    # Xid 74: its trigger conditions say "a GPU reset or node reboot is needed to clear this
    # error"; the register bits refine it where the message prints them (xid74_bits)
    "WORKFLOW_NVLINK_ERR": RESET_GPU,
    # Xid 144-150: the "XID 144-150 Decode" sheet gives each subcode and error status IGNORE,
    # RESET_GPU or XID_154_EVAL (follow the Xid 154 logged with it); hc does not decode the
    # subcode, so it takes the strongest the sheet gives (RESET_GPU), and the 154 logged with
    # the error names the driver's own action
    "WORKFLOW_NVLINK5_ERR": RESET_GPU,
    # Xid 154: "follow Xid 154 reported guidance": action_of reads it from the message; a message
    # naming none hc knows gets a GPU reset
    "XID_154": RESET_GPU,
}


class XidInfo(msgspec.Struct, frozen=True):  # a Struct, not a dataclass: a prologue imports no dataclasses
    code: int
    meaning: str
    action: str  # one of ACTIONS
    mnemonic: str = ""  # NVIDIA's, as the catalogue spells it
    bucket: str = ""  # NVIDIA's immediate-action bucket, verbatim; "" for a code not in the catalogue


# (code, mnemonic, meaning: the catalogue's description, immediate-action bucket), checked row by
# row against the Xids sheet of NVIDIA's catalogue (SOURCE_URL, also offered there as the
# spreadsheet https://docs.nvidia.com/Xid-Catalog.xlsx). Every code hc knows is in that sheet.
_CATALOGUE: tuple[tuple[int, str, str, str], ...] = (
    (8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", "RESTART_APP"),
    (13, "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
     "graphics engine exception", "RESTART_APP"),
    (31, "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT", "GPU memory page fault", "RESTART_APP"),
    (32, "ROBUST_CHANNEL_PBDMA_ERROR", "invalid or corrupted push buffer stream", "RESTART_APP"),
    (38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "driver firmware error", "IGNORE"),
    (43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing (the application hit a "
     "software-induced fault; the GPU remains healthy)", "IGNORE"),
    (45, "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL", "preemptive cleanup, due to previous errors", "WORKFLOW_XID_45"),
    (48, "ROBUST_CHANNEL_GPU_ECC_DBE", "double-bit ECC error", "WORKFLOW_XID_48"),
    # the catalogue lists 61 as "Unused" on A100, H100, B100 and GB200 (deprecated, or Volta and
    # older) with CONTACT_SUPPORT, as it does every unused code: a 61 on a current GPU is unexpected
    (61, "PMU_BREAKPOINT", "internal micro-controller breakpoint (unused on Ampere and newer)", "CONTACT_SUPPORT"),
    (62, "PMU_HALT_ERROR", "internal micro-controller halt", "RESET_GPU"),
    (63, "INFOROM_DRAM_RETIREMENT_EVENT", "GPU memory remapping event", "IGNORE"),
    (64, "INFOROM_DRAM_RETIREMENT_FAILURE", "GPU memory remapping failure", "RESET_GPU"),
    (68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 exception", "RESTART_APP"),
    (69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "graphics engine class error", "RESTART_APP"),
    (74, "NVLINK_ERROR", "NVLink error", "WORKFLOW_NVLINK_ERR"),
    (79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", "RESTART_BM"),
    (92, "EXCESSIVE_SBE_INTERRUPTS", "high single-bit ECC error rate", "IGNORE"),
    (94, "ROBUST_CHANNEL_CONTAINED_ERROR", "contained memory error (the application was stopped)", "RESTART_APP"),
    (95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "uncontained memory error", "RESET_GPU"),
    (109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "context switch timeout error", "RESET_GPU"),
    (119, "GSP_RPC_TIMEOUT", "GSP RPC timeout", "RESET_GPU"),
    (120, "GSP_ERROR", "GSP error", "RESET_GPU"),
    (121, "C2C_ERROR", "C2C error (corrected errors on the C2C link to a Grace CPU)", "IGNORE"),
    (140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC unrecovered error", "RESET_GPU"),
    (144, "NVLINK_SAW_ERROR", "NVLink SAW error", "WORKFLOW_NVLINK5_ERR"),
    (145, "NVLINK_RLW_ERROR", "NVLink RLW error", "WORKFLOW_NVLINK5_ERR"),
    (146, "NVLINK_TLW_ERROR", "NVLink TLW error", "WORKFLOW_NVLINK5_ERR"),
    (147, "NVLINK_TREX_ERROR", "NVLink TREX error", "WORKFLOW_NVLINK5_ERR"),
    (148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink NVLPW_CTRL error", "WORKFLOW_NVLINK5_ERR"),
    (149, "NVLINK_NETIR_ERROR", "NVLink NETIR error", "WORKFLOW_NVLINK5_ERR"),
    (150, "NVLINK_MSE_ERROR", "NVLink MSE error", "WORKFLOW_NVLINK5_ERR"),
    (154, "GPU_RECOVERY_ACTION_CHANGED", "GPU recovery action changed", "XID_154"),
)

XIDS: dict[int, XidInfo] = {code: XidInfo(code, meaning, BUCKET_ACTIONS[bucket], mnemonic, bucket)
                            for code, mnemonic, meaning, bucket in _CATALOGUE}

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
