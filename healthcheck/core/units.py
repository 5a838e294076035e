"""Message sizes as operators write them ("16G", "8M", "1048576"), in binary units.

nccl-tests' -b/-e and perftest's -s read K, M and G as powers of 1024, so "16G" in a
fabric file means what `all_reduce_perf -b 16G` means: 17179869184 bytes.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d{1,15})(?:\.(\d{1,6}))?\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)
_POWER = {"": 0, "K": 1, "M": 2, "G": 3, "T": 4}
MAX_SIZE = 2**40  # 1 TiB: no collective buffer is larger


def parse_size(text: str) -> int:
    """Bytes in `text` ("16G", "8 MiB", "512K", "4096"); ValueError naming the text otherwise."""
    m = _SIZE.match(text) if isinstance(text, str) and len(text) <= 32 else None
    if not m:
        raise ValueError(f"{text!r} is not a size (a number of bytes, or with K, M, G or T: 16G, 8M)")
    whole, frac, unit = m.group(1), m.group(2) or "", m.group(3).upper()
    tenths = 10 ** len(frac)
    scaled = (int(whole) * tenths + int(frac or "0")) * 1024 ** _POWER[unit]
    if scaled % tenths:
        raise ValueError(f"{text!r} is not a whole number of bytes")
    value = scaled // tenths
    if not 1 <= value <= MAX_SIZE:
        raise ValueError(f"{text!r} is out of range (1 byte to 1T)")
    return value


def format_size(n: int) -> str:
    """The shortest exact form: 17179869184 -> "16G", 1536 -> "1536" (not "1.5K")."""
    for unit in ("T", "G", "M", "K"):
        scale = 1024 ** _POWER[unit]
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)
