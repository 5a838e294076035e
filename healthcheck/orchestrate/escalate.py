"""Xid escalation: the same Xid on the same GPU in three boots (two recurrences after a
reboot, counted since the node's last repair) is a hardware fault, whatever NVIDIA's
action for one occurrence is: gpu.E025 FAILs the node for hardware inspection, and its
message names the boots.

Read from the run history before the run is recorded; where the history cannot be read,
or the node's boot id was not, nothing is escalated and a note says why (never a PASS
made of it, never a FAIL).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from healthcheck.checks.gpu import XID_RECURRING
from healthcheck.core import xid_catalogue
from healthcheck.core.model import Finding, NodeResult
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst
from healthcheck.report.recurrence import boot_of, xid_keys

RECURRENCES = 2  # recurrences after a reboot before the action becomes hardware inspection

BootsOf = Callable[[str, str, int], list[str]]  # (node, gpu, code) -> boots since the last repair


def escalate(results: list[NodeResult], boots_of: BootsOf, notes: list[str]) -> list[NodeResult]:
    """The nodes, in order, with gpu.E025 added where an Xid recurred after RECURRENCES reboots."""
    out = []
    for node in results:
        keys = sorted(set(xid_keys(node)))
        boot = boot_of(node)
        if keys and boot is None:
            notes.append(f"{node.node}: boot id not read: Xid recurrences across reboots not counted")
        found = [f for gpu, code in keys if boot is not None
                 for f in [_recurring(node.node, gpu, code, boot, boots_of(node.node, gpu, code))] if f]
        if found:
            node = msgspec.structs.replace(node, findings=[*node.findings, *found],
                                           status=worst((node.status, *(f.status for f in found))))
        out.append(node)
    return out


def _recurring(node: str, gpu: str, code: int, boot: str, earlier: list[str]) -> Finding | None:
    boots = [b for b in earlier if b != boot] + [boot]  # this run's boot last: the newest
    recurrences = len(boots) - 1
    if recurrences < RECURRENCES:
        return None
    was = xid_catalogue.ACTION_TEXT[xid_catalogue.action_of(code)]
    message = (f"{gpu} logged Xid {code} ({xid_catalogue.info(code).meaning}) in {len(boots)} boots since its last "
               f"repair on record ({recurrences} recurrences after a reboot; boots {', '.join(b[:8] for b in boots)}): "
               f"NVIDIA's action for one ({was}) has not cleared it: "
               f"{xid_catalogue.ACTION_TEXT[xid_catalogue.INSPECT]}")
    finding = XID_RECURRING(Status.FAIL, message, component=f"{gpu}:xid{code}:recurring", value=recurrences)
    return stamp(finding, check="gpu.xid", node=node)
