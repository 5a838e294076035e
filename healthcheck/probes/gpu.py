"""GPU facts (NVML in-process, or a replayed recording) and the kernel log's Xid events.

Which GPUs: the job's, where the environment names them (SLURM_JOB_GPUS, else
CUDA_VISIBLE_DEVICES), so a prologue for a 2-GPU job looks at those 2; else all.
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Optional

from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext, ProbeError, provides
from healthcheck.parsers.gpu_common import GpuFacts
from healthcheck.probes.sysinfo import boot_time

REPLAY_ENV = "HC_NVML_REPLAY"  # path of an NVML recording to replay instead of NVML


def job_gpu_indexes(env: Mapping[str, str]) -> Optional[list[int]]:
    """The NVML indexes of the job's GPUs, or None when the environment names none.

    SLURM_JOB_GPUS holds the node's GPU indexes (gres.conf order, which is NVML/PCI
    order on a standard install). CUDA_VISIBLE_DEVICES is used only when it is a list
    of plain indexes; UUIDs and MIG names cannot be mapped without NVML, and an empty
    value means "no GPU for this job".
    """
    for var in ("SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = env.get(var)
        if value is None:
            continue
        value = value.strip()
        if value in ("", "NoDevFiles"):
            return []
        parts = [p.strip() for p in value.split(",") if p.strip()]
        if all(p.isdigit() for p in parts):
            return sorted({int(p) for p in parts})
    return None


@provides("gpus", "local")
def gpus_nvml(ctx: ProbeContext) -> GpuFacts:
    from healthcheck.probes.nvml import NvmlProbe, ReplayNvml

    scope = job_gpu_indexes(ctx.env)
    replay = ctx.env.get(REPLAY_ENV)
    if replay:
        try:
            nvml = ReplayNvml.from_file(replay)
        except (OSError, ValueError) as exc:
            raise ProbeError("unreadable", f"{REPLAY_ENV}={replay}: {exc}") from None
        return NvmlProbe(nvml, source=nvml.source).facts(scope)
    expects_gpus = ctx.limits is not None and ctx.limits.gpu.count is not None
    if not expects_gpus and not ctx.path("/proc/driver/nvidia").exists():
        # No NVIDIA driver on a node that expects no GPU: skip importing NVML at all (it
        # costs the prologue ~15 ms). Where GPUs are expected, NVML itself must say why.
        return GpuFacts(source="nvml", init_error="no NVIDIA driver loaded (/proc/driver/nvidia absent)")
    try:
        import pynvml
    except ImportError:
        return GpuFacts(source="nvml", init_error="pynvml (nvidia-ml-py) is not installed")
    return NvmlProbe(pynvml).facts(scope)


# ------------------------------------------------------------------ kernel log


_KMSG = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<msg>.*)$")


def _read_kmsg(ctx: ProbeContext) -> str:
    """/dev/kmsg records as "[uptime] message" lines (continuation lines skipped)."""
    path = ctx.path("/dev/kmsg")
    lines = []
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break  # EAGAIN: the buffer is drained
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: records were overwritten while we read; go on
                    continue
                raise
            if not record:
                break
            m = _KMSG.match(record.decode(errors="replace").split("\n", 1)[0])
            if m:
                lines.append(f"[{int(m.group('usec')) / 1e6:.6f}] {m.group('msg')}")
    finally:
        os.close(fd)
    return "\n".join(lines)


def _kernel_log_text(ctx: ProbeContext, source: str, file: Optional[str]) -> tuple[str, str]:
    """(text, how it was read) from the configured source."""
    if source == "file":
        if not file:
            raise ProbeError("missing", "gpu.xid.source is file but gpu.xid.file is not set")
        try:
            return ctx.path(file).read_text(errors="replace"), f"file {file}"
        except OSError as exc:
            raise ProbeError("unreadable", f"{file}: {exc.strerror or exc}") from None
    if source in ("kmsg", "auto"):
        try:
            return _read_kmsg(ctx), "/dev/kmsg"
        except OSError as exc:
            if source == "kmsg":
                raise ProbeError("unreadable", f"/dev/kmsg: {exc.strerror or exc}") from None
    if source in ("dmesg", "auto"):
        try:
            return ctx.run_checked(("dmesg",)).stdout, "dmesg"
        except ProbeError:
            if source == "dmesg":
                raise
    result = ctx.run_checked(("journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q"))
    return result.stdout, "journalctl -k -b"


@provides("kernel_gpu_log", "local")
def kernel_gpu_log(ctx: ProbeContext):
    """Xid/SXid events since `params["since"]` (epoch seconds; default: since boot)."""
    policy = ctx.limits.gpu.xid if ctx.limits is not None else None
    source = policy.source if policy is not None else "auto"
    text, how = _kernel_log_text(ctx, source, policy.file if policy is not None else None)
    return _gpu_events(ctx, text, how, boot_time(str(ctx.root)))


def _gpu_events(ctx: ProbeContext, text: str, how: str, boot: Optional[float] = None):
    """The NVIDIA driver's events in a kernel log, within the run's window (`since`)."""
    from healthcheck.parsers.xid import parse_kernel_log, since

    # Only the NVIDIA driver's lines matter; a busy ring buffer holds ~100k others.
    text = "\n".join(line for line in text.splitlines() if "NVRM" in line or "nvswitch" in line or "Xid" in line)
    log = ctx.parse(lambda t: parse_kernel_log(t, boot_time=boot), text, how) if text else parse_kernel_log("")
    start = ctx.params.get("since")
    return since(log, float(start)) if start is not None else log


# ---------------------------------------------------------------- agentless (ssh)

NVIDIA_SMI_Q = ("nvidia-smi", "-q")
KERNEL_LOG_COMMANDS = (("dmesg", "--time-format", "iso"), ("dmesg",),
                       ("journalctl", "-k", "-b", "-o", "short-iso", "--no-pager", "-q"))


@provides("gpus", "ssh", prefetch=lambda ctx: [NVIDIA_SMI_Q])
def gpus_nvidia_smi(ctx: ProbeContext) -> GpuFacts:
    """`nvidia-smi -q` on a node reached without hc: the same facts, from text."""
    from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q

    result = ctx.runner.run(NVIDIA_SMI_Q, timeout_s=ctx.timeout_s)
    if result.not_found:
        return GpuFacts(source="nvidia-smi -q", init_error="nvidia-smi not found (no NVIDIA driver installed)")
    if result.timed_out:
        raise ProbeError("timeout", f"nvidia-smi -q did not finish within {ctx.timeout_s:g}s (a hung GPU?)")
    # a driver failure is printed instead of a report, with a non-zero exit: the parser
    # turns it into init_error, which the checks judge
    try:
        return parse_nvidia_smi_q(result.stdout + result.stderr)
    except ParseError as exc:
        # a -q layout this parser does not know: the CSV query has stable field names
        return _query_gpu(ctx, f"nvidia-smi -q: {exc}")


def _query_gpu(ctx: ProbeContext, why: str) -> GpuFacts:
    from healthcheck.parsers.nvidia_smi_query import QUERY_FIELDS, parse_nvidia_smi_query

    argv = ("nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv")
    result = ctx.runner.run(argv, timeout_s=ctx.timeout_s)
    if not result.ok:
        raise ProbeError("unparsable", f"{why}; and --query-gpu failed: {(result.stderr or result.stdout).strip()[-200:]}")
    return ctx.parse(parse_nvidia_smi_query, result.stdout, "nvidia-smi --query-gpu")


@provides("kernel_gpu_log", "ssh", prefetch=lambda ctx: [KERNEL_LOG_COMMANDS[0]])
def kernel_gpu_log_ssh(ctx: ProbeContext):
    last = None
    for argv in KERNEL_LOG_COMMANDS:
        result = ctx.runner.run(argv, timeout_s=ctx.timeout_s)
        if result.ok:
            return _gpu_events(ctx, result.stdout, " ".join(argv))
        if result.timed_out:
            raise ProbeError("timeout", f"{' '.join(argv)} did not finish within {ctx.timeout_s:g}s")
        last = result
    detail = (last.stderr or last.stdout).strip()[-300:] if last is not None else ""
    raise ProbeError("failed", f"cannot read the kernel log (dmesg, journalctl): {detail}", detail or None)


# ------------------------------------------------------------ NCCL (either transport)

LDCONFIG = ("ldconfig", "-N", "-X", "-v")  # list only: no cache rebuilt, no links made, no root


def _shared_libs(ctx: ProbeContext):
    from healthcheck.parsers.ldconfig import parse_ldconfig

    # ldconfig lives in /sbin, which a user's PATH may lack; it also complains on stderr
    # about directories it cannot read, which is no failure
    result = ctx.run_checked(LDCONFIG, ok_codes=(0, 1))
    return ctx.parse(parse_ldconfig, result.stdout, "ldconfig -v")


@provides("shared_libs", "local")
@provides("shared_libs", "ssh", prefetch=lambda ctx: [LDCONFIG])
def shared_libs(ctx: ProbeContext):
    return _shared_libs(ctx)
