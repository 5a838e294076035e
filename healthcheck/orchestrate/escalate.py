"""Xid escalation: the same Xid on the same GPU in three boots (two recurrences after a
reboot or after a GPU reset on record, counted since the node's last repair) is a hardware
fault, whatever NVIDIA's action for one occurrence is: gpu.E025 FAILs the node for hardware inspection, and its
message names the boots. It stays until a repair is put on record (`hc node NODE
--repaired TEXT`): a reboot clears the kernel log, not the fault, so a clean log after
one is no reason to resume the node; after a repair the count starts again, and the next
passing run resumes the node as the drain etiquette allows.

A GPU reset (nvidia-smi -r) is a boundary like a reboot where it is on record (`hc node NODE
--gpu-reset GPUS`): neither the kernel log nor NVML says that a GPU was reset (NVIDIA's
NVSentinel has its reset job log a line of its own for that reason), and an Xid counts as
logged after the reset only where gpu.xid read when it was last logged (`recurrence.epoch_of`).

Read from the run history before the run is recorded; where the history cannot be read,
or the node's boot id was not, nothing is escalated and a note says why (never a PASS
made of it, never a FAIL).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from healthcheck.checks.gpu import XID_RECURRING
from healthcheck.core import xid_catalogue
from healthcheck.core.errors import HcError
from healthcheck.core.model import Finding, NodeResult, Report
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status, worst
from healthcheck.report.build import with_nodes
from healthcheck.report.history import History
from healthcheck.report.recurrence import GpuReset, boot_of, epoch_text, node_epochs, xid_keys

CHECK = "gpu.xid"
RECURRENCES = 2  # recurrences after a reboot before the action becomes hardware inspection

# node -> (GPU, code) -> the epochs (boots, or a boot after a GPU reset) it was reported in since
# the node's last repair, oldest first
BootsOf = Callable[[str], dict[tuple[str, int], list[str]]]
# node -> its GPU resets on record
ResetsOf = Callable[[str], list[GpuReset]]


def escalate(results: list[NodeResult], boots_of: BootsOf, notes: list[str],
             resets_of: ResetsOf | None = None) -> list[NodeResult]:
    """The nodes, in order, with gpu.E025 added where an Xid recurred RECURRENCES times after a
    reboot or a GPU reset on record."""
    out = []
    for node in results:
        found = _escalations(node, boots_of, notes, resets_of)
        if found:  # gpu.xid's own row says it too: the table and the drain policy read it
            checks = [msgspec.structs.replace(c, status=worst((c.status, Status.FAIL))) if c.name == CHECK else c
                      for c in node.checks]
            node = msgspec.structs.replace(node, findings=[*node.findings, *found], checks=checks,
                                           status=worst((node.status, *(f.status for f in found))))
        out.append(node)
    return out


def _escalations(node: NodeResult, boots_of: BootsOf, notes: list[str], resets_of: ResetsOf | None) -> list[Finding]:
    judged = {c.name: c.status for c in node.checks}.get(CHECK)
    if judged not in (Status.PASS, Status.WARN, Status.FAIL):
        return []  # gpu.xid did not judge the node (not run, skipped, ERROR): neither does its escalation
    now = set(xid_keys(node))
    if now and boot_of(node) is None:
        notes.append(f"{node.node}: boot id not read: this run's Xids are not counted as a boot")
    epochs = node_epochs(node, resets_of(node.node) if now and resets_of is not None else [])
    seen = boots_of(node.node)
    found = []
    for key in sorted(set(seen) | now):
        boots = list(seen.get(key, []))
        epoch = epochs.get(key)
        if key in now and epoch is not None and epoch not in boots:
            boots.append(epoch)
        finding = _recurring(node.node, key, boots, logged_now=key in now)
        if finding is not None:
            found.append(finding)
    return found


def _recurring(node: str, key: tuple[str, int], boots: list[str], *, logged_now: bool) -> Finding | None:
    gpu, code = key
    recurrences = len(boots) - 1
    if recurrences < RECURRENCES:
        return None
    was = xid_catalogue.ACTION_TEXT[xid_catalogue.action_of(code)]
    still = "" if logged_now else "; not logged since the last reboot or GPU reset, but no repair is on record"
    message = (f"{gpu} logged Xid {code} ({xid_catalogue.info(code).meaning}) in {len(boots)} boots since its last "
               f"repair on record ({recurrences} recurrences after a reboot or a GPU reset; boots "
               f"{', '.join(epoch_text(b) for b in boots)}){still}: NVIDIA's action for one ({was}) has not "
               f"cleared it: {xid_catalogue.ACTION_TEXT[xid_catalogue.INSPECT]}")
    finding = XID_RECURRING(Status.FAIL, message, component=f"{gpu}:xid{code}:recurring", value=recurrences)
    return stamp(finding, check=CHECK, node=node)


def escalated_report(report: Report, history: History | None, notes: list[str]) -> Report:
    """A run's report of this node with its Xid recurrences escalated from `history` (the
    run's one open of it; None where none is kept); as it is where none is recorded yet, or
    where it cannot be read (then a note says why)."""
    if history is None or not history.path.exists():
        return report
    try:
        nodes = escalate(list(report.nodes), history.xid_boots, notes, history.gpu_resets)
    except HcError as exc:
        notes.append(f"Xid recurrences not counted: {exc}")
        return report
    return with_nodes(report, nodes) if nodes != list(report.nodes) else report
