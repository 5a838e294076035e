"""`hc bw serve`: one process per node that runs torch sweeps on request, for a deep sweep's
tests between nodes: torch is imported, CUDA and the device set up, once per node for the
whole sweep instead of once per test. On a node that is seconds per test (torch's import
from a shared file system, a CUDA context), and the rounds of a sweep start every node's
worker at the same moment, which is where a sweep's wall time went.

The protocol, one line each way (stdout lines hc does not own, NCCL's INFO for one, are
skipped by the reader: every line of ours starts with PREFIX):
  worker, once started:  PREFIX {"ready": true, "pid": P, "pgid": G, "host": H, "torch": V, "backend": B,
                                 "device": D}
                         (or {"ready": false, "error": "..."} and exit 3: no torch, no GPU)
  hc, per test:          {"id": "t1", "rank": 0, "world_size": 2, "master_addr": "gpu001", "master_port": 29517,
                          "collectives": ["all_reduce"], "sizes": [67108864], "iters": 20, "warmup": 5,
                          "check": true, "timeout_s": 290}
  worker, per test:      PREFIX {"id": "t1", "exit": 0, "error": "", "report": {...SweepReport...}}
The exit field is `hc bw allreduce`'s code for the same outcome (0 exact, 2 wrong results,
3 could not run, 4 a bad request). Each test is its own process group under a store
prefixed with the test's id (rendezvous.py), destroyed and its port freed before the
reply, so the next test, in this process or on a new partner, starts clean.

The worker ends at the end of its input (hc closed the session, or its SSH connection
dropped), after `idle_s` without a request, or, for a rendezvous or collective that never
completes, through the sweep's own watchdog (exit 3 and its one line on stderr): a hung
collective cannot be recovered in-process, so the caller starts a new worker. Inside a
test it reads no input: a caller that gives up on a test ends it by its process group
(pgid, its launcher's: `timeout` over SSH), which is why the ready line names it.
"""

from __future__ import annotations

import os
import select
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Annotated

import msgspec

from healthcheck.bandwidth import torch_sweep as ts
from healthcheck.core import typed
from healthcheck.core.errors import ExitCode, HcError

PREFIX = b"hc-bw-serve "
MAX_REQUEST = 64 * 1024  # bytes in one request line; a longer one is refused, never buffered
IDLE_S = 900.0

_Name = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+$")]
_Host = Annotated[str, msgspec.Meta(min_length=1, max_length=255, pattern=r"^[A-Za-z0-9._:%\[\]-]+$")]


class Request(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One sweep this worker takes part in, as one rank of it."""

    id: _Name
    rank: Annotated[int, msgspec.Meta(ge=0)]
    world_size: Annotated[int, msgspec.Meta(ge=1, le=65536)]
    master_addr: _Host
    master_port: Annotated[int, msgspec.Meta(ge=1, le=65535)]
    sizes: Annotated[list[Annotated[int, msgspec.Meta(ge=1, le=ts.MAX_SIZE)]],
                     msgspec.Meta(min_length=1, max_length=ts.MAX_SIZES)]
    collectives: Annotated[list[str], msgspec.Meta(min_length=1, max_length=len(ts.SWEEP_COLLECTIVES))] = \
        msgspec.field(default_factory=lambda: ["all_reduce"])
    iters: Annotated[int, msgspec.Meta(ge=1, le=100_000)] = 20
    warmup: Annotated[int, msgspec.Meta(ge=0, le=100_000)] = 5
    check: bool = True
    timeout_s: Annotated[float, msgspec.Meta(ge=1, le=86400)] = 120.0


class Reply(msgspec.Struct, frozen=True, omit_defaults=True):
    id: str
    exit: int
    error: str = ""
    report: ts.SweepReport | None = None


class Ready(msgspec.Struct, frozen=True, omit_defaults=True):
    ready: bool
    pid: int = 0
    pgid: int = 0
    host: str = ""
    torch: str = ""
    backend: str = ""
    device: str = ""
    error: str = ""


def encode_line(message: msgspec.Struct) -> bytes:
    return PREFIX + msgspec.json.encode(message) + b"\n"


def serve(backend: str = "auto", local_rank: int = 0, idle_s: float = IDLE_S, *, stdin_fd: int = 0,
          write: Callable[[bytes], None] | None = None, env: dict[str, str] | None = None) -> int:
    """Answer requests from stdin_fd until its end or `idle_s` without one; the exit code."""
    env = dict(os.environ) if env is None else env
    write = write or _write_stdout
    info = ts.RankInfo("hc bw serve", 0, 1, local_rank, "127.0.0.1", 1)
    try:
        corrupt = ts.corrupt_rank(env)
        runtime = ts.open_runtime(backend, info)
    except HcError as exc:
        write(encode_line(Ready(ready=False, error=str(exc))))
        return int(exc.exit_code)
    device = "cpu" if runtime.device.type != "cuda" else f"cuda:{runtime.device.index}"
    write(encode_line(Ready(ready=True, pid=os.getpid(), pgid=os.getpgrp(), host=socket.gethostname(),
                            torch=str(runtime.torch.__version__), backend=runtime.backend, device=device)))
    for line in _lines(stdin_fd, idle_s):
        write(encode_line(answer(runtime, line, corrupt)))
    return 0


def answer(runtime: ts.Runtime, line: bytes | None, corrupt: int | None) -> Reply:
    """The reply to one request line (None: a line longer than MAX_REQUEST)."""
    req = parse_request(line)
    if isinstance(req, Reply):
        return req
    unknown = [c for c in req.collectives if c not in ts.SWEEP_COLLECTIVES]
    if unknown or req.rank >= req.world_size:
        why = f"unknown collectives {unknown}" if unknown else f"rank {req.rank} in a world of {req.world_size}"
        return Reply(id=req.id, exit=int(ExitCode.BAD_INPUT), error=f"bad request: {why}")
    info = ts.RankInfo("hc bw serve", req.rank, req.world_size, 0, req.master_addr, req.master_port)
    opts = ts.SweepOptions(collectives=tuple(req.collectives), sizes=tuple(sorted(set(req.sizes))), iters=req.iters,
                           warmup=req.warmup, check=req.check, backend=runtime.backend, timeout_s=req.timeout_s)
    try:
        report = ts.sweep_once(runtime, info, opts, corrupt, store_prefix=f"hc-bw-serve/{req.id}")
    except HcError as exc:
        return Reply(id=req.id, exit=int(exc.exit_code), error=f"{ts.rank_prefix(info)}{exc}")
    problem = ts.report_error(report)  # the exit `hc bw allreduce` would give
    return Reply(id=req.id, exit=int(problem.exit_code) if problem else 0, error=str(problem or ""), report=report)


def parse_request(line: bytes | None) -> Request | Reply:
    """The request a line holds, or the refusal to send back (exit 4): a line too long,
    not UTF-8, not JSON, or not a Request. Never raises: a bad line ends no worker."""
    if line is None:
        return Reply(id="", exit=int(ExitCode.BAD_INPUT), error=f"a request longer than {MAX_REQUEST} bytes")
    try:
        # msgspec checks UTF-8 only inside strings, and raises UnicodeDecodeError there
        # (not its DecodeError): checked first, for every byte of the line
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Reply(id="", exit=int(ExitCode.BAD_INPUT),
                     error=f"bad request: not UTF-8 (byte {exc.start}: {line[exc.start:exc.start + 1]!r})")
    try:
        return typed.decode_json(line, Request)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        return Reply(id=_id_of(line), exit=int(ExitCode.BAD_INPUT), error=f"bad request: {str(exc)[:200]}")


def _id_of(line: bytes) -> str:
    """A bad request's id where one can be read, so the caller can match the refusal."""
    try:
        got = msgspec.json.decode(line)
    except (msgspec.DecodeError, ValueError):
        return ""
    value = got.get("id") if isinstance(got, dict) else None
    return value[:64] if isinstance(value, str) else ""


def _lines(fd: int, idle_s: float) -> Iterator[bytes | None]:
    """Request lines from fd until its end or idle_s without input; None for one too long."""
    buf = bytearray()
    skipping = False  # inside a line already refused as too long
    while True:
        cut = buf.find(b"\n")
        if cut >= 0:
            line, buf = bytes(buf[:cut]), buf[cut + 1:]
            if skipping:
                skipping = False
                continue
            if len(line) > MAX_REQUEST:
                yield None
            elif line.strip():
                yield line
            continue
        if len(buf) > MAX_REQUEST:
            if not skipping:
                yield None
            skipping, buf = True, bytearray()
        ready, _, _ = select.select([fd], [], [], idle_s)
        if not ready:
            sys.stderr.write(f"hc bw serve: no request for {idle_s:g} s, ending\n")
            return
        data = os.read(fd, 65536)
        if not data:
            return
        buf += data


def _write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
