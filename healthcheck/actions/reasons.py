"""hc's drain reasons: the one format hc writes ("hc: ib.E002,net.E001 +3") and reads back.

Below both the policy (which decides drains and resumes by it) and the Slurm client
(whose node says whether hc drained it): hc owns only the reasons it wrote, so the
test of "hc wrote this" is one pattern in one place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from healthcheck.core.lazyre import lazy_compile

REASON_PREFIX = "hc:"
_ID = lazy_compile(r"\b[a-z][a-z0-9]*\.[EW]\d{3}\b")
# Exactly what drain_reason() writes: "hc: ", an optional "ERROR xN ", finding IDs
# separated by commas, an optional " +N" for the IDs that did not fit. An admin's
# "hc:maint - jdoe replacing DIMM" starts like it and is not hc's.
_ID_TEXT = r"[a-z][a-z0-9]*\.[EW]\d{3}"
_HC_REASON = lazy_compile(rf"hc: (?:ERROR x\d+ )?(?:{_ID_TEXT}(?:,{_ID_TEXT})*(?: \+\d+)?|\+\d+)")


def is_hc_reason(reason: str) -> bool:
    """Whether hc wrote this drain reason (and so may replace or resume it)."""
    return bool(_HC_REASON.fullmatch(reason))


def drain_reason(ids: Iterable[str], max_len: int, prefix: str = "") -> str:
    """"hc: ib.E002,net.E001" — as many IDs as fit in max_len, then "+N"."""
    ids = sorted(set(ids))
    head = f"{REASON_PREFIX} {prefix}"
    for n in range(len(ids), 0, -1):
        more = len(ids) - n
        text = head + ",".join(ids[:n]) + (f" +{more}" if more else "")
        if len(text) <= max_len:
            return text
    return (head + f"+{len(ids)}")[:max_len]


def reason_ids(reason: str) -> tuple[set[str], bool]:
    """Finding IDs named in an hc reason, and whether the list was cut short ("+N")."""
    return set(_ID.findall(reason)), bool(re.search(r"\+\d+\s*$", reason))
