"""Import paramiko lazily, once, without `invoke` (everything in hc goes through here)."""

from __future__ import annotations

import sys
import threading
from types import ModuleType

_IMPORT_LOCK = threading.Lock()
_PARAMIKO: ModuleType | None = None


def import_paramiko() -> ModuleType:
    """Import paramiko (everything in hc goes through here) without `invoke`.

    paramiko.config imports the optional `invoke` package only to run `Match exec`
    lines of an ssh config; that import alone is about half of paramiko's import time
    (~80 of ~150 ms). Blocking it for the duration of the import makes paramiko record
    the ImportError, so `Match exec` in ssh_config is NOT supported: a config that
    reaches such a line raises that ImportError at lookup, which `SshConnection`
    reports as SshError("config"). When invoke (or paramiko) was imported before,
    nothing is blocked.
    """
    global _PARAMIKO
    if _PARAMIKO is not None:
        return _PARAMIKO
    with _IMPORT_LOCK:  # also keeps a second thread from seeing a half-imported module
        if _PARAMIKO is None:
            block = "invoke" not in sys.modules and "paramiko" not in sys.modules
            if block:
                sys.modules["invoke"] = None  # type: ignore[assignment]  # import fails fast
            try:
                import paramiko
            finally:
                # paramiko.config has bound `invoke = None` by now; unblock it for others
                if block and "invoke" in sys.modules and sys.modules["invoke"] is None:
                    del sys.modules["invoke"]
            _quiet_paramiko_logging()
            _PARAMIKO = paramiko
    return _PARAMIKO


def _quiet_paramiko_logging() -> None:
    """paramiko logs failures (some with tracebacks) at ERROR, which Python's last-resort
    handler would print on stderr; hc reports them as SshError/CommandResult instead.
    Records still propagate to whatever handlers the application configures."""
    import logging

    logging.getLogger("paramiko").addHandler(logging.NullHandler())
