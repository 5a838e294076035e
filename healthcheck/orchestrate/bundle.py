"""`hc report bundle NODE [--job ID] -o FILE.tar.gz`: what hc knows of a node, in one file.

Stored evidence (any host): the node's results in the run history (its newest reports,
its runs, findings, repairs, Xid recurrences by boot, its counter readings before and
after), the kernel-log lines and DCGM output behind its findings, the versions its runs
read, the hooks' latest reports under `slurm.report_dir`, the config and the node's
effective limits. On the node itself (NODE is this host, or `--local`) also what can be
collected live, each command under a hard timeout: `nvidia-smi -q`, `nvidia-smi topo -m`,
`ibstat`, uname, versions, the kernel log's Xid/NVRM/mlx5/OOM lines. For `--job ID`: a
saved diagnosis (`--diagnosis FILE`, an hc.diagnosis/2 document), Slurm's record of the
job, and the node's failures and counter rises in the job's window.

report/bundle.py redacts, bounds and packs; this module gathers, and says for each thing
it could not gather why (not on this host, tool absent, timed out, no history). The file
is written atomically (core/atomic.py) and the export audited (actions/audit.py).
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from healthcheck import __version__
from healthcheck.actions.audit import AuditLog, AuditWriteError
from healthcheck.actions.slurm import SlurmClient
from healthcheck.analyses.over_time import metric_names
from healthcheck.core import typed
from healthcheck.core.atomic import WriteError, classify, write_atomic
from healthcheck.core.config import Config
from healthcheck.core.config.schema import IbCounterLimits
from healthcheck.core.errors import HcError, UsageError
from healthcheck.core.inputs import read_bounded
from healthcheck.core.model import NodeResult
from healthcheck.core.nodes import check_node_name, expand, this_node_name
from healthcheck.core.status import Status
from healthcheck.diagnose.live import parse_job
from healthcheck.diagnose.sources import collect as collect_sources
from healthcheck.diagnose.verdict import build as build_verdict
from healthcheck.diagnose.verdict import decode as decode_diagnosis
from healthcheck.diagnose.verdict import render as render_diagnosis
from healthcheck.probes.gpu import JOURNAL
from healthcheck.probes.versions import version_lines
from healthcheck.report.build import iso, utc_now
from healthcheck.report.bundle import Built, Caps, Item, Missing, Redactor, build, secret_values
from healthcheck.report.history import History
from healthcheck.report.jsonio import parse_time
from healthcheck.report.recurrence import repair_entry
from healthcheck.runners.base import CommandResult
from healthcheck.runners.local import run_command

MAX_INPUT_BYTES = 64 * 1024 * 1024  # a saved report or diagnosis read into the bundle
GPU_COUNTERS = ("ecc_volatile_uncorrected", "ecc_volatile_corrected", "remapped_rows_correctable",
                "remapped_rows_uncorrectable", "retired_pages_dbe")
VERSION_METRICS = ("driver_version", "cuda_version", "nccl_version", "vbios_version", "fw_ver")
# the kernel-log lines a bundle keeps: GPU driver, NVSwitch, the HCA driver, the OOM killer, PCIe errors
KERNEL_WORDS = re.compile(r"(?i)\bs?xid\b|NVRM|nvswitch|mlx5|out of memory|oom[-_ ]?kill|oom_reaper|"
                          r"killed process|\bAER\b|pcieport")
JOB_ID = re.compile(r"^[0-9]+(?:[_+][0-9]+)?$")


@dataclass(frozen=True)
class BundleRequest:
    """What `hc report bundle` was asked."""

    node: str | None  # None: this host (--local)
    output: Path
    job: str | None = None
    diagnosis: Path | None = None
    diagnose: bool = False  # a running job without --diagnosis: run `hc diagnose job` now
    local: bool = False
    runs: int = 20  # the node's newest runs read from the history
    latest: int = 5  # of them, the newest whose whole result is a member
    caps: Caps = Caps()
    timeout_s: float = 10.0  # each live command, and Slurm's answer


@dataclass
class BundleOutcome:
    path: Path
    node: str
    built: Built
    warnings: list[str] = field(default_factory=list)


@dataclass
class Gathered:
    items: list[Item] = field(default_factory=list)
    missing: list[Missing] = field(default_factory=list)
    known: list[str] = field(default_factory=list)  # what hc holds of the node (empty: nothing)

    def add(self, other: Gathered) -> None:
        self.items += other.items
        self.missing += other.missing
        self.known += other.known


class _RunOfNode(msgspec.Struct):
    """A recorded report, decoded as far as its header and its nodes' results."""

    run_id: str = ""
    hc_version: str = ""
    command: str = ""
    tier: str = ""
    started_at: str = ""
    finished_at: str = ""
    host: str = ""
    status: str = ""
    config_digest: str = ""
    nodes: list[NodeResult] = []


def check_output(path: Path) -> None:
    """Refuse, before anything is gathered, an -o the bundle could never be written to (exit 4)."""
    kind = classify(path)  # a link, directory, block device or socket: WriteError
    if kind not in ("new", "regular"):
        return  # /dev/stdout, a FIFO: written in place
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise WriteError(f"{path}: cannot write: its directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise WriteError(f"{path}: cannot write: its directory {parent} is not writable")


def check_job_id(job: str) -> str:
    if not JOB_ID.match(job):
        raise UsageError(f"--job {job[:40]!r} is not a Slurm job id")
    return job


def _epoch(text: str) -> float | None:
    when = parse_time(text) if text else None
    return when.timestamp() if when is not None else None


def _here(env: Mapping[str, str]) -> str:
    try:
        return this_node_name(env)
    except UsageError:
        return platform.uname().node.split(".")[0]


def _is_this_host(node: str, env: Mapping[str, str]) -> bool:
    try:
        return this_node_name(env) == node
    except UsageError:
        return False


# ------------------------------------------------------------------------- the history


def _node_result(history: History, run_id: str, node: str) -> tuple[_RunOfNode, NodeResult] | None:
    data = history.report_json(run_id)
    if data is None:
        return None
    try:
        run = typed.decode_json(data, _RunOfNode)
    except msgspec.DecodeError as exc:
        raise HcError(f"history {history.path}: run {run_id} is not a report hc reads: {exc}") from None
    result = next((n for n in run.nodes if n.node == node), None)
    return (run, result) if result is not None else None


def _head(run: _RunOfNode) -> dict[str, Any]:
    return {k: getattr(run, k) for k in ("run_id", "hc_version", "command", "tier", "started_at", "finished_at",
                                         "host", "status", "config_digest")}


def counter_names(config: Config, node: str) -> frozenset[str]:
    """The error counters whose readings a bundle lists: the IB port counters, the GPU's, and
    whatever the node's fabric judges rates or trends of."""
    names = set(IbCounterLimits.__struct_fields__) | set(GPU_COUNTERS)
    try:
        names |= metric_names([config.for_node(node).limits])
    except HcError:
        pass
    return frozenset(names)


def history_evidence(config: Config, node: str, request: BundleRequest) -> Gathered:
    """The node's excerpt of the run history: newest reports, runs, findings, repairs, Xids, counters."""
    out = Gathered()
    history = History.from_settings(config.main.history)
    if history is None:
        out.missing.append(Missing("history", "no run history is kept (history.path is null in the config)"))
        return out
    if not history.path.exists():
        out.missing.append(Missing("history", f"no run history yet at {history.path}"))
        return out
    with history:
        node_runs = history.node_runs(node, request.runs)
        repairs = history.repairs(node, request.runs)
        if not node_runs and not repairs:
            out.missing.append(Missing("history", f"no run of {node} recorded in the history at {history.path}"))
            return out
        out.known.append(f"{len(node_runs)} run(s) in the history")
        results = [r for nr in node_runs if (r := _node_result(history, nr.run_id, node)) is not None]
        source = f"history {history.path}"
        out.add(_runs_items(source, node_runs, repairs, results, request.latest))
        out.add(_xid_items(source, history, node))
        readings = history.counter_readings([node], counter_names(config, node), "9999-12-31T23:59:59Z",
                                            request.runs).get(node, [])
        out.add(_counter_items(source, node, readings))
    results.reverse()  # oldest first
    out.add(_kernel_items(source, results))
    out.add(_dcgm_items(source, results))
    out.add(_version_items(source, results))
    return out


def _runs_items(source: str, node_runs: list, repairs: list, results: list[tuple[_RunOfNode, NodeResult]],
                latest: int) -> Gathered:
    out = Gathered()
    newest = _epoch(node_runs[0].started_at) if node_runs else None
    rows = sorted([(r.started_at, asdict(r)) for r in node_runs] + [(r.at, repair_entry(r)) for r in repairs],
                  key=lambda kv: kv[0], reverse=True)
    out.items.append(Item("history/runs.json", f"{source}: the node's newest results and repairs, newest first",
                          data=[row for _, row in rows], mtime=newest))
    out.items.append(Item("history/repairs.json", f"{source}: repairs put on record (hc node --repaired)",
                          data=[asdict(r) for r in repairs], mtime=_epoch(repairs[0].at) if repairs else None))
    findings = [{"run_id": run.run_id, "started_at": run.started_at, "command": run.command,
                 **msgspec.to_builtins(f)} for run, result in results for f in result.findings
                if f.status is not Status.PASS]
    out.items.append(Item("history/findings.json", f"{source}: the node's non-PASS findings in its newest "
                          f"{len(results)} recorded run(s), newest first", data=findings, mtime=newest))
    for i, (run, result) in enumerate(results[:latest]):
        name = f"reports/{i:02d}-{run.started_at.replace(':', '')}-{run.command}.json"
        out.items.append(Item(name, f"{source}: run {run.run_id} ({run.command}, {run.tier}), the node's result",
                              data={"run": _head(run), "node": msgspec.to_builtins(result)},
                              mtime=_epoch(run.started_at)))
    return out


def _xid_items(source: str, history: History, node: str) -> Gathered:
    out = Gathered()
    rows = history.xid_rows(node, 512)
    if not rows:
        out.missing.append(Missing("history/xid-recurrences.json", "no Xid of the node recorded with a boot id "
                                                                   "in the history"))
        return out
    boots = history.xid_boots(node)
    data = {"last_repair_at": history.last_repair_at(node) or None, "rows": rows,
            "boots_since_last_repair": [{"gpu": gpu, "code": code, "boots": b} for (gpu, code), b in
                                        sorted(boots.items())]}
    out.items.append(Item("history/xid-recurrences.json", f"{source}: node_xids (Xids per GPU and boot)", data=data,
                          mtime=_epoch(rows[-1]["started_at"])))
    return out


def _counter_items(source: str, node: str, readings: list) -> Gathered:
    out = Gathered()
    if not readings:
        out.missing.append(Missing("history/counters.json", f"no IB or GPU error counter of {node} read in its "
                                                            "recorded runs"))
        return out
    rows = [{"started_at": r.started_at, "values": {f"{c} {n}": v for (c, n), v in sorted(r.values.items())}}
            for r in readings]
    first, last = readings[0], readings[-1]
    changes = [{"component": c, "name": n, "before": v, "after": last.values[(c, n)],
                "change": last.values[(c, n)] - v}
               for (c, n), v in sorted(first.values.items()) if (c, n) in last.values and last.values[(c, n)] != v]
    data = {"before": rows[0], "after": rows[-1], "changes": changes, "readings": rows}
    out.items.append(Item("history/counters.json", f"{source}: counter readings, oldest first (before: the first, "
                          "after: the last; a change that went down is a reset)", data=data,
                          mtime=_epoch(last.started_at)))
    return out


def _kernel_items(source: str, results: list[tuple[_RunOfNode, NodeResult]]) -> Gathered:
    out = Gathered()
    lines: dict[str, None] = {}
    for run, result in results:
        window = next((str(m.value) for m in result.metrics if m.name == "kernel_log"), None)
        kept = [line for f in result.findings if f.evidence for line in f.evidence.splitlines()
                if KERNEL_WORDS.search(line)]
        if kept:
            lines[f"# run {run.run_id} ({run.started_at}): {window or 'kernel log'}"] = None
            lines.update(dict.fromkeys(kept))
    if not lines:
        out.missing.append(Missing("kernel-log/lines-hc-read.txt", "no kernel-log line behind the node's recorded "
                                   "findings (hc keeps only the lines its findings cite)"))
        return out
    out.items.append(Item("kernel-log/lines-hc-read.txt", f"{source}: the kernel-log lines (Xid, NVRM, mlx5, OOM) "
                          "the node's findings cite, oldest run first", text="\n".join(lines) + "\n",
                          mtime=_epoch(results[-1][0].started_at), keep="tail"))
    return out


def _dcgm_items(source: str, results: list[tuple[_RunOfNode, NodeResult]]) -> Gathered:
    out = Gathered()
    rows = [{"run_id": run.run_id, "started_at": run.started_at,
             "checks": [msgspec.to_builtins(c) for c in result.checks if "dcgm" in c.name],
             "findings": [msgspec.to_builtins(f) for f in result.findings if "dcgm" in f.check],
             "metrics": [msgspec.to_builtins(m) for m in result.metrics if m.name.startswith("dcgm")]}
            for run, result in results if any("dcgm" in c.name for c in result.checks)]
    if not rows:
        out.missing.append(Missing("dcgm/runs.json", "DCGM did not run on the node in its recorded runs (gpu.dcgm, "
                                                     "gpu.dcgm_deep: where the fabric's dcgm.enabled)"))
        return out
    out.items.append(Item("dcgm/runs.json", f"{source}: dcgm checks' results, findings and output",
                          data=rows, mtime=_epoch(str(rows[-1]["started_at"]))))
    return out


def _version_items(source: str, results: list[tuple[_RunOfNode, NodeResult]]) -> Gathered:
    out = Gathered()
    for run, result in reversed(results):
        found = [m for m in result.metrics if m.name in VERSION_METRICS]
        if found:
            data = {"run_id": run.run_id, "started_at": run.started_at, "hc_version": run.hc_version,
                    "versions": [msgspec.to_builtins(m) for m in found]}
            out.items.append(Item("versions/recorded.json", f"{source}: driver, CUDA, NCCL, VBIOS and HCA firmware "
                                  "as the node's newest run that read them", data=data, mtime=_epoch(run.started_at)))
            return out
    out.missing.append(Missing("versions/recorded.json", "no run in the history read the node's driver, CUDA, NCCL "
                                                         "or firmware versions"))
    return out


# --------------------------------------------------------------- reports, config, env


def report_dir_evidence(config: Config, node: str, latest: int) -> Gathered:
    """The hooks' reports of the node under slurm.report_dir: the latest of each hook, the newest others."""
    out = Gathered()
    if not config.main.slurm.report_dir:
        out.missing.append(Missing("hook-reports", "no hook reports are kept (slurm.report_dir is null)"))
        return out
    base = Path(config.main.slurm.report_dir) / node
    try:
        files = [p for p in base.iterdir() if p.name.endswith(".json") and p.is_file() and not p.is_symlink()]
    except OSError as exc:
        why = "none written here" if isinstance(exc, FileNotFoundError) else exc.strerror or str(exc)
        out.missing.append(Missing("hook-reports", f"no hook reports of {node} under {base}: {why}"))
        return out
    files.sort(key=lambda p: (not p.name.endswith("-latest.json"), -p.stat().st_mtime, p.name))
    chosen = [p for p in files if p.name.endswith("-latest.json")]
    chosen += [p for p in files if p not in chosen][:latest]
    seen: set[bytes] = set()
    for path in chosen:
        try:
            data = read_bounded(path, MAX_INPUT_BYTES, what="hook report")
        except HcError as exc:
            out.missing.append(Missing(f"hook-reports/{path.name}", str(exc)))
            continue
        if data in seen:  # a run's own report is also its hook's latest: one copy
            continue
        seen.add(data)
        out.items.append(Item(f"hook-reports/{path.name}", f"file {path}", **_json_or_text(data),
                              mtime=path.stat().st_mtime))
    if chosen:
        out.known.append(f"{len(chosen)} hook report(s) under {base}")
    return out


def _json_or_text(data: bytes) -> dict[str, Any]:
    try:
        return {"data": json.loads(data)}
    except ValueError:
        return {"text": data.decode("utf-8", "replace")}


def config_evidence(config: Config, node: str) -> Gathered:
    out = Gathered()
    try:
        text = read_bounded(config.path, MAX_INPUT_BYTES, what="config").decode("utf-8", "replace")
        out.items.append(Item("config/hc.yaml", f"file {config.path} (the main config)", text=text))
    except (HcError, OSError) as exc:
        out.missing.append(Missing("config/hc.yaml", f"the main config could not be read: {exc}"))
    try:
        node_config = config.for_node(node)
        out.items.append(Item("config/limits.json", f"the node's effective limits (fabric {node_config.fabric_name}, "
                              "after extends and overrides)", data=msgspec.to_builtins(node_config.limits)))
    except HcError as exc:
        out.missing.append(Missing("config/limits.json", f"the node's limits could not be read: {exc}"))
    return out


def secrets_of(config: Config, env: Mapping[str, str]) -> list[str]:
    """The literal values a bundle must never hold: the webhook URL, the token file's line, secret variables."""
    found = secret_values(dict(env))
    tickets = config.main.tickets
    if tickets.webhook_url:
        found.append(tickets.webhook_url)
    if tickets.token_file:
        try:
            found += read_bounded(Path(tickets.token_file).expanduser(), 65536, what="token file").decode(
                "utf-8", "replace").strip().splitlines()
        except (HcError, OSError):
            pass  # not readable here: it cannot be in what this hc read either
    return found


# --------------------------------------------------------------------------- live


def _command_item(name: str, argv: tuple[str, ...], timeout_s: float) -> Item | Missing:
    result = run_command(argv, timeout_s=timeout_s)
    return command_outcome(name, result, timeout_s)


def command_outcome(name: str, result: CommandResult, timeout_s: float) -> Item | Missing:
    """A live command's output as an item, or why there is none (tool absent, timed out, failed)."""
    shown = " ".join(result.argv)
    if result.not_found:
        return Missing(name, f"tool absent: {result.argv[0]} not found on PATH")
    if result.timed_out:
        return Missing(name, f"timed out: {shown} gave no answer within {timeout_s:g} s (killed)")
    if result.error:
        return Missing(name, f"{shown}: {result.error}")
    if result.returncode != 0 and not result.stdout.strip():
        said = (result.stderr or "").strip().splitlines()
        return Missing(name, f"{shown} exited {result.returncode}" + (f": {said[-1][:200]}" if said else ""))
    note = f" (exited {result.returncode})" if result.returncode else ""
    text = result.stdout + (f"\n--- stderr ---\n{result.stderr}" if result.stderr.strip() else "")
    return Item(name, f"`{shown}` on this host, timeout {timeout_s:g} s{note}", text=text, mtime=time.time())


def live_evidence(config: Config, node: str, timeout_s: float) -> Gathered:
    """What this host can tell now, each command bounded by `timeout_s`."""
    out = Gathered()
    now = time.time()
    for name, argv in (("live/nvidia-smi-q.txt", ("nvidia-smi", "-q")),
                       ("live/nvidia-smi-topo.txt", ("nvidia-smi", "topo", "-m")),
                       ("live/ibstat.txt", ("ibstat",))):
        got = _command_item(name, argv, timeout_s)
        (out.items if isinstance(got, Item) else out.missing).append(got)  # type: ignore[arg-type]
    u = platform.uname()
    out.items.append(Item("live/uname.txt", "os.uname() on this host",
                          text=f"{u.system} {u.node} {u.release} {u.version} {u.machine}\n", mtime=now))
    out.items.append(Item("live/versions.txt", "hc --version's probes on this host (hc, Python, torch, NCCL, driver)",
                          text="\n".join(version_lines(__version__)) + "\n", mtime=now))
    got = kernel_lines_live(config, node, timeout_s)
    (out.items if isinstance(got, Item) else out.missing).append(got)  # type: ignore[arg-type]
    out.known.append("this host")
    return out


def kernel_lines_live(config: Config, node: str, timeout_s: float) -> Item | Missing:
    """The kernel log's Xid, NVRM, mlx5 and OOM lines, from the source gpu.xid reads on this node."""
    name = "live/kernel-log.txt"
    try:
        policy = config.for_node(node).limits.gpu.xid
    except HcError:
        policy = None
    tried: list[str] = []
    if policy is not None and policy.source == "file":
        if not policy.file:
            return Missing(name, "gpu.xid.source is file but gpu.xid.file is not set")
        try:
            text = read_bounded(policy.file, MAX_INPUT_BYTES, what="gpu.xid.file").decode("utf-8", "replace")
        except HcError as exc:
            return Missing(name, str(exc))
        return _kernel_item(name, text, f"file {policy.file} (gpu.xid.file)")
    for argv in (("dmesg", "--time-format", "iso"), ("dmesg",), JOURNAL):
        got = _command_item(name, argv, timeout_s)
        if isinstance(got, Item):
            return _kernel_item(name, got.text or "", got.source)
        tried.append(got.reason)
    return Missing(name, "the kernel log could not be read: " + "; ".join(tried))


def _kernel_item(name: str, text: str, source: str) -> Item:
    lines = [line for line in text.splitlines() if KERNEL_WORDS.search(line)]
    body = "\n".join(lines) + "\n" if lines else "# no Xid, NVRM, mlx5 or OOM line in the kernel log\n"
    return Item(name, f"{source}: its Xid, SXid, NVRM, NVSwitch, mlx5, OOM and AER lines", text=body,
                mtime=time.time(), keep="tail")


def not_live(node: str, here: str) -> list[Missing]:
    why = (f"not on this host: hc runs on {here}, not on {node} (run `hc report bundle {node}` on {node} itself, "
           "or with --local there, to collect it live)")
    return [Missing(name, why) for name in ("live/nvidia-smi-q.txt", "live/nvidia-smi-topo.txt", "live/ibstat.txt",
                                            "live/uname.txt", "live/versions.txt", "live/kernel-log.txt")]


# ---------------------------------------------------------------------------- a job


def job_evidence(config: Config, node: str, job: str, request: BundleRequest) -> Gathered:
    """The job's diagnosis (saved, or made here from what is reachable), Slurm's record of it
    and the node's health in its window; an HcError where hc knows nothing of the job or it
    did not run on the node."""
    out = Gathered()
    if request.diagnosis is not None:
        out.add(_diagnosis_items(request.diagnosis, job))
    shown = SlurmClient(config.main.slurm, deadline=time.monotonic() + request.timeout_s).show_job(job)
    info = parse_job(shown.stdout or shown.message, job) if shown.ok else None
    if info is None:
        why = shown.message if not shown.ok else "no such job in scontrol's answer"
        if not out.known:
            raise HcError(f"hc knows nothing of job {job}: no --diagnosis FILE names it, and Slurm: {why}")
        out.missing.append(Missing("job/scontrol-show-job.txt", f"Slurm's record of job {job}: {why}"))
        return out
    out.known.append(f"Slurm's record of job {job}")
    if info.nodes and node not in expand([info.nodes]):
        raise HcError(f"job {job} did not run on {node} (its nodes: {info.nodes})")
    out.items.append(Item("job/scontrol-show-job.txt", f"`{config.main.slurm.scontrol} -o show job {job}`",
                          text=(shown.stdout or shown.message).strip() + "\n"))
    out.add(_job_window_items(config, node, job, info))
    if request.diagnosis is None:
        out.add(diagnosed_here(config, job, info, request))
    return out


def diagnosed_here(config: Config, job: str, info: Any, request: BundleRequest) -> Gathered:
    """A diagnosis made for the bundle: `hc diagnose job` on a running job (--diagnose: it samples
    the ranks' stacks), `hc diagnose logs` on an ended job's output where this host can read it."""
    name = "job/diagnosis.json"
    if info.running:
        if not request.diagnose:
            return Gathered(missing=[Missing(name, f"job {job} is running and hc keeps no diagnosis of its own: "
                                                   f"--diagnose runs `hc diagnose job {job}` now (its ranks' states "
                                                   "and stacks), or give a saved one with --diagnosis FILE")])
        return _live_diagnosis(config, job, request.timeout_s)
    readable = [Path(p) for p in info.output_files if os.access(p, os.R_OK) and Path(p).is_file()]
    if not readable:
        where = " ".join(info.output_files) or "none named by Slurm"
        return Gathered(missing=[Missing(name, f"job {job} has ended ({info.state}) and its output ({where}) is "
                                               f"not readable on this host: run `hc diagnose logs` on its output "
                                               "and per-rank logs, and give the verdict with --diagnosis FILE")])
    verdict = build_verdict(collect_sources(readable))
    shown = " ".join(str(p) for p in readable)
    return _verdict_items(verdict, f"`hc diagnose logs {shown}`, run by the bundle on the job's output "
                                   "(its per-rank logs, where they are elsewhere, not read)", job)


def _live_diagnosis(config: Config, job: str, timeout_s: float) -> Gathered:
    """`hc diagnose job JOB -o FILE` in a child hc, bounded: its verdict, or why there is none."""
    name = "job/diagnosis.json"
    with tempfile.TemporaryDirectory(prefix="hc-bundle-") as tmp:
        saved = Path(tmp) / "diagnosis.json"
        argv = (sys.executable, "-m", "healthcheck", "diagnose", "job", job, "--config", str(config.path),
                "--timeout", f"{timeout_s:g}", "--format", "json", "-o", str(saved))
        result = run_command(argv, timeout_s=3 * timeout_s + 30)
        if result.timed_out or not saved.is_file():
            said = (result.stderr or result.stdout or "").strip().splitlines()
            why = "timed out" if result.timed_out else f"exited {result.returncode}"
            return Gathered(missing=[Missing(name, f"`hc diagnose job {job}` gave no verdict ({why})"
                                                   + (f": {said[-1][:200]}" if said else ""))])
        verdict = decode_diagnosis(saved.read_bytes(), f"hc diagnose job {job}")
    return _verdict_items(verdict, f"`hc diagnose job {job}`, run by the bundle (ranks' states and stacks)", job)


def _diagnosis_items(path: Path, job: str) -> Gathered:
    verdict = decode_diagnosis(read_bounded(path, MAX_INPUT_BYTES, what="--diagnosis"), str(path))
    if verdict.job and not re.search(rf"(?<![0-9]){re.escape(job)}(?![0-9])", verdict.job):
        raise HcError(f"--diagnosis {path} is a diagnosis of {verdict.job!r}, not of job {job}")
    return _verdict_items(verdict, f"file {path} (hc.diagnosis/2)", job)


def _verdict_items(verdict: Any, source: str, job: str) -> Gathered:
    when = _epoch(verdict.collected_at)
    return Gathered(items=[
        Item("job/diagnosis.json", f"{source}: the verdict, its stack groups and ranks",
             data=msgspec.to_builtins(verdict), mtime=when),
        Item("job/diagnosis.txt", f"{source}, as hc diagnose shows it", text=render_diagnosis(verdict) + "\n",
             mtime=when)], known=[f"a diagnosis of job {job}"])


def _slurm_time(text: str) -> float | None:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def _job_window_items(config: Config, node: str, job: str, info: Any) -> Gathered:
    out = Gathered()
    start = info.start_epoch
    history = History.from_settings(config.main.history)
    if start is None or history is None or not history.path.exists():
        why = "the job has no start time" if start is None else "no run history is kept here"
        out.missing.append(Missing("job/health-in-window.json", f"the node's health in job {job}'s window: {why}"))
        return out
    end = _slurm_time(info.end) or time.time()
    since, until = iso(dt.datetime.fromtimestamp(start, dt.timezone.utc)), iso(dt.datetime.fromtimestamp(
        end, dt.timezone.utc))
    with history:
        failures = history.node_failures([node], since, until)
        rises = history.counter_rises(node, since, until, counter_names(config, node))
    data = {"job": job, "window": {"start": since, "end": until},
            "failures": [{"run_id": f.run_id, "command": f.command, "started_at": f.started_at,
                          "findings": [msgspec.to_builtins(x) for x in f.findings]} for f in failures],
            "counters_before_after": [asdict(r) for r in rises]}
    out.items.append(Item("job/health-in-window.json", f"history {history.path}: the node's FAILs and counter rises "
                          f"between the job's start and end (the readings before and after it)", data=data,
                          mtime=end))
    return out


# ------------------------------------------------------------------------ the bundle


def make_bundle(config: Config, request: BundleRequest, env: Mapping[str, str] | None = None) -> BundleOutcome:
    """Gather, redact, bound and write the bundle atomically; an HcError (exit 4) for bad input."""
    env = os.environ if env is None else env
    node = check_node_name(request.node) if request.node else this_node_name(env)
    job = check_job_id(request.job) if request.job is not None else None
    check_output(request.output)
    live = request.local or _is_this_host(node, env)
    got = Gathered()
    try:
        got.add(history_evidence(config, node, request))
    except HcError as exc:  # a damaged history costs the bundle its excerpt, not the rest
        got.missing.append(Missing("history", f"the run history could not be read: {exc}"))
    got.add(report_dir_evidence(config, node, request.latest))
    if live:
        got.add(live_evidence(config, node, request.timeout_s))
    else:
        got.missing += not_live(node, _here(env))
    if job is not None:  # a job that ran on the node (Slurm says so, or its diagnosis is given) makes it known
        got.add(job_evidence(config, node, job, request))
    if not got.known:
        raise HcError(f"hc knows nothing of node {node}: " + "; ".join(m.reason for m in got.missing
                                                                        if m.name in ("history", "hook-reports")))
    got.add(config_evidence(config, node))
    got.items.append(Item("hc/environment.json", "the environment of this hc process (secret values redacted)",
                          data=dict(sorted(env.items()))))
    header = {"node": node, "job": job, "hc_version": __version__, "host": platform.uname().node, "live": live,
              "known": got.known}
    top = f"hc-bundle-{node}" + (f"-job{job}" if job else "")
    built = build(top, header, got.items, got.missing, Redactor(secrets_of(config, env)), request.caps)
    write_atomic(request.output, built.data)
    return BundleOutcome(request.output, node, built, _audit(config, request, node, job, built))


def _audit(config: Config, request: BundleRequest, node: str, job: str | None, built: Built) -> list[str]:
    """One audit line per bundle written (evidence leaving the cluster); a warning where it could not be."""
    try:
        by = getpass.getuser()
    except (KeyError, OSError):
        by = "unknown"
    record = {"time": iso(utc_now()), "nodes": node, "action": "bundle", "ok": True, "by": by,
              "command": "hc report bundle", "path": str(request.output), "job": job,
              "items": len(built.manifest["items"]), "missing": len(built.manifest["missing"]),
              "redacted": built.redacted, "bytes": len(built.data)}
    try:
        AuditLog(Path(config.main.slurm.audit_log)).append(record)
    except AuditWriteError as exc:
        return [f"bundle written, but not recorded in the audit log: {exc}"]
    return []
