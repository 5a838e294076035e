"""One linear pass over a pickle's opcodes, before CPython's C unpickler reads it, refusing
every number in the stream that would make the unpickler allocate by that number instead
of by the stream's length.

What the C unpickler (Modules/_pickle.c, 3.11; pickle.py and pickletools name the
opcodes) sizes by a number it reads:

* the memo: an array indexed by the memo key. PUT, BINPUT and LONG_BINPUT at index N grow
  it to 2N entries and zero them, before anything else runs: `Np200000000\\n.` (13 bytes)
  touches 3 GB, LONG_BINPUT's 4-byte index up to 64 GB. Here an index may be at most the
  number of memo stores before it (every pickler numbers them 0, 1, 2...: torch's C++
  pickler and CPython's alike), so the array stays within 16 bytes per byte of input.
  GET, BINGET and LONG_BINGET only look an index up (an absent one is an error).
* BINBYTES, BINBYTES8 and BYTEARRAY8 allocate the size they state before reading into it;
  the other counted opcodes (BINUNICODE*, BINSTRING, LONG4, the 1-byte counts) and FRAME
  read through the file and allocate what is there, but a count beyond the end is
  truncation either way. Every stated count must fit in the bytes that follow it.

Everything else the unpickler allocates (its stack, marks, objects) grows with the opcodes
it has read, one or more bytes each: by how much depends on the object each builds (a set
is 216 bytes for EMPTY_SET's one byte), so a format may refuse opcodes it never holds.

Opcodes are read as pickletools describes them, so a Python that knows a new opcode knows
its argument here too; a byte that is no opcode is refused, as the unpickler would refuse
it. The scan stops at the first STOP, where the unpickler stops.
"""

from __future__ import annotations

import pickle
import pickletools
from collections.abc import Collection

# kinds of argument (pickletools' ArgumentDescriptor.n, negative where not a fixed width)
_LINE = pickletools.UP_TO_NEWLINE
_COUNT1 = pickletools.TAKEN_FROM_ARGUMENT1
_COUNT4 = pickletools.TAKEN_FROM_ARGUMENT4  # signed
_COUNT4U = pickletools.TAKEN_FROM_ARGUMENT4U
_COUNT8U = pickletools.TAKEN_FROM_ARGUMENT8U
# opcodes read here beyond their argument's width (values below every pickletools kind)
_TWO_LINES = -100  # GLOBAL, INST: module and name, a line each
_PUT = -101
_BINPUT = -102
_LONG_BINPUT = -103
_MEMOIZE = -104
_FRAME = -105
_STOP = -106
_UNKNOWN = -107
_REFUSED = -108

_COUNT_WIDTH = {_COUNT1: 1, _COUNT4: 4, _COUNT4U: 4, _COUNT8U: 8}
_LONGEST_INDEX = 20  # decimal digits of a PUT index: more than any input's length


def _kinds() -> list[int]:
    kinds = [_UNKNOWN] * 256
    special = {"PUT": _PUT, "BINPUT": _BINPUT, "LONG_BINPUT": _LONG_BINPUT, "MEMOIZE": _MEMOIZE,
               "FRAME": _FRAME, "STOP": _STOP}
    for op in pickletools.opcodes:
        kind = 0 if op.arg is None else op.arg.n
        if op.arg is pickletools.stringnl_noescape_pair:
            kind = _TWO_LINES
        kinds[ord(op.code)] = special.get(op.name, kind)
    return kinds


_KINDS = _kinds()
_NAMES = {ord(op.code): op.name for op in pickletools.opcodes}
_CODES = {name: code for code, name in _NAMES.items()}


def _refuse(what: str, at: int, why: str) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(f"{what} at byte {at} {why}")


def _line_end(data: bytes, pos: int, op: int, at: int) -> int:
    end = data.find(b"\n", pos)
    if end < 0:
        raise _refuse(_NAMES[op], at, "has no end of line")
    return end + 1


def _counted(data: bytes, pos: int, kind: int, op: int, at: int) -> int:
    """The position after a counted argument: its count, then that many bytes."""
    width = _COUNT_WIDTH[kind]
    if pos + width > len(data):
        raise _refuse(_NAMES[op], at, "is cut inside its count")
    count = int.from_bytes(data[pos:pos + width], "little", signed=kind == _COUNT4)
    pos += width
    if count < 0 or count > len(data) - pos:
        raise _refuse(_NAMES[op], at, f"states {count} bytes where {len(data) - pos} follow")
    return pos + count


def _put_index(data: bytes, pos: int, kind: int, at: int) -> tuple[int, int]:
    """(the memo index a PUT, BINPUT or LONG_BINPUT names, the position after it)."""
    if kind == _BINPUT:
        end = pos + 1
        index = data[pos] if end <= len(data) else 0
    elif kind == _LONG_BINPUT:
        end = pos + 4
        index = int.from_bytes(data[pos:end], "little")
    else:
        end = _line_end(data, pos, ord("p"), at)
        digits = data[pos:end - 1].strip()
        if not digits.isdigit() or len(digits) > _LONGEST_INDEX:
            raise _refuse("PUT", at, f"has no memo index ({digits[:24]!r})")
        index = int(digits)
    return index, end


def check_bounds(data: bytes, refused: Collection[str] = ()) -> None:
    """Raise pickle.UnpicklingError where an opcode before the first STOP states a memo
    index beyond the stores before it, or a count beyond the bytes after it; a byte that is
    no opcode, a line with no end and a stream cut inside an argument too, and any opcode
    `refused` names (pickletools' names: a format that never holds what they build).
    Linear: one look at each opcode, its argument skipped (a line's end found by bytes.find)."""
    n = len(data)
    kinds = _KINDS
    if refused:
        kinds = list(kinds)
        for name in refused:
            kinds[_CODES[name]] = _REFUSED
    pos = 0
    stores = 0  # memo stores so far: the highest index a pickler could have written next
    while pos < n:
        op = data[pos]
        at = pos
        pos += 1
        kind = kinds[op]
        if kind >= 0:
            pos += kind
        elif kind == _STOP:
            return
        elif kind in (_PUT, _BINPUT, _LONG_BINPUT):
            index, pos = _put_index(data, pos, kind, at)
            if index > stores:
                raise _refuse(_NAMES[op], at, f"names memo index {index} after {stores} memo stores")
            stores += 1
        elif kind == _MEMOIZE:
            stores += 1
        elif kind == _LINE:
            pos = _line_end(data, pos, op, at)
        elif kind == _TWO_LINES:
            pos = _line_end(data, _line_end(data, pos, op, at), op, at)
        elif kind in _COUNT_WIDTH:
            pos = _counted(data, pos, kind, op, at)
        elif kind == _FRAME:
            frame = int.from_bytes(data[pos:pos + 8], "little")
            pos += 8
            if frame > n - pos:
                raise _refuse("FRAME", at, f"states {frame} bytes where {max(0, n - pos)} follow")
        elif kind == _REFUSED:
            raise _refuse(_NAMES[op], at, "builds what this format never holds")
        else:
            raise pickle.UnpicklingError(f"byte {op:#04x} at {at} is no pickle opcode")
    raise pickle.UnpicklingError("pickle data was truncated: no STOP")
