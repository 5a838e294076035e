"""torchrun's ChildFailedError box: `PROGRAM FAILED` under a `====` border (or right after
`ChildFailedError:`, a box collapsed onto few lines), its `Failures:` and `Root Cause`
sections, each `[N]:` entry field by field; also a box cut to its tail."""

from __future__ import annotations

import re

from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import Line
from healthcheck.parsers.torch_log.facts import MAX_LISTED, SIGNALS, ChildFailedBlock, ChildFailure
from healthcheck.parsers.torch_log.state import FailureBox, TorchState, agent_where
from healthcheck.parsers.torch_log.text import MESSAGE_MAX, exception_head, to_int

TITLE_MAX = 1024  # characters of a `PROGRAM FAILED` title
_TRACEBACK_LINES = 80  # of an entry's traceback
_TRACEBACK_MAX = 4000
_LOOSE_MISSES = 8  # lines in a row a loose box may not read before it is taken to have ended

# an entry's `  name      : value`, read by its name whatever the blanks around it: a paste that
# lost the indent (flattened), squeezed the padding to one blank or tabified it (`  rank\t    :`)
# is the same field; only read inside a box (after its title or rules, or a tail's own field)
_BLOCK_FIELD = re.compile(r"([ \t]{0,16})(time|host|rank|exitcode|error_file|traceback)[ \t]{0,16}:[ \t]?(.*)")
_BLOCK_ENTRY = re.compile(r"\[(\d{1,9})\]:")
_BLOCK_RANK = re.compile(r"(-?\d{1,9})[ \t]{1,8}\(local_rank:[ \t]{0,8}(-?\d{1,9})\)")
_BLOCK_EXIT = re.compile(r"(-?\d{1,20})[ \t]{1,8}\(pid:[ \t]{0,8}(\d{1,10})\)(?:\s{0,4}\((\w{1,16})\))?")
_BLOCK_SIGNAL = re.compile(r"Signal (\d{1,3}) \((\w{1,16})\) received by PID")
# the box's fields that open a box cut to its tail: only torchrun's box prints them so
_BOX_TAIL_FIELDS: dict[str, re.Pattern[str]] = {
    "time": re.compile(r"\d{4}-\d\d-\d\d_\d\d:\d\d:\d\d$"), "rank": _BLOCK_RANK, "exitcode": _BLOCK_EXIT}
# a collapsed box's fields, wherever they sit on a line: `rank2 (local rank: 2)exitcode: -9 (pid: 36071)`
_LOOSE_RANK = re.compile(r"rank:? ?(-?\d{1,9}) \(local[_ ]rank: ?(-?\d{1,9})\)")
_LOOSE_EXIT = re.compile(r"exitcode ?: ?(-?\d{1,20}) \(pid: ?(\d{1,10})\)")
_LOOSE_ERROR_FILE = re.compile(r"error[_ ]file ?: ?(\S{1,1024})")
_LOOSE_FIELD = re.compile(r"(time|host|traceback) {0,8}: ?(.*)")
_LOOSE_SHAPES = ((_LOOSE_RANK, "rank", "{} (local_rank: {})"), (_LOOSE_EXIT, "exitcode", "{} (pid: {})"),
                 (_LOOSE_ERROR_FILE, "error_file", "{}"))
_ROOT_CAUSE = "Root Cause (first observed failure)"


_NO_OTHER = ("<NO_OTHER_FAILURES>", "<NO OTHER FAILURES>")


def _rule(stripped: str, char: str) -> bool:
    return stripped.startswith(char * 5) and not stripped.strip(char)


def read_box(state: TorchState, line: Line) -> bool:
    """A line of the open box (False when the box ended before it), or one that opens a box
    cut to its tail."""
    if state.box is not None:
        return _box_line(state, state.box, line)
    return _box_tail(state, line)


def before_title(text: str) -> bool:
    """Whether a line's text ends as `ChildFailedError:` does (a box's title may follow it)."""
    return text.rstrip().endswith("ChildFailedError:")


def read_box_title(state: TorchState, line: Line) -> bool:
    """`PROGRAM FAILED` after a `====` border or right after `ChildFailedError:` (then a box
    with no border: loose). Every line it sees says whether a title may follow it."""
    b = line.text
    after_error, state.after_child_error = state.after_child_error, before_title(b)
    border, state.border = state.border, False
    if (border or after_error) and b.endswith(" FAILED") and len(b) < TITLE_MAX:
        state.box = FailureBox(line, b[:-7].strip(), loose=not border)
        state.torch = True
        return True
    return False


def read_box_border(state: TorchState, line: Line) -> bool:
    """A `====` border: the box's title may follow."""
    if line.text.strip("="):
        return False
    state.border = True
    return True


def _box_line(state: TorchState, box: FailureBox, line: Line) -> bool:
    b = line.text
    stripped = b.strip()
    if not stripped:
        return True
    if _rule(stripped, "="):
        end_box(state, complete=True)
        return True
    if _marker(box, stripped) or _entry(box, line, stripped):
        return True
    if box.entries and _entry_field(box, b, stripped):
        return True
    if box.loose and box.misses < _LOOSE_MISSES:
        box.misses += 1  # a collapsed box's stray words (`time`, `host`, their values): read on
        return False
    end_box(state, complete=False)
    return False


def _marker(box: FailureBox, stripped: str) -> bool:
    """A box's rule, section title or `<NO_OTHER_FAILURES>`; True when it was one."""
    if _rule(stripped, "-"):
        box.field = ""
    elif stripped == "Failures:":
        box.section, box.field = "failures", ""
    elif stripped.startswith("Root Cause"):
        box.section, box.field = "root", ""
    elif stripped in _NO_OTHER:
        box.no_other = True
    else:
        return False
    return True


def _entry(box: FailureBox, line: Line, stripped: str) -> bool:
    """An entry's `[N]:`."""
    m = _BLOCK_ENTRY.fullmatch(stripped)
    if m is None:
        return False
    if len(box.entries) < MAX_LISTED:
        box.entries.append({"line": line.number, "index": int(m.group(1)), "root_cause": box.section == "root",
                            "other_failure": box.section == "failures", "traceback": []})
    box.field = ""
    return True


def _entry_field(box: FailureBox, b: str, stripped: str) -> bool:
    """The last entry's `  name : value` field, its traceback's next line, or (a loose box)
    fields run together."""
    entry = box.entries[-1]
    indent = len(b) - len(b.lstrip(" \t"))
    # a traceback's lines sit deeper than its field (`    File ...`): never a field, whatever words
    m = None if box.field == "traceback" and indent > box.field_indent else _BLOCK_FIELD.fullmatch(b)
    if m:
        box.field, box.field_indent = m.group(2), len(m.group(1))
        _set_field(entry, m.group(2), m.group(3).strip())
        return True
    if box.field == "traceback" and b[:1] in " \t":
        if len(entry["traceback"]) < _TRACEBACK_LINES:
            entry["traceback"].append(b[2:] if b.startswith("  ") else b)
        return True
    if box.loose and _loose_fields(entry, stripped):
        box.misses = 0
        return True
    return False


def _set_field(entry: dict, name: str, value: str) -> None:
    if name == "traceback":
        entry["traceback"].append(value)
    else:
        entry[name] = value


def _loose_fields(entry: dict, text: str) -> bool:
    """A collapsed box's fields run together on one line (`rank2 (local rank: 2)exitcode:
    -9 (pid: 36071)error file: <N/A>`), or a field whose indent was lost; True when read."""
    m = _LOOSE_FIELD.match(text)
    if m:
        _set_field(entry, m.group(1), m.group(2).strip())
        return True
    found = False
    for pattern, name, shape in _LOOSE_SHAPES:
        m = pattern.search(text, 0, 4096)
        if m:
            entry[name] = shape.format(*m.groups())
            found = True
    return found


def opens_tail(text: str) -> bool:
    """Whether a line's text opens a failure box cut to its tail (_box_tail), whatever came before."""
    if text.startswith(_ROOT_CAUSE) or text.strip() in _NO_OTHER:
        return True
    m = _BLOCK_FIELD.fullmatch(text)
    if m is None:
        return False
    shape = _BOX_TAIL_FIELDS.get(m.group(2))
    return shape is not None and shape.match(m.group(3).strip()) is not None


def _box_tail(state: TorchState, line: Line) -> bool:
    """A failure box cut to its tail (the paste begins inside it): its `Root Cause` title,
    its Failures section's `<NO_OTHER_FAILURES>`, or a field only torchrun's box prints
    (`  time      : 2025-05-21_15:43:03`, `  rank      : 0 (local_rank: 0)`, `  exitcode  :
    -9 (pid: 14750)`, whatever the blanks: its value's shape is torchrun's alone) opens it
    with no program."""
    b = line.text
    if not opens_tail(b):
        return False
    if b.startswith(_ROOT_CAUSE):
        state.box = FailureBox(line, "", loose=True)
        state.box.section, state.torch = "root", True
        return True
    if b.strip() in _NO_OTHER:  # cut inside its `Failures:` section, which lists no other failure
        state.box = FailureBox(line, "", loose=True)
        state.box.section, state.box.no_other, state.torch = "failures", True, True
        return True
    m = _BLOCK_FIELD.fullmatch(b)  # at any indent (a flattened paste's): the value's shape decides
    if m is None:
        return False
    shape = _BOX_TAIL_FIELDS.get(m.group(2))
    if shape is None or not shape.match(m.group(3).strip()):
        return False
    box = state.box = FailureBox(line, "", loose=True)
    box.entries.append({"line": line.number, "index": 0, "root_cause": False, "traceback": []})
    state.torch = True
    return _box_line(state, box, line)


def end_box(state: TorchState, complete: bool) -> None:
    """The box read so far as a ChildFailedBlock."""
    box = state.box
    if box is None:
        return
    state.box = None
    failures = tuple(child_failure(e) for e in box.entries[:MAX_LISTED])
    state.add("child_failed", ChildFailedBlock(
        **agent_where(box.line), program=clip(box.program, 256), failures=failures,
        no_other_failures=box.no_other, complete=complete))


def _last_exception(lines: list[str]) -> str:
    """The traceback's last line when it is an exception's."""
    for candidate in reversed(lines):
        candidate = candidate.strip()
        if candidate:
            return clip(candidate, MESSAGE_MAX) if exception_head(candidate) is not None else ""
    return ""


def child_failure(entry: dict) -> ChildFailure:
    rank = local_rank = exitcode = pid = None
    signal = ""
    m = _BLOCK_RANK.match(entry.get("rank", ""))
    if m:
        rank, local_rank = to_int(m.group(1)), to_int(m.group(2))
    m = _BLOCK_EXIT.match(entry.get("exitcode", ""))
    if m:
        exitcode, pid = to_int(m.group(1)), to_int(m.group(2))
        signal = m.group(3) or ""
    lines = entry["traceback"]
    text = "\n".join(lines)
    s = _BLOCK_SIGNAL.search(lines[0]) if lines else None
    if s:
        signal = s.group(2)
    if not signal and exitcode is not None and exitcode < 0:
        signal = SIGNALS.get(-exitcode, "")
    error_file = entry.get("error_file", "")
    return ChildFailure(
        line=entry["line"], index=entry["index"], root_cause=entry["root_cause"],
        other_failure=entry.get("other_failure", False),
        time=clip(entry.get("time", ""), 64), host=clip(entry.get("host", ""), 256), rank=rank,
        local_rank=local_rank, exitcode=exitcode, pid=pid, signal=signal,
        error_file="" if error_file == "<N/A>" else clip(error_file, 1024),
        traceback=text if len(text) <= _TRACEBACK_MAX else text[:_TRACEBACK_MAX] + "...",
        exception=_last_exception(lines),
    )
