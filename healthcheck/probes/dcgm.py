"""NVIDIA DCGM's diagnostic on the node: `dcgmi diag -r LEVEL -j`, read by parsers/dcgmi_diag.py.

Two facts, one per tier, so each runs the way its tier must:

* `dcgm_diag` (gpu.dcgm, standard tier): gpu.dcgm.level_standard (1 or 2), beside the
  other probes; it takes seconds to minutes. Level 1 reads the deployment and runs on busy
  nodes like every standard check. Level 2 allocates GPU memory and drives PCIe, which a job
  on the GPU makes fail ("CUDA-capable device(s) is/are busy or unavailable": a healthy node
  would FAIL) and which slows the job: it runs only where the GPUs it tests are seen idle
  (no compute process, through the node's own `gpus` fact), and is not run otherwise;
* `dcgm_diag_deep` (gpu.dcgm_deep, deep tier only): gpu.dcgm.level_deep (3 by default),
  exclusive: after every concurrent probe and the bandwidth tests, alone on the node, and,
  its check being deep-only, never on a node a job is using (orchestrate/busy.py skips
  deep-only checks there, and a deep sweep skips the node).

Inside a job (SLURM_JOB_GPUS, CUDA_VISIBLE_DEVICES) only the job's GPUs are tested (`-i`).

dcgmi exits non-zero when its diagnostic found something (226: DCGM_ST_NVVS_ERROR; 205:
DCGM_ST_NVVS_ISOLATE_ERROR), so the exit code decides nothing: what it printed does. No
test result is `problem`, never a verdict: dcgmi missing, no nv-hostengine to reach (and
no embedded one it could start: "Error: unable to establish a connection to the specified
host" / "Error: Unable to connect to host engine. Host engine connection
invalid/disconnected.", exit 235), DCGM's own runtime error (another diagnostic holding
the GPUs, a missing nvvs), or output hc cannot read.
"""

from __future__ import annotations

import time

from healthcheck.core.config.schema import DcgmSettings
from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext, ProbeError, provides, timeout_error
from healthcheck.core.inputs import clip
from healthcheck.parsers.dcgmi_diag import DcgmDiag, DcgmRun, parse_dcgmi_diag
from healthcheck.probes.gpu import gpus_nvml, job_gpu_indexes
from healthcheck.probes.gpu_agentless import gpus_nvidia_smi

EVIDENCE_CHARS = 6000  # the output's tail kept with a run hc could not judge


def _settings(ctx: ProbeContext) -> DcgmSettings:
    return ctx.limits.gpu.dcgm if ctx.limits is not None else DcgmSettings()


def diag_argv(settings: DcgmSettings, level: int, gpus: list[int] | None) -> tuple[str, ...]:
    """`dcgmi diag -r LEVEL -j`, with `--host` and the job's GPUs (`-i 0,1`) where given."""
    argv = [settings.dcgmi, "diag", "-r", str(level), "-j"]
    if settings.host:
        argv += ["--host", settings.host]
    if gpus:
        argv += ["-i", ",".join(str(g) for g in gpus)]
    return tuple(argv)


def _parsed(text: str) -> DcgmDiag | None:
    if not text.strip():
        return None
    try:
        return parse_dcgmi_diag(text)
    except ParseError:
        return None


# the lowest level whose tests need the GPUs to themselves (memory and PCIe: DCGM runs "a
# medium validation after a failed job, once the GPUs are idle")
IDLE_LEVEL = 2


def gpus_not_idle(ctx: ProbeContext) -> str | None:
    """Why the GPUs dcgmi would test (the job's, or all) are not known to be idle, or None:
    the node's `gpus` fact (NVML here, `nvidia-smi -q` over SSH) lists no compute process
    on any of them, and none holds more memory than gpu.leftover_memory_max_mib. A GPU whose
    processes could not be listed is not known to be idle."""

    gather = gpus_nvml if ctx.transport == "local" else gpus_nvidia_smi
    try:
        facts = gather(ctx)
    except ProbeError as exc:
        return f"cannot tell whether the GPUs are idle: {exc.message}"
    if facts.init_error and not facts.gpus:
        return f"cannot tell whether the GPUs are idle: {facts.init_error}"
    running = [f"GPU {g.index}: {p.name or 'pid'} {p.pid}" for g in facts.gpus for p in g.processes or ()]
    if running:
        more = f" and {len(running) - 4} more" if len(running) > 4 else ""
        return f"compute processes run on the GPUs ({', '.join(running[:4])}{more})"
    unknown = [str(g.index) for g in facts.gpus if g.processes is None]
    if unknown:
        return f"cannot tell whether GPU {', '.join(unknown[:8])} are idle: {facts.source} lists no processes for them"
    # a process NVML cannot list (another PID namespace: hc in a container) still holds memory
    limit = ctx.limits.gpu.leftover_memory_max_mib if ctx.limits is not None else 1024
    held = [f"GPU {g.index}: {g.memory_used_mib} MiB" for g in facts.gpus
            if g.memory_used_mib is not None and g.memory_used_mib > limit]
    if held:
        return (f"GPU memory is in use with no process listed ({', '.join(held[:4])}; "
                f"gpu.leftover_memory_max_mib {limit})")
    return None


def run_diag(ctx: ProbeContext, level: int, timeout_s: float) -> DcgmRun:
    """One `dcgmi diag` run on the node, as a fact: the parsed diagnostic, or why there is none."""

    settings = _settings(ctx)
    scope = job_gpu_indexes(ctx.env)
    argv = diag_argv(settings, level, scope)
    if scope == []:
        return DcgmRun(level, argv, problem="no-gpu", reason="the job has no GPU for DCGM to test")
    if level >= IDLE_LEVEL:
        busy = gpus_not_idle(ctx)
        if busy is not None:
            return DcgmRun(level, argv, problem="gpus-busy",
                           reason=f"dcgmi diag -r {level} not run: {busy} (level {level} tests GPU memory and PCIe, "
                                  "which fail and slow the work beside a running process; it runs on idle GPUs)")
    timeout = min(ctx.timeout_s, timeout_s)
    started = time.monotonic()
    result = ctx.runner.run(argv, timeout_s=timeout)
    took = round(time.monotonic() - started, 3)
    if result.timed_out:
        raise timeout_error(result, " ".join(argv), timeout)
    if result.not_found:
        return DcgmRun(level, argv, problem="missing", duration_s=took,
                       reason=f"{argv[0]} not found: DCGM is not installed on the node "
                              "(datacenter-gpu-manager), or gpu.dcgm.dcgmi does not name it",
                       evidence=result.stderr[-EVIDENCE_CHARS:] or None)
    output = result.stdout + ("\n" + result.stderr if result.stderr.strip() else "")
    evidence = f"$ {' '.join(argv)}  (exit {result.returncode})\n{output[-EVIDENCE_CHARS:]}"
    if result.error:
        return DcgmRun(level, argv, result.returncode, took, problem="failed", reason=f"{argv[0]}: {result.error}",
                       evidence=evidence)
    # stdout first: dcgmi writes its document and its own errors there; what a library
    # printed on stderr must not be taken into the JSON document
    diag = _parsed(result.stdout)
    if diag is None or not (diag.tests or diag.runtime_error or diag.connection_error):
        diag = _parsed(output) or diag
    if diag is not None and diag.tests:
        return DcgmRun(level, argv, result.returncode, took, diag=diag, evidence=evidence)
    if diag is not None and diag.connection_error:
        return DcgmRun(level, argv, result.returncode, took, diag=diag, problem="hostengine", evidence=evidence,
                       reason="dcgmi could not reach nv-hostengine nor start an embedded host engine (is the "
                              "nvidia-dcgm service running? `systemctl status nvidia-dcgm`): "
                              + clip(diag.connection_error, 300))
    if diag is not None and diag.runtime_error:
        return DcgmRun(level, argv, result.returncode, took, diag=diag, problem="failed", evidence=evidence,
                       reason=f"DCGM could not run its diagnostic: {clip(diag.runtime_error, 300)}")
    last = next((line.strip() for line in reversed(output.splitlines()) if line.strip()), "")
    if diag is not None or result.returncode == 0:
        return DcgmRun(level, argv, result.returncode, took, diag=diag, problem="unparsable", evidence=evidence,
                       reason=f"{' '.join(argv)} printed no test result hc can read (exit {result.returncode})"
                              + (f": {clip(last, 200)}" if last else ""))
    return DcgmRun(level, argv, result.returncode, took, problem="failed", evidence=evidence,
                   reason=f"{' '.join(argv)} exited {result.returncode}" + (f": {clip(last, 300)}" if last else ""))


@provides("dcgm_diag", "ssh")
@provides("dcgm_diag", "local")
def dcgm_diag(ctx: ProbeContext) -> DcgmRun:
    """The standard tier's DCGM diagnostic (gpu.dcgm.level_standard)."""
    settings = _settings(ctx)
    return run_diag(ctx, settings.level_standard, settings.timeout_standard_s)


@provides("dcgm_diag_deep", "ssh", exclusive=True)
@provides("dcgm_diag_deep", "local", exclusive=True)
def dcgm_diag_deep(ctx: ProbeContext) -> DcgmRun:
    """The deep tier's DCGM diagnostic (gpu.dcgm.level_deep): alone on an idle node."""
    settings = _settings(ctx)
    return run_diag(ctx, settings.level_deep, settings.timeout_deep_s)
