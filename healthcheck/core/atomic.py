"""Writing the files hc is told to write without destroying what is at the path.

Atomic replace (a temporary file in the same directory, fsync, rename) is right for a
regular file: a reader sees the old content or the new, never half of it. It is wrong
for anything else: renamed over `/dev/full` it replaces the machine's device node with
a JSON file. So every writer looks at the path first (`lstat`: the last component is
never followed) and does what that kind of path calls for:

- nothing there, or a regular file: atomic replace;
- a character device (`/dev/null`, a tty) or a FIFO: opened and written in place,
  never created, truncated or renamed; a FIFO with no reader is an error, not a hang;
- `/dev/stdout`, `/dev/stderr`, `/dev/fd/N`, `/proc/self/fd/N`: written to that open
  descriptor of this process, at its current offset;
- a symbolic link: refused (see `refuse_symlink` for why);
- a directory, block device or socket: refused.

Every failure is an `HcError` with a one-line message (exit 4), never a silent success,
and nothing is left behind (no temporary file, no half-written regular file).

`write_atomic` is the one function every writer of a whole file calls: reports
(`--output`, the hooks' report_dir), `hc gpu record -o`, and NodeState files.
`append` is for logs (the audit log), `check_database_path` for SQLite files.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import stat
import sys
from pathlib import Path
from typing import Union

from healthcheck.core.errors import HcError
from healthcheck.core.inputs import describe_mode

PathLike = Union[str, "os.PathLike[str]"]

# A name for a descriptor this process already has open: written through that descriptor.
_FD_ALIAS = re.compile(r"^/(?:dev/(?P<std>stdout|stderr)|dev/fd/(?P<fd>\d+)|proc/self/fd/(?P<pfd>\d+))$")

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class WriteError(HcError):
    """A file hc was told to write could not be written, or must not be (exit 4)."""


def _show(path: PathLike) -> str:
    """The path for a one-line message: as it is, or quoted when it holds control characters."""
    text = os.fspath(path)
    return text if text.isprintable() else repr(text)


def _fail(path: PathLike, why: str) -> WriteError:
    return WriteError(f"{_show(path)}: cannot write: {why}")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def fd_alias(path: PathLike) -> int | None:
    """The descriptor that `path` names (/dev/stdout -> 1), or None for any other path."""
    m = _FD_ALIAS.match(os.path.normpath(os.fspath(path)))
    if m is None:
        return None
    if m.group("std"):
        return 1 if m.group("std") == "stdout" else 2
    return int(m.group("fd") or m.group("pfd"))


def refuse_symlink(path: PathLike) -> WriteError:
    """Why a symbolic link at the path is refused rather than resolved.

    hc writes as root (Slurm hooks, cron) into directories other users may be able to
    write to (a shared report_dir, /tmp). Following a link planted at the path would let
    anyone who can create a file there make root overwrite any file on the machine; and
    resolving the link first and renaming over its target would replace a file the
    operator never named (and race with whoever changes the link). Refusing is safe, and
    the operator can name the real file. The descriptor aliases (/dev/stdout, ...) are
    links too, but name something this process already holds open, so they are
    written through instead.
    """
    return _fail(path, "it is a symbolic link; hc does not write through links (name the file it points to)")


def classify(path: PathLike) -> str:
    """What writing `path` means: "fd", "new", "regular", "chardev" or "fifo"; a
    WriteError for paths hc refuses to write (links, directories, block devices, sockets)."""
    if fd_alias(path) is not None:
        return "fd"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "new"
    except OSError as exc:
        raise _fail(path, _reason(exc)) from None
    except ValueError:  # a NUL byte in the name (from a config or an environment variable)
        raise _fail(path, "the name contains a NUL byte") from None
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return "regular"
    if stat.S_ISCHR(mode):
        return "chardev"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISLNK(mode):
        raise refuse_symlink(path)
    raise _fail(path, f"it is {describe_mode(mode)}")


# ------------------------------------------------------------------- whole files


def write_atomic(path: PathLike, data: bytes, mode: int = 0o644, *, durable: bool = True) -> None:
    """Write `data` as the whole content of `path`, safely for whatever is there.

    A new path or a regular file is replaced atomically (temporary file in the same
    directory, fsync, rename, fsync of the directory): never half-written. A character
    device or FIFO is written in place; /dev/stdout and friends go to the open
    descriptor; anything else is refused. Raises WriteError (an HcError, exit 4).

    durable=False leaves out both fsyncs (each pair costs a journal commit, 10-20 ms of
    a prologue on a busy disk): the rename is still atomic for every reader while the
    machine runs, but after a crash the file may be the old one, or empty. Only for
    files whose every reader takes an empty or unreadable file as absent and has an
    answer for that (hc's node state: actions/nodestate.py).
    """
    kind = classify(path)
    if kind == "fd":
        _write_to_descriptor(path, fd_alias(path), data)  # type: ignore[arg-type]
    elif kind in ("chardev", "fifo"):
        _write_in_place(path, data, append=False)
    else:
        _replace(Path(path), data, mode, durable=durable)


def _temporary(directory: Path, name: str) -> tuple[int, str]:
    """A new file beside the target, as tempfile.mkstemp makes one (0600, created
    exclusively, never through a link), without importing tempfile and random: ~10 ms of
    every hook's start-up."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = str(directory / f".{name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(directory))


def _replace(path: Path, data: bytes, mode: int, *, durable: bool = True) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = _temporary(directory, path.name)
    except OSError as exc:
        raise _fail(path, _reason(exc)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise _fail(path, _reason(exc)) from None
    if not durable:
        return
    try:  # make the rename itself durable
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _write_in_place(path: PathLike, data: bytes, *, append: bool) -> None:
    """Write to a character device or FIFO: opened without following a link, without
    creating anything, and without waiting for a FIFO's reader (O_NONBLOCK, then blocking
    again for the writes)."""
    flags = os.O_WRONLY | os.O_NOCTTY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC | (os.O_APPEND if append else 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise _fail(path, "it is a FIFO and nothing is reading it") from None
        if exc.errno == errno.ELOOP:
            raise refuse_symlink(path) from None
        raise _fail(path, _reason(exc)) from None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode)):  # swapped since lstat
            raise _fail(path, f"it is {describe_mode(st.st_mode)} now; not written")
        os.set_blocking(fd, True)
        _write_all(fd, data)
    except OSError as exc:
        raise _fail(path, _reason(exc)) from None
    finally:
        os.close(fd)


def _write_to_descriptor(path: PathLike, fd: int, data: bytes) -> None:
    """Write to a descriptor this process holds (where the shell put stdout), after the
    text already printed to it. Stdout goes through sys.stdout, so a reader that went
    away is handled as for the rest of the output (see cli.main)."""
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None and _fileno(stream) == fd:
                stream.flush()
        if fd == 1 and sys.stdout is not None and _fileno(sys.stdout) == 1:
            sys.stdout.buffer.write(data)
            sys.stdout.flush()
            return
        _write_all(fd, data)
    except OSError as exc:
        raise _fail(path, _reason(exc)) from None


def _fileno(stream: object) -> int | None:
    try:
        return stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, ValueError, OSError):
        return None  # replaced by something without a descriptor (a test harness)


# ------------------------------------------------------------------------- logs


def append(path: PathLike, data: bytes, mode: int = 0o644, *, lock: bool = True) -> None:
    """Append `data` to a log: created if absent, one write under an exclusive flock
    (concurrent hc runs keep lines whole), fsynced. A character device or FIFO is
    written to as for `write_atomic`; a symbolic link (O_NOFOLLOW), directory, block
    device or socket is refused. Raises WriteError."""
    kind = classify(path)
    if kind == "fd":
        _write_to_descriptor(path, fd_alias(path), data)  # type: ignore[arg-type]
        return
    if kind in ("chardev", "fifo"):
        _write_in_place(path, data, append=True)
        return
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse_symlink(path) from None
        raise _fail(path, _reason(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # replaced between lstat and open
            raise _fail(path, f"it is {describe_mode(st.st_mode)}")
        os.set_blocking(fd, True)
        if lock:
            fcntl.flock(fd, fcntl.LOCK_EX)
        _write_all(fd, data)
        os.fsync(fd)
    except OSError as exc:
        raise _fail(path, _reason(exc)) from None
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- databases


def check_database_path(path: PathLike, what: str = "database") -> None:
    """A database file must be a regular file or not exist yet: SQLite follows links,
    and on a device or FIFO it would write its journal files next to it (into /dev)."""
    try:
        kind = classify(path)
    except WriteError as exc:
        raise WriteError(f"{what} {exc}") from None
    if kind not in ("new", "regular"):
        desc = {"fd": "an open descriptor", "chardev": "a character device", "fifo": "a FIFO"}[kind]
        raise WriteError(f"{what} {_show(path)}: cannot use: it is {desc}, not a regular file")
