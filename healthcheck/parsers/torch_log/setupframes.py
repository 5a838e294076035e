"""The set-up step a traceback ran through: the job's phase read from a traceback's frames, not
from its exception's words.

Every Python version prints a frame as `File "PATH", line N, in FUNC`, so where an exception
was raised is read the same way whatever its message says. A frame of one of the calls that
form a distributed job (STEPS: torch's init_process_group and its rendezvous handlers, the
c10d store they construct, torchrun's agent joining its rendezvous, DeepSpeed's multi-node
runner checking its hosts before it starts any rank, an NCCL communicator's creation through
a Python binding, JAX's and Horovod's initialisation) says the exception was raised while the
job was being set up, whether it reads `Connection reset by peer`, `host not found` or
`CUDA error: unknown error`. The outermost such frame of a traceback names its step
(`ExceptionRaised.setup`); where the frames name none, an exception whose message names the
set-up call that failed (`ncclCommInitRank failed: ...`, a binding's own report of the C
call, which leaves no Python frame) names it. A step in LAUNCHER_STEPS is a launcher's own,
before any rank runs; the others are a rank's.

Whether the job got past its set-up before that exception is not a frame's to say (a
recovery path may call init_process_group again): diagnose/setupframes.py reads that from
the whole text.
"""

from __future__ import annotations

import re

# (a path fragment, the functions of it that are set-up: empty for every function) -> step
STEPS: tuple[tuple[str, frozenset[str], str], ...] = (
    ("/distributed/distributed_c10d.py", frozenset({"init_process_group", "_new_process_group_helper",
                                                    "_store_based_barrier"}), "init_process_group"),
    ("/distributed/rendezvous.py", frozenset(), "rendezvous"),
    ("/distributed/elastic/rendezvous/", frozenset(), "agent-rendezvous"),
    ("/distributed/elastic/agent/server/api.py", frozenset({"_rendezvous", "_initialize_workers"}),
     "agent-rendezvous"),
    ("/deepspeed/launcher/runner.py", frozenset(), "launcher"),
    ("/deepspeed/comm/comm.py", frozenset({"init_distributed"}), "init_process_group"),
    ("/jax/_src/distributed.py", frozenset({"initialize", "connect"}), "jax-initialize"),
    ("/horovod/common/basics.py", frozenset({"init"}), "horovod-init"),
    ("/vllm/distributed/parallel_state.py", frozenset({"init_distributed_environment", "initialize_model_parallel",
                                                       "init_model_parallel_group"}), "init_process_group"),
)
# a binding's frame named for the NCCL/MPI call that sets a communicator up, in any file
# (vLLM's pynccl_wrapper, CuPy's and others' `def ncclCommInitRank(...)`)
SETUP_CALLS = frozenset({"ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitAll", "ncclGetUniqueId",
                         "ncclCommInitRankScalable", "MPI_Init", "MPI_Init_thread"})
LAUNCHER_STEPS = frozenset({"agent-rendezvous", "launcher"})
# `ncclCommInitRank failed: unhandled system error`, `Call to MPI_Init failed`, `failed in ncclCommInitRank`
_CALL_FAILED = re.compile(r"\b(ncclCommInitRank(?:Config|Scalable)?|ncclCommInitAll|ncclGetUniqueId"
                          r"|MPI_Init(?:_thread)?)\b(?:\(\))? {0,4}(?:call )?failed\b"
                          r"|\bfailed (?:in|at) (ncclCommInitRank(?:Config)?|MPI_Init(?:_thread)?)\b")


def frame_step(path: str, func: str) -> str:
    """The set-up step one frame belongs to ("" for any other frame). `path` as printed;
    Windows' backslashes are read as slashes."""
    if func in SETUP_CALLS:
        return func
    path = path.replace("\\", "/")
    for fragment, funcs, step in STEPS:
        if fragment in path and (not funcs or func in funcs):
            return step
    return ""

# a frame's source line calling a set-up call (`self._funcs["ncclCommInitRank"](...)`,
# `lib.ncclCommInitRank(...)`, `MPI_Init(...)`): Python prints the line under its frame, and a
# paste cut inside the traceback may keep that line while its frame's own line is gone
_CALLED = re.compile(r"\b(ncclCommInitRank(?:Config|Scalable)?|ncclCommInitAll|ncclGetUniqueId"
                     r"|MPI_Init(?:_thread)?)\b(?:[\"']\])?\(")


def source_step(code: str) -> str:
    """The set-up call a traceback's source line makes ("" where it makes none)."""
    m = _CALLED.search(code[:1024])
    return m.group(1) if m else ""


def checked_step(expression: str) -> str:
    """The set-up call a failed native check tested the result of: glog's `Check failed:
    ncclCommInitRank(comm, n, id, rank) : unhandled system error (2)` (a framework's
    `CHECK(call)` macro around the C call: the call itself failed) or `== ncclSuccess`
    after it; "" where the checked expression is no set-up call's."""
    m = _CALLED.match(expression.lstrip()[:1024])
    return m.group(1) if m else ""


def message_step(message: str) -> str:
    """The set-up call an exception's message says failed ("" where it names none)."""
    m = _CALL_FAILED.search(message[:1024])
    return next((g for g in m.groups() if g), "") if m else ""


def is_launcher_step(step: str) -> bool:
    """A launcher's own set-up (its rendezvous, its host checks), before any rank runs."""
    return step in LAUNCHER_STEPS


__all__ = ["LAUNCHER_STEPS", "SETUP_CALLS", "STEPS", "checked_step", "frame_step", "is_launcher_step", "message_step",
           "source_step"]
