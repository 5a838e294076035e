"""What hc keeps on a node between runs: a lock so prologue, health and epilogue never
act at once, the count of consecutive runs that could not check the node, and when
each job started (the epilogue's window for Xid events)."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from pathlib import Path

from healthcheck.core.atomic import write_atomic


class LockTimeout(Exception):
    pass


class NodeState:
    def __init__(self, state_dir: str | Path, node: str) -> None:
        # per node, because a state dir on shared storage (or the test rig's hosts,
        # which share /tmp) must not mix nodes up
        self.dir = Path(state_dir) / node

    def _ensure(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)

    # ------------------------------------------------------------------ lock

    def lock(self, timeout_s: float) -> _Lock:
        self._ensure()
        return _Lock(self.dir / "lock", timeout_s)

    # ------------------------------------------------------- ERROR escalation

    def record_run(self, could_check: bool, error_ids: list[str]) -> int:
        """Count consecutive runs that could not check the node; returns the count."""
        self._ensure()
        path = self.dir / "errors.json"
        if could_check:
            path.unlink(missing_ok=True)
            return 0
        try:
            count = int(json.loads(path.read_text()).get("consecutive", 0))
        except (OSError, ValueError, AttributeError):
            count = 0
        count += 1
        _write(path, json.dumps({"consecutive": count, "ids": sorted(set(error_ids)), "time": time.time()}))
        return count

    # ------------------------------------------------------ kernel-log cursor

    def kernel_log_cursor(self) -> float | None:
        """Until when the hooks have judged this node's kernel log (None: never, so since boot).

        Each Xid is judged once by whichever hook sees it first; a node an operator put
        back is not drained again for an event hc already reported.
        """
        try:
            return float((self.dir / "kernel-log-cursor").read_text().strip())
        except (OSError, ValueError):
            return None

    def set_kernel_log_cursor(self, when: float) -> None:
        self._ensure()
        _write(self.dir / "kernel-log-cursor", f"{when:.3f}\n")

    # -------------------------------------------------------------- job marks

    def mark_job_start(self, job_id: str, when: float | None = None) -> None:
        self._ensure()
        jobs = self.dir / "jobs"
        jobs.mkdir(exist_ok=True)
        _write(jobs / _safe(job_id), f"{when if when is not None else time.time():.3f}\n")
        # drop marks of jobs whose epilogue never ran (node crashed, slurmd restarted)
        cutoff = time.time() - 7 * 86400
        for old in jobs.iterdir():
            try:
                if old.stat().st_mtime < cutoff:
                    old.unlink()
            except OSError:
                pass

    def job_start(self, job_id: str, *, remove: bool = False) -> float | None:
        path = self.dir / "jobs" / _safe(job_id)
        try:
            value = float(path.read_text().strip())
        except (OSError, ValueError):
            return None
        if remove:
            path.unlink(missing_ok=True)
        return value


def _write(path: Path, text: str) -> None:
    """Replace a state file atomically through a unique temporary name: the prologues of
    jobs starting together, or a prologue beside a health run, write the same files, and
    a shared temp name made the loser's rename fail (it then exited 3 and Slurm drained).

    Not fsynced (durable=False): every reader here takes a missing, empty or garbled file
    as no mark and has an answer (the kernel-log cursor: since boot, and a crash means a
    new boot; a job's start: Slurm's; the ERROR count: 0), so a crash that loses one
    costs nothing, while the two fsyncs of each write cost a prologue 10-20 ms of a
    busy disk's journal, twice a job (issue 22)."""

    write_atomic(path, text.encode(), durable=False)


def _safe(job_id: str) -> str:
    return "".join(c for c in job_id if c.isalnum() or c in "._-") or "unknown"


class _Lock:
    def __init__(self, path: Path, timeout_s: float) -> None:
        self.path = path
        self.timeout_s = timeout_s
        self.fd: int | None = None

    def __enter__(self) -> _Lock:
        # a lock file planted as a link is not followed (hc runs as root)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        if not stat.S_ISREG(os.fstat(self.fd).st_mode):
            os.close(self.fd)
            self.fd = None
            raise OSError(errno.EINVAL, f"{self.path} is not a regular file")
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
            if time.monotonic() >= deadline:
                os.close(self.fd)
                self.fd = None
                raise LockTimeout(f"another hc run holds {self.path}")
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the flock
            self.fd = None
