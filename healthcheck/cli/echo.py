"""One line of text to stdout or stderr, as click.echo writes it, without importing click.

The hooks and `hc node --local` run without click (cli/lean.py): what they print must be
byte for byte what the click commands print, so this does what click.echo does with a
str: a newline added, ANSI escape sequences taken out where the stream is not a
terminal, an ASCII-configured stream written as UTF-8 with replacement, a flush after.
"""

from __future__ import annotations

import codecs
import sys
from typing import IO, Any

from healthcheck.core.lazyre import lazy_compile

# click's own pattern (click._compat._ansi_re)
_ANSI = lazy_compile(r"\033\[[0-?]*[ -/]*[@-~]")


def echo(text: str = "", *, err: bool = False) -> None:
    """Write `text` and a newline to stdout (stderr with err=True), then flush."""
    stream: IO[Any] | None = sys.stderr if err else sys.stdout
    if stream is None:
        return
    out = text + "\n"
    if not _is_terminal(stream):
        out = _ANSI.sub("", out)
    if _ascii_only(stream) and hasattr(stream, "buffer"):
        stream.flush()
        stream.buffer.write(out.encode("utf-8", "replace"))
        stream.buffer.flush()
        return
    stream.write(out)
    stream.flush()


def _is_terminal(stream: IO[Any]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _ascii_only(stream: IO[Any]) -> bool:
    """click writes UTF-8 with replacement to a stream whose encoding is ASCII (or unset)."""
    try:
        return codecs.lookup(getattr(stream, "encoding", None) or "ascii").name == "ascii"
    except LookupError:
        return False
