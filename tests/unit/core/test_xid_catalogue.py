"""The Xid catalogue: NVIDIA's meaning and recommended action for every Xid hc knows,
in gpu.E020's messages and in `hc checks list`."""

from __future__ import annotations

import msgspec
from support import CORPUS

from healthcheck.checks import gpu as g
from healthcheck.core import xid_catalogue as xc
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.model import Finding
from healthcheck.parsers.xid import parse_kernel_log
from healthcheck.report.checks_list import catalogue_json, catalogue_table

H100 = Config(EMBEDDED_DEFAULT).fabric("h100-ndr400")


def _xid_findings(name: str) -> list[Finding]:
    text = (CORPUS / "xid-dmesg" / name).read_text()
    log = msgspec.structs.replace(parse_kernel_log(text), source="dmesg", source_lines=len(text.splitlines()))
    return [f for f in g.xid(kernel_gpu_log=log, gpus=None, limits=H100) if isinstance(f, Finding)]


def test_every_code_the_fabrics_judge_has_a_meaning_and_an_action() -> None:
    judged = set(H100.gpu.xid.severity)
    assert judged <= set(xc.XIDS), judged - set(xc.XIDS)
    assert all(x.action in xc.ACTIONS and x.meaning for x in xc.XIDS.values())


# NVIDIA's "Resolution Bucket (Immediate Action)" for a sample of codes across its buckets, as the
# catalogue's Xids sheet gives them (xid_catalogue.SOURCE_URL), and the action hc says for each
NVIDIA_IMMEDIATE = {
    13: ("RESTART_APP", xc.RESTART_APP), 31: ("RESTART_APP", xc.RESTART_APP), 43: ("IGNORE", xc.NONE),
    45: ("WORKFLOW_XID_45", xc.NONE), 48: ("WORKFLOW_XID_48", xc.RESET_GPU), 63: ("IGNORE", xc.NONE),
    64: ("RESET_GPU", xc.RESET_GPU), 74: ("WORKFLOW_NVLINK_ERR", xc.RESET_GPU), 79: ("RESTART_BM", xc.REBOOT),
    92: ("IGNORE", xc.NONE), 94: ("RESTART_APP", xc.RESTART_APP), 95: ("RESET_GPU", xc.RESET_GPU),
    38: ("IGNORE", xc.NONE), 109: ("RESET_GPU", xc.RESET_GPU), 121: ("IGNORE", xc.NONE),
    119: ("RESET_GPU", xc.RESET_GPU), 120: ("RESET_GPU", xc.RESET_GPU), 140: ("RESET_GPU", xc.RESET_GPU),
    61: ("CONTACT_SUPPORT", xc.INSPECT), 149: ("WORKFLOW_NVLINK5_ERR", xc.RESET_GPU), 154: ("XID_154", xc.RESET_GPU),
}


def test_each_code_takes_nvidias_immediate_action() -> None:
    got = {code: (xc.info(code).bucket, xc.action_of(code)) for code in NVIDIA_IMMEDIATE}
    assert got == NVIDIA_IMMEDIATE
    assert all(x.action == xc.BUCKET_ACTIONS[x.bucket] and x.mnemonic for x in xc.XIDS.values())
    assert xc.info(64).meaning == "GPU memory remapping failure" and xc.info(68).mnemonic.endswith("NVDEC0_ERROR")


def test_the_findings_carry_nvidias_action() -> None:
    by_code = {f.component.rsplit(":xid", 1)[1]: f for f in _xid_findings("xid48-63-94-dbe-rowremap-contained.txt")}
    assert "NVIDIA's action: reset the GPU" in by_code["48"].message
    assert "NVIDIA's action: restart the application" in by_code["94"].message
    fell = [f for f in _xid_findings("xid79-with-nvswitch-sxid-20034.txt") if f.component.endswith(":xid79")]
    assert fell and "NVIDIA's action: reboot the node" in fell[0].message
    sxid = [f for f in _xid_findings("xid79-with-nvswitch-sxid-20034.txt") if f.id == "gpu.E021"]
    assert sxid and all("action: reboot the node" in f.message for f in sxid)


def test_xid_154_takes_the_action_its_message_names() -> None:
    # constructed from the driver's wording, not a capture: the recovery action it names decides
    said = "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"
    assert xc.action_of(154, said) == xc.REBOOT
    assert xc.action_of(154, "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)") == xc.RESET_GPU
    assert xc.action_of(154, "GPU recovery action changed from 0x0 (None) to 0x0 (None)") == xc.NONE
    assert xc.action_of(99999) == xc.RESET_GPU and "NVIDIA" in xc.info(99999).meaning


def test_checks_list_shows_the_xid_catalogue() -> None:
    rows = {x["code"]: x for x in catalogue_json("quick")["xids"]}
    assert rows[79]["action"] == "reboot" and rows[64]["action"] == "reset-gpu" and rows[43]["action"] == "none"
    assert rows[79]["nvidia_bucket"] == "RESTART_BM" and rows[79]["mnemonic"] == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert rows[48]["source"] == xc.SOURCE_URL
    text = catalogue_table("quick")
    assert "XID" in text and "fallen off the bus" in text and "RESTART_BM" in text and xc.SOURCE_URL in text


# Xid 74's wording as NVIDIA's catalogue prints it, the register words constructed for each case
# (no real capture with these bits is in tests/fixtures): the bits decide the action
def xid74(*words: int) -> str:
    regs = ", ".join(hex(w) for w in [*words, *[0] * (7 - len(words))])
    return f"NVRM: Xid (PCI:0000:19:00): 74, pid='<unknown>', name=<unknown>, NVLink: fatal error detected on link 14({regs})"


def test_xid74_register_bits_are_decoded_and_decide_the_action() -> None:
    reseat = xc.xid74_bits(xid74(1 << 16))
    assert reseat is not None and reseat.link == 14 and reseat.action == xc.INSPECT
    assert reseat.meanings == ["reg1 bit 16: possibly hardware: check the link's mechanical connections, reseat, "
                               "run field diagnostics"]
    assert xc.action_of(74, xid74(0, 0, 0, 0, 1 << 20)) == xc.NONE  # an ECC threshold, no uncorrectable error
    assert xc.action_of(74, xid74(0, 0, 1 << 16)) == xc.RESET_GPU
    assert xc.action_of(74, xid74(1 << 21, 0, 0, 0, 1 << 20)) == xc.INSPECT  # the strongest asked wins
    secondary = xc.xid74_bits(xid74(0, 0, 0, 1 << 16))
    assert secondary is not None and secondary.action is None and xc.action_of(74, xid74(0, 0, 0, 1 << 16)) == \
        xc.RESET_GPU  # a secondary error asks nothing of its own: the catalogue's action
    unknown = xc.xid74_bits(xid74(1 << 2))
    assert unknown is not None and "not in NVIDIA's workflow" in unknown.meanings[0]
    assert xc.xid74_bits(xid74(1 << 5, 1 << 7)).meanings == [f"reg1 bit 5: {xc.ECC_PARITY}"]  # reg2 is not valid
    assert xc.xid74_bits("NVRM: Xid (PCI:0000:19:00): 74, NVLink: fatal error detected on link 3") is None


def test_an_xid74_finding_names_its_register_bits() -> None:
    text = f"[  100.000000] {xid74(1 << 21)}\n"
    log = msgspec.structs.replace(parse_kernel_log(text), source="dmesg", source_lines=1)
    (f,) = [f for f in g.xid(kernel_gpu_log=log, gpus=None, limits=H100) if isinstance(f, Finding)]
    assert "link 14 error registers: reg1 bit 21: marginal channel signal integrity" in f.message
    assert "NVIDIA's action: drain the node for hardware inspection" in f.message
    assert xc.action_of(74, "x" * 100_000 + xid74(1 << 16)) == xc.INSPECT  # a long line is read at its end only
