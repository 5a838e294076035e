"""What `hc run` sets before the job starts: the log directory, the debug variables, the manifest.

Nothing the user set is ever replaced. The Flight Recorder's variables have two names:
torch >= 2.8 reads TORCH_FR_BUFFER_SIZE and TORCH_FR_DUMP_TEMP_FILE, and warns on every
rank ("Environment variable TORCH_NCCL_TRACE_BUFFER_SIZE is deprecated; use
TORCH_FR_BUFFER_SIZE instead") when the old name is set at all, even beside the new one.
So hc sets one name: the current one, or the old one where the torch it finds is older
than 2.8 (which knows no other); and only when the user set neither (setting the other
name would override the user's value on the releases that read it first).

NCCL expands only %h (host) and %p (pid) in NCCL_DEBUG_FILE, and NCCL opens the file
only when NCCL_DEBUG is above VERSION. The Flight Recorder writes `<prefix><rank>` per
rank when a collective times out (TORCH_NCCL_DUMP_ON_TIMEOUT).
"""

from __future__ import annotations

import os
import re
import socket
import stat
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import msgspec

from healthcheck import __version__
from healthcheck.core.atomic import write_atomic
from healthcheck.core.errors import UsageError

MANIFEST_SCHEMA = "hc.run/1"
FR_BUFFER_ENTRIES = "2000"  # torch 2.13's own default; older releases default to 0 (off)
DEFAULT_SUBSYS = "INIT,BOOTSTRAP,ENV,NET"  # BOOTSTRAP (NCCL >= 2.23) is ignored by older NCCL
NCCL_FILE_NAME = "nccl.%h.%p.log"
FR_PREFIX_NAME = "fr/nccl_trace_rank_"
MAX_KEY = 64  # a job id or run id in a directory name
MAX_DIR = 3800  # NCCL copies NCCL_DEBUG_FILE (expanded) into a PATH_MAX (4096) buffer
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")

# (current name, the name torch < 2.8 reads): a variable torch reads under either
PAIRS_FR = (("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"),)
PAIRS_FR_FILE = (("TORCH_FR_DUMP_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"),)
FR_NEW_NAMES_SINCE = (2, 8)


@dataclass(frozen=True)
class Who:
    """This process's place in the job, as far as the launcher's variables tell (never raises)."""

    launcher: str  # torchrun | mpirun | srun | none
    rank: int | None
    world_size: int | None
    local_rank: int | None
    local_world_size: int | None


def _num(env: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = (env.get(name) or "").strip()
        if value.isdigit():
            return int(value)
    return None


def who(env: Mapping[str, str]) -> Who:
    if "RANK" in env or "WORLD_SIZE" in env or "TORCHELASTIC_RUN_ID" in env:
        return Who("torchrun" if "TORCHELASTIC_RUN_ID" in env or "GROUP_RANK" in env else "env",
                   _num(env, "RANK"), _num(env, "WORLD_SIZE"), _num(env, "LOCAL_RANK"),
                   _num(env, "LOCAL_WORLD_SIZE"))
    if "OMPI_COMM_WORLD_RANK" in env:
        return Who("mpirun", _num(env, "OMPI_COMM_WORLD_RANK"), _num(env, "OMPI_COMM_WORLD_SIZE"),
                   _num(env, "OMPI_COMM_WORLD_LOCAL_RANK"), _num(env, "OMPI_COMM_WORLD_LOCAL_SIZE"))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        return Who("srun", _num(env, "SLURM_PROCID"), _num(env, "SLURM_NTASKS"), _num(env, "SLURM_LOCALID"), None)
    return _mpi_rank(env) or Who("none", 0, 1, 0, 1)


def _mpi_rank(env: Mapping[str, str]) -> Who | None:
    """A rank of an MPI launcher other than Open MPI's: Hydra's (MPICH, Intel MPI, MVAPICH) sets
    PMI_RANK and PMI_SIZE; a PMIx launcher its PMIX_RANK, the size left unknown. Without this
    every rank of theirs claimed to be rank 0 of a world of 1."""
    if "PMI_RANK" in env and "PMI_SIZE" in env:
        return Who("mpirun", _num(env, "PMI_RANK"), _num(env, "PMI_SIZE"), _num(env, "MPI_LOCALRANKID"),
                   _num(env, "MPI_LOCALNRANKS"))
    if _num(env, "PMIX_RANK") is not None:
        return Who("mpirun", _num(env, "PMIX_RANK"), None, None, None)
    return None


def safe_key(text: str) -> str:
    """A job or run id as one bounded directory-name component."""
    key = _UNSAFE.sub("_", text)[:MAX_KEY].strip(".")
    return key or "x"


# what every rank of one job finds in its environment and no other job does, first found
# wins: (variable, prefix of the directory's name). PMIx names each job of Open MPI's mpirun
# (4.x: "583008257"; 5.x: "prterun-host-123@1"), PRRTE's and srun --mpi=pmix's; Open MPI
# without PMIx has its ess jobid. Before MASTER_PORT: two jobs in a row on one port (29500)
# would share a directory, and a job that meets at its own tcp:// address has none.
JOB_KEYS = (("TORCHELASTIC_RUN_ID", "torchrun-"), ("PMIX_NAMESPACE", "mpi-"), ("OMPI_MCA_ess_base_jobid", "mpi-"))


def job_key(env: Mapping[str, str]) -> str | None:
    """A name for this job that every one of its ranks finds without talking (no Slurm job id:
    that one names a directory of its own), or None: nothing the ranks share tells them apart."""
    for name, prefix in JOB_KEYS:
        if env.get(name):
            return prefix + env[name]
    if env.get("MASTER_PORT"):
        return f"{env.get('MASTER_ADDR', 'localhost')}-{env['MASTER_PORT']}"
    return None


def default_log_dir(env: Mapping[str, str]) -> Path:
    """$SLURM_SUBMIT_DIR/hc-job-<jobid> under Slurm, else a per-job directory in the temp dir.

    Every rank of one job must name the same directory without talking: Slurm's job id,
    torchrun's run id, the MPI job's PMIx namespace, or the rendezvous address; where there
    is none (a one-process job) it is this process's own: pid<pid>.
    """
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if job:
        base = env.get("SLURM_SUBMIT_DIR") or os.getcwd()
        return Path(base) / f"hc-job-{safe_key(job)}"
    key = job_key(env) or f"pid{os.getpid()}"
    return Path(tempfile.gettempdir()) / f"hc-run-{os.getuid()}" / safe_key(key)


def _own_dir(path: Path, mode: int) -> None:
    """Create `path` (mode) or accept it: a real directory (never a link) that we own."""
    try:
        os.mkdir(path, mode)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{path}: not a directory (a symbolic link or a file): refusing to log there")
    if info.st_uid != os.getuid():
        raise UsageError(f"{path}: owned by uid {info.st_uid}, not by this user: refusing to log there")


def make_log_dir(path: Path) -> Path:
    """Create the log directory (0750, its fr/ inside) and return it absolute; UsageError when not possible."""
    path = Path(os.path.abspath(path))
    if len(str(path)) > MAX_DIR:
        raise UsageError(f"--log-dir is {len(str(path))} characters long: NCCL takes at most {MAX_DIR}")
    if not str(path).isprintable():
        raise UsageError(f"--log-dir {str(path)!r}: control characters in the path")
    try:
        if path.parent.name.startswith("hc-run-") and path.parent.parent == Path(tempfile.gettempdir()):
            _own_dir(path.parent, 0o700)  # the per-user directory in a world-writable /tmp
        path.mkdir(mode=0o750, parents=True, exist_ok=True)
        _own_dir(path, 0o750)
        _own_dir(path / "fr", 0o750)
    except OSError as exc:
        raise UsageError(f"cannot create the log directory {path}: {exc.strerror or exc}") from None
    return path


def torch_release() -> tuple[int, int] | None:
    """(major, minor) of the torch installed beside hc, from its metadata (torch is not imported)."""

    try:
        version = metadata.version("torch")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    m = re.match(r"(\d{1,4})\.(\d{1,4})", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def fr_name(pair: tuple[str, str], release: tuple[int, int] | None) -> str:
    """The one name of a Flight Recorder variable to set: the current one unless torch is older."""
    return pair[1] if release is not None and release < FR_NEW_NAMES_SINCE else pair[0]


def debug_env(env: Mapping[str, str], log_dir: Path, *, nccl_debug: str = "INFO",
              subsys: str = DEFAULT_SUBSYS, desync: bool = False,
              release: tuple[int, int] | None = None) -> dict[str, str]:
    """The variables hc sets: those the user has not set (a Flight Recorder one only when neither
    of its names is, and then under the one name `release` of torch reads without a warning)."""
    wanted: list[tuple[tuple[str, ...], str, str]] = [
        (("NCCL_DEBUG",), "NCCL_DEBUG", nccl_debug),
        (("NCCL_DEBUG_SUBSYS",), "NCCL_DEBUG_SUBSYS", subsys),
        (("NCCL_DEBUG_FILE",), "NCCL_DEBUG_FILE", str(log_dir / NCCL_FILE_NAME)),
        (PAIRS_FR[0], fr_name(PAIRS_FR[0], release), FR_BUFFER_ENTRIES),
        (("TORCH_NCCL_DUMP_ON_TIMEOUT",), "TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
        (PAIRS_FR_FILE[0], fr_name(PAIRS_FR_FILE[0], release), str(log_dir / FR_PREFIX_NAME)),
    ]
    if desync:
        wanted += [(("TORCH_DISTRIBUTED_DEBUG",), "TORCH_DISTRIBUTED_DEBUG", "DETAIL"),
                   (("TORCH_NCCL_DESYNC_DEBUG",), "TORCH_NCCL_DESYNC_DEBUG", "1")]
    return {name: value for names, name, value in wanted if value and not any(n in env for n in names)}


def kept_env(env: Mapping[str, str], *, desync: bool = False) -> dict[str, str]:
    """The variables hc would set that the user had set already (kept as they were)."""
    names = ["NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", *PAIRS_FR[0], "TORCH_NCCL_DUMP_ON_TIMEOUT",
             *PAIRS_FR_FILE[0]]
    if desync:
        names += ["TORCH_DISTRIBUTED_DEBUG", "TORCH_NCCL_DESYNC_DEBUG"]
    return {name: env[name] for name in names if name in env}


class Manifest(msgspec.Struct, kw_only=True):
    """One rank's record in the log directory: which pid (NCCL's %p) is which rank, and what was set."""

    schema: str
    hc_version: str
    launcher: str
    rank: int | None
    world_size: int | None
    local_rank: int | None
    local_world_size: int | None = None
    host: str
    pid: int
    output: str | None = None  # the tee's file of this rank's stdout and stderr, in log_dir
    started_at: str  # ISO 8601, UTC, milliseconds
    started_unix: float
    command: list[str]
    cwd: str
    log_dir: str
    job_id: str | None
    step_id: str | None
    env_set: dict[str, str]  # what hc set
    env_kept: dict[str, str]  # what hc would have set, as the user had it


def manifest_path(log_dir: Path, info: Who, host: str, pid: int) -> Path:
    rank = "x" if info.rank is None else str(info.rank)
    return log_dir / f"hc-run.rank{rank}.{safe_key(host)}.{pid}.json"


def output_path(log_dir: Path, info: Who | None, host: str, pid: int) -> Path:
    """Where the tee keeps this process's output: per rank, or the launcher's (info None)."""
    if info is None:
        return log_dir / f"hc-run.launcher.{safe_key(host)}.{pid}.log"
    return manifest_path(log_dir, info, host, pid).with_suffix(".log")


def write_manifest(log_dir: Path, info: Who, command: Sequence[str], env: Mapping[str, str],
                   env_set: Mapping[str, str], env_kept: Mapping[str, str], *, now: float | None = None,
                   output: Path | None = None) -> Path:

    now = time.time() if now is None else now
    host, pid = socket.gethostname(), os.getpid()
    manifest = Manifest(
        schema=MANIFEST_SCHEMA, hc_version=__version__, launcher=info.launcher, rank=info.rank,
        world_size=info.world_size, local_rank=info.local_rank, local_world_size=info.local_world_size,
        host=host, pid=pid, output=output.name if output is not None else None,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
        started_unix=round(now, 3), command=list(command), cwd=os.getcwd(), log_dir=str(log_dir),
        job_id=env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID"),
        step_id=env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID"),
        env_set=dict(env_set), env_kept=dict(env_kept))
    path = manifest_path(log_dir, info, host, pid)
    write_atomic(path, msgspec.json.format(msgspec.json.encode(manifest), indent=2) + b"\n", mode=0o640)
    return path


def shown_env(env: Mapping[str, str], limit: int = 120) -> str:
    """The NCCL_* and TORCH_* variables in effect, compact: `NAME=value ...`, each value clipped."""
    names = sorted(n for n in env if n.startswith(("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCH_DISTRIBUTED_")))
    parts = []
    for name in names:
        value = env[name].replace("\n", "\\n")
        parts.append(f"{name}={value if len(value) <= limit else value[:limit] + '...'}")
    return " ".join(parts) if parts else "(none)"
