"""Bandwidth tests on this node: nccl-tests and hc's torch sweep, each run alone.

Both providers are exclusive: they run after every concurrent probe has finished, one at
a time, because a collective must not share the GPUs with NVML probes or with each
other. Each test runs under hc's own timeout (nccl-tests' -T does not cover NCCL
start-up, where most hangs are), and is run again while it falls short of a floor, up
to the fabric's `repeats`; the attempts are the fact, the check judges them.

A node with no GPU has nothing to test (`gpus == 0`, the checks SKIP); a tool that is
missing where the fabric says to look is hc.E001, never a verdict on the node.

nccl-tests >= 2.17.3 also writes its results as JSON with `-J FILE` (exact where the table
rounds: a one-rank in-place algbw prints as `1e+06`). Whether a binary can is asked once
per process (`<binary> -h` lists `-J,--output_file`); where it can, the run writes to a
file of hc's on the node (mktemp here, /tmp/hc-nccl-tests-<uuid>.json over SSH, removed
afterwards) and the samples are read from it; a file that is missing, empty or cut (a
run that died leaves it unclosed) leaves the text table as the source. The text is the
evidence either way, and the failures, rank count and hang are always read from it.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from healthcheck.bandwidth.judge import floors, short_of, size_range
from healthcheck.core import typed
from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext, ProbeError, ProbeKind, provides
from healthcheck.core.units import format_size, parse_size
from healthcheck.parsers.bandwidth_common import BandwidthAttempt, BandwidthRun, BandwidthRuns, BandwidthSample
from healthcheck.parsers.nccl_tests import CUT_END, parse_nccl_tests
from healthcheck.runners.launch import launch, torchrun_launch

NVIDIA_GPUS = "/proc/driver/nvidia/gpus"  # one directory per GPU the driver bound
IB_LOOPBACK_ENV = {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1", "NCCL_NVLS_ENABLE": "0"}
TAIL = 8000  # characters of a run's output kept as evidence
HELP_TIMEOUT_S = 10.0  # `<collective>_perf -h`: does it know -J?
JSON_MAX = 4 << 20  # bytes of a -J file read back; a longer one is cut, so the text table is read
# (transport, node or None, binary) -> whether it supports -J, for this process
_JSON_SUPPORT: dict[tuple[str, str | None, str], bool] = {}
_JSON_SUPPORT_LOCK = threading.Lock()


def gpu_count(ctx: ProbeContext) -> int:
    """GPUs the NVIDIA driver bound on this node (0 without the driver)."""
    if ctx.transport != "local":  # over SSH: list the node's directory, not ours
        result = ctx.runner.run(("sh", "-c", f"ls -1 {NVIDIA_GPUS} 2>/dev/null || true"), timeout_s=ctx.timeout_s)
        if not result.ok:
            raise ProbeError(ProbeKind.FAILED, f"listing {NVIDIA_GPUS} on the node failed", result.stderr or None)
        return len([line for line in result.stdout.splitlines() if line.strip()])
    try:
        return sum(1 for _ in ctx.path(NVIDIA_GPUS).iterdir())
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise ProbeError(ProbeKind.UNREADABLE, f"{NVIDIA_GPUS}: {exc.strerror or exc}") from None


def _measured_sizes(bw: Any) -> list[str]:
    sizes = list(bw.sizes)
    for collective in bw.collectives:
        for scope in ("single_node", "ib_loopback"):
            sizes += [f.size_text for f in floors(bw, collective, scope)]
    return sizes


def nccl_binary(bin_dir: str | None, collective: str) -> str:
    """The nccl-tests program for `collective`: in bin_dir, else on the PATH."""
    name = f"{collective}_perf"
    return str(Path(bin_dir) / name) if bin_dir else name


def _missing(bin_dir: str | None, collective: str) -> ProbeError:
    where = bin_dir or f"$PATH ({os.environ.get('PATH', '')})"
    return ProbeError(ProbeKind.MISSING, f"{collective}_perf (nccl-tests) not found in {where}; "
                      "set bandwidth.nccl_tests.bin_dir or install nccl-tests")


def _supports_json(ctx: ProbeContext, binary: str, env: dict[str, str]) -> bool:
    """Whether `binary` writes JSON with -J (its `-h` lists --output_file); asked once per process."""
    key = (ctx.transport, getattr(ctx.runner, "node", None), binary)
    with _JSON_SUPPORT_LOCK:
        if key in _JSON_SUPPORT:
            return _JSON_SUPPORT[key]
    result = ctx.runner.run((binary, "-h"), timeout_s=HELP_TIMEOUT_S, env=env)
    if result.not_found or result.error:  # not known: the run itself says what is wrong; ask again next time
        return False
    supported = "--output_file" in result.stdout + result.stderr
    with _JSON_SUPPORT_LOCK:
        _JSON_SUPPORT[key] = supported
    return supported


def _json_file(ctx: ProbeContext) -> str:
    """A new file for -J on the node: mktemp here, a unique name under /tmp over SSH."""
    if ctx.transport == "local":
        fd, path = tempfile.mkstemp(prefix="hc-nccl-tests-", suffix=".json")
        os.close(fd)
        return path
    return f"/tmp/hc-nccl-tests-{uuid.uuid4().hex}.json"


def _take_json(ctx: ProbeContext, path: str) -> str:
    """The -J file's text (at most JSON_MAX bytes; "" when unreadable), and the file removed."""
    if ctx.transport == "local":
        try:
            with open(path, "rb") as f:
                return f.read(JSON_MAX).decode(errors="replace")
        except OSError:
            return ""
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
    result = ctx.runner.run(("sh", "-c", 'head -c "$1" "$0" 2>/dev/null; rm -f "$0"', path, str(JSON_MAX)),
                            timeout_s=HELP_TIMEOUT_S)
    return result.stdout if result.ok else ""


def _with_json(attempt: BandwidthAttempt, text: str, collective: str) -> BandwidthAttempt:
    """The attempt's samples (and wrong, out of bounds, last size) from the -J file where it
    parses with results; the attempt as read from the text otherwise."""

    if not text.strip() or attempt.hung:
        return attempt
    try:
        run = parse_nccl_tests(text, collective=collective)
    except ParseError:  # cut (the run died) or not nccl-tests' JSON: the table stands
        return attempt
    samples = tuple(s for s in run.samples if s.size_bytes > 0)
    if run.format != "json" or not samples:
        return attempt
    wrong = sum(s.wrong for s in samples if s.wrong is not None) if any(s.wrong is not None for s in samples) else None
    return msgspec.structs.replace(attempt, samples=samples, last_size_bytes=run.last_size_bytes, wrong=wrong,
                                   out_of_bounds=run.out_of_bounds if run.out_of_bounds is not None
                                   else attempt.out_of_bounds)


def _nccl_attempt(ctx: ProbeContext, collective: str, scope: str, gpus: int, size_args: tuple[int, int, int],
                  timeout_s: float) -> BandwidthAttempt:
    """One nccl-tests run: -w, -n, -c 1 (check results) and -a 3 (the slowest rank's time), and
    -J FILE where the binary supports it (samples from the JSON, the text table otherwise)."""
    settings = ctx.limits.bandwidth.nccl_tests
    lo, hi, factor = size_args
    argv: tuple[str, ...] = (nccl_binary(settings.bin_dir, collective), "-b", str(lo), "-e", str(hi), "-f",
                             str(factor), "-g", str(gpus), "-w", str(settings.warmup), "-n", str(settings.iters),
                             "-c", "1", "-a", "3")
    env = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **settings.env, **(IB_LOOPBACK_ENV if scope == "ib_loopback" else {})}
    json_path = _json_file(ctx) if _supports_json(ctx, argv[0], env) else None
    if json_path:
        argv += ("-J", json_path)
    try:
        result = ctx.runner.run(argv, timeout_s=timeout_s, env=env)
    finally:
        json_text = _take_json(ctx, json_path) if json_path else ""
    if result.not_found:
        raise _missing(settings.bin_dir, collective)
    if result.error:
        raise ProbeError(ProbeKind.FAILED, f"{argv[0]}: {result.error}")
    text = result.stdout + ("\n" + result.stderr if result.stderr else "")
    attempt = nccl_attempt_from_text(text, collective, argv=argv, env=env, expected_ranks=gpus,
                                     duration_s=round(result.duration_s, 3), returncode=result.returncode,
                                     hung=result.timed_out, output_tail=text[-TAIL:])
    return _with_json(attempt, json_text, collective)


def nccl_attempt_from_text(text: str, collective: str, **common: Any) -> BandwidthAttempt:
    """What one nccl-tests run printed, read into an attempt (here on one node, and between
    nodes in orchestrate/pairsweep/tools.py): samples, wrong elements, the tool's failure lines,
    and why a run says nothing (the launcher refused, lone ranks, a rank count other than
    `expected_ranks`). `common`: the attempt's argv, env, expected_ranks, duration_s,
    returncode, hung and output_tail, as BandwidthAttempt names them."""

    expected = common.get("expected_ranks", 0)
    try:
        run = parse_nccl_tests(text, collective=collective)
    except ParseError as exc:
        if common.get("hung"):  # hung before it printed anything: still a hang
            return BandwidthAttempt(**common)
        return BandwidthAttempt(**common, misconfigured=f"nccl-tests printed nothing hc understands ({exc})")
    samples = tuple(s for s in run.samples if s.size_bytes > 0)
    wrong = sum(s.wrong for s in samples if s.wrong is not None) if any(s.wrong is not None for s in samples) else None
    misconfigured = None
    if run.launcher_error:
        misconfigured = f"the launcher refused: {run.launcher_error}"
    elif run.incomplete not in (None, CUT_END) and not samples:  # `hc parse` reads a footer alone; a run's
        # verdict needs its rows (a run that stopped inside a row is a hang, or a failure, with no rows yet)
        misconfigured = f"nccl-tests printed {run.incomplete}"
    elif run.lone_ranks:
        misconfigured = "every rank ran alone (a binary built without MPI launched by mpirun): busbw 0 means nothing"
    elif run.rank_count and run.rank_count != expected:
        misconfigured = f"{run.rank_count} ranks reported, {expected} expected (one per GPU)"
    failures = tuple(f"{f.host + ': ' if f.host else ''}{f.kind}: {f.message}"[:500] for f in run.failures)
    return BandwidthAttempt(**common, samples=samples, ranks=run.rank_count, last_size_bytes=run.last_size_bytes,
                            wrong=wrong, out_of_bounds=run.out_of_bounds, failures=failures,
                            misconfigured=misconfigured)


def _conclusive(attempt: BandwidthAttempt) -> bool:
    """Whether running again could change the verdict (only a plain shortfall can)."""
    return bool(attempt.hung or attempt.failures or attempt.misconfigured or (attempt.wrong or 0) > 0
                or (attempt.out_of_bounds or 0) > 0)


def _repeat(ctx: ProbeContext, collective: str, scope: str, deadline: float, run_once: Any) -> BandwidthRun:
    """Run a test, again while it falls short of a floor, up to the fabric's repeats."""
    bw = ctx.limits.bandwidth
    wanted = floors(bw, collective, scope)
    attempts: list[BandwidthAttempt] = []
    for _ in range(bw.repeats):
        left = deadline - time.monotonic()
        if left < 1 and attempts:
            break
        attempt = run_once(max(left, 1.0))
        attempts.append(attempt)
        if _conclusive(attempt) or not short_of(attempt.samples, collective, wanted):
            break
    return BandwidthRun(collective, scope, tuple(attempts))


@provides("nccl_tests", "ssh", exclusive=True)
@provides("nccl_tests", exclusive=True)
def nccl_tests(ctx: ProbeContext) -> BandwidthRuns:
    """nccl-tests on every GPU of the node, then with NVLink/SHM off (IB loopback)."""
    bw = ctx.limits.bandwidth
    gpus = gpu_count(ctx)
    if not bw.nccl_tests.enabled or gpus < 2:  # one GPU: no collective within the node moves data
        return BandwidthRuns("nccl-tests", gpus)
    deadline = time.monotonic() + ctx.timeout_s
    size_args = size_range(_measured_sizes(bw))
    scopes = ("single_node", "ib_loopback") if bw.nccl_tests.ib_loopback else ("single_node",)
    runs = []
    for collective in bw.collectives:
        for scope in scopes:
            def once(left: float, collective: str = collective, scope: str = scope) -> BandwidthAttempt:
                return _nccl_attempt(ctx, collective, scope, gpus, size_args, min(bw.nccl_tests.timeout_s, left))
            runs.append(_repeat(ctx, collective, scope, deadline, once))
    return BandwidthRuns("nccl-tests", gpus, tuple(runs))


def _torch_attempt(ctx: ProbeContext, gpus: int, sizes: list[str], timeout_s: float) -> list[BandwidthAttempt]:
    """One `hc bw allreduce` under torchrun --standalone, one rank per GPU: an attempt per collective."""

    bw = ctx.limits.bandwidth
    settings = bw.torch
    worker_timeout = max(5, int(timeout_s) - 5)  # the worker's own, inside hc's
    program = [sys.executable, "-m", "healthcheck", "bw", "allreduce", "--format", "json",
               "--collectives", ",".join(bw.collectives), "--sizes", ",".join(sizes),
               "--iters", str(settings.iters), "--warmup", str(settings.warmup),
               "--backend", settings.backend, "--timeout", str(worker_timeout)]
    # the torchrun beside this interpreter (hc's venv) first: the worker must import the same hc
    beside = Path(sys.executable).parent / "torchrun"
    torchrun = str(beside) if beside.exists() else shutil.which("torchrun") or "torchrun"
    # torchrun's --tee writes every worker's output under a log dir (a new /tmp/torchelastic_*
    # of its own otherwise, left behind by every run): hc's, removed after the run
    with tempfile.TemporaryDirectory(prefix="hc-torchrun-") as logs:
        spec = torchrun_launch(program, nproc_per_node=gpus, torchrun=torchrun, no_python=True, log_dir=logs,
                               env={"CUDA_DEVICE_ORDER": "PCI_BUS_ID", **settings.env})
        result = launch(spec, timeout_s=timeout_s)
    if result.not_found:
        raise ProbeError(ProbeKind.MISSING, "torchrun not found (install torch: pip install 'hc[bandwidth]')")
    lines = result.ranks.get(0, [])
    text = "\n".join(lines)
    tail = (result.stdout + "\n" + result.stderr)[-TAIL:]
    common: dict[str, Any] = dict(argv=spec.argv, env=dict(spec.env), expected_ranks=gpus,
                                  duration_s=round(result.duration_s, 3), returncode=result.returncode,
                                  hung=result.timed_out, output_tail=tail)
    start = text.find("{")
    try:
        doc = typed.decode_json(text[start:] if start >= 0 else "", dict)
        samples = tuple(typed.convert(s, BandwidthSample) for s in doc.get("samples", []))
    except (msgspec.DecodeError, msgspec.ValidationError):
        if result.timed_out:
            return [BandwidthAttempt(**common)] * len(bw.collectives)
        errors = [line for rank_lines in result.ranks.values() for line in rank_lines if "error" in line][:5]
        failed = BandwidthAttempt(**common, failures=tuple(errors),
                                  misconfigured=None if errors else "the torch sweep printed no result")
        return [failed] * len(bw.collectives)
    out = []
    for collective in bw.collectives:
        mine = tuple(s for s in samples if s.collective == collective)
        wrong = sum(s.wrong or 0 for s in mine) if any(s.wrong is not None for s in mine) else None
        out.append(BandwidthAttempt(**common, samples=mine, ranks=int(doc.get("ranks") or 0), wrong=wrong,
                                    last_size_bytes=max((s.size_bytes for s in mine), default=None)))
    return out


@provides("torch_sweep", "ssh", exclusive=True)
def torch_sweep_over_ssh(ctx: ProbeContext) -> BandwidthRuns:
    """Agentless: the torch sweep is hc itself, so it runs only where hc runs on the node."""
    gpus = gpu_count(ctx)
    if gpus and ctx.limits.bandwidth.torch.enabled:
        raise ProbeError(ProbeKind.MISSING, "the torch sweep runs only where hc runs on the node "
                         "(agent mode, --via slurm, or hc node --local on it)")
    return BandwidthRuns("torch", gpus)


@provides("torch_sweep", exclusive=True)
def torch_sweep(ctx: ProbeContext) -> BandwidthRuns:
    """hc's own torch collective sweep on every GPU of the node (gloo where the fabric says so)."""
    bw = ctx.limits.bandwidth
    gpus = gpu_count(ctx)
    if not bw.torch.enabled or gpus < 2:  # one GPU: no collective within the node moves data
        return BandwidthRuns("torch", gpus)
    deadline = time.monotonic() + ctx.timeout_s
    sizes = [format_size(b) for b in sorted({parse_size(s) for s in _measured_sizes(bw)})]
    # one launch measures every collective; re-run while any falls short
    attempts: dict[str, list[BandwidthAttempt]] = {c: [] for c in bw.collectives}
    for _ in range(bw.repeats):
        left = deadline - time.monotonic()
        if left < 1 and any(attempts.values()):
            break
        got = _torch_attempt(ctx, gpus, sizes, min(bw.torch.timeout_s, max(left, 1.0)))
        for attempt, collective in zip(got, bw.collectives, strict=True):
            attempts[collective].append(attempt)
        latest = [a[-1] for a in attempts.values() if a]
        if any(_conclusive(a) for a in latest) or not any(
                short_of(a[-1].samples, c, floors(bw, c, "single_node")) for c, a in attempts.items() if a):
            break
    return BandwidthRuns("torch", gpus, tuple(BandwidthRun(c, "single_node", tuple(a)) for c, a in attempts.items()))

