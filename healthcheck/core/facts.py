"""Fact providers: how a named fact is gathered for a node over a given transport.

A provider runs a probe (a command, a sysfs walk, an NVML call) through the context's
runner and hands the raw output to a parser. The same fact can have several providers:
`ib_ports` comes from sysfs when hc runs on the node and from `ibstat` text when it
only has a shell on the node (agentless SSH).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Any

import msgspec

from healthcheck.core.errors import ParseError
from healthcheck.core.plugins import load_probes_for
from healthcheck.runners.base import CommandResult, Runner

# How much of what a timed-out command printed is kept as evidence (per stream, bytes):
# enough for the last lines of a bandwidth sweep, small enough for a report.
PARTIAL_OUTPUT_BYTES = 64 * 1024


class ProbeKind(str, Enum):
    """Why a fact could not be gathered (a str, so `kind == "timeout"` still holds)."""

    MISSING = "missing"  # tool or source absent
    TIMEOUT = "timeout"  # the probe ran out of its own time budget and was stopped
    FAILED = "failed"  # the tool exited with an error
    UNPARSABLE = "unparsable"  # its output made no sense
    UNREADABLE = "unreadable"  # I/O error
    NOT_RUN = "not-run"  # never started: the run's time was spent, or an exclusive probe could not run alone

    def __str__(self) -> str:
        return self.value


class ProbeError(Exception):
    """A fact could not be gathered; the checks that need it report ERROR.

    kind: a ProbeKind (a plain string naming one is accepted). cut_short: the run's
    deadline, not the probe's own budget, ended it, so a timeout is no sign of a hang.
    """

    def __init__(self, kind: ProbeKind | str, message: str, evidence: str | None = None) -> None:
        super().__init__(message)
        self.kind = ProbeKind(kind)
        self.message = message
        self.evidence = evidence
        self.cut_short = False

    @property
    def is_hang(self) -> bool:
        """Whether the probe had its whole budget and still did not finish."""
        return self.kind is ProbeKind.TIMEOUT and not self.cut_short


def _tail(text: str, limit: int) -> tuple[str, bool]:
    """The last `limit` bytes of text (UTF-8), and whether anything was cut."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= limit:
        return text, False
    return data[-limit:].decode("utf-8", errors="ignore"), True


def partial_output(result: CommandResult, limit: int = PARTIAL_OUTPUT_BYTES) -> str | None:
    """What a stopped command printed before it was killed (each stream's tail), or None."""
    parts = []
    for name, text in (("stdout", result.stdout), ("stderr", result.stderr)):
        if text:
            kept, cut = _tail(text, limit)
            parts.append(f"--- {name} before it was stopped{f' (last {limit // 1024} KiB)' if cut else ''} ---\n{kept}")
    return "\n".join(parts) or None


def timeout_error(result: CommandResult, what: str, timeout_s: float) -> ProbeError:
    """The ProbeError of a timed-out command, carrying what it printed as evidence."""
    return ProbeError(ProbeKind.TIMEOUT, f"{what} did not finish within {timeout_s:g}s", partial_output(result))


class ProbeContext(msgspec.Struct):
    """What a provider may use: a runner, a filesystem root, the environment, a timeout."""

    runner: Runner
    transport: str = "local"  # local | ssh
    root: Path = Path("/")  # where /sys and /proc are read (tests point it at a fixture tree)
    env: Mapping[str, str] = msgspec.field(default_factory=dict)
    timeout_s: float = 5.0
    params: Mapping[str, Any] = msgspec.field(default_factory=dict)  # run parameters (e.g. since=)
    # The node's limits, for providers that must know *where* to look (which paths to
    # stat, which GPUs the job owns); only checks judge what they find.
    limits: Any = None

    def path(self, absolute: str) -> Path:
        """`absolute` (e.g. "/sys/class/infiniband") under this context's root."""
        return self.root / absolute.lstrip("/")

    def run_checked(
        self,
        argv: tuple[str, ...],
        *,
        ok_codes: tuple[int, ...] = (0,),
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> CommandResult:
        """Run argv, turning a missing tool, a timeout or an error exit into ProbeError."""
        # env/cwd only when asked for: runners that predate them (ssh, batch) keep working
        extra: dict[str, Any] = {k: v for k, v in (("env", env), ("cwd", cwd)) if v is not None}
        result = self.runner.run(argv, timeout_s=self.timeout_s, **extra)
        if result.not_found:
            raise ProbeError(ProbeKind.MISSING, f"{argv[0]} not found", result.stderr or None)
        if result.timed_out:
            raise timeout_error(result, " ".join(argv), self.timeout_s)
        if result.error:
            raise ProbeError(ProbeKind.FAILED, f"{argv[0]}: {result.error}")
        if result.returncode not in ok_codes:
            tail = (result.stderr or result.stdout).strip().splitlines()
            last = tail[-1] if tail else ""
            raise ProbeError(
                ProbeKind.FAILED,
                f"{' '.join(argv)} exited {result.returncode}" + (f": {last}" if last else ""),
                (result.stderr or result.stdout)[-2000:] or None,
            )
        return result

    def parse(self, parser: Callable[[str], Any], text: str, tool: str) -> Any:
        """Run a parser, turning its ParseError into ProbeError("unparsable")."""

        try:
            return parser(text)
        except ParseError as exc:
            raise ProbeError(ProbeKind.UNPARSABLE, f"{tool}: {exc}", text[-2000:] or None) from None


ProviderFn = Callable[[ProbeContext], Any]
PrefetchFn = Callable[[ProbeContext], list[tuple[str, ...]]]


class Provider(msgspec.Struct, frozen=True):
    """How one fact is gathered over one transport."""

    fn: ProviderFn
    # the commands it will run, known before it runs (so a remote transport can run them
    # for all facts of a node in one session)
    prefetch: PrefetchFn | None = None
    # runs alone, after every concurrent provider of the run has finished, one at a time
    # (a GPU bandwidth test must not share the GPUs with NVML probes)
    exclusive: bool = False


class Providers:
    """Fact providers by (fact, transport): the process has one; a test may own another.

    base: providers to fall back on for facts not registered here (a test's own set
    over the process-wide one, so its throw-away providers sit beside the real ones).
    """

    def __init__(self, load: Callable[[str, str], None] | None = None, base: Providers | None = None) -> None:
        self.by_key: dict[tuple[str, str], Provider] = {}
        self._load = load  # imports the module that registers a fact's provider over a transport, when first asked
        self.base = base

    def provides(self, fact: str, transport: str = "local", *, prefetch: PrefetchFn | None = None,
                 exclusive: bool = False) -> Callable[[ProviderFn], ProviderFn]:
        """Register a provider of `fact` for `transport` (and the commands it will run)."""

        def register(fn: ProviderFn) -> ProviderFn:
            key = (fact, transport)
            if key in self.by_key:
                raise ValueError(f"fact {fact!r} has two providers for transport {transport!r}")
            self.by_key[key] = Provider(fn, prefetch, exclusive)
            return fn

        return register

    def lookup(self, fact: str, transport: str) -> Provider | None:
        """The provider of `fact` over `transport` here or in the base, or None."""
        if self._load is not None:
            self._load(fact, transport)
        found = self.by_key.get((fact, transport))
        if found is None and self.base is not None:
            return self.base.lookup(fact, transport)
        return found

    def get(self, fact: str, transport: str) -> Provider:
        """The provider of `fact` over `transport`; ProbeError("missing") when there is none."""
        found = self.lookup(fact, transport)
        if found is None:
            raise ProbeError(ProbeKind.MISSING, f"no way to gather {fact!r} over {transport}")
        return found

    def prefetch_commands(self, facts: list[str], ctx: ProbeContext) -> list[tuple[str, ...]]:
        """The commands the providers of `facts` over ctx's transport declare up front.

        Exclusive providers are left out: they must not run in a batch beside the others.
        """
        out: list[tuple[str, ...]] = []
        for fact in facts:
            provider = self.lookup(fact, ctx.transport)
            if provider is not None and provider.prefetch is not None and not provider.exclusive:
                out.extend(provider.prefetch(ctx))
        return out


# The process-wide providers: every probe module registers here (through `provides`),
# imported when one of its facts is first looked up.
DEFAULT_PROVIDERS = Providers(load=load_probes_for)
_current = DEFAULT_PROVIDERS


def current_providers() -> Providers:
    """The providers the engine uses now (the process-wide ones unless a test swapped its own in)."""
    return _current


@contextmanager
def using_providers(providers: Providers) -> Iterator[Providers]:
    """Make `providers` the ones the engine uses, for the block (tests; see registry.using)."""
    global _current
    previous, _current = _current, providers
    try:
        yield providers
    finally:
        _current = previous


def provides(fact: str, transport: str = "local", *, prefetch: PrefetchFn | None = None,
             exclusive: bool = False) -> Callable[[ProviderFn], ProviderFn]:
    """Register a process-wide provider of `fact` for `transport`.

    exclusive: it runs alone, after every concurrent provider of the run has finished,
    one exclusive provider at a time, still under its budget and the run's deadline.
    """
    return DEFAULT_PROVIDERS.provides(fact, transport, prefetch=prefetch, exclusive=exclusive)


def prefetch_commands(facts: list[str], ctx: ProbeContext) -> list[tuple[str, ...]]:
    """The commands the current providers of `facts` over ctx's transport declare up front."""
    return current_providers().prefetch_commands(facts, ctx)


def provider_for(fact: str, transport: str) -> ProviderFn:
    """The function that gathers `fact` over `transport` (ProbeError("missing") if none)."""
    return current_providers().get(fact, transport).fn
