"""Errors torch raises or logs, one handler each: NCCL and CUDA errors, gloo's transport,
the Flight Recorder's notes, ports in use, rendezvous and store failures, a call on a
group the rank is not in, and the NCCL versions named."""

from __future__ import annotations

import re
from typing import Any

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.peers import PEER, endpoint
from healthcheck.parsers.torch_log.bindsetup import note_bind
from healthcheck.parsers.torch_log.facts import (
    AddressInUse,
    BackendError,
    BackendKind,
    FlightRecorderNote,
    FrKind,
    GlooError,
    GlooKind,
    NotInGroup,
    RendezvousError,
    RendezvousKind,
)
from healthcheck.parsers.torch_log.state import TorchState, group_where, rank_key, where
from healthcheck.parsers.torch_log.text import (
    MESSAGE_MAX,
    basename,
    host_port,
    message_from,
    rest_of,
    to_int,
    type_before,
)

_NCCL_ERROR = re.compile(
    r"NCCL error(?: in: ([^\s,]{1,512}),|:) ([^,]{1,256}?)(?: \(run with NCCL_DEBUG=\w{1,16} for details\))?,"
    r" NCCL version ([\w.+\-]{1,64})"
)
_NCCL_TIMEOUT = re.compile(r"NCCL timeout in: ([^\s,]{1,512})")
_CUDA_ERROR = re.compile(r"CUDA error: ([^\n]{1,300})")
# NCCL's result name and torch's detail for it, the lines torch prints after `NCCL error in:`;
# alone where a paste (or a wrapper printing only the exception's last lines) cut the head:
# `ncclUnhandledCudaError: Call to CUDA function failed.` (the names of NCCL's ncclResult_t)
NCCL_RESULTS = r"nccl(?:UnhandledCudaError|SystemError|InternalError|InvalidArgument|InvalidUsage|RemoteError)"
_NCCL_RESULT = re.compile(rf"({NCCL_RESULTS}): (.{{1,512}})")
_VERSION_NUMBERS = re.compile(r"\d{1,4}\.\d{1,4}\.\d{1,4}")
_NCCL_VERSION = re.compile(r"NCCL version (\d{1,4}\.\d{1,4}\.\d{1,4})")
# gloo's pair.cc and unbound_buffer.cc messages, each with the peer as gloo prints it
# (peers.PEER: `[10.1.3.122]:42916`, `[::1]:54172`, `[none]`)
_GLOO_PEER = re.compile(rf"Connection closed by peer ({PEER})")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (\d{1,20})ms for (\w{1,32}) operation")
_GLOO_SIZE = re.compile(r"op\.preamble\.length <= op\.nbytes\. (\d{1,20}) vs (\d{1,20})")
_GLOO_CONNECT = re.compile(rf"\bconnect ({PEER}): ([^\n]{{1,200}})")
# pair.cc's `Connect timeout [ADDR]:PORT`: the words first, the peer last (gloo's `[none]`: no peer known)
_GLOO_CONNECT_TIMEOUT = re.compile(rf"\b(Connect timeout) ({PEER})")
_GLOO_READ = re.compile(rf"Read error ({PEER}): ([^.\n]{{0,200}})")
# pair.cc's write(): `writev [::1]:54172: Connection reset by peer` (field/issues-9, a gtest's
# gloo::IoException what())
_GLOO_WRITE = re.compile(rf"\bwritev ({PEER}): ([^.\n]{{0,200}})")
# ProcessGroupGloo's `Gloo connectFullMesh failed with [.../pair.cc:144] no error` (torch 2.0's
# `[E ProcessGroupGloo.cpp:144]`, 2.7's `[rank1]:[E528 ...]`), `... pair.h:311] Connect timeout
# [none]`: the group's setup could not reach its peers; gloo's own message after the source
_GLOO_MESH = re.compile(r"(?:Gloo )?connectFullMesh failed with ")
_GLOO_PEER_ANY = re.compile(PEER)
_GLOO_SOURCE_AFTER = re.compile(r"\[([^\[\]\s]{1,600})\] ?")
# gloo's GLOO_ENFORCE: `[enforce fail at .../gloo/transport/tcp/device.cc:84] ifa != nullptr.
# Unable to find address for: ib0` (a size check has its own kind: _GLOO_SIZE)
_GLOO_ENFORCE = re.compile(r"\[enforce fail at ([^\[\]\s]{1,600})\] ?")
_NOT_IN_GROUP = re.compile(r"Running (\w{1,64}) on global rank (-?\d{1,9}) which does not belong to the given group")
_FR_PATH = re.compile(r"debug info to (?:file: )?(\S{1,1024})")
_FR_PATH_ERROR = re.compile(r"(?:writing NCCLPG debug info|Flight Recorder debug info(?: to file)?): (\S{1,1024})")
_BIND = re.compile(r"failed to (?:bind to|listen on) (\S{1,256}?):(\d{1,5}) \(errno: (\d{1,5}) - ([^)]{0,128})\)")
_LISTEN_PORT = re.compile(r"port: (\d{1,5}), useIpv6: \w{1,8}, code: (-?\d{1,5}), name: (\w{1,32})")
_SERVER_SOCKET = "server socket has failed to"
_ERRNO_98 = re.compile(r"\[Errno (\d{1,5})\] [Aa]ddress already in use")
_PORT_NEAR = re.compile(r"\bport[ :=]{1,3}(\d{1,5})\b", re.IGNORECASE)
_CLIENT_TIMEOUT = re.compile(
    r"client socket has timed out after (\d{1,20}(?:\.\d{1,9})?)(ms|s)? while trying to connect to "
    r"\(?([^\s(),]{1,256})(?::|, )(\d{1,5})\)?"
)
# the TCPStore client's own account of a connect it could not make or validate (torch 2.3+'s
# TCPStore.cpp, as torch 2.13's libtorch_cpu.so holds it): `TCP client failed to connect/validate to
# host {}:{} - retrying (try={}, timeout={}ms, delay={}ms): {}` and `- timed out (try={}, timeout={}ms): {}`
_TCP_CLIENT = re.compile(
    r"TCP client failed to connect/validate to host (\S{1,256}):(\d{1,5}) - (?:retrying|timed out) "
    r"\(try=(\d{1,9}), timeout=(\d{1,20})ms[^)]{0,64}\): ?"
)
_CLIENT_FAILED = re.compile(r"client socket has failed to connect to (?:any network address of )?(\S{1,256})")
_CLIENTS_JOINED = re.compile(
    r"Timed out after (\d{1,20}) seconds waiting for clients\. (\d{1,9})/(\d{1,9}) clients joined"
)
_WAIT_TIMEOUT = re.compile(r"wait timeout after (\d{1,20})ms")
# the NCCL unique-id fetch whose store get the wait timeout ended (torch 2.x: `[R] is setting up
# NCCL communicator and retrieving ncclUniqueId from [S] ... got error: wait timeout after Nms`):
# its message keeps the sentence from here, which names the root S (diagnose/uniqueid.py)
_FETCH_HEAD = re.compile(r"\[\d{1,9}\] is setting up NCCL communicator")
_STORE_WAIT = re.compile(r"waitForInput: socket SocketImpl\(fd=\d{1,9}, addr=\S{1,128}, remote=(\S{1,128}?)\)")
_RDZV_CLASS = re.compile(r"Rendezvous(Closed|Connection|Timeout|State|GracefulExit|)Error(?=:|$)")
_RDZV_KINDS: dict[str, RendezvousKind] = {"Closed": "closed", "Connection": "connection", "Timeout": "timeout",
                                          "State": "state", "GracefulExit": "graceful-exit", "": "error"}
_LISTEN_FAILED = "failed to listen on any local network address"


# ---------------------------------------------------------------- NCCL and CUDA errors


def _backend_kind(state: TorchState, b: str) -> tuple[BackendKind, str, str, str, int] | None:
    """(kind, where, reason, NCCL version, where the error starts) of the line's error; an
    NCCL error's version is noted on `state`."""
    m = _NCCL_ERROR.search(b)
    if m:
        at, reason, version = m.groups()
        numbers = _VERSION_NUMBERS.match(version)
        version = numbers.group(0) if numbers else version
        state.version(version)
        return "nccl", at, reason, version, m.start()
    t = _NCCL_TIMEOUT.search(b)
    if t:
        return "nccl-timeout", t.group(1), "timeout", "", t.start()
    c = _CUDA_ERROR.search(b)
    if c:
        return "cuda", "", c.group(1).strip(), "", c.start()
    return None


def read_backend_error(state: TorchState, line: Line) -> bool:
    """`NCCL error in: FILE:LINE, <reason>, NCCL version V`, `NCCL timeout in:`, `CUDA error:`;
    an NCCL error's detail lines are read after it (continued.py)."""
    b = line.text
    fields = group_where(line, b)
    found = _backend_kind(state, b)
    if found is None:
        return False
    kind, at, reason, version, start = found
    index = state.add("backend_errors", BackendError(
        **fields, kind=kind, reason=clip(reason.strip(), MESSAGE_MAX), exception=type_before(b, start),
        where=basename(at or ""), nccl_version=version, watchdog="watchdog thread terminated with exception" in b,
    ))
    if index >= 0 and kind == "nccl":
        state.start("backend", index, rank_key(line))
    return True


def read_headless_nccl_result(state: TorchState, line: Line) -> bool:
    """`ncclUnhandledCudaError: Call to CUDA function failed.` with no `NCCL error in:` line
    before it (continued.py reads it where one is open): an NCCL error whose head the paste
    cut; its `Last error:` lines after it are read as after a whole one."""
    m = _NCCL_RESULT.match(line.text)
    if m is None:
        return False
    index = state.add("backend_errors", BackendError(
        **where(line), kind="nccl", nccl_error=m.group(1),
        detail=clip(m.group(2).strip(), MESSAGE_MAX),
    ))
    if index >= 0:
        state.start("backend", index, rank_key(line))
    return True


def read_nccl_version(state: TorchState, line: Line) -> bool:
    """Every `NCCL version 2.21.5` a line names."""
    found = False
    for m in _NCCL_VERSION.finditer(line.text, 0, 4096):
        state.version(m.group(1))
        found = True
    return found


# ---------------------------------------------------------------- gloo


def _gloo_source(b: str, at: int) -> str:
    """gloo's `[.../gloo/transport/tcp/pair.cc:598]` just before `at`: "pair.cc:598"."""
    close = b.rfind("]", max(0, at - 40), at)
    opening = b.rfind("[", max(0, close - 600), close) if close > 0 else -1
    inside = b[opening + 1:close].rsplit(None, 1)[-1] if opening >= 0 and close > opening + 1 else ""
    return basename(inside) if "/gloo/" in inside else ""


def _gloo(state: TorchState, line: Line, kind: GlooKind, at: int, source: str | None = None,
          **fields: Any) -> None:
    source = _gloo_source(line.text, at) if source is None else source
    state.add("gloo", GlooError(**where(line), kind=kind, source=source, **fields))


def _peer(token: str) -> dict[str, Any]:
    """GlooError's peer and port from gloo's `[ADDR]:PORT` (none for `[none]`)."""
    found = endpoint(token)
    return {"peer": found.address, "port": found.port} if found else {}


def read_gloo(state: TorchState, line: Line) -> bool:
    """gloo's transport errors (GlooError's kinds), each with pair.cc's source line."""
    if _gloo_mesh(state, line):
        return True  # its own message (a connect's, a timeout's) is that failure's cause, not another
    b = line.text
    found = False
    for m in _GLOO_PEER.finditer(b):
        _gloo(state, line, "peer-closed", m.start(), **_peer(m.group(1)), message=rest_of(b, m.start()))
        found = True
    for m in _GLOO_TIMEOUT.finditer(b):
        _gloo(state, line, "timeout", m.start(), operation=m.group(2), timeout_ms=to_int(m.group(1)),
              message=clip(m.group(0), MESSAGE_MAX))
        found = True
    size = _GLOO_SIZE.search(b)
    if size or "Received data size doesn't match" in b:
        at = size.start() if size else b.find("Received data size")
        _gloo(state, line, "size-mismatch", at, received_bytes=to_int(size.group(1)) if size else None,
              expected_bytes=to_int(size.group(2)) if size else None, message=rest_of(b, at))
        found = True
    elif _gloo_enforce(state, line):
        found = True
    return _gloo_connects(state, line) or found


def _gloo_connects(state: TorchState, line: Line) -> bool:
    """pair.cc's `connect [ADDR]:PORT: ERROR`, `Connect timeout [ADDR]:PORT`, `Read error
    [ADDR]:PORT: ...`, `writev [ADDR]:PORT: ...`."""
    b = line.text
    found = False
    for m in _GLOO_CONNECT.finditer(b):
        _gloo(state, line, "connect", m.start(), **_peer(m.group(1)), message=clip(m.group(2).strip(), MESSAGE_MAX))
        found = True
    for m in _GLOO_CONNECT_TIMEOUT.finditer(b):
        _gloo(state, line, "connect", m.start(), **_peer(m.group(2)), message=m.group(1))
        found = True
    io: tuple[tuple[GlooKind, re.Pattern[str]], ...] = (("read-error", _GLOO_READ), ("write-error", _GLOO_WRITE))
    for kind, pattern in io:
        for m in pattern.finditer(b):
            _gloo(state, line, kind, m.start(), **_peer(m.group(1)), message=clip(m.group(2).strip(), MESSAGE_MAX))
            found = True
    return found


def _gloo_mesh(state: TorchState, line: Line) -> bool:
    """`Gloo connectFullMesh failed with [.../pair.cc:144] no error` (_GLOO_MESH): kind
    connect, operation connectFullMesh, the source and the peer gloo's own message names."""
    b = line.text
    m = _GLOO_MESH.search(b)
    if m is None:
        return False
    inner = _GLOO_SOURCE_AFTER.match(b, m.end())
    cause = b[inner.end() if inner else m.end():]
    peer = _GLOO_PEER_ANY.search(cause, 0, 400)
    _gloo(state, line, "connect", m.start(), source=basename(inner.group(1)) if inner else "",
          operation="connectFullMesh", **(_peer(peer.group(0)) if peer else {}), message=rest_of(b, m.start()))
    return True


def _gloo_enforce(state: TorchState, line: Line) -> bool:
    """gloo's `[enforce fail at .../gloo/...:N] CONDITION. MESSAGE` (gloo::EnforceNotMet's what())."""
    b = line.text
    m = _GLOO_ENFORCE.search(b)
    if m is None or "/gloo/" not in m.group(1):
        return False
    _gloo(state, line, "enforce", m.start(), source=basename(m.group(1)), message=rest_of(b, m.end()))
    return True


def _gloo_words(b: str) -> bool:
    return ("Connection closed by peer" in b or "Timed out waiting" in b or "op.preamble.length" in b
            or "Received data size doesn't match" in b or "Read error [" in b or "connect [" in b
            or "Connect timeout [" in b or "writev [" in b or "connectFullMesh failed" in b
            or "[enforce fail at " in b)


# ---------------------------------------------------------------- the Flight Recorder


def _fr_note(b: str) -> tuple[FrKind, str] | None:
    """(kind, dump path) of a Flight Recorder note other than its stack."""
    if "Stack trace of the failed collective" in b:
        return ("disabled", "") if "not found" in b else None
    if "Finished writing" in b and "debug info to" in b:
        m = _FR_PATH.search(b)
        return "dump-written", m.group(1) if m else ""
    if "Error" in b and "debug info" in b:
        m = _FR_PATH_ERROR.search(b)
        return "dump-failed", m.group(1) if m else ""
    if "preparing to dump debug info" in b:
        return "dump-preparing", ""
    if "signal dumping" in b:
        return "dump-signal-sent", ""
    if "dump signal from another rank" in b:
        return "dump-signal-observed", ""
    return None


def read_flight_recorder(state: TorchState, line: Line) -> bool:
    """What a rank said of the Flight Recorder; the failed collective's stack is read from the
    lines after it (continued.py)."""
    b = line.text
    note = _fr_note(b)
    if note is not None:
        kind, path = note
        state.add("flight_recorder", FlightRecorderNote(**group_where(line, b), kind=kind, path=clip(path, 1024)))
        return True
    if "Stack trace of the failed collective" not in b:
        return False
    index = state.add("flight_recorder", FlightRecorderNote(**group_where(line, b), kind="stack"))
    if index >= 0:
        state.start("fr-stack", index, rank_key(line))
    return True


# ---------------------------------------------------------------- ports, rendezvous, the store


def _in_use_words(b: str) -> bool:
    return "ddress already in use" in b or "EADDRINUSE" in b or "errno: 98" in b


def _read_in_use(state: TorchState, line: Line) -> bool:
    """`read_address_in_use` where the line holds its words: the table's test looks for any
    `errno: `, blind to the digits' values (lines.HandlersByText's `digit_blind`)."""
    return _in_use_words(line.text) and read_address_in_use(state, line)


def read_address_in_use(state: TorchState, line: Line) -> bool:
    """A port already bound: `failed to bind to [::]:29500 (errno: 98 - ...)`, EADDRINUSE, ...;
    whose store it was comes from the traceback that raised it (bindsetup.py)."""
    b = line.text
    found: list[int] = []
    for m in _BIND.finditer(b):
        errno = to_int(m.group(3))
        if errno == 98 or "in use" in m.group(4):
            found.append(state.add("address_in_use", AddressInUse(**where(line), port=to_int(m.group(2)),
                                                                  address=m.group(1), errno=errno)))
    if not found:
        listen = _LISTEN_PORT.search(b)
        if listen and (listen.group(3) == "EADDRINUSE" or listen.group(2) in ("-98", "98")):
            found.append(state.add("address_in_use", AddressInUse(**where(line), port=to_int(listen.group(1)),
                                                                  errno=98)))
        elif "ddress already in use" in b or "EADDRINUSE" in b:
            e = _ERRNO_98.search(b)
            p = _PORT_NEAR.search(b)
            found.append(state.add("address_in_use", AddressInUse(**where(line), port=to_int(p.group(1)) if p else None,
                                                                  errno=to_int(e.group(1)) if e else None)))
    if _SERVER_SOCKET in b:  # c10d's TCPStore server (socket.cpp), not NCCL's own bootstrap socket
        for index in found:
            note_bind(state, rank_key(line), index, line.number)
    return bool(found)


def _tcp_client(b: str) -> dict | None:
    """`TCP client failed to connect/validate to host H:P - retrying (try=N, ...): CAUSE`: a
    client-timeout where the cause is the socket's timeout, else connect-failed."""
    m = _TCP_CLIENT.search(b)
    if m is None:
        return None
    cause = b[m.end():]
    return {"kind": "client-timeout" if _CLIENT_TIMEOUT.search(cause) else "connect-failed",
            "seconds": int(m.group(4)) / 1000, "address": host_port(f"{m.group(1)}:{m.group(2)}"),
            "retry": to_int(m.group(3)), "message": rest_of(b, m.start())}


def _client_socket(b: str) -> dict | None:
    """The TCPStore client's timeouts and failures, and the server's listen failure."""
    found = _tcp_client(b)
    if found is not None:
        return found
    m = _CLIENT_TIMEOUT.search(b)
    if m:
        value = float(m.group(1))
        return {"kind": "client-timeout", "seconds": value / 1000 if m.group(2) == "ms" else value,
                "address": f"{m.group(3)}:{m.group(4)}", "message": message_from(b, "The client socket", m.start())}
    m = _CLIENTS_JOINED.search(b)
    if m:
        return {"kind": "clients-timeout", "seconds": float(m.group(1)), "joined": to_int(m.group(2)),
                "expected": to_int(m.group(3)), "message": rest_of(b, m.start())}
    m = _WAIT_TIMEOUT.search(b)
    if m:
        fetch = _FETCH_HEAD.search(b, 0, m.start())
        return {"kind": "wait-timeout", "seconds": int(m.group(1)) / 1000,
                "message": rest_of(b, fetch.start() if fetch else m.start())}
    m = _CLIENT_FAILED.search(b)
    if m:
        return {"kind": "connect-failed", "address": m.group(1).rstrip(".,"),
                "message": message_from(b, "The client socket", m.start())}
    at = b.find(_LISTEN_FAILED)
    if at >= 0:
        p = _LISTEN_PORT.search(b)
        return {"kind": "listen-failed", "address": f":{p.group(1)}" if p else "",
                "message": message_from(b, "The server socket", at)}
    return None


def _store(b: str) -> dict | None:
    """A store client's wait that timed out, `Socket Timeout`."""
    m = _STORE_WAIT.search(b)
    if m and "timed out after" in b:
        return {"kind": "store-wait", "address": host_port(m.group(1)), "message": rest_of(b, m.start())}
    if "Socket Timeout" in b:
        return {"kind": "socket-timeout", "message": clip(b.strip(), MESSAGE_MAX)}
    return None


def _rendezvous_class(b: str) -> dict | None:
    """The elastic Rendezvous*Error named (not a traceback's `raise RendezvousClosedError`)."""
    for m in _RDZV_CLASS.finditer(b, 0, 4096):
        if b[max(0, m.start() - 6):m.start()] == "raise ":
            continue
        rest = b[m.end() + 1:].strip() if m.end() < len(b) else ""
        return {"kind": _RDZV_KINDS[m.group(1)], "message": clip(rest.strip('",'), MESSAGE_MAX)}
    return None


def read_rendezvous(state: TorchState, line: Line) -> bool:
    """A rendezvous or TCPStore failure (RendezvousError's kinds)."""
    b = line.text
    found = _client_socket(b) or _store(b)
    if found is None:
        if b[:1] in " \t" and state.tracebacks.get(rank_key(line)):
            return False  # a traceback's source line: `raise RendezvousClosedError`
        found = _rendezvous_class(b)
    if found is None:
        return False
    state.add("rendezvous", RendezvousError(**where(line), **found))
    return True


def read_not_in_group(state: TorchState, line: Line) -> bool:
    """`Running OP on global rank N which does not belong to the given group.`"""
    m = _NOT_IN_GROUP.search(line.text)
    if m is None:
        return False
    rank = int(m.group(2))
    at = where(line)
    if rank >= 0:  # the message names the global rank itself (-1: no default group yet)
        at["rank"] = rank
    state.add("not_in_group", NotInGroup(**at, operation=m.group(1), global_rank=rank))
    return True


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("backend-error", lambda b: "NCCL error" in b or "NCCL timeout in: " in b or "CUDA error: " in b,
            read_backend_error),
    Handler("nccl-result", lambda b: b.startswith("nccl"), read_headless_nccl_result),
    Handler("gloo", _gloo_words, read_gloo),
    Handler("flight-recorder", lambda b: ("Stack trace of the failed collective" in b or "debug info" in b
                                          or "signal dumping" in b or "dump signal from another rank" in b),
            read_flight_recorder),
    Handler("address-in-use", lambda b: "ddress already in use" in b or "EADDRINUSE" in b or "errno: " in b,
            _read_in_use),
    Handler("rendezvous", lambda b: ("Rendezvous" in b or "socket" in b or "clients joined" in b
                                     or "wait timeout after" in b or "Socket Timeout" in b
                                     or "TCP client failed" in b), read_rendezvous),
    Handler("not-in-group", lambda b: "does not belong to the given group" in b, read_not_in_group),
)
