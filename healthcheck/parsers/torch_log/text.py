"""Small readers of the words torch prints: numbers, rank lists, exception heads. Each is
bounded: a hostile line costs its length."""

from __future__ import annotations

from healthcheck.core.inputs import clip
from healthcheck.parsers.peers import endpoint

MAX_LINE = 16_384  # characters of a line that are read
MESSAGE_MAX = 300  # characters of a message kept
RANKS_MAX = 4096  # ranks of one list kept
_MAX_INT_DIGITS = 20
_MODULE_ERRORS = ("error", "timeout")
_EXC_SUFFIXES = ("Error", "Exception", "Interrupt", "Exit", "Warning", "Failure", "Iteration", "Group", "Timeout")


def to_int(text: str | None) -> int | None:
    """A decimal integer (ASCII digits, optional minus, at most 20 digits), else None."""
    if not text:
        return None
    body = text[1:] if text[0] == "-" else text
    if not body or len(body) > _MAX_INT_DIGITS or not (body.isascii() and body.isdigit()):
        return None
    return int(text)


def rank_list(text: str) -> tuple[int, ...]:
    """"1, 2, 3" -> (1, 2, 3), at most RANKS_MAX."""
    out = []
    for part in text.split(",", RANKS_MAX)[:RANKS_MAX]:
        value = to_int(part.strip())
        if value is not None:
            out.append(value)
    return tuple(out)


def task_ids(text: str) -> tuple[int, ...]:
    """srun's task list: "2", "0-1", "0,2-3" -> the ids, at most RANKS_MAX."""
    out: list[int] = []
    for part in text.split(",", RANKS_MAX)[:RANKS_MAX]:
        lo, _, hi = part.partition("-")
        first, last = to_int(lo), to_int(hi) if hi else to_int(lo)
        if first is None or last is None or last < first:
            continue
        out.extend(range(first, min(last, first + RANKS_MAX - len(out)) + 1))
        if len(out) >= RANKS_MAX:
            break
    return tuple(out[:RANKS_MAX])


def basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def exception_head(body: str, in_traceback: bool = False) -> tuple[str, str | None] | None:
    """`pkg.Type: message` -> (pkg.Type, message), `pkg.Type` -> (pkg.Type, None): the last
    line of a Python traceback, None for any other line. The type's last part must look
    like an exception class (CamelCase, or one of _EXC_SUFFIXES; inside a traceback a
    program's own class of any CamelCase name, which Python prints without `__main__.`);
    NCCL's `ncclXxx:` detail lines are not exceptions."""
    colon = body.find(":", 0, 300)
    if colon >= 0:
        after = body[colon + 1:colon + 2]
        if after not in ("", " "):
            return None
        name, message = body[:colon], body[colon + 1:]
    else:
        if len(body) > 300:
            return None
        name, message = body.rstrip(), None
    if not name or not name.isascii() or name.startswith("nccl"):
        return None
    parts = name.split(".")
    if len(parts) > 17 or not all(p.isidentifier() for p in parts):
        return None
    last = parts[-1]
    camel = last[:1].isupper() and any(c.islower() for c in last)
    # a C module's lowercase error class (`struct.error`, `socket.gaierror`, `socket.timeout`),
    # ending a traceback: the module's name before it
    module_error = in_traceback and message is not None and len(parts) > 1 and last.endswith(_MODULE_ERRORS)
    if not last.endswith(_EXC_SUFFIXES) and not module_error and \
            not (camel and (len(parts) > 1 or in_traceback and message is not None)):
        return None
    return name, message


def type_before(body: str, start: int) -> str:
    """The exception type printed just before `start` (`pkg.DistBackendError: ` + text)."""
    head = body[max(0, start - 300):start]
    if not head.endswith(": "):
        return ""
    token = head[:-2].rsplit(None, 1)[-1] if head[:-2].strip() else ""
    parsed = exception_head(token)
    return parsed[0] if parsed else ""


def host_port(text: str) -> str:
    """`[::ffff:127.0.0.1]:30520` -> `127.0.0.1:30520`; `[::1]:80` -> `::1:80` (peers.endpoint's
    forms; a text that is none of them as it is)."""
    found = endpoint(text)
    if found is None or found.port is None:
        return text
    return f"{found.address.removeprefix('::ffff:')}:{found.port}"


def message_from(body: str, opening: str, at: int) -> str:
    """The message from `opening` (looked for just before `at`) to the end of the line."""
    start = body.rfind(opening, max(0, at - 40), at + len(opening))
    return clip(body[start if start >= 0 else at:].strip(), MESSAGE_MAX)


def rest_of(body: str, at: int) -> str:
    """The message from `at` to the end of the line, bounded."""
    return clip(body[at:].strip(), MESSAGE_MAX)
