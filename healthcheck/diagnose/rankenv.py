"""What a rank's environment says: its rank, local rank and world size (from the launcher's
variables, most trusted first), its Slurm job, the debug files it was told to write, and
the launch-relevant variables kept for the report (never the whole environment: it may
hold secrets)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from healthcheck.diagnose.nodeschema import DebugFiles
from healthcheck.diagnose.procs import parse_int

MAX_VALUE = 1024  # characters of one kept variable's value
MAX_KEPT_VARS = 200

# rank variables, most trusted first; (rank, local rank, world size)
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID")
LOCAL_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID")
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "SLURM_NPROCS")
JOB_VARS = ("SLURM_JOB_ID", "SLURM_JOBID")
# variables kept per rank (names, and prefixes); names that look like secrets never are
_KEEP_NAMES = frozenset({
    *RANK_VARS, *LOCAL_VARS, *WORLD_VARS, *JOB_VARS, "GROUP_RANK", "ROLE_RANK", "LOCAL_WORLD_SIZE",
    "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_NODEID",
    "SLURM_NODELIST", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST", "SLURMD_NODENAME", "SLURM_CPUS_ON_NODE",
    "CUDA_DEVICE_ORDER", "OMP_NUM_THREADS", "PYTHONFAULTHANDLER",
})
_KEEP_PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCH_DISTRIBUTED_", "TORCHELASTIC_", "GLOO_",
                  "TORCH_CPP_LOG", "UCX_", "HC_")
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|(?:^|_)KEY(?:$|_)|AUTH", re.I)


def rank_of(env: Mapping[str, str]) -> tuple[int | None, str | None]:
    """(rank, the variable it came from): the first of RANK, OMPI_COMM_WORLD_RANK, PMI_RANK,
    PMIX_RANK, SLURM_PROCID that holds a whole number."""
    for name in RANK_VARS:
        value = parse_int(env.get(name))
        if value is not None:
            return value, name
    return None, None


def has_rank(env: Mapping[str, str] | None) -> bool:
    """An environment that names a rank."""
    return env is not None and rank_of(env)[0] is not None


def first_int(env: Mapping[str, str], names: Iterable[str]) -> int | None:
    """The first of `names` that holds a whole number."""
    for name in names:
        value = parse_int(env.get(name))
        if value is not None:
            return value
    return None


def slurm_job_of(env: Mapping[str, str]) -> str | None:
    """The Slurm job id the environment names (SLURM_JOB_ID, SLURM_JOBID)."""
    return next((env[v] for v in JOB_VARS if v in env), None)


def kept_env(env: Mapping[str, str]) -> dict[str, str]:
    """The launch, NCCL and torch variables of a rank, never anything that looks like a secret."""
    out: dict[str, str] = {}
    for name in sorted(env):
        if len(out) >= MAX_KEPT_VARS:
            break
        if (name in _KEEP_NAMES or name.startswith(_KEEP_PREFIXES)) and not _SECRET.search(name):
            out[name] = env[name][:MAX_VALUE]
    return out


def debug_files(env: Mapping[str, str], pid: int, host: str, rank: int | None) -> DebugFiles:
    """The debug files a rank was told to write (NCCL_DEBUG_FILE with NCCL's %h/%p expanded,
    the Flight Recorder dump, TORCHELASTIC_ERROR_FILE)."""
    nccl = env.get("NCCL_DEBUG_FILE")
    if nccl:  # NCCL expands %h (its hostname up to the first dot) and %p (the pid)
        nccl = nccl.replace("%h", host.split(".", 1)[0]).replace("%p", str(pid))
    prefix = env.get("TORCH_FR_DUMP_TEMP_FILE") or env.get("TORCH_NCCL_DEBUG_INFO_TEMP_FILE")
    fr = f"{prefix}{rank}" if prefix and rank is not None else None
    return DebugFiles(nccl_debug=nccl or None, flight_recorder=fr, flight_recorder_prefix=prefix or None,
                      elastic_error=env.get("TORCHELASTIC_ERROR_FILE") or None)
