"""`run_hc_inproc` (tests/support.py) against `run_hc`, the real `python -m healthcheck`: the
same argv gives the same exit code, stdout and stderr, so a test moved in-process asserts
what an operator would see. The only differences allowed are a run's own identity (its run
id, the seconds it took), which two real runs do not share either.

The sample covers each way out of main(): help (click's own formatting, at a pipe's width),
a usage error (click's exit 2 turned into hc's 4), a bad config (an HcError), a saved
report shown, the catalogue, a hook in --dry-run (HookGuard's signals and timer, Slurm
stand-ins on PATH), a saved job diagnosed, and `hc node --local` (runners.stop installed).
The runner's own guards (a traceback fails the test, os._exit is refused, state restored)
are tested below the sample."""

from __future__ import annotations

import atexit
import os
import re
import signal

import pytest
from support import FIXTURES, InProcessUnsupported, run_hc, run_hc_inproc, write_stub

import healthcheck.cli as hc_cli
from healthcheck.runners import stop

RUN_ID = re.compile(rb"\d{8}T\d{6}Z-[0-9a-f]{6}")
SECONDS = re.compile(rb"\d+\.\d+s\b")


def identity_free(text: bytes) -> bytes:
    """A run's output without what differs between any two real runs of it."""
    return SECONDS.sub(b"<s>", RUN_ID.sub(b"<run>", text))


def hook_env(tmp_path) -> dict[str, str]:
    """A node whose lo MTU is not the fabric's (net.E001: FAIL), sinfo and scontrol stand-ins."""
    bin_dir = tmp_path / "bin"
    nodes = "\\n".join(f"node{i}|idle|Unknown|none" for i in range(1, 11))  # one drain is within the guard
    write_stub(bin_dir, "sinfo", f'printf "{nodes}\\n"\n')
    write_stub(bin_dir, "scontrol", f'echo "$@" >> {tmp_path}/scontrol.log\n')
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text("net:\n  interfaces:\n    lo: {mtu: 1500}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nslurm:\n  state_dir: {tmp_path}/state\n  audit_log: {tmp_path}/audit.jsonl\n"
                   f"  report_dir: {tmp_path}/reports\nhistory: {{path: {tmp_path}/history.sqlite}}\n")
    return {"HC_CONFIG": str(cfg), "HC_NODE_NAME": "node1", "SLURM_JOB_ID": "7", "HC_SYSLOG_SOCKET": "",
            "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}


SAMPLE = {
    "help": (["--help"], None),
    "subcommand-help": (["report", "diff", "--help"], None),
    "usage-error": (["report", "show", "--format", "yaml", "x.json"], None),
    "unknown-command": (["nosuch"], None),
    "bad-config": (["config", "validate", "{tmp}/bad.yaml"], None),
    "report-show": (["report", "show", str(FIXTURES / "reports" / "deep-sweep-8-nodes.json")], None),
    "report-show-json": (["report", "show", "--format", "json", str(FIXTURES / "reports" / "hc-report-1.json")],
                         None),
    "checks-list": (["checks", "list"], None),
    "parse-stdin": (["parse", "ibstat", "-"], "garbage\n"),
    "hook-dry-run": (["prologue", "--dry-run"], "hook"),
    "diagnose-logs": (["diagnose", "logs", str(FIXTURES / "diagnose" / "dead")], None),
    "node-local": (["node", "--local", "--checks", "sys", "--config", "{tmp}/hc.yaml"], "hook"),
}


@pytest.mark.parametrize("name", sorted(SAMPLE))
def test_in_process_and_real_hc_print_the_same(name, tmp_path):
    argv, extra = SAMPLE[name]
    (tmp_path / "bad.yaml").write_text("default_fabric: [not, a, name]\n")
    args = [a.format(tmp=tmp_path) for a in argv]
    env = hook_env(tmp_path) if extra == "hook" else None
    stdin = extra if extra not in (None, "hook") else None
    real = run_hc(*args, env=env, input=stdin)
    here = run_hc_inproc(*args, env=env, input=stdin)
    assert here.returncode == real.returncode, (real.stderr[-400:], here.stderr[-400:])
    assert identity_free(here.stdout) == identity_free(real.stdout)
    assert identity_free(here.stderr) == identity_free(real.stderr)


def test_the_sample_takes_every_way_out_of_main(tmp_path):
    """The sample is not all exit 0: click's usage error (2, hc's 4), an HcError (4), a
    node's FAIL through a hook (2)."""
    (tmp_path / "bad.yaml").write_text("default_fabric: [not, a, name]\n")
    env = hook_env(tmp_path)
    codes = {name: run_hc_inproc(*[a.format(tmp=tmp_path) for a in argv], env=env if extra == "hook" else None,
                                 input=extra if extra not in (None, "hook") else None).returncode
             for name, (argv, extra) in SAMPLE.items()}
    assert (codes["help"], codes["usage-error"], codes["bad-config"], codes["parse-stdin"]) == (0, 4, 4, 4)
    assert codes["hook-dry-run"] == 2


# ------------------------------------------------------------------ the runner's guards


def test_an_internal_error_fails_the_test_with_its_traceback(monkeypatch):
    """An exception main() turns into "hc: internal error" (exit 3 in a real process) must
    not pass as an exit code in-process: the test sees the traceback."""
    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("deliberately")

    monkeypatch.setattr(hc_cli.LazyGroup, "get_command", broken)
    with pytest.raises(AssertionError, match=r"(?s)internal error.*Traceback.*ZeroDivisionError: deliberately"):
        run_hc_inproc("checks", "list")


def test_an_internal_error_of_a_run_without_click_fails_the_test_too(monkeypatch):
    """`hc node --local` runs without click (cli/lean.py): its internal errors are caught too."""
    import healthcheck.cli.localnode as localnode

    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("deliberately")

    monkeypatch.setattr(localnode, "run_local", broken)
    with pytest.raises(AssertionError, match=r"(?s)internal error.*Traceback.*ZeroDivisionError: deliberately"):
        run_hc_inproc("node", "--local")


def test_an_exception_escaping_main_is_raised_not_an_exit_code(monkeypatch):
    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("deliberately")

    monkeypatch.setattr(hc_cli.LazyGroup, "get_command", broken)
    with pytest.raises(ZeroDivisionError):
        run_hc_inproc("checks", "list", env={"HC_DEBUG": "1"})


def test_os_exit_is_refused_not_run(tmp_path):
    """A hook whose config cannot be read exits through HookGuard.failed's os._exit: in
    process that would end the test worker, so the runner refuses it loudly."""
    with pytest.raises(InProcessUnsupported, match="os._exit"):
        run_hc_inproc("prologue", env={"HC_CONFIG": str(tmp_path / "missing.yaml"), "HC_NODE_NAME": "node1",
                                       "HC_SYSLOG_SOCKET": ""})


def test_an_atexit_function_hc_registers_fails_the_test(monkeypatch):
    """It would run when the test worker exits, long after the call; a real hc runs it at its own exit."""
    get_command = hc_cli.LazyGroup.get_command

    def registering(self, ctx, name):
        atexit.register(leftover)
        return get_command(self, ctx, name)

    def leftover():
        return None

    monkeypatch.setattr(hc_cli.LazyGroup, "get_command", registering)
    try:
        with pytest.raises(AssertionError, match="atexit function .*leftover"):
            run_hc_inproc("checks", "list")
    finally:
        atexit.unregister(leftover)


def test_process_state_is_put_back(tmp_path, monkeypatch):
    """What a real hc takes with it when it exits: signal handlers and the timer (a hook's
    HookGuard), runners.stop's install (hc node), the cwd, the environment."""
    monkeypatch.setenv("HC_TIER", "deep")  # the runner's own HC_* are hidden from hc, then back
    before = ({s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM)},
              os.getcwd(), dict(os.environ))
    timer = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's alarm, where it runs
    env = hook_env(tmp_path)
    assert run_hc_inproc("prologue", "--dry-run", env=env).returncode == 2
    assert run_hc_inproc("node", "--local", "--checks", "sys", cwd=str(tmp_path),
                         env={"HC_NODE_NAME": "n1"}).returncode == 0
    after = ({s: signal.getsignal(s) for s in before[0]}, os.getcwd(), dict(os.environ))
    assert after == before
    left = signal.getitimer(signal.ITIMER_REAL)[0]
    assert (left > 0) == (timer[0] > 0) and left <= timer[0]  # armed as before, the calls' time spent
    assert not stop.installed() and signal.set_wakeup_fd(-1) == -1
