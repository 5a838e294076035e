"""`hc completion bash|zsh|fish` and what a TAB offers: subcommands without importing
them, node names from the config's hostlists and from sinfo, bounded, never an error;
driven through click's completion protocol and through the real shells' scripts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, run_hc

from healthcheck.cli import COMMANDS
from healthcheck.cli.completion import MAX_CANDIDATES, MAX_SCAN, node_candidates

CONFIG = """\
default_fabric: generic
nodes:
  "gpu[001-128]": generic
  "login[1-2]": generic
rails:
  "gpu[001-064]": leaf1
overrides:
  "gpu017":
    ib: {hca_count: 7}
  "huge[0000001-9999999]": {}
slurm:
  sinfo: SINFO
"""


def config(tmp_path: Path, sinfo: str = "/nonexistent/sinfo", text: str = CONFIG) -> Path:
    path = tmp_path / "hc.yaml"
    path.write_text(text.replace("SINFO", sinfo))
    return path


def stub(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def complete(words: str, env: dict[str, str] | None = None) -> list[str]:
    """What `hc` answers bash asking to complete `words` (its last word the one typed)."""
    cword = len(words.split(" ")) - 1
    r = run_hc(env={"_HC_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(cword), **(env or {})})
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr
    return [line.split(",", 1)[1] for line in r.stdout.decode().splitlines() if line]  # none: one empty line


# ---------------------------------------------------------------- the scripts


@pytest.mark.parametrize("shell, marker", [
    ("bash", "complete -o nosort -F _hc_completion hc"),
    ("zsh", "#compdef hc"),
    ("fish", "complete --no-files --command hc"),
])
def test_completion_prints_each_shells_script(shell, marker):
    r = run_hc("completion", shell)
    assert r.returncode == 0 and marker in r.stdout.decode() and "_HC_COMPLETE=" in r.stdout.decode()


def test_an_unknown_shell_is_a_usage_error():
    r = run_hc("completion", "tcsh")
    assert r.returncode == 4 and b"hc: error:" in r.stderr and b"Traceback" not in r.stderr


# ---------------------------------------------------------------- subcommands


def test_subcommands_complete_without_importing_them():
    """click's Group would import every subcommand for its help line (torch's checks too) on each TAB."""
    code = ("import atexit, json, sys\n"
            "atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.stderr))\n"
            "from healthcheck.cli import main\nmain()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HC_")}
    env.update(_HC_COMPLETE="zsh_complete", COMP_WORDS="hc ", COMP_CWORD="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode().splitlines()  # zsh: type, value, help per item
    offered = {out[i + 1]: out[i + 2] for i in range(0, len(out), 3) if out[i] == "plain"}
    assert offered == {name: help for name, (_, _, help) in COMMANDS.items()}
    loaded = set(json.loads(r.stderr.decode().strip().splitlines()[-1]))
    assert loaded & {module for module, _, _ in COMMANDS.values()} == set()
    assert not any(m.startswith(("healthcheck.checks", "healthcheck.orchestrate", "torch")) for m in loaded)


def test_a_prefix_narrows_subcommands_and_options_still_complete():
    assert complete("hc di") == ["diagnose"]
    assert complete("hc co") == ["completion", "config"]
    assert "--version" in complete("hc --")


# ---------------------------------------------------------------- node names


def test_node_names_complete_from_the_configs_hostlists(tmp_path):
    cfg = config(tmp_path)
    assert complete(f"hc node --config {cfg} gpu00") == [f"gpu00{i}" for i in range(1, 10)]
    assert complete(f"hc node --config {cfg} lo") == ["login1", "login2"]
    assert complete("hc node gpu12", env={"HC_CONFIG": str(cfg)}) == [f"gpu12{i}" for i in range(9)]


def test_names_already_given_are_not_offered_again(tmp_path):
    cfg = config(tmp_path)
    assert complete(f"hc node --config {cfg} gpu001 gpu003 gpu00") == [f"gpu00{i}" for i in (2, 4, 5, 6, 7, 8, 9)]


@pytest.mark.parametrize("words", ["sweep --config {cfg} --nodes lo", "diagnose hosts --config {cfg} lo",
                                   "config show --config {cfg} lo"])
def test_every_node_argument_completes(tmp_path, words):
    assert complete("hc " + words.format(cfg=config(tmp_path))) == ["login1", "login2"]


def test_a_hostlist_being_typed_keeps_what_comes_before_its_last_comma(tmp_path):
    cfg = config(tmp_path)
    assert complete(f"hc sweep --config {cfg} --nodes gpu001,lo") == ["gpu001,login1", "gpu001,login2"]
    assert node_candidates("gpu[00", cfg) == []  # a range being typed: nothing starts with it
    assert node_candidates("gpu001,gpu[1-2],lo", cfg) == ["gpu001,gpu[1-2],login1", "gpu001,gpu[1-2],login2"]


def test_many_matches_narrow_by_the_next_character(tmp_path):
    """Cutting 5,000 matches at the first N would let bash complete 'n0' where 'n4...' was meant."""
    cfg = config(tmp_path, text='nodes:\n  "n[0001-5000]": generic\n')
    assert node_candidates("n", cfg) == ["n0", "n1", "n2", "n3", "n4", "n5"]
    assert node_candidates("n4", cfg) == [f"n4{i}" for i in range(10)]
    assert node_candidates("n42", cfg) == [f"n42{i:02d}" for i in range(100)]  # 100 <= MAX_CANDIDATES
    assert len(node_candidates("n42", cfg)) <= MAX_CANDIDATES


def test_a_pattern_too_large_to_expand_is_left_out_and_the_rest_still_completes(tmp_path):
    cfg = config(tmp_path)  # huge[0000001-9999999]: 500 times MAX_SCAN
    assert 9_999_999 > MAX_SCAN
    started = time.monotonic()
    assert node_candidates("hu", cfg) == []
    assert node_candidates("gpu01", cfg) == [f"gpu01{i}" for i in range(10)]
    assert time.monotonic() - started < 20  # not the minutes (and gigabytes) expanding it would take


def test_terms_that_cannot_match_are_not_expanded(tmp_path):
    # the 15,000-name term would eat most of MAX_SCAN for nothing: its text says no name starts with "lo"
    cfg = config(tmp_path, text='nodes:\n  "big[00001-15000],login[1-2]": generic\n  "lab[00001-15000]": generic\n')
    assert node_candidates("lo", cfg) == ["login1", "login2"]
    assert node_candidates("la", cfg) == ["lab0", "lab1"]  # 15,000 matches, narrowed


# ---------------------------------------------------------------- sinfo


def test_sinfo_adds_slurms_nodes(tmp_path):
    # sinfo -h -o %N prints one folded hostlist per partition and state; a node may be in several
    sinfo = stub(tmp_path, "sinfo", '[ "$*" = "-h -o %N" ] || exit 3\nprintf "node[01-04]\\nlogin[1-2]\\nnode[03-04]\\n"\n')
    cfg = config(tmp_path, str(sinfo))
    assert complete(f"hc node --config {cfg} node0") == ["node01", "node02", "node03", "node04"]
    assert complete(f"hc node --config {cfg} lo") == ["login1", "login2"]  # config and sinfo: once each


def test_a_hung_sinfo_is_killed_at_its_timeout_and_the_config_still_answers(tmp_path):
    pidfile = tmp_path / "pid"
    sinfo = stub(tmp_path, "sinfo", f'echo $$ > {pidfile}\nexec sleep 60\n')
    started = time.monotonic()
    assert node_candidates("lo", config(tmp_path, str(sinfo)), sinfo_timeout_s=0.5) == ["login1", "login2"]
    assert time.monotonic() - started < 30  # the shell was not held for sinfo's 60 s
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)


@pytest.mark.parametrize("body", ['echo "sinfo: error: Unable to contact slurm controller" >&2\nexit 1\n',
                                  'printf "\\000\\377 garbage [[[\\n"\n'])
def test_a_failing_or_garbled_sinfo_leaves_the_config_names(tmp_path, body):
    cfg = config(tmp_path, str(stub(tmp_path, "sinfo", body)))
    assert node_candidates("lo", cfg) == ["login1", "login2"]


def test_a_flood_from_sinfo_costs_a_bounded_scan(tmp_path):
    # 100 kB of unclosed brackets (a regex splitter rescans the line from each), then 200,000 lines
    body = "head -c 100000 /dev/zero | tr '\\000' '['; echo; seq -f 'n%g' 1 200000\n"
    cfg = config(tmp_path, str(stub(tmp_path, "sinfo", body)))
    started = time.monotonic()
    assert node_candidates("lo", cfg) == ["login1", "login2"]
    offered = node_candidates("n1", cfg)
    assert offered and len(offered) <= MAX_CANDIDATES and all(name.startswith("n1") for name in offered)
    assert time.monotonic() - started < 20  # bounded work, not a scan of everything sinfo printed


@pytest.mark.parametrize("text", ["nodes: [not, a, mapping]\n", "nodes: {\n", "\x00\x01 binary", "- a list\n"])
def test_a_config_that_cannot_be_read_offers_nothing_and_fails_nothing(tmp_path, text):
    cfg = config(tmp_path, text=text)
    assert complete(f"hc node --config {cfg} lo") == []


def test_a_missing_or_special_config_offers_nothing(tmp_path):
    assert complete(f"hc node --config {tmp_path / 'absent.yaml'} lo") == []
    assert complete("hc node --config /dev/zero lo") == []


def test_hostile_names_are_never_offered(tmp_path):
    sinfo = stub(tmp_path, "sinfo", "printf 'x$(reboot)\\nnode[1-2\\nx;rm[1-2]\\nxok[1-2]\\n'\n")
    text = 'nodes:\n  "x;bad[1-2]": generic\n  "x\\u00e9[1-2]": generic\n  "xgood[1-2]": generic\nslurm: {sinfo: SINFO}\n'
    cfg = config(tmp_path, str(sinfo), text=text)
    assert node_candidates("x", cfg) == ["xgood1", "xgood2", "xok1", "xok2"]


# ---------------------------------------------------------------- real shells


@pytest.fixture
def hc_on_path(tmp_path) -> dict[str, str]:
    """An environment whose PATH finds `hc` (this checkout), as the scripts call it by name."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub(bindir, "hc", f'exec "{sys.executable}" -m healthcheck "$@"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("HC_")}
    env["PATH"] = f"{bindir}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def shell(argv: list[str], env: dict[str, str]) -> list[str]:
    r = subprocess.run(argv, capture_output=True, env=env, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode().splitlines()


@pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")
def test_bash_completes_through_the_script(tmp_path, hc_on_path):
    cfg = config(tmp_path)
    script = ('source <(hc completion bash)\n'
              'COMP_WORDS=(hc node --config "$1" gpu00); COMP_CWORD=4; _hc_completion hc; printf "%s\\n" "${COMPREPLY[@]}"\n'
              'COMP_WORDS=(hc dia); COMP_CWORD=1; COMPREPLY=(); _hc_completion hc; printf "%s\\n" "${COMPREPLY[@]}"\n')
    out = shell(["bash", "--norc", "--noprofile", "-c", script, "bash", str(cfg)], hc_on_path)
    assert out == [f"gpu00{i}" for i in range(1, 10)] + ["diagnose"]


@pytest.mark.skipif(not shutil.which("zsh"), reason="needs zsh (tests/rig/install.sh installs it)")
def test_zsh_completes_through_the_script(tmp_path, hc_on_path):
    # compadd, _describe and compdef exist only inside zsh's completion system: these stand-ins
    # print what the script hands them, the script itself runs as zsh runs it on a TAB
    cfg = config(tmp_path)
    script = ('compdef() { :; }\n'
              'compadd() { print -l -- "${(@P)${@[-1]}}"; }\n'
              '_describe() { print -l -- "${(@P)3}"; }\n'
              'eval "$(hc completion zsh)"\n'
              'words=(hc node --config "$1" lo); CURRENT=5; _hc_completion\n'
              'words=(hc swe); CURRENT=2; _hc_completion\n')
    out = shell(["zsh", "-f", "-c", script, "zsh", str(cfg)], hc_on_path)
    assert out == ["login1", "login2", "sweep:" + COMMANDS["sweep"][2].replace(":", "\\:")]


@pytest.mark.skipif(not shutil.which("fish"), reason="needs fish (tests/rig/install.sh installs it)")
def test_fish_completes_through_the_script(tmp_path, hc_on_path):
    cfg = config(tmp_path)
    script = f'hc completion fish | source; complete -C "hc node --config {cfg} gpu12"; complete -C "hc swe"'
    out = shell(["fish", "--no-config", "-c", script], hc_on_path)
    assert [line.split("\t")[0] for line in out] == [f"gpu12{i}" for i in range(9)] + ["sweep"]
