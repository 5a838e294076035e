"""The Slurm jobs hc asks for itself, and the promise that none outlives it.

Outside an allocation, srun asks Slurm for a job of hc's own: the `--via slurm` sweep's
(orchestrate/srun.py), a pair test's, and a persistent worker's one-node job held for the
sweep (pairsweep/launched.py, pairsweep/workers.py). srun gives its job back when it ends; what keeps
one alive is srun killed (by hc at a timeout, or by the kernel when hc dies: SIGKILL
cannot release anything) while its request pends or just as it is granted. So each such
job (`OwnJob`):

- has a name that is unique and says who asked:
  `hc-<kind>-<token>.<pid>.<start>.<until>@<host>` (hc's pid and its start time in clock
  ticks since boot, the epoch second past which that hc has surely ended, its host);
- is registered with runners.stop for as long as srun may hold it: SIGINT, SIGTERM and
  SIGHUP cancel it, after srun itself was ended;
- is cancelled (`cancel()`) by its name (pending or running), then looked for again with
  squeue until two looks in a row show no live job of that name: a grant that raced the
  cancel is cancelled by its id (bounded: CANCEL_BOUND_S);
- gets a time limit (`--time`, minutes: the bound of what it serves plus MARGIN_S) where
  the partition's MaxTime allows it (read once per process with sinfo; unknown: none, and
  the rest of this holds);
- if hc was killed outright, is found by the next sweep (`cancel_leftovers`): a job of
  hc's name owned by the same user whose hc is gone (same host: no process with that pid
  and start time) or past its bound (another host) is cancelled, named in a run finding
  (act.E010) and written to the audit log.
"""

from __future__ import annotations

import math
import os
import re
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from healthcheck.actions.audit import AuditLog
from healthcheck.actions.slurm import shell_line
from healthcheck.core import catalogue
from healthcheck.core.errors import HcError
from healthcheck.report.build import action_finding, iso, utc_now
from healthcheck.runners import stop
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import run_command

if TYPE_CHECKING:
    from healthcheck.core.config import Config
    from healthcheck.core.config.schema import SlurmSettings
    from healthcheck.core.model import Finding
    from healthcheck.runners.launch import LaunchResult

MARGIN_S = 120.0  # past the bound of what a job serves, before Slurm ends it
CANCEL_BOUND_S = 20.0  # one job's cancel and the looks after it
RECHECK_S = 0.5  # between two looks for a grant that raced the cancel
LEFTOVERS_MAX = 200  # jobs one sweep cancels as leftovers (the rest: the next sweep)
_NAME = re.compile(r"hc-(?P<kind>[a-z]{1,16})-(?P<token>[0-9a-f]{8})\.(?P<pid>\d{1,10})\.(?P<start>\d{1,20})"
                   r"\.(?P<until>\d{1,12})@(?P<host>[A-Za-z0-9_-]{1,64})")
# squeue's states of a job that has ended or is ending (cancelled, completing): nothing to cancel
_ENDED = frozenset({"COMPLETING", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
                    "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY", "REVOKED"})


# ------------------------------------------------------------------ names


@dataclass(frozen=True)
class Owner:
    """Who asked for an hc-named job, read back from its name."""

    kind: str
    pid: int
    start: int  # the process's start, clock ticks since boot (/proc/PID/stat field 22)
    until: int  # epoch seconds: that hc has ended by then, whatever happened to it
    host: str


def this_host() -> str:
    """This machine's short host name, as a job name carries it."""
    name = re.sub(r"[^A-Za-z0-9_-]", "", socket.gethostname().split(".", 1)[0])[:64]
    return name or "unknown"


def start_ticks(pid: int) -> int | None:
    """When process `pid` started (clock ticks since boot), or None where it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # the name may hold spaces and parentheses
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def job_name(kind: str, bound_s: float, *, now: float | None = None) -> str:
    """A unique job name for hc's own job of `kind`, saying which hc asked and until when."""
    until = int((time.time() if now is None else now) + bound_s + MARGIN_S) + 1
    pid = os.getpid()
    return f"hc-{kind}-{secrets.token_hex(4)}.{pid}.{start_ticks(pid) or 0}.{until}@{this_host()}"


def owner_of(name: str) -> Owner | None:
    """The hc behind a job name of hc's form, or None for any other name."""
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    return Owner(m["kind"], int(m["pid"]), int(m["start"]), int(m["until"]), m["host"])


def asked_by_this_hc(name: str) -> bool:
    """Whether a job of this name is one this very hc asked for (this process on this host,
    by pid and start time): not another hc's, however alike its name."""
    owner = owner_of(name)
    if owner is None or owner.host != this_host() or owner.pid != os.getpid():
        return False
    return owner.start == (start_ticks(owner.pid) or 0)  # job_name writes 0 where it could not read it


def abandoned(owner: Owner, now: float) -> str | None:
    """Why the hc behind a job has surely ended (its job is a leftover), or None when it may still run."""
    if owner.host == this_host() and start_ticks(os.getpid()) is not None:
        if start_ticks(owner.pid) == owner.start:
            return None  # that hc runs (this very one, or a sweep beside it)
        return f"hc (pid {owner.pid}) that asked for it on {owner.host} is gone"
    if owner.until < now:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(owner.until))
        return f"past its bound ({when}): the hc on {owner.host} that asked for it has ended"
    return None


# ------------------------------------------------------------------ time limits


def time_limit_minutes(settings: SlurmSettings, env: Mapping[str, str], bound_s: float) -> int | None:
    """`--time` in minutes for a job serving something bounded by `bound_s`: the bound plus
    MARGIN_S, rounded up; None where the partition's MaxTime is unknown or lower (Slurm would
    refuse the job, or hold it pending: the partition's own limit applies then)."""
    minutes = math.ceil((bound_s + MARGIN_S) / 60)
    max_s = partition_max_s(settings, env)
    if max_s is None or minutes * 60 > max_s:
        return None
    return minutes


_LIMITS: dict[tuple[str | None, ...], float | None] = {}
_LIMITS_LOCK = threading.Lock()


def partition_max_s(settings: SlurmSettings, env: Mapping[str, str]) -> float | None:
    """MaxTime of the partition srun will use (SLURM_PARTITION, else the default), in seconds
    (math.inf: unlimited); None when it cannot be told. One sinfo per process and Slurm."""
    key = (settings.sinfo, env.get("SLURM_CONF"), env.get("SLURM_PARTITION"), env.get("PATH"))
    with _LIMITS_LOCK:  # workers starting together ask once
        if key not in _LIMITS:
            r = run_command((settings.sinfo, "--noheader", "--format=%P|%l"), timeout_s=settings.command_timeout_s,
                            env=env)
            _LIMITS[key] = max_time_of(r.stdout, env.get("SLURM_PARTITION")) if r.ok else None
        return _LIMITS[key]


def max_time_of(sinfo: str, partition: str | None) -> float | None:
    """From `sinfo --format=%P|%l`: the named partition's time limit (the default one's, marked
    `*`, when None), in seconds; math.inf for unlimited; None when not found or unreadable."""
    for line in sinfo.splitlines()[:10_000]:
        name, sep, limit = line.strip().partition("|")
        if not sep:
            continue
        default = name.endswith("*")
        if (name.rstrip("*") == partition) if partition else default:
            return duration_s(limit.strip())
    return None


_DURATION = re.compile(r"(?:(\d{1,6})-)?(\d{1,9})(?::(\d{1,2}))?(?::(\d{1,2}))?")


def duration_s(text: str) -> float | None:
    """Slurm's time (`infinite`, `D-HH:MM:SS`, `HH:MM:SS`, `MM:SS`, `MM`) in seconds."""
    if text.lower() in ("infinite", "unlimited"):
        return math.inf
    m = _DURATION.fullmatch(text)
    if m is None:
        return None
    days, first, second, third = m.groups()
    if third is not None:
        h, mins, s = int(first), int(second), int(third)
    elif second is not None:
        h, mins, s = (int(first), int(second), 0) if days else (0, int(first), int(second))
    else:
        h, mins, s = (int(first), 0, 0) if days else (0, int(first), 0)
    return float(((int(days or 0) * 24 + h) * 60 + mins) * 60 + s)


# ------------------------------------------------------------------ Slurm commands


def _tool(settings: SlurmSettings, name: str) -> str:
    """scancel or squeue, beside scontrol where that is a path (as a site installs them together)."""
    return os.path.join(os.path.dirname(settings.scontrol), name) if os.sep in settings.scontrol else name


def _run(settings: SlurmSettings, env: Mapping[str, str], argv: tuple[str, ...], deadline: float) -> CommandResult:
    timeout = max(0.1, min(settings.command_timeout_s, deadline - time.monotonic()))
    return run_command(argv, timeout_s=timeout, env=env)


def _said(r: CommandResult) -> str:
    """A failed command's last line (Slurm's message), bounded."""
    lines = (r.stderr or r.error or r.stdout or "").strip().splitlines()
    return lines[-1][:300] if lines else f"exit {r.returncode}"


def queued_jobs(settings: SlurmSettings, env: Mapping[str, str], deadline: float, *,
                name: str | None = None) -> tuple[list[tuple[str, str, str]], str | None]:
    """This user's jobs squeue lists, as (id, name, state), named `name` where given; or
    ([], why) when squeue cannot be asked ("not found": no Slurm here)."""
    argv = (_tool(settings, "squeue"), "--noheader", f"--user={os.getuid()}", "--format=%i|%j|%T",
            *((f"--name={name}",) if name else ()))
    r = _run(settings, env, argv, deadline)
    if not r.ok:
        return [], ("not found" if r.not_found else _said(r))
    jobs = []
    for line in r.stdout.splitlines():
        job, sep, rest = line.strip().partition("|")
        named, _, state = rest.rpartition("|")  # a name may hold "|": the state is the last field
        if sep and job.isdigit() and state.strip():
            jobs.append((job, named, state.strip()))
    return jobs, None


def live_jobs(settings: SlurmSettings, env: Mapping[str, str], deadline: float, *,
              name: str | None = None) -> tuple[list[tuple[str, str]], str | None]:
    """This user's jobs that have not ended (nor are ending), as (id, name); see queued_jobs."""
    jobs, error = queued_jobs(settings, env, deadline, name=name)
    return [(job, named) for job, named, state in jobs if state not in _ENDED], error


def _scancel(settings: SlurmSettings, env: Mapping[str, str], targets: tuple[str, ...],
             deadline: float) -> CommandResult:
    return _run(settings, env, (_tool(settings, "scancel"), *targets, f"--user={os.getuid()}"), deadline)


# ------------------------------------------------------------------ hc's own jobs


class OwnJob:
    """One job hc asks srun for outside an allocation: its name, its time limit, its cancel."""

    def __init__(self, settings: SlurmSettings, env: Mapping[str, str], kind: str, bound_s: float) -> None:
        self.settings = settings
        self.env = dict(env)
        self.name = job_name(kind, bound_s)
        self.minutes = time_limit_minutes(settings, self.env, bound_s)
        self._lock = threading.Lock()  # a stop's cleanup and the caller may cancel at once
        self._ended = False
        self._said = ""
        # not `late`: once hc is stopping, the launch that would ask for this job is refused
        self._forget = stop.at_stop(self._cancel_once, stop.SLURM, late=False)

    @property
    def ended(self) -> bool:
        """Whether the job is known to be gone: srun gave it back, or a cancel took it."""
        return self._ended

    def srun_args(self) -> tuple[str, ...]:
        """srun's options for this job: its time limit, where the partition allows one."""
        return (f"--time={self.minutes}",) if self.minutes is not None else ()

    def release(self) -> None:
        """srun ended by itself: Slurm ended the job with it, nothing to cancel."""
        if stop.stopping():
            return  # srun may have ended at the stop's SIGTERM: the stop's cleanup cancels the job
        with self._lock:
            self._ended = True
        self._forget()

    def settle(self, srun_exit: int | None, what: str = "the allocation srun asked for, job") -> str:
        """After srun: released where it exited by itself, else (killed, never started, still
        running) cancelled; what cancelling said, else ''."""
        if srun_exit is not None and srun_exit >= 0:
            self.release()
            return ""
        return self.cancel(what)

    def settle_launch(self, result: LaunchResult | None, what: str = "the allocation srun asked for, job") -> str:
        """settle() after runners.launch ran srun: one that never ran (not found, not started)
        asked for nothing and is released; one that was killed, timed out or raised is cancelled."""
        if result is not None and (result.not_found or result.error):
            self.release()
            return ""
        return self.settle(None if result is None else result.returncode, what)

    def cancel(self, what: str = "the allocation srun asked for, job") -> str:
        """Cancel the job by its name, then cancel by id what a look finds still live (a
        grant that raced the cancel); once done, later calls say the same and do nothing.
        While hc is stopping, the stop's cleanup does it (after every launcher ended, and
        never cut short by that), and this returns ''."""
        if stop.stopping():
            return ""
        return self._cancel_once(what)

    def _cancel_once(self, what: str = "the allocation srun asked for, job") -> str:
        with self._lock:
            if not self._ended:
                self._ended, self._said = self._cancel(what)
                if self._ended:
                    self._forget()
            return self._said

    def _cancel(self, what: str) -> tuple[bool, str]:
        deadline = time.monotonic() + CANCEL_BOUND_S
        r = _scancel(self.settings, self.env, (f"--name={self.name}",), deadline)
        if not r.ok:
            return False, f"could not cancel {what} {self.name}: {_said(r)}"
        raced = self._recheck(deadline)
        return True, f"cancelled {what} {self.name}" + (
            f" (and job {', '.join(raced)}, granted as it was cancelled)" if raced else "")

    def _recheck(self, deadline: float) -> list[str]:
        """Look again until two looks in a row find no live job of the name; cancel by id what
        they find. The ids cancelled so; [] also where squeue cannot be asked (scancel's word stands)."""
        raced: list[str] = []
        quiet = 0
        while quiet < 2 and time.monotonic() < deadline:
            live, error = live_jobs(self.settings, self.env, deadline, name=self.name)
            if error is not None:
                break
            if live:
                quiet = 0
                ids = tuple(job for job, _ in live)
                _scancel(self.settings, self.env, ids, deadline)
                raced += [job for job in ids if job not in raced]
            else:
                quiet += 1
            if quiet < 2:
                time.sleep(max(0.0, min(RECHECK_S, deadline - time.monotonic())))
        return raced


def needs_own_job(launcher: str, env: Mapping[str, str]) -> bool:
    """Whether srun asks for a job of hc's own (outside an allocation) rather than a step."""
    return launcher == "srun" and not env.get("SLURM_JOB_ID")


# ------------------------------------------------------------------ leftovers


@dataclass
class Leftovers:
    """What the look for jobs a killed hc left found and did."""

    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def cancel_leftovers(settings: SlurmSettings, env: Mapping[str, str], audit: AuditLog, *,
                     now: float | None = None) -> Leftovers:
    """Cancel this user's hc-named jobs whose hc has ended; one run finding (act.E010)
    naming them, one audit record each. Nothing where Slurm is not installed; a note where
    squeue does not answer."""

    out = Leftovers()
    deadline = time.monotonic() + CANCEL_BOUND_S
    jobs, error = live_jobs(settings, env, deadline)
    if error == "not found":
        return out
    if error is not None:
        out.notes.append(f"could not look for Slurm jobs a killed hc left behind: squeue: {error}")
        return out
    now = time.time() if now is None else now
    found = {job: (name, why) for job, name in jobs
             if (owner := owner_of(name)) is not None and (why := abandoned(owner, now)) is not None}
    if not found:
        return out
    ids = tuple(sorted(found, key=lambda j: (len(j), j))[:LEFTOVERS_MAX])
    r = _scancel(settings, env, ids, deadline)
    live = _until_released(settings, env, ids, deadline, cancelled=r.ok)
    _audit(audit, ids, found, r, live)
    said = [f"{j} {found[j][0]} ({found[j][1]})" for j in ids if j not in live]
    message = f"cancelled {len(said)} Slurm job(s) a killed hc left behind: {'; '.join(said)}" if said else ""
    if live:
        why = _said(r) if not r.ok else "still live after scancel"
        message += f"{'. ' if message else ''}could not cancel job(s) {', '.join(sorted(live))}: {why}"
    out.findings.append(action_finding(catalogue.LEFTOVER_JOB, message, scope="slurm", value=list(ids),
                                    evidence="\n".join(f"{j} {found[j][0]}: {found[j][1]}" for j in ids)))
    out.notes.append(message)
    return out


def _until_released(settings: SlurmSettings, env: Mapping[str, str], ids: tuple[str, ...],
                    deadline: float, *, cancelled: bool) -> set[str]:
    """Wait (bounded) until the cancelled jobs have left their nodes (no longer live nor
    completing), so this sweep does not skip those nodes as busy; the ids still live."""
    while True:
        jobs, error = queued_jobs(settings, env, deadline)
        if error is not None:
            return set() if cancelled else set(ids)  # cannot look: scancel's word stands
        held = {job: state for job, _, state in jobs if job in ids and (state == "COMPLETING" or state not in _ENDED)}
        if not held or not cancelled or time.monotonic() >= deadline:
            return {job for job, state in held.items() if state not in _ENDED}
        time.sleep(min(RECHECK_S, max(0.0, deadline - time.monotonic())))


def _audit(audit: AuditLog, ids: tuple[str, ...], found: dict[str, tuple[str, str]], r: CommandResult,
           live: set[str]) -> None:

    when = iso(utc_now())
    for job in ids:
        entry = {"time": when, "action": "cancel-leftover", "job": job, "job_name": found[job][0],
                 "reason": found[job][1], "ok": job not in live, "command": shell_line(r.argv),
                 "message": (r.stderr or r.stdout).strip()[:500] or None}
        try:
            audit.append(entry)
        except OSError:
            pass  # kept in audit.failures: the run reports it (hc.E008)


@dataclass
class SweepLeftovers:
    """The look for leftovers before a run: run findings (act.E010), the audit's failures
    (hc.E008, which make the run ERROR), notes for stderr."""

    findings: list[Finding] = field(default_factory=list)
    errors: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def before_run(config: Config, nodes: list[str], *, via: str, tier: str, pairs: bool,
               env: Mapping[str, str] | None = None) -> SweepLeftovers:
    """Before a run that will ask Slurm for jobs of its own (a sweep through Slurm outside an
    allocation, or a deep sweep whose pair tests srun starts), cancel the jobs a killed hc left."""

    env = dict(os.environ if env is None else env)
    out = SweepLeftovers()
    if env.get("SLURM_JOB_ID"):
        return out  # inside an allocation hc asks for steps of it, which end with it
    if not (via == "slurm" or (tier == "deep" and pairs and len(nodes) > 1 and _pairs_by_srun(config, nodes))):
        return out
    audit = AuditLog(Path(config.main.slurm.audit_log))
    found = cancel_leftovers(config.main.slurm, env, audit)
    out.findings, out.notes = found.findings, found.notes
    lost = audit.failure_finding(scope="slurm")
    if lost is not None:
        out.errors.append(lost)
    return out


def _pairs_by_srun(config: Config, nodes: list[str]) -> bool:
    """Whether any of the nodes' fabrics has srun start its pair tests."""

    seen: dict[str, str] = {}
    for node in nodes:
        try:
            fabric = config.fabric_of(node)
            if fabric not in seen:
                seen[fabric] = config.for_node(node).limits.bandwidth.pairs.launcher
        except HcError:
            continue  # the node's own checks say what is wrong with its config
    return "srun" in seen.values()
