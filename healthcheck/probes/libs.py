"""The shared libraries the dynamic linker knows (`ldconfig -v`), over either transport:
the NCCL version a job will load. Loaded only when a run gathers `shared_libs`
(probes.FACT_MODULES)."""

from __future__ import annotations

from healthcheck.core.facts import ProbeContext, provides
from healthcheck.parsers.ldconfig import parse_ldconfig

LDCONFIG = ("ldconfig", "-N", "-X", "-v")  # list only: no cache rebuilt, no links made, no root


def _shared_libs(ctx: ProbeContext):
    # ldconfig lives in /sbin, which a user's PATH may lack; it also complains on stderr
    # about directories it cannot read, which is no failure
    result = ctx.run_checked(LDCONFIG, ok_codes=(0, 1))
    return ctx.parse(parse_ldconfig, result.stdout, "ldconfig -v")


@provides("shared_libs", "local")
@provides("shared_libs", "ssh", prefetch=lambda ctx: [LDCONFIG])
def shared_libs(ctx: ProbeContext):
    return _shared_libs(ctx)
