"""The files `hc diagnose logs DIR|FILE...` reads: found by a bounded walk, opened only
when they are regular files on a real file system.

Named `/` (or a directory holding a mount of one), a walk would otherwise reach the
kernel's pseudo file systems: `/proc/kmsg` is a "regular file" whose read blocks until
the kernel logs something and takes that line from the system logger; `/sys` and
cgroup files are generated on read, `/dev` holds devices whose open alone has effects
(a watchdog, a tape). So:

* the walk never enters `/proc`, `/sys` or `/dev` (by path) nor anything on a pseudo
  file system (by `st_dev`: proc, sysfs, devtmpfs, devpts, cgroup, debugfs, ...), and a
  path named on the command line that is one is refused (exit 4);
* nothing but a regular file is opened: the stat the walk made decides, the file is
  opened `O_PATH` (which opens no device), checked again with fstat (the same inode,
  still regular, still not on a pseudo file system), and only then reopened for
  reading, non-blocking;
* names are shown escaped (`shown`): bytes that are not UTF-8 as `\\xff`, control and
  bidi characters as `\\n`, `\\u202e`, so a hostile name neither breaks the JSON nor
  the terminal;
* the walk is bounded (MAX_ENTRIES looked at, MAX_FILES taken, MAX_TOTAL_BYTES in all,
  MAX_FILE_BYTES a file, MAX_DEPTH deep) and says what it skipped and why: the first
  MAX_LISTED one by one, the rest counted per reason;
* a caller may pass `progress`, called with a one-line account now and then, for a
  walk or a read that takes long.
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from healthcheck.core.errors import HcError
from healthcheck.core.inputs import describe_mode
from healthcheck.diagnose.evidence import Unreadable

MiB = 1024 * 1024
MAX_ENTRIES = 200_000  # directory entries looked at (stat) in one walk
MAX_FILES = 20_000
MAX_TOTAL_BYTES = 4096 * MiB
MAX_FILE_BYTES = 256 * MiB
MAX_DEPTH = 8
MAX_LISTED = 200  # skipped entries listed one by one; past it, counted per reason
SNIFF_BYTES = 8192  # read first: a binary file (not a pickle) is not read further

# Kernel pseudo file systems: generated on read, devices, or blocking (proc's kmsg).
PSEUDO_FS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs",
    "configfs", "fusectl", "bpf", "pstore", "efivarfs", "mqueue", "binfmt_misc", "autofs", "rpc_pipefs",
    "nsfs", "selinuxfs", "hugetlbfs",
})
PSEUDO_PATHS = ("/proc", "/sys", "/dev")  # never entered; /proc and /sys hold nothing else either
MOUNTINFO = "/proc/self/mountinfo"

_O_PATH = getattr(os, "O_PATH", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NOCTTY = getattr(os, "O_NOCTTY", 0)

Progress = Callable[[str], None]


class Skip(Exception):
    """A file the walk found but will not read, with why (never fatal)."""


def shown(path: str | os.PathLike[str]) -> str:
    """The path as hc shows it: valid UTF-8, printable, one line. Bytes that are not
    UTF-8 (a name Python holds as surrogate escapes) become `\\xNN`; control, format
    and other unprintable characters (a newline, an escape, a bidi override) become
    `\\n`, `\\x1b`, `\\u202e`."""
    text = os.fsencode(path).decode("utf-8", errors="backslashreplace")
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def pseudo_devices(mountinfo: str = MOUNTINFO) -> dict[int, str]:
    """st_dev -> file system type of every pseudo file system mounted (from mountinfo);
    empty when it cannot be read (the path rule still keeps the walk out of /proc)."""
    try:
        with open(mountinfo, "rb") as f:
            text = f.read(4 * MiB).decode("utf-8", errors="replace")
    except OSError:
        return {}
    found: dict[int, str] = {}
    for line in text.splitlines():
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 3 or not tail.split():
            continue
        fstype = tail.split()[0]
        major, _, minor = fields[2].partition(":")
        if fstype in PSEUDO_FS and major.isdigit() and minor.isdigit():
            found[os.makedev(int(major), int(minor))] = fstype
    return found


@dataclass(frozen=True)
class Found:
    """A regular file the walk will read: where to open it, how to show it, what it was."""

    path: str  # to open (a link inside the tree: where it points)
    name: str  # to show (escaped)
    st: os.stat_result


@dataclass
class Walk:
    """One bounded walk; `files` in the order found, `skipped` what was not taken."""

    pseudo: dict[int, str] = field(default_factory=pseudo_devices)
    progress: Progress | None = None
    files: list[Found] = field(default_factory=list)
    skipped: list[Unreadable] = field(default_factory=list)
    unlisted: Counter[str] = field(default_factory=Counter)  # reason -> skips past MAX_LISTED
    entries: int = 0
    budget: int = MAX_TOTAL_BYTES
    full: bool = False  # a bound was reached: the walk stopped

    # ---------------------------------------------------------------- what to skip

    def skip(self, name: str, why: str) -> None:
        if len(self.skipped) < MAX_LISTED:
            self.skipped.append(Unreadable(name, why))
        else:
            self.unlisted[why] += 1

    def pseudo_reason(self, real: str, st: os.stat_result) -> str | None:
        """Why a directory or file (`real`: its path with no link in it) is on the kernel's side, or None."""
        fstype = self.pseudo.get(st.st_dev)
        if fstype is not None:
            return f"a kernel pseudo file system ({fstype}): not read"
        # by path too: where mountinfo could not be read, and for /dev (a tmpfs in a container);
        # below /dev only devices are refused (a tmpfs such as /dev/shm may hold a job's logs)
        if real in PSEUDO_PATHS or real.startswith(("/proc/", "/sys/")):
            return "a kernel pseudo file system (by its path): not read"
        return None

    # ---------------------------------------------------------------- the walk

    def top(self, top: str | os.PathLike[str]) -> None:
        """One path named on the command line: a file or a directory, never a pseudo one."""
        name = shown(top)
        try:
            st = os.stat(top)
        except (OSError, ValueError) as exc:
            raise HcError(f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
        why = self.pseudo_reason(os.path.realpath(top), st)
        if why is not None:
            raise HcError(f"{name}: {why} (a job's logs are never there; /proc/kmsg would take the system "
                          "logger's lines)")
        if stat.S_ISREG(st.st_mode):
            self.take(os.path.realpath(top), name, st)  # opened without following links: where it is
        elif stat.S_ISDIR(st.st_mode):
            self.tree(os.fspath(top))
        else:
            raise HcError(f"{name}: not a file or a directory")

    def tree(self, top: str) -> None:
        """A directory's tree. Each directory goes with its real path (no link in it), so an
        entry's is its directory's plus its name: os.path.realpath, an lstat per component of
        the path, runs only for links (on /usr it was three quarters of the walk's time)."""
        root = os.path.realpath(top)
        stack: list[tuple[str, str, int]] = [(top, root, 0)]
        while stack and not self.full:
            directory, real, depth = stack.pop()
            subdirs = self.directory(directory, real, depth, root)
            stack.extend(reversed(subdirs))

    def directory(self, directory: str, real: str, depth: int, root: str) -> list[tuple[str, str, int]]:
        """Look at one directory's entries (`real`: its real path): files taken, subdirectories returned."""
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            self.skip(shown(directory), f"cannot list: {exc.strerror or exc}")
            return []
        subdirs: list[tuple[str, str, int]] = []
        for entry in entries:
            if self.full:
                break
            self.entries += 1
            if self.entries > MAX_ENTRIES:
                self.stop(shown(entry.path), f"more than {MAX_ENTRIES} entries looked at: the rest were not")
                break
            if self.entries % 1024 == 0:
                self.tell(f"looked at {self.entries} entries, {len(self.files)} files to read")
            sub = self.entry(entry, real, depth, root)
            if sub is not None:
                subdirs.append(sub)
        return subdirs

    def entry(self, entry: os.DirEntry[str], parent: str, depth: int, root: str) -> tuple[str, str, int] | None:
        """One entry of the directory whose real path is `parent`: a file taken, a subdirectory
        returned (with its real path), anything else skipped with why."""
        name = shown(entry.path)
        path = entry.path
        real = os.path.join(parent, entry.name)
        try:
            if entry.is_symlink():
                path = real = os.path.realpath(entry.path)
                if os.path.commonpath([root, path]) != root:
                    self.skip(name, "a link out of the directory: not followed")
                    return None
                if os.path.isdir(path):
                    return None  # inside the tree: walked where it really is
            st = os.stat(path)
        except (OSError, ValueError) as exc:
            self.skip(name, f"cannot stat: {getattr(exc, 'strerror', None) or exc}")
            return None
        why = self.pseudo_reason(real, st)
        if why is not None:
            self.skip(name, why)
        elif stat.S_ISDIR(st.st_mode):
            if depth + 1 <= MAX_DEPTH:
                return path, real, depth + 1
            self.skip(name, f"deeper than {MAX_DEPTH} directories: not read")
        elif stat.S_ISREG(st.st_mode):
            self.take(path, name, st)
        else:
            self.skip(name, f"{_kind(st.st_mode)}, not a regular file: not opened")
        return None

    def take(self, path: str, name: str, st: os.stat_result) -> None:
        if len(self.files) >= MAX_FILES:
            self.stop(name, f"more than {MAX_FILES} files: the rest were not read")
        elif st.st_size > MAX_FILE_BYTES:
            self.skip(name, f"{st.st_size} bytes, more than the {MAX_FILE_BYTES} read")
        elif st.st_size > self.budget:
            self.skip(name, f"over the {MAX_TOTAL_BYTES} bytes read in all")
        else:
            self.budget -= st.st_size
            self.files.append(Found(path, name, st))

    def stop(self, name: str, why: str) -> None:
        self.full = True
        self.skipped.append(Unreadable(name, why))  # listed whatever MAX_LISTED says: it is why the rest is missing

    def tell(self, text: str) -> None:
        if self.progress is not None:
            self.progress(text)

    def unreadable(self) -> list[Unreadable]:
        """Every skip: those listed, then one line per reason for those only counted."""
        rest = [Unreadable(f"({count} more)", why) for why, count in self.unlisted.most_common()]
        return [*self.skipped, *rest]


def walk(paths: Iterable[str | os.PathLike[str]], *, progress: Progress | None = None,
         pseudo: dict[int, str] | None = None) -> Walk:
    """The regular files under `paths`, bounded; HcError (exit 4) for a named path that
    does not exist, is not a file or directory, or is a kernel pseudo file system."""
    w = Walk(progress=progress) if pseudo is None else Walk(pseudo=pseudo, progress=progress)
    for top in paths:
        if w.full:
            break
        w.top(top)
    return w


def _kind(mode: int) -> str:
    return describe_mode(mode)


# ---------------------------------------------------------------- reading one file


def read_found(found: Found, pseudo: dict[int, str], *, is_binary: Callable[[bytes], bool]) -> bytes:
    """The bytes of a file the walk found, at most MAX_FILE_BYTES; Skip with why when it
    is not what the walk saw (replaced by a device, a FIFO or a link since) or is binary.

    Opened O_PATH first (no device's open runs), checked with fstat, then reopened for
    reading through /proc/self/fd, non-blocking: a FIFO or device is never read, and
    never opened. Where O_PATH or /proc/self/fd are missing, the file is opened
    O_NONBLOCK|O_NOFOLLOW|O_NOCTTY and checked the same way before any read.
    """
    fd = _open_checked(found, pseudo)
    try:
        head = _read_some(fd, SNIFF_BYTES)
        if head[:1] != b"\x80" and is_binary(head):  # \x80: a pickle (a Flight Recorder dump)
            raise Skip("binary, not a log (no known dump format either)")
        rest = _read_some(fd, MAX_FILE_BYTES + 1 - len(head)) if len(head) == SNIFF_BYTES else b""
    except OSError as exc:
        raise Skip(f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = head + rest
    if len(data) > MAX_FILE_BYTES:
        raise Skip(f"grew past the {MAX_FILE_BYTES} bytes read while it was read")
    return data


def _open_checked(found: Found, pseudo: dict[int, str]) -> int:
    """A read descriptor of the regular file the walk saw, or Skip."""
    if _O_PATH:
        try:
            handle = os.open(found.path, _O_PATH | _NOFOLLOW | _CLOEXEC)
        except OSError as exc:
            raise Skip(f"cannot open: {exc.strerror or exc}") from None
        try:
            _check(os.fstat(handle), found, pseudo)
            try:
                return os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC | _NOCTTY)
            except FileNotFoundError:  # no /proc here: open by name, checked again below
                pass
            except OSError as exc:
                raise Skip(f"cannot open: {exc.strerror or exc}") from None
        finally:
            os.close(handle)
    try:
        fd = os.open(found.path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW | _CLOEXEC | _NOCTTY)
    except OSError as exc:
        raise Skip(f"cannot open: {exc.strerror or exc}") from None
    try:
        _check(os.fstat(fd), found, pseudo)
    except Skip:
        os.close(fd)
        raise
    return fd


def _check(st: os.stat_result, found: Found, pseudo: dict[int, str]) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise Skip(f"{_kind(st.st_mode)} now, not the regular file listed: not read")
    if (st.st_dev, st.st_ino) != (found.st.st_dev, found.st.st_ino):
        raise Skip("replaced since it was listed: not read")
    if st.st_dev in pseudo:
        raise Skip(f"a kernel pseudo file system ({pseudo[st.st_dev]}): not read")


def _read_some(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes (fewer at the end of the file)."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(MiB, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_all(found: list[Found], *, pseudo: dict[int, str], is_binary: Callable[[bytes], bool],
             progress: Progress | None = None) -> Iterable[tuple[Found, bytes | Skip]]:
    """Each file's bytes (or why not), in order, telling `progress` how far it got."""
    total = sum(f.st.st_size for f in found)
    done_bytes = 0
    for i, f in enumerate(found, 1):
        try:
            yield f, read_found(f, pseudo, is_binary=is_binary)
        except Skip as exc:
            yield f, exc
        done_bytes += f.st.st_size
        if progress is not None:
            progress(f"read {i} of {len(found)} files ({_size(done_bytes)} of {_size(total)})")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"

