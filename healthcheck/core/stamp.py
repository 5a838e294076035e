"""The one stamper: what every finding carries besides what its producer said.

Checks, analyses, the engine's could-not-run findings and the run's own findings all
leave node, subject, hint, suggested action, limit source and fingerprint to `stamp`,
so a finding reads (and de-duplicates) the same whatever produced it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import msgspec

from healthcheck.core import catalogue
from healthcheck.core.model import Finding, fingerprint

# "file:line" of a limit, or a function from the limit's config key to it
LimitSource = str | Callable[[str], str | None] | None


def stamp(f: Finding, *, check: str, node: str | None = None, members: Iterable[str] | None = None,
          subject: str | None = None, limit_source: LimitSource = None) -> Finding:
    """`f` stamped for `check` on `node` (or about `members` together, or the run's `subject`)."""
    who = node or ""
    names = list(members) if members is not None else []
    if subject is None:
        base = who or "-".join(names)
        subject = f"{base}:{f.component}" if f.component else base
    spec = catalogue.CATALOGUE.get(f.id)
    limit = f.limit
    if limit is not None and limit.source is None and limit_source is not None:
        source = limit_source(limit.key) if callable(limit_source) else limit_source
        limit = msgspec.structs.replace(limit, source=source)
    extra = {"members": tuple(names)} if names else {}  # only findings about several nodes name them
    return msgspec.structs.replace(
        f,
        node=who,
        check=check,
        subject=subject,
        hint=spec.hint if spec else "",
        suggested_action=spec.action if spec else "",
        limit=limit,
        fingerprint=fingerprint(who, check, subject, f.id),
        **extra,
    )
