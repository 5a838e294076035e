"""torchrun's agent and the launchers on how workers and tasks ended, one handler each: a
worker that failed, srun's and mpirun's word on their tasks, the agent signalled, the
agent closing workers, the worker group's steps. Their labels are a node's, never a rank."""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import (
    SIGNALS,
    AgentSignal,
    ClosingSignal,
    GroupEventKind,
    TaskExit,
    WorkerFailed,
    WorkerGroupEvent,
)
from healthcheck.parsers.torch_log.state import TorchState, agent_where
from healthcheck.parsers.torch_log.text import task_ids, to_int

# the agent's line up to the pid is what says a worker failed; a paste may cut it anywhere
# after the pid (field/issues-12: `... (pid: 14447) of binary:` with nothing after it, twice)
_WORKER_FAILED = re.compile(
    r"failed \(exitcode: (-?\d{1,20})\) local_rank: (\d{1,9}) \(pid: (\d{1,10})(?:\)|[ \t]{0,64}$)")
# torch 1.9-1.10's `@record` without an error file: `Child process P (local_rank R) FAILED
# (exitcode N)` in its CHILD PROCESS FAILED WITH NO ERROR_FILE banner. R is the key of the
# ChildFailedError's failures, a GlobalRank, printed under the word local_rank
# (errors/__init__.py: `_no_error_file_warning_msg(rank, failure)` with `rank, failure =
# e.get_first_failure()`): the global rank of the agent's first failure in time
_CHILD_BANNER = re.compile(r"Child process (\d{1,10}) \(local_rank (\d{1,9})\) FAILED \(exitcode (-?\d{1,20})\)")
_WORKER_BINARY = re.compile(r" of (?:binary|fn):(?: (.{0,512}))?")  # after the pid's `)`: the program, if not cut
_DEATH = re.compile(r"Received (\d{1,3}) death signal, shutting down workers")
_GOT_SIGNAL = re.compile(r"Process (\d{1,10}) got signal: (?:Signals\.)?(\w{1,16})")
# torchelastic's agent (`Sending process P closing signal`, `Closing process P via signal`) and
# mp.spawn's parent once one process failed (`Terminating process P via signal SIGTERM`, torch
# 2.x's spawn.py under glog: field/issues-14): each stops a process that did not fail
_CLOSING = re.compile(
    r"(?:Sending process (\d{1,10}) closing signal|(?:Closing|Terminating) process (\d{1,10}) via signal) (\w{1,16})")
# torchrun's agent when a worker outlived its closing signal (elastic/multiprocessing/api.py):
# `Unable to shutdown process P via 15, forcefully exiting via 9`
_FORCED = re.compile(r"Unable to shutdown process (\d{1,10}) via (\w{1,16}), forcefully exiting via (\w{1,16})")
_GROUP_RESTART = re.compile(
    r"\[([^\]]{1,64})\] Worker group (\w{1,32})\. (\d{1,9})/(\d{1,9}) attempts left; will restart worker group"
)
_GROUP_STEP = re.compile(r"\[([^\]]{1,64})\] (Stopping|Starting|Rendezvous'ing) worker group")
_GROUP_DONE = re.compile(r"\[([^\]]{1,64})\] worker group successfully finished")
_GROUP_NODES = re.compile(r"\[([^\]]{1,64})\] Detected (\d{1,9}) new nodes from group_rank=\d{1,9}; will restart")
_GROUP_STEPS: dict[str, GroupEventKind] = {"Stopping": "stopping", "Starting": "starting",
                                           "Rendezvous'ing": "rendezvous"}
_TASK_EXIT = re.compile(r"srun: error: ([^\s:]{1,256}): tasks? ([\d,\-]{1,4096}): (.{1,200})$")
_EXIT_CODE = re.compile(r"Exited with exit code (\d{1,3})")
_MPIRUN_PROCESS = re.compile(r"\s{0,8}Process name: \[\[\d{1,10},\d{1,10}\],(\d{1,9})\]")
_MPIRUN_EXIT = re.compile(r"\s{0,8}Exit code: {0,16}(\d{1,3})\s*$")
# Open MPI 4.1.4 as captured here (held-out-2 saved outputs); a paste may redact the pid and
# the node (`with PID xxxxxx on node xxxxxxxx`, field-2), or Open MPI print no node name at all
# (`with PID 0 on node exited on signal 4`, field-9): the rank and the signal still say it.
# The launcher under any of Open MPI's names for it (`mpiexec` as often as `mpirun`; orterun,
# prterun in Open MPI 5)
OMPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun")
# Open MPI prints the launcher's own basename (argv[0]): a distribution's or an image's renamed
# binary keeps a suffix (Debian's `mpirun.openmpi`, Horovod and Kubeflow MPIJob images'
# `mpirun.real` behind a wrapper script)
OMPI_NAME = rf"(?:{'|'.join(OMPI_LAUNCHERS)})(?:\.[A-Za-z0-9_-]{{1,24}})?"
MPIRUN_SIGNAL = re.compile(
    rf"{OMPI_NAME} noticed that process rank (\d{{1,9}}) with PID (\S{{1,32}}) "
    r"on node (?:(\S{1,256}) )?exited on signal (\d{1,3})")
_REDACTED = re.compile(r"[xX*#?]{1,256}|<[^>]{0,64}>")  # a host a paste blanked out: no host
# srun's `task N: <strsignal(sig)>[ (core dumped)]` (src/srun/libsrun's task-finish report):
# every signal's text as glibc's strsignal() words it, and Slurm's own "Out Of Memory"
_TASK_SIGNALS = {"Hangup": "SIGHUP", "Interrupt": "SIGINT", "Quit": "SIGQUIT", "Illegal instruction": "SIGILL",
                 "Trace/breakpoint trap": "SIGTRAP", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
                 "Floating point exception": "SIGFPE", "Killed": "SIGKILL", "User defined signal 1": "SIGUSR1",
                 "Segmentation fault": "SIGSEGV", "User defined signal 2": "SIGUSR2", "Broken pipe": "SIGPIPE",
                 "Alarm clock": "SIGALRM", "Terminated": "SIGTERM", "Stack fault": "SIGSTKFLT",
                 "CPU time limit exceeded": "SIGXCPU", "File size limit exceeded": "SIGXFSZ",
                 "Bad system call": "SIGSYS", "Out Of Memory": "SIGKILL"}
_CORE_DUMPED = " (core dumped)"
# the same report quoted inside a sentence (a question pasting the error after its own words):
# only srun's own form, `srun: error: HOST: task N: ` then one of srun's task-end words, ended
# there (a comma, a stop, the line's end), so a `task N` of anyone else's words is never read
_TASK_ENDS = "|".join(re.escape(w) for w in sorted(_TASK_SIGNALS, key=len, reverse=True))
_TASK_EXIT_INLINE = re.compile(
    r"(?<![\w./-])srun: error: ([^\s:]{1,256}): tasks? ([\d,\-]{1,4096}): "
    rf"((?:Exited with exit code \d{{1,3}}|{_TASK_ENDS})(?: \(core dumped\))?)(?![\w-])")
# a torchrun command line (also `python -m torch.distributed.run`/`.launch`) and its sizes
_LAUNCHER = re.compile(r"(?<![\w./-])(?:torchrun|torch\.distributed\.(?:run|launch))(?![\w.-])")
_NPROC = re.compile(r"--nproc[_-]per[_-]node[= ]{1,4}(\d{1,5})(?![\w.:-])")
_NNODES = re.compile(r"--nnodes(?:[= ]{1,4}(\S{1,16}))?")
# an MPI or Slurm launch command and the processes it starts: Open MPI's and MPICH's `-np N`/`-n N`,
# horovodrun's `-np N`, srun's `-n N`/`--ntasks=N`, only among the options before the program
_MPI_LAUNCHER = re.compile(r"(?<![\w./-])(?:mpirun|mpiexec|orterun|prterun|horovodrun|srun)(?![\w.:-])")
_PROCESS_COUNT = re.compile(r"(?:-{1,2}np|-n|--ntasks)(?:=| {1,4}|(?<=-n)(?=\d))(\d{1,7})")
_OPTIONS_MAX = 32  # words looked at after the launcher
# the lines Slurm's own tools print (srun, slurmstepd and its `slurmstepd-HOST:`, salloc, sbatch)
_SLURM_OWN = ("srun: ", "slurmstepd", "salloc: ", "sbatch: ")
_LAUNCH_WORDS = frozenset({"srun", "salloc", "sbatch", "mpirun", "mpiexec", "torchrun", "$", "#", ">"})


def job_line(text: str) -> bool:
    """Whether a line may be the job's own output: not blank, not Slurm's tools' own line,
    not a launch command as pasted (`srun -n 4 ./a.out`, a prompt's `$ srun ...`)."""
    words = text.split(maxsplit=1)
    return bool(words) and not text.startswith(_SLURM_OWN) and words[0] not in _LAUNCH_WORDS


_STEP_ABORTED = ("Job step aborted", "CANCELLED", "Force Terminated", "Terminating StepId", "TIME LIMIT")
_WORKER_WORDS = "failed (exitcode: "


def read_worker_failed(state: TorchState, line: Line) -> bool:
    """The agent's `failed (exitcode: N) local_rank: L (pid: P) of binary: B`, under any
    logger's prefix, also cut anywhere after the pid (the binary then unknown: "")."""
    m = _WORKER_FAILED.search(line.text)
    if m is None:
        return False
    exitcode = int(m.group(1)) if to_int(m.group(1)) is not None else 0
    binary = _WORKER_BINARY.match(line.text, m.end())
    state.add("worker_failures", WorkerFailed(
        **agent_where(line), exitcode=exitcode, local_rank=to_int(m.group(2)), pid=to_int(m.group(3)),
        binary=clip((binary.group(1) or "").strip(), 512) if binary else "",
        signal=SIGNALS.get(-exitcode, "") if exitcode < 0 else ""))
    return True


def read_child_banner(state: TorchState, line: Line) -> bool:
    """torch 1.9's `Child process P (local_rank R) FAILED (exitcode N)`: the agent's first
    failed worker, R its global rank (see _CHILD_BANNER)."""
    m = _CHILD_BANNER.search(line.text)
    if m is None:
        return False
    exitcode = int(m.group(3)) if to_int(m.group(3)) is not None else 0
    state.add("worker_failures", WorkerFailed(
        **agent_where(line), rank=to_int(m.group(2)), exitcode=exitcode, pid=to_int(m.group(1)),
        signal=SIGNALS.get(-exitcode, "") if exitcode < 0 else ""))
    return True


def read_mpirun_signal(state: TorchState, line: Line) -> bool:
    """Open MPI's `process rank R ... exited on signal N`: the first rank it saw killed."""
    m = MPIRUN_SIGNAL.match(line.text)
    if m is None:
        return False
    number = int(m.group(4))
    node = m.group(3) or ""
    host = "" if _REDACTED.fullmatch(node) else clip(node, 256)
    state.add("task_exits", TaskExit(**agent_where(line), host=host, tasks=(int(m.group(1)),),
                                     state=f"exited on signal {number}", signal=SIGNALS.get(number, ""),
                                     launcher="mpirun"))
    return True


def read_mpirun_exit(state: TorchState, line: Line) -> bool:
    """Open MPI's `mpirun detected that one or more processes exited with non-zero status`
    box: `Process name: [[J,1],R]` then `Exit code: N`, the first rank to exit non-zero."""
    m = _MPIRUN_PROCESS.match(line.text)
    if m is not None:
        state.mpirun_process = int(m.group(1))
        return True
    m = _MPIRUN_EXIT.match(line.text)
    rank, state.mpirun_process = state.mpirun_process, None
    if m is None or rank is None:
        return False
    state.add("task_exits", TaskExit(**agent_where(line), tasks=(rank,), exitcode=int(m.group(1)),
                                     state=f"exited with exit code {m.group(1)}", launcher="mpirun"))
    return True


def read_srun(state: TorchState, line: Line) -> bool:
    """srun's own lines: how each task ended, and whether srun had aborted the step."""
    b = line.text
    own = b.startswith(_SLURM_OWN[:2])
    if own and any(w in b for w in _STEP_ABORTED):
        state.step_aborted = True
        return True
    m = (_TASK_EXIT.match(b) if own else None) or _TASK_EXIT_INLINE.search(b)
    if m is None:
        return False
    host, tasks, ended = m.group(1), task_ids(m.group(2)), m.group(3).strip()
    code = _EXIT_CODE.match(ended)
    state.add("task_exits", TaskExit(**agent_where(line), host=clip(host, 256), tasks=tasks,
                                     state=clip(ended, 64), exitcode=to_int(code.group(1)) if code else None,
                                     signal=_TASK_SIGNALS.get(ended.removesuffix(_CORE_DUMPED), ""),
                                     oom=ended.lower() == "out of memory",
                                     after_abort=state.step_aborted, job_lines_before=state.job_lines))
    return True


def read_agent_signal(state: TorchState, line: Line) -> bool:
    """`Received 15 death signal, shutting down workers`, SignalException's `Process P got signal: S`."""
    b = line.text
    m = _DEATH.search(b)
    if m:
        number = to_int(m.group(1))
        state.add("agent_signals", AgentSignal(**agent_where(line), kind="death-signal",
                                               signal=SIGNALS.get(number or 0, ""), number=number))
        return True
    m = _GOT_SIGNAL.search(b)
    if m is None:
        return False
    value = m.group(2)
    number = to_int(value)
    name = value if number is None else SIGNALS.get(number, "")
    if number is None:
        number = next((n for n, s in SIGNALS.items() if s == name), None)
    state.add("agent_signals", AgentSignal(**agent_where(line), kind="signal-exception", signal=name,
                                           number=number, pid=to_int(m.group(1))))
    return True


def read_closing_signal(state: TorchState, line: Line) -> bool:
    """`Sending process P closing signal SIGTERM`, `Closing process P via signal SIGTERM`,
    mp.spawn's `Terminating process P via signal SIGTERM`."""
    m = _CLOSING.search(line.text)
    pid = to_int(m.group(1) or m.group(2)) if m else None
    if m is None or pid is None:
        return False
    state.add("closing_signals", ClosingSignal(**agent_where(line), pid=pid, signal=m.group(3)))
    return True


def read_forced_kill(state: TorchState, line: Line) -> bool:
    """`Unable to shutdown process P via 15, forcefully exiting via 9`: the agent's own SIGKILL
    of a worker that did not end on its closing signal (hung in a handler, blocked): a closing
    signal too, marked `forced`; the worker's SIGKILL is the agent's, not its death's cause."""
    m = _FORCED.search(line.text)
    pid = to_int(m.group(1)) if m else None
    if m is None or pid is None:
        return False
    number = to_int(m.group(3))
    signal = SIGNALS.get(number, "") if number is not None else m.group(3)
    state.add("closing_signals", ClosingSignal(**agent_where(line), pid=pid, signal=signal or m.group(3), forced=True))
    return True


def _group_event(b: str) -> dict | None:
    m = _GROUP_RESTART.search(b)
    if m:
        return {"kind": "restart", "role": m.group(1), "state": m.group(2), "attempts_left": to_int(m.group(3)),
                "max_restarts": to_int(m.group(4))}
    m = _GROUP_STEP.search(b)
    if m:
        return {"kind": _GROUP_STEPS[m.group(2)], "role": m.group(1)}
    m = _GROUP_DONE.search(b)
    if m:
        return {"kind": "finished", "role": m.group(1)}
    m = _GROUP_NODES.search(b)
    if m:
        return {"kind": "membership-change", "role": m.group(1), "new_nodes": to_int(m.group(2))}
    return None


def launched_world(text: str) -> int | None:
    """The world a torchrun (torch.distributed.run/launch) command line starts: its
    `--nproc_per_node N` times its `--nnodes M` (torchrun's default 1, `--standalone` 1);
    None where either is not a number (`gpu`, `auto`, an elastic range `1:4`)."""
    m = _LAUNCHER.search(text)
    if m is None:
        return None
    per_node = _NPROC.search(text, m.end())
    if per_node is None:
        return None
    nodes = _NNODES.search(text, m.end())
    if nodes is not None and not (nodes.group(1) or "").isdigit():
        return None  # a range of nodes (elastic), a shell variable: the world not known
    return int(per_node.group(1)) * (int(nodes.group(1)) if nodes is not None else 1)


def _is_program(word: str) -> bool:
    """The launched program's word, after which `-n` is its own option, not the launcher's."""
    return "python" in word or word.endswith((".py", ".sh")) or word.startswith(("./", "/"))


def launched_np(text: str) -> int | None:
    """The processes an MPI or Slurm launch command line starts (`mpirun -np 4 python t.py`,
    `srun --ntasks=8 ...`, `horovodrun -np 2 ...`): its count among the options before the
    program, None where it gives none."""
    m = _MPI_LAUNCHER.search(text)
    if m is None:
        return None
    words = text[m.end():m.end() + 1024].split(None, _OPTIONS_MAX)[:_OPTIONS_MAX]
    for i, word in enumerate(words):
        if _is_program(word):
            return None
        option = _PROCESS_COUNT.fullmatch(word) or (
            _PROCESS_COUNT.fullmatch(f"{word} {words[i + 1]}") if i + 1 < len(words) else None)
        if option is not None:
            return int(option.group(1)) or None
    return None


def read_process_count(state: TorchState, line: Line) -> bool:
    """An MPI or Slurm launch command in the text: the processes it starts, kept where every
    such command agrees (0 where they do not)."""
    count = launched_np(line.text)
    if count is None:
        return False
    state.launched_np = count if state.launched_np in (None, count) else 0
    return True


def read_launch_command(state: TorchState, line: Line) -> bool:
    """A torchrun command in the text (a paste's command line): the world it starts, kept
    where every such command agrees (0 where they do not)."""
    world = launched_world(line.text)
    if world is None or world < 1:
        return False
    state.launched_world = world if state.launched_world in (None, world) else 0
    return True


def read_worker_group(state: TorchState, line: Line) -> bool:
    """`[default] Worker group FAILED. 3/3 attempts left; will restart worker group` and the other steps."""
    event = _group_event(line.text)
    if event is None:
        return False
    state.add("worker_group", WorkerGroupEvent(**agent_where(line), **event))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("worker-failed", lambda b: _WORKER_WORDS in b, read_worker_failed),
    Handler("child-banner", lambda b: ") FAILED (exitcode " in b, read_child_banner),
    Handler("mpirun-signal",
            lambda b: b.startswith(OMPI_LAUNCHERS) and " noticed that " in b and _WORKER_WORDS not in b,
            read_mpirun_signal),
    Handler("srun", lambda b: (b.startswith(("srun: ", "slurmstepd")) or "srun: error: " in b)
            and _WORKER_WORDS not in b, read_srun),
    Handler("agent-signal", lambda b: "death signal" in b or "got signal: " in b, read_agent_signal),
    Handler("closing-signal", lambda b: "closing signal" in b or "via signal" in b, read_closing_signal),
    Handler("forced-kill", lambda b: "forcefully exiting via" in b, read_forced_kill),
    Handler("worker-group", lambda b: "orker group" in b, read_worker_group),
    Handler("launch-command", lambda b: "--nproc" in b, read_launch_command),
    Handler("mpi-launch-command", lambda b: "-n" in b and _MPI_LAUNCHER.search(b) is not None, read_process_count),
    Handler("mpirun-exit", lambda b: "Process name: [[" in b or "Exit code: " in b, read_mpirun_exit),
)
