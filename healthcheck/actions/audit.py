"""The audit log: one JSON line per drain, resume or rollback, appended under a lock.

Appending goes through core.atomic.append: a symbolic link planted in place of the log
is refused (never followed as root), a directory, block device or socket is refused, a
device or FIFO is written in place (never replaced). A record that cannot be written is
never dropped silently: `append` raises, and the log keeps the failures so the run can
report them (`failure_finding`: hc.E008 in the report, ERROR).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from healthcheck.core import catalogue
from healthcheck.core.atomic import WriteError
from healthcheck.core.atomic import append as append_bytes
from healthcheck.report.build import action_finding

if TYPE_CHECKING:
    from healthcheck.core.model import Finding


class AuditWriteError(OSError):
    """An audit record could not be written (an OSError: callers catch OSError)."""


class AuditLog:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.failures: list[str] = []  # one line per record that could not be written

    def append(self, record: dict[str, Any]) -> None:
        """Append one record; raises AuditWriteError (an OSError) when it cannot be written."""
        line = (json.dumps(record, sort_keys=True, ensure_ascii=False) + "\n").encode()
        try:
            # several hc runs may act at once; one write under the lock keeps lines whole
            append_bytes(self.path, line)
        except WriteError as exc:
            self.failures.append(str(exc))
            raise AuditWriteError(str(exc)) from None

    def failure_finding(self, scope: str) -> Finding | None:
        """hc.E008 (ERROR) naming what could not be recorded, or None when every record was written."""
        if not self.failures:
            return None

        count = len(self.failures)
        what = "record" if count == 1 else "records"
        return action_finding(catalogue.NOT_WRITTEN, f"{count} audit {what} not written: {self.failures[0]}",
                           scope=scope, value=count, evidence="\n".join(self.failures[:20]))

    def read(self) -> list[dict[str, Any]]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]
