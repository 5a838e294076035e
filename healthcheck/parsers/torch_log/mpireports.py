"""MPI runtimes' own reports of one rank's end, beside Open MPI's MPI_ABORT box (mpiabort.py):

* MPICH's fatal error handler (and its forks: Cray MPICH, Intel MPI) aborts the job from
  the rank whose MPI call failed, printing `Abort(CODE) (rank R in comm C): Fatal error in
  PMPI_X: ...` (Intel MPI: `Abort(CODE) on node N (rank R in comm C): ...`; Cray MPICH puts
  `MPICH ERROR [Rank R] [job id J] [DATE] [HOST] - ` before it; Cray MPT 7, MPICH 3's fork
  before Cray MPICH 8, prints `Rank R [DATE] [HOST] Fatal error in MPI_X: ...`, R the world's
  rank, no Abort code). Comm 0 is MPI_COMM_WORLD,
  so R is the world's rank there only. The rank's own death (type MPI_ABORT, native); where
  the call is MPI_Init/MPI_Init_thread the rank failed to start (`collective` "MPI_Init",
  a setup function: diagnose/setupdeath.py). Where two ranks or more report it in a
  communication call, their calls failed alike, as a peer's death leaves them: each is a
  collective's failure, no rank's own death (`shared_fatal_errors`, after the parse).
* MPICH's `application called MPI_Abort(COMM, CODE) - process N` (one line per process
  that called it): kept as an MpiAbortCall, not as an exception, since a program may call
  MPI_Abort on every process alike (an input error every process found): which of them
  ended the job is the diagnosis' to judge (diagnose/mpiends.py). N is the caller's rank in
  COMM (MPIR_Abort_impl prints `comm_ptr->rank`; an unnamed COMM is `comm=0xHANDLE`), the
  world's only in MPI_COMM_WORLD; the world rank of a caller in another communicator is the
  line's own prefix where it has one: MPID_Abort's `Abort(C) on node W (rank R in comm K): `
  (W is `MPIR_Process.comm_world->rank`, whatever the word says) or Cray MPICH's `MPICH ERROR
  [Rank W]` (`world`; `abort_world_rank` gives whichever the line states).
* Open MPI's `mpirun has exited due to process rank R with PID P on node H exiting
  improperly` (or `exiting without calling "finalize"`; its help text breaks it after `on`,
  sentences.py joins it back): the first process mpirun saw leave without MPI_Finalize. A
  TaskExit of launcher "mpirun" with no exit code (state "exited improperly"), read by
  diagnose/improperexit.py.
* Open MPI's signal report (signalreport.py) carries host and pid only: where the text's own
  launch command starts one process, it is rank 0's (`one_process_world`, after the parse).
* The error stack under MPICH's fatal error in MPI_Init (`FUNC(LINE)....: text` lines): a
  frame of the processes' exchange through the launcher's key-value space (PMI's KVS get,
  fence or barrier, PMIx's, MPICH's business-card `initial_address_exchange`) is said in the
  exception's message (`EXCHANGE_WORDS`): the rank waited on its peers' entries, its own
  set-up did not fail (diagnose/setupdeath.py names no rank for it).
* PETSc's signal handler: `[R]PETSC ERROR: Caught signal number S NAME: ...`, R the rank in
  PETSC_COMM_WORLD (the world's, as PETSc's own `[R]` prefix says): rank R's own death by S.
"""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.agent import OMPI_LAUNCHERS, OMPI_NAME
from healthcheck.parsers.torch_log.facts import SIGNALS, ExceptionRaised, MpiAbortCall, TaskExit
from healthcheck.parsers.torch_log.mpiabort import ABORT_TYPE
from healthcheck.parsers.torch_log.signalreport import DEATH_TYPES
from healthcheck.parsers.torch_log.state import TorchState, agent_where, rank_key, where

_WORLD_COMM = "0"
_CRAY_HEAD = re.compile(r"MPICH ERROR \[Rank (\d{1,9})\] \[job id [^\]]{0,64}\] \[[^\]]{0,64}\] "
                        r"\[([^\]\s]{1,256})\] - ")
_FATAL = re.compile(r"Abort\((-?\d{1,12})\)(?: on node \d{1,9})? \(rank (\d{1,9}) in comm (\d{1,12})\): "
                    r"Fatal error in P?(MPI_\w{1,64})(?:: (.{0,200}))?")
# Cray MPT 7: `Rank 0 [Fri May  8 18:08:48 2020] [c0-0c0s0n0] Fatal error in MPI_Comm_spawn: ...`
_MPT_FATAL = re.compile(r"(?<![\w-])Rank (\d{1,9}) \[[^\]]{1,64}\] \[[^\]\s]{1,256}\] "
                        r"Fatal error in P?(MPI_\w{1,64})(?:: (.{0,200}))?")
_INIT_CALLS = ("MPI_Init", "MPI_Init_thread")
INIT_CALL = "MPI_Init"
_CALLED = re.compile(r"application called MPI_Abort\((comm=0x[0-9A-Fa-f]{1,16}|\w{1,64}), (-?\d{1,12})\) "
                     r"- process (\d{1,9})")
_ON_NODE = re.compile(r"Abort\(-?\d{1,12}\) on node (\d{1,9}) \(rank \d{1,9} in comm \d{1,12}\): ")
_WORLD_NAME = "MPI_COMM_WORLD"
IMPROPER_STATE = "exited improperly"
IMPROPER_EXIT = re.compile(
    rf"{OMPI_NAME} has exited due to process rank (\d{{1,9}}) with PID (\S{{1,32}}) on "
    r"node (?:(\S{1,256}) )?exiting (?:improperly|without calling \"finalize\")")
IMPROPER_HEADS = tuple(f"{name} has exited due to" for name in OMPI_LAUNCHERS)
_PETSC = re.compile(r"\[(\d{1,9})\]PETSC ERROR: Caught signal number (\d{1,3}) ([A-Z]{1,8})")
_STACK_OPEN = "mpich-init-stack"
# MPICH's error stack frame: `MPIR_pmi_kvs_get(227).......: PMI_KVS_Get returned -1`
_FRAME = re.compile(r"\s{0,8}(\w{1,64})\(\d{1,6}\)\.{0,64}: ?(.{0,200})")
# frames of the exchange between processes through the launcher (PMI/PMIx): a wait on peers
_EXCHANGE = re.compile(r"pmi|address_exchange|bc_table|kvs|fence", re.IGNORECASE)
# what the message then says (setupdeath.py reads it)
EXCHANGE_WORDS = "in the processes' exchange through the launcher"
_REDACTED = re.compile(r"[xX*#?.]{1,256}|<[^>]{0,64}>")


def read_fatal_error(state: TorchState, line: Line) -> bool:
    """MPICH's `Abort(CODE) (rank R in comm 0): Fatal error in PMPI_X`: rank R's own abort."""
    m = _FATAL.search(line.text)
    if m is not None and m.group(3) == _WORLD_COMM:
        code, rank, call, said = m.group(1), int(m.group(2)), m.group(4), m.group(5)
        head = _CRAY_HEAD.search(line.text, 0, m.start() + 1)
    elif (t := _MPT_FATAL.search(line.text)) is not None:
        code, rank, call, said, head = "", int(t.group(1)), t.group(2), t.group(3), None
    else:
        return False
    at = where(line)
    if at["rank"] is None:
        at["rank"] = rank
    host = f" on {head.group(2)}" if head else ""
    aborted = f" (Abort({code}))" if code else ""
    index = state.add("exceptions", ExceptionRaised(
        **at, type=ABORT_TYPE, native=True, collective=INIT_CALL if call in _INIT_CALLS else "",
        message=clip(f"rank {rank}{host}: fatal error in {call}{aborted}: {said or ''}".rstrip(": "), 300)))
    if call in _INIT_CALLS and index >= 0:
        state.start(_STACK_OPEN, index, rank_key(line))
    return True


def read_init_stack(state: TorchState, line: Line) -> bool:
    """A frame of the error stack under MPICH's fatal error in MPI_Init: one of the exchange
    through the launcher is said in the exception's message (module doc), once."""
    opened = state.find_open(_STACK_OPEN, rank_key(line))
    m = _FRAME.fullmatch(line.text)
    if opened is None or m is None:
        return False
    if _EXCHANGE.search(m.group(1)) or _EXCHANGE.search(m.group(2)):
        e = state.facts["exceptions"][opened.index]
        said = f"{m.group(1)}: {m.group(2).strip()}" if m.group(2).strip() else m.group(1)
        state.amend("exceptions", opened.index, message=clip(f"{e.message} ({EXCHANGE_WORDS}: {said})", 400))
        state.close(_STACK_OPEN, opened.key)
    return True


def read_abort_call(state: TorchState, line: Line) -> bool:
    """MPICH's `application called MPI_Abort(COMM, CODE) - process N`, with the caller's world
    rank where the line's prefix states it (module doc)."""
    m = _CALLED.search(line.text)
    if m is None:
        return False
    head = _CRAY_HEAD.search(line.text, 0, m.start() + 1) or _ON_NODE.search(line.text, 0, m.start() + 1)
    state.add("mpi_abort_calls", MpiAbortCall(**agent_where(line), comm=m.group(1), code=int(m.group(2)),
                                              process=int(m.group(3)), world=int(head.group(1)) if head else None))
    return True


def abort_world_rank(call: MpiAbortCall) -> int | None:
    """The world rank of the process that called MPI_Abort: its process number in
    MPI_COMM_WORLD, else the line's prefix's (module doc), else None."""
    return call.process if call.comm == _WORLD_NAME else call.world


def read_improper_exit(state: TorchState, line: Line) -> bool:
    """Open MPI's `mpirun has exited due to process rank R ... exiting improperly`."""
    m = IMPROPER_EXIT.search(line.text)
    if m is None:
        return False
    node = m.group(3) or ""
    pid = m.group(2)
    state.add("task_exits", TaskExit(**agent_where(line), tasks=(int(m.group(1)),), launcher="mpirun",
                                     host="" if _REDACTED.fullmatch(node) else clip(node, 256),
                                     pid=int(pid) if pid.isdigit() and int(pid) > 0 else None,
                                     state=IMPROPER_STATE))
    return True


def read_petsc_signal(state: TorchState, line: Line) -> bool:
    """PETSc's `[R]PETSC ERROR: Caught signal number S NAME`: rank R died of signal S."""
    m = _PETSC.search(line.text)
    if m is None:
        return False
    at = where(line)
    if at["rank"] is None:
        at["rank"] = int(m.group(1))
    number = int(m.group(2))
    state.add("exceptions", ExceptionRaised(**at, type=SIGNALS.get(number, "signal"), native=True,
                                            message=clip(f"PETSc caught signal {number} ({m.group(3)})", 200)))
    return True


# the call a fatal error's message names (read_fatal_error writes it so)
_FATAL_CALL = re.compile(r"fatal error in (MPI_\w{1,64})(?: \(Abort\(|:|$)")


def shared_fatal_errors(state: TorchState) -> None:
    """Where two ranks or more report MPICH's fatal error in a communication call (not
    MPI_Init), their calls failed alike, as a peer's death leaves every rank that talked to
    it: each is marked as raised in its call (a collective's failure, a victim's), and none
    is taken for the rank's own death; one rank's alone stays its own."""
    found = [(i, m.group(1)) for i, e in enumerate(state.facts["exceptions"])
             if e.type == ABORT_TYPE and not e.collective and (m := _FATAL_CALL.search(e.message))]
    if len({state.facts["exceptions"][i].rank for i, _ in found}) < 2:
        return
    for index, call in found:
        state.amend("exceptions", index, collective=call)


def after_parse(state: TorchState) -> None:
    """What these reports say once the whole text is read (one_process_world, shared_fatal_errors)."""
    one_process_world(state)
    shared_fatal_errors(state)


def one_process_world(state: TorchState) -> None:
    """Where the text's own launch command starts one process (`mpirun -n 1`, `-np 1`:
    `launched_np`) and no line names a rank past 0, a process's own report of its death that
    names no rank (Open MPI's `[host:pid] *** Process received signal ***`, which carries only
    host and pid) is rank 0's: the world's only rank."""
    if state.launched_np != 1 or any(r > 0 for r in state.prefixed):
        return
    for index, e in enumerate(state.facts["exceptions"]):
        if e.rank is None and e.pid is not None and e.native and e.type in DEATH_TYPES:
            state.amend("exceptions", index, rank=0)


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("mpich-fatal", lambda b: "Fatal error in " in b and ("Abort(" in b or "Rank " in b), read_fatal_error),
    Handler("mpich-init-stack", lambda b: "(" in b and "):" in b or ")." in b, read_init_stack),
    Handler("mpich-abort-call", lambda b: "application called MPI_Abort(" in b, read_abort_call),
    Handler("ompi-improper-exit", lambda b: "has exited due to process rank" in b, read_improper_exit),
    Handler("petsc-signal", lambda b: "PETSC ERROR: Caught signal number" in b, read_petsc_signal),
)

__all__ = ["EXCHANGE_WORDS", "HANDLERS", "IMPROPER_EXIT", "IMPROPER_HEADS", "IMPROPER_STATE", "INIT_CALL",
           "abort_world_rank",
           "after_parse", "one_process_world", "read_abort_call", "shared_fatal_errors",
           "read_fatal_error", "read_improper_exit", "read_init_stack", "read_petsc_signal"]
