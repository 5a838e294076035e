"""`hc diagnose`: the odd rank, the failure class and the evidence of a hung or failed
distributed job. `logs` reads what a job saved; `job` (Slurm) and `pids` (one machine)
collect the same evidence live and plug into this group as further subcommands."""

from __future__ import annotations

import datetime as dt
import functools
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click
import msgspec

from healthcheck.actions.saved_runs import diagnosis_report
from healthcheck.actions.slurm import SlurmClient
from healthcheck.cli.app import App, PrometheusTarget, prometheus_dir
from healthcheck.cli.completion import complete_nodes
from healthcheck.cli.options import config_option, format_option, prometheus_option
from healthcheck.cli.params import integer, number, pid
from healthcheck.cli.progress import TextProgress
from healthcheck.core.atomic import write_atomic
from healthcheck.core.config.loader import load_config
from healthcheck.core.config.schema import IbCounterLimits
from healthcheck.core.errors import ExitCode, HcError
from healthcheck.core.inputs import clip
from healthcheck.core.nodes import expand
from healthcheck.diagnose import MAX_PARALLEL, MAX_TIMEOUT_S
from healthcheck.diagnose.collect import (
    CollectError,
    NodeCollection,
    collect_here,
    collect_node,
    find_launchers,
    local_rank_pids,
)
from healthcheck.diagnose.evidence import HealthEvent
from healthcheck.diagnose.live import (
    MAX_DEBUG_BYTES,
    MAX_OUTPUT_BYTES,
    MAX_RANK_OUTPUT_BYTES,
    NodeAnswer,
    collect_args,
    decode_node,
    evidence_from_nodes,
    fetch_argv,
    local_fetcher,
    parse_fetched,
    parse_job,
    remote_argv,
    sampling_args,
    srun_collect_argv,
)
from healthcheck.diagnose.sampling import (
    DEFAULT_HORIZON_S,
    DEFAULT_SAMPLES,
    DEFAULT_WINDOW_S,
    MAX_HORIZON_S,
    MAX_SAMPLES,
    MAX_WINDOW_S,
    SamplingSpec,
)
from healthcheck.diagnose.sources import collect as collect_sources
from healthcheck.diagnose.verdict import build, encode, render
from healthcheck.probes.gpu import MAX_SINCE
from healthcheck.report.build import iso
from healthcheck.report.history import History
from healthcheck.report.jsonio import parse_time
from healthcheck.report.prometheus import check_directory, export
from healthcheck.runners.base import CommandResult
from healthcheck.runners.fanout import fan_out
from healthcheck.runners.local import run_command
from healthcheck.runners.ssh import SshConnection, SshError

if TYPE_CHECKING:
    from healthcheck.core.config import Config
    from healthcheck.diagnose.health import HistoryLookup
    from healthcheck.diagnose.verdict import Verdict

EXIT_CODES = """\b
Exit codes:
  0  diagnosed: a failure class other than unknown, or progressing (live:
     every rank's stack moved while it was sampled: nothing hangs)
  3  unknown: nothing conclusive in the input (the verdict says why), or
     --prometheus DIR could not be written after the diagnosis
  4  usage or input error: a path that does not exist, -o not writable

\b
The diagnosis is a finding of the catalogue (diag.E001-E011, hc checks list),
fingerprinted per job and culprit: hc report tickets|html|show read the
-o FILE as they read a report, and --prometheus DIR writes hc-diagnose.prom."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def diagnose() -> None:
    """Diagnose a hung or failed distributed job: odd ranks, failure class, evidence."""


@diagnose.command(epilog=EXIT_CODES)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@format_option
@click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the hc.diagnosis/2 JSON to this file (atomically).")
@prometheus_option
@config_option
def logs(paths: tuple[Path, ...], fmt: str, output: Path | None, prometheus_to: Path | None,
         config_path: Path | None) -> int:
    """Diagnose from saved files: DIR|FILE... of per-rank logs (NCCL_DEBUG files, job
    stdout/stderr with [rankN]:, srun -l or mpirun prefixes, torchrun output), py-spy dumps
    (text or --json, named rankN / py-spy-N), Flight Recorder dumps (nccl_trace_rank_N),
    torchrun error.json files, NCCL RAS replies and kernel logs.

    Prints one verdict: the class (dead-rank, collective-mismatch, shape-mismatch,
    stuck-rank, host-wedged, network, socket-fallback, init-failure, gpu-failure or
    unknown), a confidence, the odd ranks, the first failure by time, the stack groups,
    a per-rank table and the evidence lines (file:line). Files that cannot be read are
    listed with why; they never stop the diagnosis. The walk never enters /proc, /sys,
    /dev or another kernel pseudo file system, opens only regular files, and is bounded
    (20,000 files, 4 GiB); a long one shows its progress on stderr.
    """

    sink = Sink(fmt, output, prometheus_to, config_path)
    progress = TextProgress("hc diagnose logs")
    try:
        collected = collect_sources(list(paths), progress=progress)
    finally:
        progress.done()
    return sink.emit(build(collected, history=sink.history()))


class Sink:
    """Where a verdict goes: stdout (table or JSON), -o FILE (hc.diagnosis/2) and the
    Prometheus textfile (--prometheus DIR, else prometheus.textfile_dir where
    prometheus.commands names "diagnose"), the directory checked before the diagnosis
    starts. The config is read for the export and the run history; a diagnosis of saved
    files never needed one, so a config that cannot be read is a warning unless --config
    named it (then exit 4, as every command)."""

    def __init__(self, fmt: str, output: Path | None, prometheus_to: Path | None = None,
                 config_path: Path | None = None) -> None:

        self.fmt, self.output = fmt, output
        self.config = _config(config_path)
        self.prometheus: PrometheusTarget | None = None
        if prometheus_to is not None:
            self.prometheus = PrometheusTarget(check_directory(prometheus_to), True)
        elif self.config is not None:
            app = App(config_path)
            app.__dict__["config"] = self.config  # the one already read (App.config is a cached_property)
            self.prometheus = prometheus_dir(app, None, "diagnose")

    def history(self) -> HistoryLookup | None:
        """hc's run history for the culprits' hosts (diagnose/health.py): the runs that FAILed
        them in the job's window; None where no history is kept (or none recorded yet)."""
        if self.config is None:
            return None

        history = History.from_settings(self.config.main.history)
        if history is None or not history.path.exists():
            return None
        config = self.config
        return lambda hosts, start, end: history_events(history, hosts, start, end,
                                                        allowed=lambda host: _max_rise(config, host))

    def emit(self, verdict: Verdict) -> int:
        data = encode(verdict)
        if self.output is not None:
            write_atomic(self.output, data)
        lost = self._export(verdict)
        if self.fmt == "json":
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
        else:
            click.echo(render(verdict))
        if lost:  # the diagnosis stands, its export is missing: never exit 0
            click.echo(f"hc: error: --prometheus {lost}", err=True)
            return int(ExitCode.ERROR)
        return int(ExitCode.ERROR if verdict.cls == "unknown" else ExitCode.OK)

    def _export(self, verdict: Verdict) -> str:
        """Write the Prometheus textfile; why it failed where --prometheus asked ("" when written
        or not asked; the config's directory failing is a warning, as for hc node)."""
        if self.prometheus is None:
            return ""

        settings = self.config.main.prometheus if self.config is not None else None
        try:
            export(diagnosis_report(verdict), self.prometheus.directory, settings)
        except HcError as exc:
            if self.prometheus.explicit:
                return str(exc)
            click.echo(f"hc: warning: Prometheus textfile not written: {exc}", err=True)
        return ""


def history_events(history: History, hosts: Sequence[str], start: float, end: float, *,
                   allowed: Callable[[str], dict[str, int]] | None = None) -> list[HealthEvent]:
    """What the history says of `hosts` in [start, end], as health events: each run that
    FAILed a host, and each IB error counter that rose on one over the window (more than
    `allowed(host)[counter]`, 0 where unset)."""

    def stamp(t: float) -> str:
        return iso(dt.datetime.fromtimestamp(t, dt.timezone.utc))

    def epoch(text: str) -> float | None:
        when = parse_time(text)
        return when.timestamp() if when else None

    counters = frozenset(IbCounterLimits.__struct_fields__)
    with history:
        failures = history.node_failures(list(hosts), stamp(start), stamp(end))
        rises = [r for h in hosts for r in history.counter_rises(
            h, stamp(start), stamp(end), counters, allowed=allowed(h) if allowed else None,
            lookback=stamp(start - COUNTER_LOOKBACK_S))]
    out = [HealthEvent(host=r.node, kind="counters", source=f"hc history {history.path}", time=epoch(r.after_at),
                       text=f"{r.component} {r.name} rose from {r.before:g} ({r.before_at}) to {r.after:g} "
                            f"({r.after_at})",
                       said=f"had {r.name} of {r.component} rise by {r.after - r.before:g}") for r in rises]
    for f in failures:
        ids = list(dict.fromkeys(x.id for x in f.findings))
        when = parse_time(f.started_at)
        said = "; ".join(f"{x.id} {x.message}" for x in f.findings[:3]) or "FAIL"
        out.append(HealthEvent(host=f.node, kind="hc", text=f"hc {f.command}: {said}"[:500],
                               source=f"hc history {history.path} run {f.run_id}",
                               time=when.timestamp() if when else None, id=", ".join(ids[:3])))
    return out


COUNTER_LOOKBACK_S = 86400.0  # how far before a job a reading of its hosts' IB counters is a baseline


def _max_rise(config: Config, host: str) -> dict[str, int]:
    """The rise of each IB error counter the host's fabric allows during a test
    (bandwidth.counters_max_rise); {} where the host has no fabric here."""

    try:
        limits = config.for_node(host).limits.bandwidth.counters_max_rise
    except (HcError, ValueError):
        return {}
    return {k: v for k, v in msgspec.structs.asdict(limits).items() if v is not None}


def _config_named(config_path: Path | None) -> Config:
    """The config a command cannot do without (hc diagnose job|hosts: Slurm, SSH): its error is exit 4."""

    return load_config(config_path)


def _config(config_path: Path | None) -> Config | None:
    """The config (--config, $HC_CONFIG, the site's or the embedded one); None, with a
    warning, where it cannot be read and --config did not name it."""

    try:
        return load_config(config_path)
    except HcError as exc:
        if config_path is not None:
            raise
        click.echo(f"hc: warning: config not read ({exc}): no Prometheus export from it, no run history", err=True)
        return None


JOB_EXIT_CODES = """\b
Exit codes:
  0  diagnosed: a failure class other than unknown
  3  unknown: nothing conclusive (the verdict says why), or nothing live to
     diagnose: the job is pending or has ended (the one-line answer names
     `hc diagnose logs` with the job's output files), or Slurm did not answer
  4  usage or input error: no such job, scontrol/srun missing, -o not writable"""

_OUTPUT_HELP = "Also write the hc.diagnosis/2 JSON to this file (atomically)."
DEFAULT_NODE_TIMEOUT_S = 15.0
STARTUP_MARGIN_S = 10.0  # beyond a node's collection time: starting the helper there (ssh, an srun step)


def _live_options(fn: Callable) -> Callable:
    opts: list[Callable[[Callable], Callable]] = [
        click.option("--timeout", "timeout_s", type=number(0, MAX_TIMEOUT_S, low_open=True),
                     default=DEFAULT_NODE_TIMEOUT_S, show_default=True,
                     help="Seconds for one node's collection (py-spy of every rank); a node that has not answered "
                          "a few seconds after it is named as not answering. hc diagnose job: also the most "
                          "its question to Slurm (scontrol show job, retries included) may take."),
        click.option("--startup-timeout", "startup_s", type=number(0, MAX_TIMEOUT_S), default=STARTUP_MARGIN_S,
                     show_default=True,
                     help="Seconds, beyond --timeout, for starting the helper on a node (SSH, an srun step); "
                          "hc diagnose job/hosts only."),
        click.option("--ras", is_flag=True, help="Also ask NCCL's RAS service (127.0.0.1:28028) on each node."),
        click.option("--native", is_flag=True, help="py-spy --native: C/C++ frames too (slower)."),
        click.option("--samples", "samples", type=integer(1, MAX_SAMPLES), default=DEFAULT_SAMPLES,
                     show_default=True,
                     help="py-spy dumps of every rank over --window: a rank whose stack (or I/O) moves between "
                          "them is progressing, not stuck; 1 is a single look. While a rank is still, sampling "
                          f"goes on up to {DEFAULT_HORIZON_S:g} s (a straggler slower than the window)."),
        click.option("--window", "window_s", type=number(0, MAX_WINDOW_S), default=DEFAULT_WINDOW_S,
                     show_default=True, help="Seconds the samples are spread over (at least 1 is sampled)."),
        click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False), help=_OUTPUT_HELP),
        prometheus_option,
        format_option,
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


COLLECT_EXIT_CODES = """\b
Exit codes:
  0  ranks found (the NodeCollection JSON line on stdout)
  1  none found (the JSON line says why: no-ranks, and any torchrun agent
     whose ranks never started)
  4  usage error: an option out of range, --job/--pids/--local not one"""


@diagnose.command(epilog=COLLECT_EXIT_CODES)
@click.argument("pid_args", nargs=-1, type=pid(), metavar="[PID]...")
@click.option("--job", "job_id", metavar="ID", help="The Slurm job whose ranks to collect.")
@click.option("--pids", "by_pids", is_flag=True,
              help="The processes PID... (a torchrun agent stands for its ranks): --pids 11 12 13.")
@click.option("--local", is_flag=True,
              help="Every rank process on this machine (Python with RANK/SLURM_PROCID/..., this netns).")
@click.option("--timeout", "timeout_s", type=number(0, MAX_TIMEOUT_S, low_open=True), default=20.0,
              show_default=True, help="Seconds for the whole node.")
@click.option("--per-rank-timeout", "per_rank_timeout_s", type=number(0, MAX_TIMEOUT_S, low_open=True),
              default=10.0, show_default=True, help="Seconds for one rank's py-spy.")
@click.option("--parallel", type=integer(1, MAX_PARALLEL), default=8, show_default=True,
              help="py-spy dumps at once.")
@click.option("--py-spy", "py_spy", default="py-spy", show_default=True, help="The py-spy binary (name or path).")
@click.option("--no-stacks", is_flag=True, help="Do not run py-spy.")
@click.option("--native", is_flag=True, help="py-spy --native (C/C++ frames too).")
@click.option("--ras", is_flag=True, help="Also ask NCCL RAS (127.0.0.1, --ras-port).")
@click.option("--ras-port", type=integer(1, 65535), default=28028, show_default=True)
@click.option("--raw", is_flag=True, help="Keep py-spy's own JSON per rank (fixtures, bug reports; it holds "
                                          "the values of the ranks' local variables: py-spy --locals).")
@click.option("--any-netns", is_flag=True, help="Ranks in other network namespaces too.")
@click.option("--since", type=number(0, MAX_SINCE), default=None,
              help="The job's start (epoch seconds): kernel log events from then on [default: the earliest start "
                   "of the job's processes on this node].")
@click.option("--no-kernel", is_flag=True, help="Do not read the kernel log (OOM kills, Xid, links).")
@click.option("--samples", type=integer(1, MAX_SAMPLES), default=DEFAULT_SAMPLES, show_default=True,
              help="py-spy dumps of every rank over --window (1: a single look).")
@click.option("--window", "window_s", type=number(0, MAX_WINDOW_S), default=DEFAULT_WINDOW_S, show_default=True,
              help="Seconds the samples are spread over.")
@click.option("--horizon", "horizon_s", type=number(0, MAX_HORIZON_S), default=DEFAULT_HORIZON_S, show_default=True,
              help="Seconds sampling may go on while a rank is still (a straggler slower than the window).")
def collect(pid_args: tuple[int, ...], job_id: str | None, by_pids: bool, local: bool, timeout_s: float,
            per_rank_timeout_s: float, parallel: int, py_spy: str, no_stacks: bool, native: bool, ras: bool,
            ras_port: int, raw: bool, any_netns: bool, since: float | None, no_kernel: bool, samples: int,
            window_s: float, horizon_s: float) -> int:
    """The per-node helper of `hc diagnose job|hosts`: every rank process of a job on THIS
    node (--job ID | --pids PID... | --local) with its /proc state, py-spy --json stack,
    debug file paths and the kernel log of the job's window (--ras: NCCL RAS too), as one
    JSON line."""

    if sum((job_id is not None, by_pids, local)) != 1:
        raise click.UsageError("give exactly one of --job ID, --pids PID... and --local")
    if by_pids != bool(pid_args):
        raise click.UsageError("--pids takes the process ids: --pids PID..." if by_pids
                               else f"process ids ({pid_args[0]}) go with --pids")
    result = collect_here(job_id=job_id, pids=list(pid_args) or None, local=local, py_spy=None if no_stacks else py_spy,
                          timeout_s=timeout_s, same_netns=not any_netns, native=native,
                          per_rank_timeout_s=per_rank_timeout_s, parallel=parallel, ras=ras, ras_port=ras_port,
                          raw=raw, kernel=not no_kernel, since=since,
                          sampling=SamplingSpec(samples, window_s, max(window_s, horizon_s)))
    sys.stdout.buffer.write(result.to_json() + b"\n")
    sys.stdout.flush()
    return 0 if result.ranks else 1


@diagnose.command(epilog=EXIT_CODES)
@click.argument("pids", nargs=-1, type=pid())
@click.option("--local", is_flag=True, help="Every rank process on this machine (torchrun's children, mpirun's "
                                            "ranks: Python processes with RANK/SLURM_PROCID/... set).")
@config_option
@_live_options
def pids(pids: tuple[int, ...], local: bool, config_path: Path | None, timeout_s: float, startup_s: float, ras: bool,
         native: bool, samples: int, window_s: float, output: Path | None, prometheus_to: Path | None,
         fmt: str) -> int:
    """Diagnose a job running on this machine, no Slurm: PID... (a torchrun agent's pid
    stands for its ranks) or --local. Takes every rank's state (a stopped rank is state T)
    and py-spy --json stack (needs root or CAP_SYS_PTRACE; a refusal is reported with the
    fix), reads the debug files the ranks were given (NCCL_DEBUG_FILE, Flight Recorder
    dumps, torchelastic error files), names ranks the world size expects but that are gone,
    and prints one verdict as `hc diagnose logs` does."""

    if bool(pids) == local:
        raise click.UsageError("give PID... or --local (not both)")
    sink = Sink(fmt, output, prometheus_to, config_path)
    wanted = local_rank_pids() if local else list(pids)
    host = socket.gethostname()
    # torchrun agents given by pid whose ranks never started are read as --local reads them
    # (and only they: another job's ranks on this machine are not this job's), not as ranks
    agents = [] if local else find_launchers(host, py_spy="py-spy", timeout_s=timeout_s, only=set(wanted))
    if agents and len(agents) == len(set(wanted)):
        wanted = []
    if wanted:
        node = collect_node(pids=wanted, timeout_s=timeout_s, ras=ras, native=native, host=host,
                            sampling=_spec(samples, window_s))
    else:
        # none started: a torchrun agent still in its rendezvous says why
        launchers = find_launchers(host, py_spy="py-spy", timeout_s=timeout_s) if local else agents
        node = NodeCollection(host=host, collected_at=dt.datetime.now(dt.timezone.utc).isoformat(),
                              launchers=tuple(launchers),
                              errors=(CollectError("no-ranks", f"no Python rank process on {host} (RANK, "
                                                   "SLURM_PROCID, ... set)"),))
    what = "local ranks" if local else "pids " + " ".join(map(str, pids))
    live = evidence_from_nodes([node], job=f"{what} on {host}", fetch=local_fetcher,
                               rank_output_fetch=functools.partial(local_fetcher, max_bytes=MAX_RANK_OUTPUT_BYTES,
                                                                   tail=True))
    return sink.emit(build(live.collected, history=sink.history()))


def _spec(samples: int, window_s: float) -> SamplingSpec:
    return SamplingSpec(samples, window_s, max(window_s, DEFAULT_HORIZON_S))


def _gather(nodes: list[str], run: Callable[[str, list[str], float], CommandResult], args: list[str],
            timeout_s: float, parallel: int, startup_s: float = STARTUP_MARGIN_S) -> list[NodeAnswer]:
    """The helper on every node, at most `parallel` at once, each bounded: a node that does
    not answer in time (or answers nonsense) is a NodeAnswer with why, never a hang."""

    limit = timeout_s + startup_s

    def one(node: str) -> NodeAnswer:
        r = run(node, args, limit)
        col = decode_node(node, r.stdout)
        if col is not None:
            return NodeAnswer(node, col, seconds=round(r.duration_s, 2))
        if r.timed_out:
            why = f"no answer within {limit:g} s"
        elif r.not_found:
            why = f"{r.argv[0] if r.argv else 'command'} not found"
        else:
            said = (r.stderr or r.stdout or r.error or "").strip()
            why = f"exit {r.returncode}: {clip(said.splitlines()[-1] if said else 'no output', 300)}"
        return NodeAnswer(node, None, why, round(r.duration_s, 2))

    results = fan_out(nodes, one, max_parallel=max(1, parallel), timeout_s=limit + 5.0,
                      on_timeout=lambda n: NodeAnswer(n, None, f"no answer within {limit + 5.0:g} s"))
    return [results[n] for n in dict.fromkeys(nodes)]


def _fetcher(run: Callable[[str, list[str], float], CommandResult], tail: bool = False,
             max_bytes: int | None = None) -> Callable[[str, list[str]], dict]:
    """Read files on a node through run: their first bytes (debug files), or their last
    (tail: a job's output); max_bytes of each, else the kind's own bound."""

    size = max_bytes or (MAX_OUTPUT_BYTES if tail else MAX_DEBUG_BYTES)

    def fetch(host: str, paths: list[str]) -> dict:
        r = run(host, fetch_argv(paths, size, tail=tail), 20.0)
        if r.returncode != 0 and not r.stdout:
            why = "no answer" if r.timed_out else (r.stderr or r.error or f"exit {r.returncode}").strip()[:200]
            return {p: f"fetch failed: {why}" for p in paths}
        return parse_fetched(r.stdout, paths)

    return fetch


def _ssh_runner(settings: object) -> tuple[Callable[[str, list[str], float], CommandResult], Callable[[], None]]:
    """run(node, argv, timeout) over hc's SSH runner, one connection per node, and close()."""

    conns: dict[str, SshConnection] = {}
    lock = threading.Lock()

    def run(node: str, argv: list[str], timeout_s: float) -> CommandResult:
        try:
            with lock:
                conn = conns.get(node) or conns.setdefault(node, SshConnection(node, settings))  # type: ignore[arg-type]
        except SshError as exc:
            return CommandResult(tuple(argv), None, "", "", 0.0, error=exc.message)
        return conn.run(tuple(argv), timeout_s=timeout_s)

    def close() -> None:
        for c in conns.values():
            c.close()

    return run, close


def _live_verdict(nodes: list[str], run: Callable[[str, list[str], float], CommandResult], helper: list[str],
                  label: str, timeout_s: float, parallel: int, startup_s: float,
                  outputs: Sequence[tuple[str, str]] = (), *, history: HistoryLookup | None = None,
                  started: float | None = None) -> Verdict:

    results = _gather(nodes, run, helper, timeout_s, parallel, startup_s)
    # each rank's own stdout/stderr file, read on its node as `hc diagnose pids` reads it
    # here: torch's warnings and a rank's traceback are only there when it prints to a file
    live = evidence_from_nodes(results, job=label, fetch=_fetcher(run), outputs=outputs,
                               output_fetch=_fetcher(run, tail=True),
                               rank_output_fetch=_fetcher(run, tail=True, max_bytes=MAX_RANK_OUTPUT_BYTES))
    ev = live.collected.evidence
    if ev.window_start is None:  # no node read its kernel log: the job's start as Slurm says it
        ev.window_start = started
    return build(live.collected, history=history)


@diagnose.command(epilog=JOB_EXIT_CODES)
@click.argument("job_id")
@click.option("--via", type=click.Choice(["srun", "ssh"]), default="srun", show_default=True,
              help="How to reach the job's nodes: a step of the job (srun --overlap --jobid, no GPU binding) or "
                   "SSH (the config's ssh settings; ssh.remote_hc runs hc there).")
@click.option("--parallel", type=integer(1, MAX_PARALLEL), default=None,
              help="Nodes at once [default: ssh.max_parallel].")
@config_option
@_live_options
def job(job_id: str, via: str, parallel: int | None, config_path: Path | None, timeout_s: float, startup_s: float,
        ras: bool, native: bool, samples: int, window_s: float, output: Path | None, prometheus_to: Path | None,
        fmt: str) -> int:
    """Diagnose a running Slurm job: finds its nodes (scontrol show job), runs `hc diagnose
    collect --job ID` on every node at once (each bounded by --timeout; a node that does not
    answer is named, never waited for), takes every rank's state and py-spy stack, reads the
    debug files the ranks were given, and prints one verdict as `hc diagnose logs` does.
    A job that is pending or has ended is answered in one line (for an ended job: the
    `hc diagnose logs` command for its output files). Each node also reads its kernel log
    from the job's start: OOM kills, Xid and HCA link events in the job's window. A batch
    job's own stdout/stderr (scontrol's StdOut/StdErr) are read on its batch host, their
    last 8 MiB: what a rank printed as it died (a gloo size mismatch, a traceback) is there."""

    if not job_id.replace("_", "").replace("+", "").isdigit():
        raise click.BadParameter(f"{job_id!r} is not a Slurm job id", param_hint="JOB_ID")
    sink = Sink(fmt, output, prometheus_to, config_path)
    cfg = (sink.config or _config_named(config_path)).main
    # --timeout bounds the question to Slurm too, retries included: with Slurm's own
    # defaults (command_timeout_s x retries) a hung scontrol would hold hc for 47 s
    shown = SlurmClient(cfg.slurm, deadline=time.monotonic() + timeout_s).show_job(job_id)
    if not shown.ok:
        if shown.not_found:
            click.echo(f"hc diagnose job: {cfg.slurm.scontrol} not found: no Slurm here", err=True)
            return int(ExitCode.BAD_INPUT)
        if "Invalid job id" in shown.message or "does not exist" in shown.message:
            click.echo(f"slurm job {job_id}: no such job (it never existed, or ended long enough ago that Slurm "
                       "forgot it): for a finished job, run hc diagnose logs on what it wrote")
            return int(ExitCode.BAD_INPUT)
        click.echo(f"slurm job {job_id}: Slurm did not answer: {shown.message}")
        return int(ExitCode.ERROR)
    info = parse_job(shown.message, job_id)
    if info is None:
        click.echo(f"slurm job {job_id}: no such job in scontrol's answer")
        return int(ExitCode.BAD_INPUT)
    if not info.running or not info.nodes:
        if info.state == "PENDING" or not info.nodes:
            click.echo(f"slurm job {job_id} is {info.state or 'not running'}"
                       + (f" ({info.reason})" if info.reason and info.reason != "None" else "")
                       + ": nothing runs yet to diagnose")
        else:
            files = " ".join(info.output_files)
            click.echo(f"slurm job {job_id} has ended ({info.state}"
                       + (f" at {info.end}" if info.end and info.end != "Unknown" else "") + "): nothing live to "
                       + "diagnose; diagnose what it left: hc diagnose logs "
                       + (f"{files} <its per-rank logs>" if files else "<its output and per-rank logs>"))
        return int(ExitCode.ERROR)
    nodes = expand([info.nodes])
    helper_args = collect_args(job_id, timeout_s=timeout_s, ras=ras, native=native, since=info.start_epoch,
                               sampling=_spec(samples, window_s))
    close: Callable[[], None] = lambda: None  # noqa: E731
    if via == "srun":
        env_hc = cfg.slurm.remote_hc

        def run(node: str, argv: list[str], t: float) -> CommandResult:
            cmd = remote_argv(env_hc, argv) if argv[:1] == ["diagnose"] else argv
            return run_command(srun_collect_argv(cfg.slurm.srun, job_id, node, cmd), timeout_s=t)
    else:
        ssh_run, close = _ssh_runner(cfg.ssh)

        def run(node: str, argv: list[str], t: float) -> CommandResult:
            cmd = remote_argv(cfg.ssh.remote_hc, argv) if argv[:1] == ["diagnose"] else argv
            return ssh_run(node, cmd, t)
    try:
        # a batch job's stdout/stderr, read on its batch host: what a rank printed as it died
        outputs = [(info.batch_host, p) for p in info.output_files] if info.batch_host else []
        verdict = _live_verdict(nodes, run, helper_args, f"slurm job {job_id} ({info.nodes})", timeout_s,
                                parallel or cfg.ssh.max_parallel, startup_s, outputs, history=sink.history(),
                                started=info.start_epoch)
    finally:
        close()
    return sink.emit(verdict)


@diagnose.command(epilog=EXIT_CODES)
@click.argument("hostlist", shell_complete=complete_nodes)
@click.option("--parallel", type=integer(1, MAX_PARALLEL), default=None,
              help="Nodes at once [default: ssh.max_parallel].")
@config_option
@_live_options
def hosts(hostlist: str, parallel: int | None, config_path: Path | None, timeout_s: float, startup_s: float,
          ras: bool, native: bool, samples: int, window_s: float, output: Path | None, prometheus_to: Path | None,
          fmt: str) -> int:
    """Diagnose a job launched without Slurm across HOSTLIST (torchrun on each host, mpirun):
    runs `hc diagnose collect --local` on every host over SSH (ssh.remote_hc) and prints one
    verdict: every rank process found there is taken as the job's (run it where one job runs)."""

    sink = Sink(fmt, output, prometheus_to, config_path)
    cfg = (sink.config or _config_named(config_path)).main
    nodes = expand([hostlist])
    ssh_run, close = _ssh_runner(cfg.ssh)
    args = ["diagnose", "collect", "--local", "--timeout", f"{timeout_s:g}", *(["--ras"] if ras else []),
            *(["--native"] if native else []), *sampling_args(_spec(samples, window_s))]

    def run(node: str, argv: list[str], t: float) -> CommandResult:
        return ssh_run(node, remote_argv(cfg.ssh.remote_hc, argv) if argv[:1] == ["diagnose"] else argv, t)

    try:
        verdict = _live_verdict(nodes, run, args, f"hosts {hostlist}", timeout_s, parallel or cfg.ssh.max_parallel,
                                startup_s, history=sink.history())
    finally:
        close()
    return sink.emit(verdict)
