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
    assert xc.action_of(79) == xc.REBOOT and xc.action_of(64) == xc.INSPECT
    assert xc.action_of(99999) == xc.RESET_GPU and "NVIDIA" in xc.info(99999).meaning


def test_checks_list_shows_the_xid_catalogue() -> None:
    rows = {x["code"]: x for x in catalogue_json("quick")["xids"]}
    assert rows[79]["action"] == "reboot" and rows[64]["action"] == "inspect-hardware"
    assert rows[48]["source"] == xc.SOURCE_URL
    text = catalogue_table("quick")
    assert "XID" in text and "fallen off the bus" in text and xc.SOURCE_URL in text
