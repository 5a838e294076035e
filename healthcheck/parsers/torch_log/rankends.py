"""MPI launchers' own word on how each rank ended, beside Open MPI's (agent.py) and srun's.

* HPE PALS (Cray's `mpiexec` on ALCF's Polaris and Aurora) ends a failed
  job with one line per rank it saw end badly: `HOST: rank N died from signal S` or `HOST:
  rank N exited with code C` (without the host, the same words are read as a supervisor's,
  launchreports.py). The host may be cut or blanked (`x1921c7s1b0n0-hsn0...:`), the
  rank padded (`rank  1`), and a paste may annotate the line after it (`<- the victim`).
  Each is the rank's end (TaskExit, launcher "pals"), read as srun's `task N: Killed` is: a
  SIGKILL of one rank among SIGTERMs of the others is the first death and PALS's cascade.
* MPICH's Hydra (and Intel MPI's, its fork) box, one per process it saw end badly:
  `BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES`, then `RANK R PID P RUNNING AT H`
  and `KILLED BY SIGNAL: S (Name)` or `EXIT CODE: C` / `EXIT STATUS: C`, each behind `=   `.
  Older Hydra prints `PID P RUNNING AT H` with no rank: nothing names the rank, nothing is
  kept. Hydra then kills the remaining processes itself (`CLEANING UP REMAINING
  PROCESSES`), and those may get boxes of their own: which box came first is not the
  order of the deaths, so the diagnosis names a rank from these boxes only where there is
  one (diagnose/signals.py). TaskExit, launcher "hydra" (sources.link_task_exits links no
  hydra signal: a cleanup's SIGKILL is no death).
* MPICH's older process manager, mpd (MPICH2 1.0-1.2's `mpiexec`), when a rank ends badly
  (its `job_aborted_early` message): `rank R in job J  caused collective abort of all ranks`,
  then `  exit status of rank R: killed by signal S ` or `return code C ` (J is the host and
  port, `node1_42982`, which a paste may blank to words: `<system name>_65327`; some copies
  write `Rank`/`Exit`). mpd prints it for the one rank whose end made it abort the job, and
  then kills the others itself: that rank's end (TaskExit, launcher "mpd"), kept only where
  the status line names the rank the abort line named, within a few lines of it.
* horovodrun's own launcher (gloo), for each process that ended badly: `Process N exit with
  status code C.` (N the rank, horovodrun's index; C negative for a signal): that rank's end
  (TaskExit, launcher "horovodrun"). It prints it for every process that ends badly, so the
  diagnosis names a rank from it only where one process is reported (diagnose/signals.py).
* torch's distributed test harness (`MultiProcessTestCase`, torch/testing/_internal/
  common_distributed.py) catches what a rank's test raised, logs `Caught exception: ` and
  the traceback under glog's prefix from that file, and ends the rank's process: read as
  the rank's caught exception (HarnessCaught) only under that file's prefix and a rank's
  label, never from the words alone.
"""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import SIGNALS, HarnessCaught, TaskExit
from healthcheck.parsers.torch_log.state import TorchState, agent_where, where

# `HOST: rank N died from signal S` / `exited with code C`; the host optional (a paste may
# keep the rank's words only); a bounded blank run between words (PALS pads the rank)
_PALS = re.compile(r"(?:(?<![^\s`>|])([^\s:]{1,256}): {1,8})?rank {1,8}(\d{1,7}) {1,8}"
                   r"(?:died from signal {1,8}(\d{1,3})|exited with code {1,8}(\d{1,3}))\b")
_REDACTED = re.compile(r"[xX*#?.]{1,256}|<[^>]{0,64}>")

_HYDRA_HEAD = "BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES"
_HYDRA_WHO = re.compile(r"(?:RANK {1,8}(\d{1,7}) {1,8})?PID {1,8}(\d{1,10}) {1,8}RUNNING AT {1,8}(\S{1,256})")
_HYDRA_END = re.compile(r"(?:KILLED BY SIGNAL: {0,8}(\d{1,3})|EXIT (?:CODE|STATUS): {0,8}(-?\d{1,3}))\b")
_HYDRA_LINES = 4  # lines after the head its fields may take


def _host(text: str | None) -> str:
    """The host as printed, less a cut's `...`; "" where the paste blanked it."""
    if not text:
        return ""
    host = text.rstrip(".")
    return "" if not host or _REDACTED.fullmatch(text) else clip(host, 256)


def read_pals(state: TorchState, line: Line) -> bool:
    """PALS's `HOST: rank N died from signal S` / `exited with code C`: rank N's end."""
    m = _PALS.search(line.text)
    if m is None or (m.group(4) is not None and m.group(1) is None):
        return False  # `rank N exited with code C` without PALS's host is a supervisor's (launchreports.py)
    number = int(m.group(3)) if m.group(3) is not None else None
    where = agent_where(line)
    state.add("task_exits", TaskExit(
        line=where["line"], time=where["time"], host=_host(m.group(1)), tasks=(int(m.group(2)),), launcher="pals",
        state=f"died from signal {number}" if number is not None else f"exited with code {m.group(4)}",
        signal=SIGNALS.get(number, "") if number is not None else "",
        exitcode=int(m.group(4)) if m.group(4) is not None else None))
    return True


def read_hydra(state: TorchState, line: Line) -> bool:
    """Hydra's BAD TERMINATION box: the head opens it, its `RANK R PID P RUNNING AT H` and
    `KILLED BY SIGNAL: S` / `EXIT CODE: C` lines fill it (module doc)."""
    b = line.text
    if _HYDRA_HEAD in b:
        state.hydra_box = {"at": str(line.number)}
        return True
    box = state.hydra_box
    if box is None:
        return False
    if line.number - int(box["at"]) > _HYDRA_LINES:
        state.hydra_box = None
        return False
    if (m := _HYDRA_WHO.search(b)) is not None:
        box.update(rank=m.group(1) or "", pid=m.group(2), host=m.group(3))
        return True
    m = _HYDRA_END.search(b)
    if m is None:
        return False
    state.hydra_box = None
    if not box.get("rank"):
        return True  # older Hydra's box names no rank
    number = int(m.group(1)) if m.group(1) is not None else None
    where = agent_where(line)
    state.add("task_exits", TaskExit(
        line=where["line"], time=where["time"], host=_host(box.get("host")), tasks=(int(box["rank"]),),
        pid=int(box["pid"]), launcher="hydra",
        state=f"killed by signal {number}" if number is not None else f"exit code {m.group(2)}",
        exitcode=int(m.group(2)) if m.group(2) is not None else None,
        signal=SIGNALS.get(number, "") if number is not None else ""))
    return True


_MPD_ABORT_WORDS = "caused collective abort of all ranks"
_MPD_ABORT = re.compile(r"[Rr]ank (\d{1,9}) in job ")
_MPD_STATUS = re.compile(r"[Ee]xit status of rank (\d{1,9}): (?:killed by signal (\d{1,3})|return code (-?\d{1,3}))\b")
_MPD_LINES = 6  # lines after the abort line its status may take (a paste's blank lines)


def read_mpd(state: TorchState, line: Line) -> bool:
    """mpd's `rank R in job J caused collective abort of all ranks` and the `exit status of
    rank R: ...` line after it (module doc)."""
    b = line.text
    if _MPD_ABORT_WORDS in b:
        m = _MPD_ABORT.search(b, 0, b.index(_MPD_ABORT_WORDS))
        state.mpd_abort = (int(m.group(1)), line.number) if m else None
        return m is not None
    opened, state.mpd_abort = state.mpd_abort, None
    m = _MPD_STATUS.search(b)
    if m is None or opened is None or int(m.group(1)) != opened[0] or line.number - opened[1] > _MPD_LINES:
        return False
    number = int(m.group(2)) if m.group(2) is not None else None
    where = agent_where(line)
    state.add("task_exits", TaskExit(
        line=where["line"], time=where["time"], tasks=(opened[0],), launcher="mpd",
        state=f"killed by signal {number}" if number is not None else f"return code {m.group(3)}",
        exitcode=int(m.group(3)) if m.group(3) is not None else None,
        signal=SIGNALS.get(number, "") if number is not None else ""))
    return True


_HOROVOD_WORDS = " exit with status code "
_HOROVOD_EXIT = re.compile(r"Process (\d{1,9}) exit with status code (-?\d{1,4})\.\s{0,16}$")


def read_horovod_exit(state: TorchState, line: Line) -> bool:
    """horovodrun's `Process N exit with status code C.` (module doc)."""
    m = _HOROVOD_EXIT.match(line.text)
    if m is None:
        return False
    rank, code = int(m.group(1)), int(m.group(2))
    where = agent_where(line)
    state.add("task_exits", TaskExit(
        line=where["line"], time=where["time"], tasks=(rank,), launcher="horovodrun",
        state=f"exit status code {code}", exitcode=code if code >= 0 else None,
        signal=SIGNALS.get(-code, "") if code < 0 else ""))
    return True


_HARNESS_SOURCE = "common_distributed.py:"
_HARNESS_CAUGHT = "Caught exception:"


def read_harness_caught(state: TorchState, line: Line) -> bool:
    """The test harness's `Caught exception:` of a labelled rank (module doc)."""
    if _HARNESS_SOURCE not in line.source or line.global_rank is None:
        return False
    state.add("harness_caught", HarnessCaught(**where(line)))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("harness-caught", lambda b: b.startswith(_HARNESS_CAUGHT), read_harness_caught),
    Handler("pals-rank-end", lambda b: "died from signal" in b or "exited with code" in b, read_pals),
    Handler("hydra-box", lambda b: _HYDRA_HEAD in b or "RUNNING AT" in b or "SIGNAL:" in b or "EXIT " in b,
            read_hydra),
    Handler("mpd-abort", lambda b: _MPD_ABORT_WORDS in b or "xit status of rank" in b, read_mpd),
    Handler("horovod-exit", lambda b: b.startswith("Process ") and _HOROVOD_WORDS in b, read_horovod_exit),
)

__all__ = ["HANDLERS", "read_harness_caught", "read_hydra", "read_mpd", "read_pals"]
