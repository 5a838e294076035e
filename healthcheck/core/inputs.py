"""Reading operator-supplied files with bounds: a size cap, and no blocking on things
that are not files.

Every file hc reads because someone named it (a config, a captured tool output for
`hc parse`, an Xid log, a report) goes through here, so `/dev/zero` as a config ends in
a one-line error instead of exhausting memory, and a FIFO named as a config cannot hang
a prologue on its open().
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path
from typing import BinaryIO

from healthcheck.core.errors import HcError

MiB = 1024 * 1024

# Defaults per kind of input: generous for real files, small enough that a mistake
# (a device, a log named as a config) fails fast.
CONFIG_MAX_BYTES = 4 * MiB
TOOL_OUTPUT_MAX_BYTES = 64 * MiB  # nvidia-smi -q of 8 GPUs is ~150 kB; kernel logs can be large
REPORT_MAX_BYTES = 256 * MiB  # a 10,000-node sweep report, decoded whole (~4x its size in memory)
# What `hc report show`, `hc report diff` and `hc baseline` read: they hold the file's bytes
# and decode one node at a time, or only the fields they use (report/fleetread.py), so a
# report takes about its own size in memory. 8 GiB is ~350,000 nodes at 23 KB a node; the
# cap stays so that a device or an endless pipe named as a report fails fast.
FLEET_REPORT_MAX_BYTES = 8 * 1024 * MiB


class InputTooLarge(HcError):
    """An input is larger than hc accepts for its kind."""


class InputNotFound(HcError):
    """The named input does not exist (callers may word this their own way)."""


def describe_mode(mode: int) -> str:
    """What a file of this st_mode is, for a one-line message ("a FIFO", "a symbolic link")."""
    for test, what in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device")):
        if test(mode):
            return what
    return "not a regular file"


def read_bounded(path: Path | str, max_bytes: int, *, what: str = "file",
                 regular_only: bool = True, allow_fifo: bool = False) -> bytes:
    """The bytes of `path`, at most `max_bytes`; HcError (exit 4) otherwise.

    regular_only: refuse FIFOs, devices, sockets and directories (a config must be a
    file). allow_fifo: with regular_only, still accept a pipe, as `<(command)` names
    one (devices stay refused). The open itself never blocks on a FIFO (O_NONBLOCK),
    whatever is asked.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise InputNotFound(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    except OSError as exc:
        raise HcError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise HcError(f"{path}: cannot read {what}: it is a directory")
        accepted = stat.S_ISREG(st.st_mode) or (allow_fifo and stat.S_ISFIFO(st.st_mode))
        if regular_only and not accepted:
            raise HcError(f"{path}: cannot read {what}: it is {describe_mode(st.st_mode)}, not a regular file")
        if stat.S_ISREG(st.st_mode) and st.st_size > max_bytes:
            raise InputTooLarge(f"{path}: {what} is {st.st_size} bytes, more than the {max_bytes} hc reads")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=True) as f:
            fd = -1
            if not stat.S_ISREG(st.st_mode) or not st.st_size:
                return read_stream_bounded(f, max_bytes, name=str(path), what=what)
            # a regular file in one read of its size: chunks joined at the end held a
            # 1 GB report twice; what it grew by since the fstat is read after it
            data = f.read(st.st_size)
            try:
                more = read_stream_bounded(f, max_bytes - len(data), name=str(path), what=what)
            except InputTooLarge:
                raise InputTooLarge(f"{path}: {what} is larger than the {max_bytes} bytes hc reads") from None
            return data + more if more else data
    except OSError as exc:
        raise HcError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)


def read_stream_bounded(stream: BinaryIO, max_bytes: int, *, name: str = "<stdin>",
                        what: str = "input") -> bytes:
    """Read a stream to its end, refusing it once it exceeds `max_bytes`."""
    chunks: list[bytes] = []
    total = 0
    while True:
        chunk = stream.read(min(1 * MiB, max_bytes + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise InputTooLarge(f"{name}: {what} is larger than the {max_bytes} bytes hc reads")


def read_stdin_bounded(max_bytes: int, what: str = "input") -> bytes:
    return read_stream_bounded(sys.stdin.buffer, max_bytes, what=what)


def middle_cut(text: str, most: int) -> str:
    """text, or its start and its end when longer than `most`: a tool's output kept as
    evidence, whose command and cause come first and whose last words come last."""
    if len(text) <= most:
        return text
    half = (most - 5) // 2
    return f"{text[:half]}\n...\n{text[-half:]}"


def clip(text: str, limit: int = 120) -> str:
    """Input echoed in an error message, cut to `limit` characters and made one line."""
    text = text.replace("\n", "\\n").replace("\r", "\\r")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"
