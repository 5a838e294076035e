"""Putting a repair on record: `hc node NODE --repaired TEXT`.

A repair (a GPU reseated, a baseboard replaced) is written to the run history, where Xid
escalation counts recurrences from it (orchestrate/escalate.py) and `hc report history
--node` lists it beside the node's failures, and to the audit log beside hc's drains and
resumes: who said what was done to which node, and when. Both or an error: a repair the
audit log could not take is an HcError (exit 4) naming what was kept.
"""

from __future__ import annotations

import getpass
from pathlib import Path

from healthcheck.actions.audit import AuditLog, AuditWriteError
from healthcheck.core.config.schema import MainConfig
from healthcheck.core.errors import HcError, UsageError
from healthcheck.report.build import iso, utc_now
from healthcheck.report.history import configured_history
from healthcheck.report.recurrence import MAX_REPAIR_TEXT, Repair


def repair_text(text: str) -> str:
    """The operator's words, checked: one printable line of at most MAX_REPAIR_TEXT characters."""
    words = text.strip()
    if not words:
        raise UsageError("--repaired needs words saying what was repaired")
    if len(words) > MAX_REPAIR_TEXT or not words.isprintable():
        raise UsageError(f"--repaired takes one printable line of at most {MAX_REPAIR_TEXT} characters")
    return words


def record_repairs(main: MainConfig, nodes: list[str], text: str) -> list[Repair]:
    """Record a repair of each node in the history, then in the audit log; the repairs recorded."""
    words = repair_text(text)
    at = iso(utc_now())
    try:
        by = getpass.getuser()
    except (KeyError, OSError):
        by = "unknown"
    repairs = [Repair(node, at, words, by) for node in nodes]
    with configured_history(main.history, must_exist=False) as history:
        for repair in repairs:
            history.record_repair(repair)
    audit = AuditLog(Path(main.slurm.audit_log))
    for repair in repairs:
        try:
            audit.append({"time": repair.at, "nodes": repair.node, "action": "repair", "ok": True,
                          "reason": repair.text, "by": repair.by, "command": "hc node --repaired"})
        except AuditWriteError as exc:
            raise HcError(f"repair of {repair.node} recorded in the history, but not in the audit log: {exc}") from None
    return repairs
