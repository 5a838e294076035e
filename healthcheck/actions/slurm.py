"""Talk to Slurm with scontrol and sinfo: node states, drain, resume.

Every call has a timeout; transient failures (controller down, timeouts) are retried
with backoff; permanent ones (an unknown node, no permission) are not. Failures are
results with Slurm's own message, never exceptions that end the run.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from healthcheck.actions.reasons import is_hc_reason
from healthcheck.core.config.schema import SlurmSettings
from healthcheck.core.inputs import clip
from healthcheck.core.lazyre import lazy_compile
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import run_command

# Slurm's messages for failures that a retry can fix
_TRANSIENT = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Connection refused",
    "Transport endpoint is not connected",
    "Zero Bytes were transmitted or received",
    "slurm_load_node error",
    "timed out",
)


# sinfo long states (%T) in which a node is someone else's business
_HANDS_OFF_STATES = frozenset({"down", "fail", "failing", "future", "unknown", "maint", "planned"})
# sinfo long states (%T), or parts of one ("mixed+drain"), with a job on the node: "draining"
# is a drain asked for while a job still runs ("drained" has none left)
_BUSY_STATES = frozenset({"allocated", "mixed", "completing", "draining"})


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # sinfo's long state, without the "*" of a node that does not respond
    reason: str = ""
    reason_time: str = ""  # when the reason was set (sinfo %H)
    responding: bool = True

    @property
    def drained(self) -> bool:
        """Drained or draining (a drain was asked for), whoever asked."""
        return "drain" in self.state

    @property
    def drained_by_hc(self) -> bool:
        """Drained with a reason of exactly hc's format ("hc:maint - jdoe" is an admin's)."""
        return self.drained and is_hc_reason(self.reason)

    @property
    def hands_off(self) -> str | None:
        """Why hc must not drain or resume this node whatever it finds, or None.

        A DOWN node is an admin's or Slurm's decision (a PSU swap, a node that stopped
        answering); draining it would replace their reason with hc's, and resuming it
        would put it back into service. hc reports such nodes and leaves them alone.
        """
        if not self.responding:
            return f"{self.state}, not responding"
        base = self.state.split("+", 1)[0]
        if base in _HANDS_OFF_STATES or base.startswith(("power", "reboot")):
            return self.state
        return None

    @property
    def busy(self) -> bool:
        """A job runs on the node (allocated, mixed, completing, draining): no deep test there."""
        return any(part in _BUSY_STATES for part in self.state.split("+"))


@dataclass
class SlurmResult:
    ok: bool
    message: str  # Slurm's output (stderr or stdout), or what went wrong
    argv: tuple[str, ...]
    attempts: int = 1
    not_found: bool = False  # the command does not exist here (no Slurm installed)
    stdout: str = ""  # what the command printed on stdout (its answer, where it succeeded)


@dataclass
class NodeStates:
    """What one sinfo said: the nodes' states, or why Slurm could not be asked."""

    nodes: dict[str, SlurmNode]
    error: str | None = None  # Slurm's message when it could not be asked
    not_installed: bool = False  # sinfo itself is missing: no Slurm on this machine


@dataclass
class SlurmClient:
    settings: SlurmSettings
    env: dict[str, str] | None = None
    run: Callable[..., CommandResult] = field(default=run_command)
    sleep: Callable[[float], None] = field(default=time.sleep)
    # a monotonic time no call may run past (a prologue's deadline); None = no limit
    deadline: float | None = None

    def _timeout(self) -> float:
        if self.deadline is None:
            return self.settings.command_timeout_s
        return max(0.0, min(self.settings.command_timeout_s, self.deadline - time.monotonic()))

    def _call(self, argv: tuple[str, ...]) -> SlurmResult:
        delay = self.settings.retry_backoff_s
        attempts = max(1, self.settings.retries)
        last = SlurmResult(False, "not run", argv)
        for attempt in range(1, attempts + 1):
            timeout = self._timeout()
            if timeout <= 0:
                return SlurmResult(False, f"no time left before the deadline ({last.message})", argv, attempt - 1)
            r = self.run(argv, timeout_s=timeout, env=self.env)
            if r.ok:
                return SlurmResult(True, (r.stdout or r.stderr).strip(), argv, attempt, stdout=r.stdout)
            if r.not_found:
                return SlurmResult(False, f"{argv[0]} not found", argv, attempt, not_found=True)
            said = (r.stderr or r.stdout).strip()
            if r.timed_out:
                message = f"{argv[0]} timed out after {timeout:g}s" + (f": {said.splitlines()[-1]}" if said else "")
            else:
                message = said or r.error or f"{argv[0]} exited {r.returncode}"
            last = SlurmResult(False, message.splitlines()[-1] if message else message, argv, attempt)
            if not (r.timed_out or any(t in message for t in _TRANSIENT)) or attempt == attempts:
                return last
            if self.deadline is not None and time.monotonic() + delay >= self.deadline:
                return last
            self.sleep(delay)
            delay *= 2
        return last

    def nodes(self, names: str | None = None, partition: str | None = None
              ) -> tuple[dict[str, SlurmNode], str | None]:
        """State of `names` (a hostlist), of a partition, or of every node; (nodes, error)."""
        states = self.node_states(names, partition)
        return states.nodes, states.error

    def node_states(self, names: str | None = None, partition: str | None = None) -> NodeStates:
        """`nodes()`, telling a missing sinfo (no Slurm here) from a Slurm that did not answer."""
        from healthcheck.parsers.sinfo import HC_FORMAT  # "%N|%T|%H|%E", what parse_sinfo reads

        argv: tuple[str, ...] = (self.settings.sinfo, "-h", "-N", "-o", HC_FORMAT)
        if names:
            argv += ("-n", names)
        if partition:
            argv += ("-p", partition)
        r = self._call(argv)
        if not r.ok:
            return NodeStates({}, r.message, r.not_found)
        nodes, unreadable = read_sinfo(r.stdout)  # a warning on stderr is not a node
        if unreadable is not None:
            # garbage is no answer: read as "these nodes are absent" it would hide every FAIL
            return NodeStates({}, f"{argv[0]}'s answer is not node states: {unreadable}")
        return NodeStates(nodes)

    def jobs_on(self, names: str) -> tuple[list[SlurmJob], str | None]:
        """The running (or ending, or suspended) jobs on `names` (a hostlist), by one squeue;
        (jobs, error). Garbage from squeue is an error, never "no job"."""
        squeue = os.path.join(os.path.dirname(self.settings.sinfo), "squeue") if os.sep in self.settings.sinfo \
            else "squeue"
        r = self._call((squeue, "-h", "-t", "RUNNING,COMPLETING,CONFIGURING,SUSPENDED", "-w", names,
                        "-o", SQUEUE_FORMAT))
        if not r.ok:
            return [], r.message
        return read_squeue(r.stdout)

    def show_job(self, job_id: str) -> SlurmResult:
        """`scontrol -o show job ID`: the job's record (one line per job), or Slurm's message."""
        return self._call((self.settings.scontrol, "-o", "show", "job", job_id))

    def job_exclusive(self, job_id: str) -> tuple[bool | None, str | None]:
        """Whether job `job_id` holds its nodes alone (`scontrol -o show job`); (exclusive, error)."""
        r = self._call((self.settings.scontrol, "-o", "show", "job", job_id))
        if not r.ok:
            return None, r.message
        return parse_job_exclusive(r.message)

    def job_start(self, job_id: str) -> tuple[float | None, str | None]:
        """When job `job_id` started (epoch seconds, from `scontrol -o show job`); (start, error)."""
        r = self._call((self.settings.scontrol, "-o", "show", "job", job_id))
        if not r.ok:
            return None, r.message
        return parse_job_start(r.message)

    def drain(self, nodes: str, reason: str, *, dry_run: bool = False) -> SlurmResult:
        argv = (self.settings.scontrol, "update", f"nodename={nodes}", "state=drain", f"reason={reason}")
        return self._act(argv, dry_run)

    def resume(self, nodes: str, *, dry_run: bool = False) -> SlurmResult:
        argv = (self.settings.scontrol, "update", f"nodename={nodes}", "state=resume")
        return self._act(argv, dry_run)

    def _act(self, argv: tuple[str, ...], dry_run: bool) -> SlurmResult:
        if dry_run:
            return SlurmResult(True, "dry run: not executed", argv, 0)
        return self._call(argv)


# what a node name and a state (%T) of sinfo look like: anything else is not sinfo's answer
_SINFO_NAME = lazy_compile(r"[A-Za-z0-9._-]{1,253}")
_SINFO_STATE = lazy_compile(r"[a-z][a-z_]*(?:\+[a-z][a-z_]*)*[*~#!%$@^-]*")
_SHOWN_MAX = 80  # characters of an unreadable line named in the error


def read_sinfo(text: str) -> tuple[dict[str, SlurmNode], str | None]:
    """hc's `sinfo -h -N -o '%N|%T|%H|%E'` read strictly: (nodes, None), or ({}, what is wrong)
    when any line is not a node's state (binary garbage, another format, an error message
    on stdout). Nothing printed is an answer: no node matched."""
    from healthcheck.parsers.sinfo import HC_FIELDS, parse_hc_sinfo

    lines = [line for line in text.splitlines() if line.strip()]
    for number, line in enumerate(lines, 1):
        parts = line.split("|", len(HC_FIELDS) - 1)
        if len(parts) != len(HC_FIELDS) or not _SINFO_NAME.fullmatch(parts[0]) \
                or not _SINFO_STATE.fullmatch(parts[1].strip().lower()):
            return {}, f"line {number} of {len(lines)} is {clip(line.strip(), _SHOWN_MAX)!r}"
    rows = parse_hc_sinfo("\n".join(lines))
    return {row.nodes: SlurmNode(row.nodes, row.state or "", row.reason or "", row.reason_time or "",
                                 row.responding) for row in rows}, None


def parse_sinfo(text: str) -> dict[str, SlurmNode]:
    """`sinfo -h -N -o '%N|%T|%H|%E'` -> node -> state (a node in several partitions once).

    The text is read by parsers/sinfo.py (`hc parse sinfo` reads it the same way);
    lines it cannot read are skipped. What Slurm answers is read by `read_sinfo`, which
    refuses such lines."""
    from healthcheck.parsers.sinfo import parse_hc_sinfo

    return {
        row.nodes: SlurmNode(row.nodes, row.state or "", row.reason or "", row.reason_time or "", row.responding)
        for row in parse_hc_sinfo(text)
    }


SQUEUE_FORMAT = "%i|%U|%j|%N"  # job id, user id, name (may hold "|"), nodes (a hostlist)


@dataclass(frozen=True)
class SlurmJob:
    """A job squeue lists on some node: its id, owner's uid, name and nodes (a hostlist)."""

    id: str
    uid: int
    name: str
    nodes: str


_JOB_ID = lazy_compile(r"[0-9]{1,20}(?:[_+][0-9]{1,20})?(?:\.[A-Za-z0-9_]{1,32})?")
_UID = lazy_compile(r"[0-9]{1,10}")
_JOB_NODES = lazy_compile(r"[A-Za-z0-9._,\[\]-]{1,65536}")  # as long as a hostlist hc reads (nodes.parse_hostlist)


def read_squeue(text: str) -> tuple[list[SlurmJob], str | None]:
    """squeue's SQUEUE_FORMAT lines -> (jobs, None), or ([], what is wrong) for any line that
    is not a job (garbage is no answer)."""

    jobs = []
    lines = [line for line in text.splitlines() if line.strip()]
    for number, line in enumerate(lines, 1):
        head = line.strip().split("|", 2)
        rest = head[2].rsplit("|", 1) if len(head) == 3 else []
        if len(rest) != 2 or not _JOB_ID.fullmatch(head[0]) or not _UID.fullmatch(head[1]) \
                or not _JOB_NODES.fullmatch(rest[1]):
            shown = clip(line.strip(), _SHOWN_MAX)
            return [], f"squeue's answer is not jobs: line {number} of {len(lines)} is {shown!r}"
        jobs.append(SlurmJob(head[0], int(head[1]), rest[0], rest[1]))
    return jobs, None


def parse_job_start(text: str) -> tuple[float | None, str | None]:
    """`StartTime=` of `scontrol -o show job` (local time, as Slurm prints it) -> (epoch, error)."""

    m = re.search(r"(?:^|\s)StartTime=(\S+)", text)
    if m is None:
        return None, "no StartTime in scontrol's answer"
    value = m.group(1)
    if value in ("Unknown", "None", "N/A"):
        return None, f"the job has no start time ({value})"
    try:
        return dt.datetime.fromisoformat(value).timestamp(), None
    except ValueError:
        return None, f"unreadable StartTime {value!r}"


def parse_job_exclusive(text: str) -> tuple[bool | None, str | None]:
    """`OverSubscribe=` of `scontrol -o show job` -> (exclusive, error).

    A job submitted with `--exclusive` shows OverSubscribe=NO (Slurm before 16.05: Shared=0
    or Shared=NO); anything else (OK, YES, USER, MCS, TOPO) may share its nodes with other
    jobs. A job exclusive only through its partition's OverSubscribe=EXCLUSIVE is not told
    apart here: it reads as shared, so deep tests skip rather than run beside a job.
    """
    m = re.search(r"(?:^|\s)(OverSubscribe|Shared)=(\S+)", text)
    if m is None:
        return None, "no OverSubscribe in scontrol's answer"
    return m.group(2).upper() in ("NO", "0"), None


def shell_line(argv: tuple[str, ...]) -> str:
    """The exact command, quoted for a shell (what --dry-run prints)."""
    return " ".join(shlex.quote(a) for a in argv)
