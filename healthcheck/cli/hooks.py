"""`hc prologue`, `hc epilogue`, `hc health`: what Slurm's Prolog, Epilog and
HealthCheckProgram call (through the wrappers in slurm/), run inside their deadline and
exit contract. No click here: the click commands (cli/hook_commands.py) and the lean
entry (cli/lean.py, what a hook's argv takes) both call `run`."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from healthcheck.cli.app import App, this_node_name
from healthcheck.cli.echo import echo
from healthcheck.core.config.schema import SlurmSettings
from healthcheck.core.errors import ExitCode, HcError
from healthcheck.report.syslog import send as send_to_syslog
from healthcheck.runners.local import kill_children

# The whole hook run is bounded by its tier's deadline_s plus this margin for acting and
# writing the report; the margin also covers loading the config, which is read before
# deadline_s is known (a first deadline from the schema's default is armed before it).
HARD_MARGIN_S = 3.0


def run(kind: str, config_path: Path | None, fmt: str | None, dry_run: bool,
         tier: str | None = None, resume: bool | None = None) -> int:
    """Run a hook inside its deadline and the exception guard; return its documented exit code.

    Nothing before or after the checks may make a hook exit otherwise: Slurm drains a node
    on any other Prolog/Epilog exit, outside hc's guard and with no reason hc could resume.
    """
    guard = HookGuard(kind)
    try:
        guard.arm(getattr(SlurmSettings(), kind).deadline_s + HARD_MARGIN_S)
        app = App(config_path, fmt or "table")
        config = app.config
        node = this_node_name()
        settings = getattr(config.main.slurm, kind)
        guard.arm(settings.deadline_s + HARD_MARGIN_S)
        from healthcheck.orchestrate.hooks import run_hook  # noqa: PLC0415 -- a failed import exits by the hook contract

        result = run_hook(kind, config, dict(os.environ), dry_run=dry_run, tier=tier, resume=resume,
                          node=node, hard_deadline=guard.deadline)
        for message in result.messages:  # stdout stays parseable with --format json
            echo(message, err=fmt == "json")
        if fmt is not None:
            app.emit_report(result.report)
        echo(result.summary, err=True)
        sys.stdout.flush()
        _journal(result.journal, "warning" if result.report.status.value in ("FAIL", "ERROR") else "info")
        return guard.finish(result.exit_code, abandoned=result.abandoned)
    except Exception as exc:
        return guard.failed(exc)


class HookGuard:
    """The deadline and the exit contract of one hook run.

    prologue: 2 only when the node FAILed (the verdict), else 0, whatever went wrong;
    epilogue: always 0; health: its Nagios code, 4 for a bad config, 3 for anything else
    that stopped it. On the hard deadline or SIGTERM, the commands hc started are killed
    and the hook exits by the same contract.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.started = time.monotonic()
        self.deadline: float | None = None
        signal.signal(signal.SIGTERM, self._give_up)

    def arm(self, seconds: float) -> None:
        """Bound the whole run to `seconds` from its start (not from now)."""
        self.deadline = self.started + seconds
        signal.signal(signal.SIGALRM, self._give_up)
        signal.setitimer(signal.ITIMER_REAL, max(0.01, self.deadline - time.monotonic()))

    def _code(self, own: int, *, finished: bool = False) -> int:
        """The exit code the contract allows, given what the run wanted; a run that did
        not finish falls back on the verdict it reached (a FAIL keeps the job off)."""
        if self.kind == "epilogue":
            return 0
        if self.kind == "prologue":
            wanted = (own,) if finished else (own, _verdict())
            return 2 if 2 in wanted else 0  # 2: ExitCode.FAIL
        return own

    def finish(self, code: int, *, abandoned: bool = False) -> int:
        signal.setitimer(signal.ITIMER_REAL, 0)
        code = self._code(code, finished=True)  # e.g. a guard refusal lets the job run
        if abandoned:  # a probe thread is stuck in a system call: do not wait for it
            _exit_now(code)
        return code

    def failed(self, exc: BaseException) -> int:
        signal.setitimer(signal.ITIMER_REAL, 0)

        kill_children()
        if isinstance(exc, HcError):
            what, own = str(exc), int(exc.exit_code)
        else:
            what, own = f"internal error: {type(exc).__name__}: {exc}", int(ExitCode.ERROR)
            if os.environ.get("HC_DEBUG") == "1":
                import traceback  # noqa: PLC0415 -- HC_DEBUG only; not on every hook's path

                traceback.print_exc()
        code = self._code(own)
        _log(f"hc {self.kind}: error: {_one_line(what)} ({_consequence(self.kind, code)})")
        _journal(f"hook={self.kind} verdict=none exit={code} report=none action=none: "
                 f"error: {_one_line(what)} ({_consequence(self.kind, code)})", "err")
        # threads (a probe stuck in NVML) must not keep a failed hook alive
        _exit_now(code)
        return code  # not reached

    def _give_up(self, signum: int, frame: object) -> None:
        kill_children()
        code = self._code(3)
        why = "hard deadline exceeded" if signum == signal.SIGALRM else f"signal {signal.Signals(signum).name}"
        said = f"{why} after {time.monotonic() - self.started:.1f}s; giving up ({_consequence(self.kind, code)})"
        _log(f"hc {self.kind}: {said}")
        _journal(f"hook={self.kind} verdict=none exit={code} report=none action=none: {said}", "err")
        _exit_now(code)


def _verdict() -> int:
    try:
        from healthcheck.orchestrate.hooks import verdict  # noqa: PLC0415 -- a failed import still exits by the contract

        return verdict()
    except Exception:
        return 0


def _consequence(kind: str, code: int) -> str:
    if kind == "health":
        return f"exit {code}"
    return "job not affected" if code == 0 else "the node FAILed: keeping the job off it"


def _one_line(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _log(line: str) -> None:
    try:
        os.write(2, (line + "\n").encode(errors="replace"))
    except OSError:
        pass  # stderr closed: the exit code is all slurmd gets anyway


def _journal(line: str, severity: str) -> None:
    """The run's one line to syslog/journald (report/syslog.py: never raises, never waits)."""
    send_to_syslog(line, severity=severity)


def _exit_now(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(code)
