"""Regular expressions compiled when first used, not when their module is imported.

A module on the prologue's path (the line layer, the kernel-log parsers, the config
schema) declares dozens of patterns, and a prologue uses a handful: compiling all of
them cost more start-up than the checks' own work (issue 22). `lazy_compile` returns
an object that stands for the compiled pattern: `.pattern` is there at once, and the
first other attribute compiles it, keeping the compiled pattern's bound method on the
object so later calls cost what a compiled pattern's do. Every pattern made here is
listed in PATTERNS, and tests/unit/core/test_lazyre.py compiles them all, so a mistyped
pattern still fails in CI, not in a node's first run that needs it.
"""

from __future__ import annotations

import re
import threading
from typing import Any, AnyStr, cast

_LOCK = threading.Lock()


class LazyPattern:
    """A pattern compiled on first use; it answers what `re.Pattern` answers."""

    def __init__(self, pattern: str | bytes, flags: int = 0) -> None:
        self.pattern = pattern
        self.compile_flags = flags
        self._compiled: re.Pattern[Any] | None = None

    def compiled(self) -> re.Pattern[Any]:
        if self._compiled is None:
            with _LOCK:  # probe threads may meet the same pattern first together
                if self._compiled is None:
                    self._compiled = re.compile(self.pattern, self.compile_flags)
        return self._compiled

    def __getattr__(self, name: str) -> Any:
        # only for what is not on the object yet: a method, once, then kept on it
        if name.startswith("__"):
            raise AttributeError(name)
        value = getattr(self.compiled(), name)
        self.__dict__[name] = value
        return value

    def __repr__(self) -> str:
        return f"lazy_compile({self.pattern!r}, {self.compile_flags})"


PATTERNS: list[LazyPattern] = []


def lazy_compile(pattern: AnyStr, flags: int | re.RegexFlag = 0) -> re.Pattern[AnyStr]:
    """`re.compile(pattern, flags)`, done when the pattern is first used."""
    lazy = LazyPattern(pattern, int(flags))
    PATTERNS.append(lazy)
    return cast("re.Pattern[AnyStr]", lazy)
