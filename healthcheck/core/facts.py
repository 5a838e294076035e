"""Fact providers: how a named fact is gathered for a node over a given transport.

A provider runs a probe (a command, a sysfs walk, an NVML call) through the context's
runner and hands the raw output to a parser. The same fact can have several providers:
`ib_ports` comes from sysfs when hc runs on the node and from `ibstat` text when it
only has a shell on the node (agentless SSH).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol

from healthcheck.runners.local import CommandResult


class ProbeError(Exception):
    """A fact could not be gathered; the checks that need it report ERROR.

    kind: "missing" (tool or source absent), "timeout", "failed" (tool exited with an
    error), "unparsable" (output made no sense), "unreadable" (I/O error).
    """

    def __init__(self, kind: str, message: str, evidence: Optional[str] = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.evidence = evidence


class Runner(Protocol):
    """Where a command runs: locally, over SSH, under srun."""

    def run(
        self, argv: tuple[str, ...], *, timeout_s: float, input: Optional[str] = None
    ) -> CommandResult: ...


@dataclass
class ProbeContext:
    """What a provider may use: a runner, a filesystem root, the environment, a timeout."""

    runner: Runner
    transport: str = "local"  # local | ssh
    root: Path = Path("/")  # where /sys and /proc are read (tests point it at a fixture tree)
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 5.0
    params: Mapping[str, Any] = field(default_factory=dict)  # run parameters (e.g. since=)
    # The node's limits, for providers that must know *where* to look (which paths to
    # stat, which GPUs the job owns); only checks judge what they find.
    limits: Any = None

    def path(self, absolute: str) -> Path:
        """`absolute` (e.g. "/sys/class/infiniband") under this context's root."""
        return self.root / absolute.lstrip("/")

    def run_checked(self, argv: tuple[str, ...], *, ok_codes: tuple[int, ...] = (0,)) -> CommandResult:
        """Run argv, turning a missing tool, a timeout or an error exit into ProbeError."""
        result = self.runner.run(argv, timeout_s=self.timeout_s)
        if result.not_found:
            raise ProbeError("missing", f"{argv[0]} not found", result.stderr or None)
        if result.timed_out:
            raise ProbeError("timeout", f"{' '.join(argv)} did not finish within {self.timeout_s:g}s")
        if result.error:
            raise ProbeError("failed", f"{argv[0]}: {result.error}")
        if result.returncode not in ok_codes:
            tail = (result.stderr or result.stdout).strip().splitlines()
            last = tail[-1] if tail else ""
            raise ProbeError(
                "failed",
                f"{' '.join(argv)} exited {result.returncode}" + (f": {last}" if last else ""),
                (result.stderr or result.stdout)[-2000:] or None,
            )
        return result


    def parse(self, parser: Callable[[str], Any], text: str, tool: str) -> Any:
        """Run a parser, turning its ParseError into ProbeError("unparsable")."""
        from healthcheck.core.errors import ParseError

        try:
            return parser(text)
        except ParseError as exc:
            raise ProbeError("unparsable", f"{tool}: {exc}", text[-2000:] or None) from None


ProviderFn = Callable[[ProbeContext], Any]
PrefetchFn = Callable[[ProbeContext], list[tuple[str, ...]]]
PROVIDERS: dict[tuple[str, str], ProviderFn] = {}
# the commands a remote provider will run, known before it runs (so the transport can
# run them for all facts of a node in one session)
PREFETCH: dict[tuple[str, str], PrefetchFn] = {}


def provides(fact: str, transport: str = "local", *, prefetch: Optional[PrefetchFn] = None
             ) -> Callable[[ProviderFn], ProviderFn]:
    """Register a provider of `fact` for `transport` (and the commands it will run)."""

    def register(fn: ProviderFn) -> ProviderFn:
        key = (fact, transport)
        if key in PROVIDERS:
            raise ValueError(f"fact {fact!r} has two providers for transport {transport!r}")
        PROVIDERS[key] = fn
        if prefetch is not None:
            PREFETCH[key] = prefetch
        return fn

    return register


def prefetch_commands(facts: list[str], ctx: ProbeContext) -> list[tuple[str, ...]]:
    """The commands the providers of `facts` over ctx's transport declare up front."""
    from healthcheck.probes import load_all

    load_all()
    out: list[tuple[str, ...]] = []
    for fact in facts:
        fn = PREFETCH.get((fact, ctx.transport))
        if fn is not None:
            out.extend(fn(ctx))
    return out


def provider_for(fact: str, transport: str) -> ProviderFn:
    from healthcheck.probes import load_all

    load_all()
    try:
        return PROVIDERS[(fact, transport)]
    except KeyError:
        raise ProbeError("missing", f"no way to gather {fact!r} over {transport}") from None
