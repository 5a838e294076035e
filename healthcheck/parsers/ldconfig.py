"""`ldconfig -N -X -v` -> the shared libraries the loader would use, and their versions.

Each directory line ("/usr/lib/x86_64-linux-gnu: (from ...)") is followed by its links
("\tlibnccl.so.2 -> libnccl.so.2.18.3"); the file name carries the full version. The
first directory that provides a soname wins, as in the loader's cache.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.parsers.lines import mended_lines

_DIR = re.compile(r"^(?P<dir>/\S*?):(?:\s|$)")
_LINK = re.compile(r"^\s+(?P<soname>\S+)\s+->\s+(?P<file>\S+)\s*$")


class SharedLib(msgspec.Struct, frozen=True):
    soname: str
    path: str  # directory/file the soname points to

    @property
    def version(self) -> str | None:
        """"libnccl.so.2.18.3" -> "2.18.3"."""
        m = re.search(r"\.so\.(\d+(?:\.\d+)*)$", self.path)
        return m.group(1) if m else None


class SharedLibs(msgspec.Struct, frozen=True):
    libs: dict[str, SharedLib]

    def version_of(self, soname_prefix: str) -> SharedLib | None:
        """The library whose soname starts with `soname_prefix` ("libnccl.so"), highest soname first."""
        found = sorted((name for name in self.libs if name.startswith(soname_prefix)), reverse=True)
        return self.libs[found[0]] if found else None


def parse_ldconfig(text: str) -> SharedLibs:
    libs: dict[str, SharedLib] = {}
    directory: str | None = None
    saw_dir = False
    for line in mended_lines(text):  # CRLF, colour codes and a prompt line off, the indent kept
        m = _DIR.match(line)
        if m:
            directory, saw_dir = m.group("dir"), True
            continue
        m = _LINK.match(line)
        if m and directory is not None and m.group("soname") not in libs:
            libs[m.group("soname")] = SharedLib(m.group("soname"), f"{directory}/{m.group('file')}")
    if not saw_dir:
        raise ParseError("ldconfig -v: no library directory in the output")
    return SharedLibs(libs)
