"""The catalogue of finding IDs: the contract with ops ticketing.

Every ID a check may emit is declared once, here or in its family module, with its
meaning, a hint an operator can act on and a suggested action. IDs are never reused
or renumbered; retired IDs stay listed with `retired=True`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import msgspec

from healthcheck.core.model import Finding, Limit
from healthcheck.core.plugins import load_declarations
from healthcheck.core.status import Status

_ID_RE = re.compile(r"^[a-z][a-z0-9]*\.[EW][0-9]{3}$")

# What an operator should do about a finding; a fixed vocabulary so tickets can be routed.
SUGGESTED_ACTIONS = (
    "none",
    "rerun",
    "fix-config",
    "reseat-cable",
    "replace-cable",
    "reset-gpu",
    "reboot",
    "rma",
    "investigate",
    "clean-up",
)


class FindingSpec(msgspec.Struct, frozen=True):
    """One catalogued finding ID."""

    id: str
    title: str  # one-line meaning
    hint: str  # what to do about it
    action: str = "investigate"
    retired: bool = False

    def __call__(
        self,
        status: Status,
        message: str,
        *,
        component: str = "",
        value: Any = None,
        unit: str | None = None,
        limit: Limit | None = None,
        evidence: str | None = None,
    ) -> Finding:
        """A finding of this ID; the engine stamps node, subject, hint and fingerprint."""
        return Finding(
            id=self.id,
            status=status,
            message=message,
            component=component,
            value=value,
            unit=unit,
            limit=limit,
            evidence=evidence,
        )

    def fail(self, message: str, **kw: Any) -> Finding:
        return self(Status.FAIL, message, **kw)

    def warn(self, message: str, **kw: Any) -> Finding:
        return self(Status.WARN, message, **kw)


CATALOGUE: dict[str, FindingSpec] = {}
# finding ID -> the checks and analyses that declare they emit it (filled as they register)
EMITTERS: dict[str, set[str]] = {}


def record_emitter(finding_id: str, emitter: str) -> None:
    """Record that check or analysis `emitter` declared `finding_id` (registry.py calls this)."""
    EMITTERS.setdefault(finding_id, set()).add(emitter)


def emitters(ids: Iterable[str]) -> dict[str, frozenset[str]]:
    """finding ID -> the checks and analyses that can emit it, every family declared first."""

    load_declarations()
    return {i: frozenset(EMITTERS.get(i, ())) for i in ids}


def finding(id: str, title: str, hint: str, action: str = "investigate", retired: bool = False) -> FindingSpec:
    """Declare a finding ID; declaring one twice is a programming error."""
    if not _ID_RE.match(id):
        raise ValueError(f"finding ID {id!r} is not of the form family.E001")
    if id in CATALOGUE:
        raise ValueError(f"finding ID {id} declared twice")
    if action not in SUGGESTED_ACTIONS:
        raise ValueError(f"finding ID {id}: unknown suggested action {action!r}")
    spec = FindingSpec(id, title, hint, action, retired)
    CATALOGUE[id] = spec
    return spec


# Findings about running checks rather than about the node: always ERROR, never drain.
TOOL_MISSING = finding(
    "hc.E001",
    "a tool or data source a check needs is not available",
    "Install the tool named in the message, or run with a config whose fabric does not need it.",
    action="fix-config",
)
TIMED_OUT = finding(
    "hc.E002",
    "a probe did not finish within its time budget and was stopped",
    "The tool hung (a failing GPU or HCA can hang NVML or MAD tools); re-run, then inspect the node.",
    action="rerun",
)
TOOL_FAILED = finding(
    "hc.E003",
    "a tool exited with an error",
    "Read the tool's message in the finding's evidence; re-run the command by hand on the node.",
    action="investigate",
)
UNPARSABLE = finding(
    "hc.E004",
    "a tool's output could not be parsed",
    "Attach the raw output (hc parse TOOL FILE shows what the parser makes of it) to a bug report.",
    action="investigate",
)
CHECK_CRASHED = finding(
    "hc.E005",
    "a check raised an unexpected exception",
    "This is a bug in hc: attach the report to a bug report.",
    action="investigate",
)
UNREACHABLE = finding(
    "hc.E006",
    "the node could not be reached or its checks could not be run",
    "Check that the node is up and reachable (ssh, host key, sshd); the message says what failed.",
    action="investigate",
)
NOTHING_CHECKED = finding(
    "hc.E007",
    "nothing was checked: every selected check was skipped, or no check was selected",
    "A run that looked at nothing is not a healthy result: check --checks and --tier, and that the "
    "node's fabric (hc config show NODE) configures what the checks look at.",
    action="fix-config",
)
NOT_WRITTEN = finding(
    "hc.E008",
    "a file hc must keep (the audit log, an --output report, a --prometheus export) could not be written",
    "The message names the path and why (full or read-only disk, a link or special file at the path, "
    "a FIFO nobody reads, permissions); the checks and actions happened and the verdict stands, but their "
    "record is missing there.",
    action="fix-config",
)

# Findings about acting on the scheduler (actions/): also never evidence against a node.
GUARDED = finding(
    "act.E001",
    "the blast-radius guard refused to drain: too many nodes would have been drained",
    "When many nodes fail at once the config or a shared dependency (switch, filesystem, driver rollout) "
    "is more likely wrong than the nodes: check the findings' common cause before raising "
    "slurm.drain.max_drain_fraction; the finding names the nodes it would have drained.",
    action="investigate",
)
ERRORS_REPEATED = finding(
    "act.E002",
    "the node could not be checked in several consecutive runs",
    "A probe keeps failing or timing out on this node (see the hc.E00x findings): a hung GPU or HCA "
    "driver often shows like this; run hc node on it by hand.",
    action="investigate",
)
SLURM_FAILED = finding(
    "act.E003",
    "Slurm could not be queried or refused an action",
    "Read Slurm's message in the finding: controller down (check slurmctld), no permission (run as "
    "SlurmUser or root), unknown node (the node's name differs from Slurm's: set HC_NODE_NAME).",
    action="investigate",
)
LOCKED = finding(
    "act.E004",
    "another hc run on the node held its lock, so this run took no action",
    "A health check or epilogue was acting at the same time; the next run acts. If it persists, "
    "look for a stuck hc process on the node.",
    action="rerun",
)

STATE_FAILED = finding(
    "act.E005",
    "hc's state on the node (lock, kernel-log cursor, job marks, ERROR count) could not be kept",
    "slurm.state_dir is full, read-only or not a directory; the checks and actions still ran, but "
    "the next run may judge the kernel log since boot again. Free or fix the state directory.",
    action="fix-config",
)

LAUNCH_FAILED = finding(
    "act.E006",
    "the Slurm launcher could not place hc on the nodes (srun refused, pended past its bound, or failed)",
    "Nodes Slurm cannot schedule (drained, down, reserved, busy) are checked over SSH or skipped and "
    "named; look at srun's message in the evidence.",
    action="investigate",
)

NOT_DRAINED = finding(
    "act.E007",
    "a node FAILed and hc did not drain it: Slurm shows it down, not responding or unknown, someone else "
    "drained it, or sinfo does not list it",
    "hc acts only on nodes Slurm shows up, responding and not drained by anyone else, and only on names sinfo "
    "lists. The node's FAIL still stands (a prologue still keeps the job off it): drain it by hand if it is "
    "back in service, or name it as Slurm does (HC_NODE_NAME, the hostlist).",
    action="investigate",
)
STAYS_DRAINED = finding(
    "act.E008",
    "a node hc drained stays drained: the checks named in its reason did not run and pass again",
    "The message names each finding ID of the reason and what its check did in this run: FAILed again, could "
    "not run (ERROR), was skipped, or did not run (an analysis such as bw.pairs or fleet.drift runs only in a "
    "sweep over its peers). Other checks do not matter: an unrelated ERROR never keeps a node drained.",
    action="investigate",
)
NO_SLURM = finding(
    "act.E009",
    "no Slurm here (sinfo not found): deep tests ran without asking whether a job uses the node",
    "On a Slurm cluster, install Slurm's client commands on the machine hc runs on (or set slurm.sinfo): hc "
    "then skips nodes with a job. Without Slurm, make sure no job uses the node while its deep tests run.",
    action="fix-config",
)
LEFTOVER_JOB = finding(
    "act.E010",
    "Slurm jobs a killed hc left behind were found (and cancelled)",
    "An hc killed outright (SIGKILL, the OOM killer, a lost login node) cannot cancel the job srun "
    "had asked for; the next sweep cancels jobs of hc's name whose hc is gone or past its bound, "
    "and the audit log has a line for each. If it recurs, find what kills hc.",
    action="investigate",
)

# Diagnoses of a job (`hc diagnose`): one ID per failure class, about the job's ranks and
# their hosts rather than a node's state. Never evidence for a drain: a job's diagnosis is
# a GroupResult of kind "job" in a report, never a node's finding. Their fingerprint is per
# job and culprit (subject "<job>:<ranks>"), so one failing job is one ticket per culprit.
DIAG_DEAD_RANK = finding(
    "diag.E001",
    "a job failed because a rank died first (a signal, the OOM killer, an exception, an early exit)",
    "Read the dead rank's own log and its host's kernel log (OOM killer, segfault, Xid); the peers' "
    "'connection closed' and timeout errors are collateral. The finding names the rank, host and evidence.",
    action="investigate",
)
DIAG_COLLECTIVE_MISMATCH = finding(
    "diag.E002",
    "a job's ranks called different collectives (or in a different order) and hung or failed",
    "Make every rank call the same collectives in the same order (a collective inside `if rank ...` or a "
    "data-dependent branch); rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to have torch name the call.",
    action="investigate",
)
DIAG_SHAPE_MISMATCH = finding(
    "diag.E003",
    "a job's ranks passed tensors of different shapes or dtypes to one collective",
    "Make the odd rank's tensor the same shape and dtype as its peers' at that collective (an uneven last "
    "batch, padding, a per-rank dtype).",
    action="investigate",
)
DIAG_STUCK_RANK = finding(
    "diag.E004",
    "a job hung: a rank stopped outside the collective its peers wait in",
    "Look at the odd rank's stack (a data loader, file system or compute step that never returns); dump it "
    "again (py-spy) to see whether it moves, and run hc node on its host.",
    action="investigate",
)
DIAG_HOST_WEDGED = finding(
    "diag.E005",
    "a job's watchdog was blocked on a host (a CUDA/NCCL call or the GIL never returned)",
    "py-spy dump --native the rank, check the GPU (nvidia-smi, Xid in the kernel log) and run hc node --tier "
    "standard on its host.",
    action="investigate",
)
DIAG_NETWORK = finding(
    "diag.E006",
    "a job failed on the network between its ranks (IB completion errors, verbs or socket failures)",
    "Run hc node --tier standard on the hosts of the failing link (IB ports, counters, cables), then hc bw pairs "
    "between them.",
    action="investigate",
)
DIAG_SOCKET_FALLBACK = finding(
    "diag.E007",
    "a job's NCCL used TCP sockets where InfiniBand was expected (a performance cliff)",
    "Check NCCL_IB_HCA / NCCL_SOCKET_IFNAME and that the IB devices are visible inside the job (hc node --tier "
    "standard on its hosts).",
    action="fix-config",
)
DIAG_INIT_FAILURE = finding(
    "diag.E008",
    "a job failed while starting (port in use, rendezvous or store timeout, no usable interface, duplicate GPU)",
    "Fix the launch: a free MASTER_PORT, every rank reachable on MASTER_ADDR, the same WORLD_SIZE on every rank, "
    "the right NCCL_SOCKET_IFNAME, one GPU per rank; then relaunch.",
    action="fix-config",
)
DIAG_GPU_FAILURE = finding(
    "diag.E009",
    "a job failed on a GPU (an Xid in its window, a CUDA error)",
    "Drain the host and run hc node --tier deep on it; the Xid (kernel log) names the GPU.",
    action="reset-gpu",
)
DIAG_PROGRESSING = finding(
    "diag.E011",
    "a live job was progressing: every rank's stack or I/O moved while hc sampled it (nothing hangs)",
    "Nothing hangs and no rank is to blame. If the job is slow, look at the straggler the finding names in "
    "words (its data loading, its host: hc node) or profile a step; sample again if it hangs later.",
    action="none",
)
DIAG_UNKNOWN = finding(
    "diag.E010",
    "a job could not be diagnosed: nothing conclusive in what it left (ERROR: not judged)",
    "Collect more: per-rank logs with NCCL_DEBUG=INFO, py-spy dump --json of every rank while it hangs, Flight "
    "Recorder dumps (TORCH_FR_BUFFER_SIZE, TORCH_NCCL_DUMP_ON_TIMEOUT=1); the finding says why nothing was "
    "concluded.",
    action="investigate",
)
