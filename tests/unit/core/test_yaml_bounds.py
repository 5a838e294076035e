"""Hostile YAML configs: aliases, nesting, merge keys, values no tag can hold, and files
that are not files. Each is a ConfigError naming file:line (exit 4), decided before
any node is built where building is what would hang or crash."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest
from support import run_hc, run_hc_inproc

from healthcheck.core.config import yamlsrc
from healthcheck.core.config.yamlsrc import MAX_ALIASES, MAX_DEPTH, MAX_VALUES, load_yaml
from healthcheck.core.errors import ConfigError


def write(tmp_path: Path, text: str, name: str = "hc.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def laughs(levels: int, width: int) -> str:
    """The "billion laughs": each level an anchored list of `width` aliases to the last."""
    out = ["l0: &l0 [" + ", ".join(['"lol"'] * width) + "]"]
    for i in range(1, levels):
        out.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(out) + "\n"


@pytest.fixture
def no_compose(monkeypatch):
    """Fail if the composer runs: the bounds must hold on the event stream, before any
    node is built (the C composer recurses, and crashes ~30,000 levels down)."""

    def compose(*args, **kwargs):
        raise AssertionError("yaml.compose ran on a document past the bounds")

    monkeypatch.setattr(yamlsrc.yaml, "compose", compose)


def test_billion_laughs_is_refused_before_building(tmp_path, no_compose):
    path = write(tmp_path, laughs(9, 9))
    assert len(path.read_bytes()) < 1024  # 10^9 values from under a kilobyte
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:\d+: more than {MAX_VALUES} values"):
        load_yaml(path)


def test_billion_laughs_through_the_cli_is_one_line_exit_4(tmp_path):
    path = write(tmp_path, laughs(9, 9))
    r = run_hc("config", "validate", str(path))
    assert r.returncode == 4, r.stderr
    assert r.stderr.decode().count("\n") == 1 and b"more than" in r.stderr


def test_aliases_within_the_bounds_still_work(tmp_path):
    doc = load_yaml(write(tmp_path, "mtu: &m 9000\nnet: {mtu_min: *m, list: &l [1, 2]}\nagain: *l\n"))
    assert doc.data == {"mtu": 9000, "net": {"mtu_min": 9000, "list": [1, 2]}, "again": [1, 2]}
    assert doc.where(("again",)) == f"{doc.path}:3"


def test_too_many_aliases(tmp_path, no_compose):
    text = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(ConfigError, match=rf":2: more than {MAX_ALIASES} YAML aliases"):
        load_yaml(write(tmp_path, text))


def test_too_many_plain_values(tmp_path, no_compose):
    text = "a: [" + ",".join(["1"] * (MAX_VALUES + 1)) + "]\n"
    with pytest.raises(ConfigError, match=rf":1: more than {MAX_VALUES} values"):
        load_yaml(write(tmp_path, text))


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_000, 100_000])
def test_deep_nesting_is_refused_before_building(tmp_path, no_compose, depth):
    # Refused at file:line, saying why. Whose words say it is not pinned: hc's bound stops
    # the event stream at depth 65, but libyaml itself (PyYAML 6.0.4's) refuses the deeper
    # ones first ("exceeded maximum nesting depth"), and a library's wording is no contract.
    path = write(tmp_path, "a: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:1: .*nest"):
        load_yaml(path)


def test_hcs_own_bound_refuses_one_level_past_it(tmp_path, no_compose):
    # one past the bound is well inside any libyaml's own limit, so this is hc's message
    path = write(tmp_path, "a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:1: nested deeper than {MAX_DEPTH} levels"):
        load_yaml(path)


def test_deep_block_nesting_names_the_line(tmp_path, no_compose):
    text = "".join("  " * i + f"k{i}:\n" for i in range(MAX_DEPTH + 5))
    # the mapping at depth d starts on line d
    with pytest.raises(ConfigError, match=rf":{MAX_DEPTH + 1}: nested deeper"):
        load_yaml(write(tmp_path, text))


def test_nesting_at_the_bound_loads(tmp_path):
    doc = load_yaml(write(tmp_path, "a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"))
    node, levels = doc.data["a"], 1
    while node:
        node, levels = node[0], levels + 1
    assert levels == MAX_DEPTH - 1


def test_deep_nesting_through_aliases(tmp_path, no_compose):
    half = MAX_DEPTH // 2 + 2
    text = "a: &a " + "[" * half + "]" * half + "\nb: " + "[" * half + "*a" + "]" * half + "\n"
    with pytest.raises(ConfigError, match=r":2: alias \*a nests deeper"):
        load_yaml(write(tmp_path, text))


def test_thirty_thousand_levels_do_not_crash_the_process(tmp_path):
    # libyaml's C composer recursed until the process died (SIGSEGV, exit -11/139)
    path = write(tmp_path, "a: " + "[" * 30_000 + "]" * 30_000 + "\n")
    r = run_hc("config", "validate", str(path))
    assert r.returncode == 4, (r.returncode, r.stderr[-300:])
    # one line at file:line saying why (hc's bound or libyaml's own, whichever stops it first)
    assert re.fullmatch(rf"hc: error: {re.escape(str(path))}:1: [^\n]*nest[^\n]*\n", r.stderr.decode()), r.stderr


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: [1, {c: *a}]}\n"])
def test_an_alias_inside_its_own_anchor(tmp_path, no_compose, text):
    with pytest.raises(ConfigError, match=r":1: alias \*a refers to a collection that contains it"):
        load_yaml(write(tmp_path, text))


def test_an_undefined_alias(tmp_path):
    with pytest.raises(ConfigError, match=r":2: alias \*nope names no anchor"):
        load_yaml(write(tmp_path, "a: 1\nb: *nope\n"))


@pytest.mark.parametrize("text, line", [
    ("base: &b {x: 1}\nnet:\n  <<: *b\n", 3),
    ("net:\n  <<: {x: 1}\n", 2),
    ("net:\n  a: 1\n  <<: [{x: 1}]\n", 3),
])
def test_merge_keys_are_a_clean_config_error(tmp_path, text, line):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:{line}: YAML merge keys \(<<\) are not supported"):
        load_yaml(path)


def test_merge_key_through_the_cli(tmp_path):
    path = write(tmp_path, "base: &b {x: 1}\nnet:\n  <<: *b\n")
    r = run_hc_inproc("config", "validate", str(path))
    assert r.returncode == 4 and r.stderr.decode().startswith(f"hc: error: {path}:3: YAML merge keys")
    assert b"Traceback" not in r.stderr and r.stderr.count(b"\n") == 1


@pytest.mark.parametrize("text, line, message", [
    ("a: 1\nb: 2020-99-99\n", 2, "month must be in 1..12"),
    ("a: !foo x\n", 1, "could not determine a constructor for the tag '!foo'"),
    ("!foo a: 1\n", 1, "could not determine a constructor for the tag '!foo'"),
    ("a: !!python/object:os.system x\n", 1, "could not determine a constructor"),
    ("a: 1\nb: " + "9" * 5000 + "\n", 2, "invalid value"),
    ("a: !!float abc\n", 1, "invalid value"),
    ("a: !!int xyz\n", 1, "invalid value"),
], ids=["bad-date", "unknown-tag", "tagged-key", "python-tag", "5000-digits", "bad-float", "bad-int"])
def test_values_no_tag_can_hold_name_their_line(tmp_path, text, line, message):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:{line}: .*{re.escape(message)}"):
        load_yaml(path)


def test_a_duplicate_key_of_a_megabyte_is_clipped(tmp_path):
    key = "k" * 1_000_000
    with pytest.raises(ConfigError) as info:
        load_yaml(write(tmp_path, f"? {key}\n: 1\n? {key}\n: 2\n"))  # explicit keys: no 1,024 limit
    assert "appears twice" in str(info.value) and len(str(info.value)) < 300


# ----------------------------------------------------------------- not a file


def test_dev_zero_as_config_is_refused(tmp_path):
    r = run_hc("config", "validate", "/dev/zero")
    assert r.returncode == 4
    assert r.stderr == b"hc: error: /dev/zero: cannot read config file: it is a character device, not a regular file\n"


def test_a_fifo_as_config_never_hangs(tmp_path):
    fifo = tmp_path / "hc.yaml"
    os.mkfifo(fifo)
    # a writer that never writes: an open() without O_NONBLOCK would wait for it forever
    holder = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)
    holder.start()
    with pytest.raises(ConfigError, match="it is a FIFO, not a regular file"):
        load_yaml(fifo)
    r = run_hc("config", "validate", str(fifo), timeout=30)
    assert r.returncode == 4 and b"FIFO" in r.stderr


def test_an_oversized_config(tmp_path):
    from healthcheck.core.inputs import CONFIG_MAX_BYTES

    path = write(tmp_path, "# " + "x" * CONFIG_MAX_BYTES + "\n")
    with pytest.raises(ConfigError, match=rf"config file is \d+ bytes, more than the {CONFIG_MAX_BYTES}"):
        load_yaml(path)


def test_missing_and_directory_keep_their_messages(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.yaml: config file not found$"):
        load_yaml(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="is a directory"):
        load_yaml(tmp_path)
