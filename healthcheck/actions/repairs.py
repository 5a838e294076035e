"""Putting a repair on record: `hc node NODE --repaired TEXT`; and a GPU reset:
`hc node NODE --gpu-reset GPUS`.

A repair (a GPU reseated, a baseboard replaced) is written to the run history, where Xid
escalation counts recurrences from it (orchestrate/escalate.py) and `hc report history
--node` lists it beside the node's failures, and to the audit log beside hc's drains and
resumes: who said what was done to which node, and when. Both or an error: a repair the
audit log could not take is an HcError (exit 4) naming what was kept.

The history a node's own health runs read (`hc health`, the default `history.path` under root's
home on each node) is not the login node's: `hc node NODES --repaired` also sends the repair to
each node (orchestrate/remote.py `record_repairs_on_nodes`, agent mode: the node's hc records it
with `hc node --local --record-repair JSON`, `record_own_repair`), with the same time, words
and user, so a history both share holds it once; the audit line says where it reached.

A GPU reset (nvidia-smi -r) is not a repair: it does not restart the count. It is a boundary
like a reboot: the same Xid on that GPU logged after it is a recurrence. Neither the kernel
log nor NVML says that a GPU was reset, so hc knows of one only from this record.
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from healthcheck.actions.audit import AuditLog, AuditWriteError
from healthcheck.core.config.schema import MainConfig
from healthcheck.core.errors import HcError, UsageError
from healthcheck.parsers.gpu_common import normalize_pci
from healthcheck.report.build import iso, utc_now
from healthcheck.report.history import configured_history
from healthcheck.report.recurrence import ALL_GPUS, MAX_REPAIR_TEXT, GpuReset, Repair

_GPU_INDEX = re.compile(r"(?:gpu)?(\d{1,3})", re.IGNORECASE)
_BUS_ID = re.compile(r"(?:[0-9a-f]{1,8}:)?[0-9a-f]{2}:[0-9a-f]{2}(?:\.[0-7])?", re.IGNORECASE)


def repair_text(text: str) -> str:
    """The operator's words, checked: one printable line of at most MAX_REPAIR_TEXT characters."""
    words = text.strip()
    if not words:
        raise UsageError("--repaired needs words saying what was repaired")
    if len(words) > MAX_REPAIR_TEXT or not words.isprintable():
        raise UsageError(f"--repaired takes one printable line of at most {MAX_REPAIR_TEXT} characters")
    return words


def reset_gpus(text: str) -> list[str]:
    """`--gpu-reset`'s GPUs as gpu.xid names them: "all" -> [ALL_GPUS]; "3,GPU5" -> ["GPU3", "GPU5"];
    a PCI bus id as normalize_pci writes it. Anything else is a UsageError."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    if not words:
        raise UsageError("--gpu-reset needs the GPUs reset: 'all', indexes (3,5 or GPU3,GPU5) or PCI bus ids")
    if any(w.lower() == "all" for w in words):
        return [ALL_GPUS]
    out = []
    for word in words:
        if (m := _GPU_INDEX.fullmatch(word)) is not None:
            out.append(f"GPU{int(m.group(1))}")
        elif _BUS_ID.fullmatch(word) is not None:
            out.append(normalize_pci(word))
        else:
            raise UsageError(f"--gpu-reset: {word[:40]!r} is no GPU: 'all', an index (3 or GPU3) or a PCI bus id")
    return list(dict.fromkeys(out))


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


def record_gpu_resets(main: MainConfig, nodes: list[str], gpus: str) -> list[GpuReset]:
    """Record a reset of `gpus` of each node in the history, then in the audit log; the resets recorded."""
    names = reset_gpus(gpus)
    at, by = iso(utc_now()), _user()
    resets = [GpuReset(node, gpu, at, by) for node in nodes for gpu in names]
    with configured_history(main.history, must_exist=False) as history:
        for reset in resets:
            history.record_gpu_reset(reset)
    audit = AuditLog(Path(main.slurm.audit_log))
    for node in nodes:
        try:
            audit.append({"time": at, "nodes": node, "action": "gpu-reset", "ok": True,
                          "reason": ", ".join(g or "all GPUs" for g in names), "by": by,
                          "command": "hc node --gpu-reset"})
        except AuditWriteError as exc:
            raise HcError(f"GPU reset of {node} recorded in the history, but not in the audit log: {exc}") from None
    return resets


def new_repairs(nodes: list[str], text: str) -> list[Repair]:
    """A repair of each node, now, by this user, in the operator's words (checked)."""
    words = repair_text(text)
    at, by = iso(utc_now()), _user()
    return [Repair(node, at, words, by) for node in nodes]


def record_in_history(main: MainConfig, repairs: list[Repair]) -> list[bool]:
    """Put the repairs on record in the configured history; for each, whether it was not there yet."""
    with configured_history(main.history, must_exist=False) as history:
        return [history.record_repair(repair) for repair in repairs]


def audit_repairs(main: MainConfig, repairs: list[Repair], on_node: Mapping[str, str] | None = None,
                  command: str = "hc node --repaired") -> None:
    """One audit line per repair (with where it reached on the node, where it was sent there); an
    HcError where one cannot be written, naming what was kept."""
    audit = AuditLog(Path(main.slurm.audit_log))
    for repair in repairs:
        record: dict[str, Any] = {"time": repair.at, "nodes": repair.node, "action": "repair", "ok": True,
                                  "reason": repair.text, "by": repair.by, "command": command}
        if on_node is not None and repair.node in on_node:
            record["on_node"] = on_node[repair.node]
        try:
            audit.append(record)
        except AuditWriteError as exc:
            raise HcError(f"repair of {repair.node} recorded in the history, but not in the audit log: {exc}") from None


def record_repairs(main: MainConfig, nodes: list[str], text: str) -> list[Repair]:
    """Record a repair of each node in the history, then in the audit log; the repairs recorded."""
    repairs = new_repairs(nodes, text)
    record_in_history(main, repairs)
    audit_repairs(main, repairs)
    return repairs


def repair_payload(repair: Repair, sender: str) -> str:
    """A repair as `hc node --local --record-repair` takes it on the node: its words, time and user,
    and the host whose hc sent it."""
    return json.dumps({"text": repair.text, "at": repair.at, "by": repair.by, "from": sender}, sort_keys=True)


def repair_from_payload(node: str, payload: str) -> tuple[Repair, str]:
    """The repair of `node` that `payload` (repair_payload's JSON) says, and who sent it; a
    UsageError for anything else."""
    try:
        data = json.loads(payload)
    except ValueError:
        data = None
    if not isinstance(data, dict) or not all(isinstance(data.get(k), str) for k in ("text", "at", "by")):
        raise UsageError("--record-repair takes the JSON another hc sends: text, at and by")
    at, by = data["at"], data["by"]
    try:
        when = dt.datetime.fromisoformat(at.replace("Z", "+00:00"))
    except ValueError:
        when = None
    if when is None or when.tzinfo is None or not at.endswith("Z"):
        raise UsageError(f"--record-repair: {at[:40]!r} is no UTC time as hc writes it")
    if not by or len(by) > 64 or not by.isprintable():
        raise UsageError("--record-repair: 'by' is no user name")
    sender = data.get("from")
    sender = sender if isinstance(sender, str) and sender.isprintable() and 0 < len(sender) <= 255 else "another host"
    return Repair(node, at, repair_text(data["text"]), by), sender


def record_own_repair(main: MainConfig, node: str, payload: str) -> dict[str, Any]:
    """`hc node --local --record-repair JSON` (sent by the hc on another host): the repair of this
    node (`node`) on record in its own history and, where it was not there yet, its audit log;
    what was done, as the sender reads it back."""
    repair, sender = repair_from_payload(node, payload)
    (fresh,) = record_in_history(main, [repair])
    if fresh:
        audit_repairs(main, [repair], command=f"hc node --repaired (sent by hc on {sender})")
    return {"node": node, "at": repair.at, "recorded": fresh, "history": str(main.history.path)}
