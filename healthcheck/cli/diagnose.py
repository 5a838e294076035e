"""`hc diagnose`: the odd rank, the failure class and the evidence of a hung or failed
distributed job. `logs` reads what a job saved; `job` (Slurm) and `pids` (one machine)
collect the same evidence live and plug into this group as further subcommands."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from healthcheck.cli.app import config_option, format_option
from healthcheck.cli.completion import complete_nodes
from healthcheck.cli.params import integer, number, pid
from healthcheck.diagnose import MAX_PARALLEL, MAX_TIMEOUT_S
from healthcheck.diagnose.sampling import (
    DEFAULT_HORIZON_S,
    DEFAULT_SAMPLES,
    DEFAULT_WINDOW_S,
    MAX_SAMPLES,
    MAX_WINDOW_S,
    SamplingSpec,
)

if TYPE_CHECKING:
    from healthcheck.diagnose.live import NodeResult
    from healthcheck.diagnose.verdict import Verdict
    from healthcheck.runners.base import CommandResult

EXIT_CODES = """\b
Exit codes:
  0  diagnosed: a failure class other than unknown, or progressing (live:
     every rank's stack moved while it was sampled: nothing hangs)
  3  unknown: nothing conclusive in the input (the verdict says why)
  4  usage or input error: a path that does not exist, -o not writable"""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def diagnose() -> None:
    """Diagnose a hung or failed distributed job: odd ranks, failure class, evidence."""


@diagnose.command(epilog=EXIT_CODES)
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@format_option
@click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the hc.diagnosis/1 JSON to this file (atomically).")
def logs(paths: tuple[Path, ...], fmt: str, output: Path | None) -> int:
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
    from healthcheck.cli.progress import TextProgress
    from healthcheck.diagnose.sources import collect
    from healthcheck.diagnose.verdict import build

    progress = TextProgress("hc diagnose logs")
    try:
        collected = collect(list(paths), progress=progress)
    finally:
        progress.done()
    return _emit(build(collected), fmt, output)


def _emit(verdict: Verdict, fmt: str, output: Path | None) -> int:
    import sys

    from healthcheck.core.atomic import write_atomic
    from healthcheck.core.errors import ExitCode
    from healthcheck.diagnose.verdict import encode, render

    data = encode(verdict)
    if output is not None:
        write_atomic(output, data)
    if fmt == "json":
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        click.echo(render(verdict))
    return int(ExitCode.ERROR if verdict.cls == "unknown" else ExitCode.OK)


JOB_EXIT_CODES = """\b
Exit codes:
  0  diagnosed: a failure class other than unknown, or progressing (every
     rank's stack moved while it was sampled: nothing hangs)
  3  unknown: nothing conclusive (the verdict says why), or nothing live to
     diagnose: the job is pending or has ended (the one-line answer names
     `hc diagnose logs` with the job's output files), or Slurm did not answer
  4  usage or input error: no such job, scontrol/srun missing, -o not writable"""

_OUTPUT_HELP = "Also write the hc.diagnosis/1 JSON to this file (atomically)."
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
                          "them is progressing, not stuck; 1 is a single look. While a rank has not moved, "
                          f"sampling goes on up to {DEFAULT_HORIZON_S:g} s (a straggler slower than the window)."),
        click.option("--window", "window_s", type=number(0, MAX_WINDOW_S), default=DEFAULT_WINDOW_S,
                     show_default=True, help="Seconds the samples are spread over."),
        click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False), help=_OUTPUT_HELP),
        format_option,
    ]
    for opt in reversed(opts):
        fn = opt(fn)
    return fn


@diagnose.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                    "help_option_names": []}, add_help_option=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def collect(args: tuple[str, ...]) -> int:
    """The per-node helper of `hc diagnose job|hosts`: every rank process of a job on THIS
    node (--job ID | --pids PID... | --local) with its /proc state, py-spy --json stack and
    debug file paths (--ras: NCCL RAS too), as one JSON line (--help: its options).
    Exit 0: ranks found, 1: none, 2: usage."""
    from healthcheck.diagnose.collect import main

    return main(list(args))


@diagnose.command(epilog=EXIT_CODES)
@click.argument("pids", nargs=-1, type=pid())
@click.option("--local", is_flag=True, help="Every rank process on this machine (torchrun's children, mpirun's "
                                            "ranks: Python processes with RANK/SLURM_PROCID/... set).")
@_live_options
def pids(pids: tuple[int, ...], local: bool, timeout_s: float, startup_s: float, ras: bool, native: bool,
         samples: int, window_s: float, output: Path | None, fmt: str) -> int:
    """Diagnose a job running on this machine, no Slurm: PID... (a torchrun agent's pid
    stands for its ranks) or --local. Takes every rank's state (a stopped rank is state T)
    and py-spy --json stack (needs root or CAP_SYS_PTRACE; a refusal is reported with the
    fix), reads the debug files the ranks were given (NCCL_DEBUG_FILE, Flight Recorder
    dumps, torchelastic error files), names ranks the world size expects but that are gone,
    and prints one verdict as `hc diagnose logs` does."""
    import datetime as dt
    import functools
    import socket

    from healthcheck.diagnose.collect import (
        CollectError,
        NodeCollection,
        collect_node,
        find_launchers,
        local_rank_pids,
    )
    from healthcheck.diagnose.live import MAX_RANK_OUTPUT_BYTES, evidence_from_nodes, local_fetcher
    from healthcheck.diagnose.verdict import build

    if bool(pids) == local:
        raise click.UsageError("give PID... or --local (not both)")
    wanted = local_rank_pids() if local else list(pids)
    host = socket.gethostname()
    if wanted:
        node = collect_node(pids=wanted, timeout_s=timeout_s, ras=ras, native=native, host=host,
                            sampling=_spec(samples, window_s))
    else:
        # none started: a torchrun agent still in its rendezvous says why
        launchers = find_launchers(host, py_spy="py-spy", timeout_s=timeout_s) if local else []
        node = NodeCollection(host=host, collected_at=dt.datetime.now(dt.timezone.utc).isoformat(),
                              launchers=tuple(launchers),
                              errors=(CollectError("no-ranks", f"no Python rank process on {host} (RANK, "
                                                   "SLURM_PROCID, ... set)"),))
    what = "local ranks" if local else "pids " + " ".join(map(str, pids))
    live = evidence_from_nodes([node], job=f"{what} on {host}", fetch=local_fetcher,
                               rank_output_fetch=functools.partial(local_fetcher, max_bytes=MAX_RANK_OUTPUT_BYTES,
                                                                   tail=True))
    return _emit(build(live.collected), fmt, output)


def _spec(samples: int, window_s: float) -> SamplingSpec:
    return SamplingSpec(samples, window_s, max(window_s, DEFAULT_HORIZON_S))


def _gather(nodes: list[str], run: Callable[[str, list[str], float], CommandResult], args: list[str],
            timeout_s: float, parallel: int, startup_s: float = STARTUP_MARGIN_S) -> list[NodeResult]:
    """The helper on every node, at most `parallel` at once, each bounded: a node that does
    not answer in time (or answers nonsense) is a NodeResult with why, never a hang."""
    from healthcheck.core.inputs import clip
    from healthcheck.diagnose.live import NodeResult, decode_node
    from healthcheck.runners.fanout import fan_out

    limit = timeout_s + startup_s

    def one(node: str) -> NodeResult:
        r = run(node, args, limit)
        col = decode_node(node, r.stdout)
        if col is not None:
            return NodeResult(node, col, seconds=round(r.duration_s, 2))
        if r.timed_out:
            why = f"no answer within {limit:g} s"
        elif r.not_found:
            why = f"{r.argv[0] if r.argv else 'command'} not found"
        else:
            said = (r.stderr or r.stdout or r.error or "").strip()
            why = f"exit {r.returncode}: {clip(said.splitlines()[-1] if said else 'no output', 300)}"
        return NodeResult(node, None, why, round(r.duration_s, 2))

    results = fan_out(nodes, one, max_parallel=max(1, parallel), timeout_s=limit + 5.0,
                      on_timeout=lambda n: NodeResult(n, None, f"no answer within {limit + 5.0:g} s"))
    return [results[n] for n in dict.fromkeys(nodes)]


def _fetcher(run: Callable[[str, list[str], float], CommandResult],
             tail: bool = False) -> Callable[[str, list[str]], dict]:
    """Read files on a node through run: their first bytes (debug files), or their last
    (tail: a job's output)."""
    from healthcheck.diagnose.live import MAX_DEBUG_BYTES, MAX_OUTPUT_BYTES, fetch_argv, parse_fetched

    def fetch(host: str, paths: list[str]) -> dict:
        r = run(host, fetch_argv(paths, MAX_OUTPUT_BYTES if tail else MAX_DEBUG_BYTES, tail=tail), 20.0)
        if r.returncode != 0 and not r.stdout:
            why = "no answer" if r.timed_out else (r.stderr or r.error or f"exit {r.returncode}").strip()[:200]
            return {p: f"fetch failed: {why}" for p in paths}
        return parse_fetched(r.stdout, paths)

    return fetch


def _ssh_runner(settings: object) -> tuple[Callable[[str, list[str], float], CommandResult], Callable[[], None]]:
    """run(node, argv, timeout) over hc's SSH runner, one connection per node, and close()."""
    import threading

    from healthcheck.runners.base import CommandResult
    from healthcheck.runners.ssh import SshConnection, SshError

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
                  outputs: Sequence[tuple[str, str]] = ()) -> Verdict:
    from healthcheck.diagnose.live import evidence_from_nodes
    from healthcheck.diagnose.verdict import build

    results = _gather(nodes, run, helper, timeout_s, parallel, startup_s)
    live = evidence_from_nodes(results, job=label, fetch=_fetcher(run), outputs=outputs,
                               output_fetch=_fetcher(run, tail=True))
    return build(live.collected)


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
        ras: bool, native: bool, samples: int, window_s: float, output: Path | None, fmt: str) -> int:
    """Diagnose a running Slurm job: finds its nodes (scontrol show job), runs `hc diagnose
    collect --job ID` on every node at once (each bounded by --timeout; a node that does not
    answer is named, never waited for), takes every rank's state and py-spy stack, reads the
    debug files the ranks were given, and prints one verdict as `hc diagnose logs` does.
    A job that is pending or has ended is answered in one line (for an ended job: the
    `hc diagnose logs` command for its output files). Each node also reads its kernel log
    from the job's start: OOM kills, Xid and HCA link events in the job's window. A batch
    job's own stdout/stderr (scontrol's StdOut/StdErr) are read on its batch host, their
    last 8 MiB: what a rank printed as it died (a gloo size mismatch, a traceback) is there."""
    import time

    from healthcheck.actions.slurm import SlurmClient
    from healthcheck.core.config.loader import load_config
    from healthcheck.core.errors import ExitCode
    from healthcheck.core.nodes import expand
    from healthcheck.diagnose.live import collect_args, parse_job, remote_argv, srun_collect_argv
    from healthcheck.runners.local import run_command

    if not job_id.replace("_", "").replace("+", "").isdigit():
        raise click.BadParameter(f"{job_id!r} is not a Slurm job id", param_hint="JOB_ID")
    cfg = load_config(config_path).main
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
                                parallel or cfg.ssh.max_parallel, startup_s, outputs)
    finally:
        close()
    return _emit(verdict, fmt, output)


@diagnose.command(epilog=EXIT_CODES)
@click.argument("hostlist", shell_complete=complete_nodes)
@click.option("--parallel", type=integer(1, MAX_PARALLEL), default=None,
              help="Nodes at once [default: ssh.max_parallel].")
@config_option
@_live_options
def hosts(hostlist: str, parallel: int | None, config_path: Path | None, timeout_s: float, startup_s: float,
          ras: bool, native: bool, samples: int, window_s: float, output: Path | None, fmt: str) -> int:
    """Diagnose a job launched without Slurm across HOSTLIST (torchrun on each host, mpirun):
    runs `hc diagnose collect --local` on every host over SSH (ssh.remote_hc) and prints one
    verdict: every rank process found there is taken as the job's (run it where one job runs)."""
    from healthcheck.core.config.loader import load_config
    from healthcheck.core.nodes import expand
    from healthcheck.diagnose.live import remote_argv, sampling_args

    cfg = load_config(config_path).main
    nodes = expand([hostlist])
    ssh_run, close = _ssh_runner(cfg.ssh)
    args = ["diagnose", "collect", "--local", "--timeout", f"{timeout_s:g}", *(["--ras"] if ras else []),
            *(["--native"] if native else []), *sampling_args(_spec(samples, window_s))]

    def run(node: str, argv: list[str], t: float) -> CommandResult:
        return ssh_run(node, remote_argv(cfg.ssh.remote_hc, argv) if argv[:1] == ["diagnose"] else argv, t)

    try:
        verdict = _live_verdict(nodes, run, args, f"hosts {hostlist}", timeout_s, parallel or cfg.ssh.max_parallel,
                                startup_s)
    finally:
        close()
    return _emit(verdict, fmt, output)
