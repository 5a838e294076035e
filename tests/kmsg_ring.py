"""/dev/kmsg records made from kernel-log text, and a ring buffer of them, for tests and bin/bench.

The device gives one record a read: `prio,seq,usec,flags;message\\n`, then the record's
key=value lines, each indented by a space (a device's SUBSYSTEM= and DEVICE=). The kernel
escapes a newline inside a message as `\\x0a`; dmesg prints what follows it as a line
indented under the message, so such a line here continues the record before it. The
fixtures' lines in other framings (journal, syslog, dmesg -T) keep their prefix in the
message: a record holds whatever bytes it holds, and the readers must agree on it anyway.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
# the kernel-log captures in the repo: dmesg, journal and syslog text with NVIDIA lines among others'
KERNEL_LOG_FILES = (sorted((FIXTURES / "kernel-log").glob("*.txt"))
                    + sorted((FIXTURES / "corpus" / "xid-dmesg").glob("*.txt")))
_UPTIME = re.compile(r"\[\s*(\d{1,12})\.(\d{6})\] ?")
_DEVICE = b" SUBSYSTEM=pci\n DEVICE=+pci:0000:5d:00.0\n"
NVIDIA = (b"NVRM", b"nvswitch", b"Xid")


def kmsg_records(text: str, *, first_seq: int = 0, dict_every: int = 3) -> list[bytes]:
    """text's lines as /dev/kmsg records: a `[uptime] ` stamp is the record's usec, an indented
    line continues the message before it, every dict_every-th record carries device lines."""
    messages: list[tuple[int, str]] = []
    for line in text.splitlines():
        if line[:1].isspace() and line.strip() and messages:
            usec, message = messages[-1]
            messages[-1] = (usec, message + "\\x0a" + line.strip())
            continue
        m = _UPTIME.match(line)
        usec = int(m.group(1)) * 10**6 + int(m.group(2)) if m else len(messages) * 1000
        messages.append((usec, line[m.end():] if m else line))
    return [f"4,{first_seq + i},{usec},-;{message}\n".encode(errors="surrogateescape")
            + (_DEVICE if dict_every and i % dict_every == 0 else b"")
            for i, (usec, message) in enumerate(messages)]


def fixture_records() -> list[bytes]:
    """Every kernel-log capture in the repo as records, one after another."""
    records: list[bytes] = []
    for path in KERNEL_LOG_FILES:
        records += kmsg_records(path.read_text(errors="surrogateescape"), first_seq=len(records))
    return records


def ring(n: int, *, nvidia_every: int = 97, extra: Iterable[bytes] = ()) -> list[bytes]:
    """A ring buffer of n records as a busy GPU node's: the captures' other lines over and over,
    one of their NVIDIA lines every nvidia_every records, `extra` records among them (odd ones)."""
    records = fixture_records()
    nvidia = [r for r in records if any(w in r for w in NVIDIA)]
    others = [r for r in records if not any(w in r for w in NVIDIA)]
    nv, other, odd = itertools.cycle(nvidia), itertools.cycle(others), list(extra)
    spread = max(1, n // (len(odd) + 1))
    out = []
    for i in range(n):
        if odd and i % spread == spread - 1:
            out.append(odd.pop())
            continue
        record = next(nv) if i % nvidia_every == 0 else next(other)
        head, _, rest = record.partition(b";")
        out.append(b"4,%d,%d,-;" % (i, i * 1000) + rest if head.count(b",") == 3 else record)
    return out
