"""The parse cache of config files (core/config/yamlcache.py): a hit gives what the
parser gives without importing PyYAML; changed bytes, a corrupt, foreign or other-user
entry, an untrusted directory are never trusted; what cannot be stored exactly is not
stored; and a hook exits by its contract whatever state the cache is in."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
from support import REPO, run_hc, write_stub

from healthcheck.core.config import yamlcache, yamlsrc

MAIN = "default_fabric: t\n# a comment\nsys:\n  disk_free_min_gib:\n    /tmp: 0.5\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("HC_CACHE_DIR", str(directory))
    return directory


def _same_doc(a, b) -> None:
    assert a.data == b.data and a.lines == b.lines and a.raw == b.raw and a.path == b.path


def test_a_hit_gives_what_the_parser_gives(tmp_path, cache):
    f = tmp_path / "hc.yaml"
    f.write_text("gpu:\n  xid:\n    severity: {13: WARN, 48: FAIL}\nnet:\n  interfaces:\n    ib*: {mtu: 4092}\n"
                 "  ignore: [lo, 'docker*']\nx: [1, 2.5, true, null]\n")
    first = yamlcache.load_yaml(f)
    assert len(list(cache.iterdir())) == 1
    second = yamlcache.load_yaml(f)
    _same_doc(second, yamlsrc.load_yaml(f))
    _same_doc(first, second)
    assert list(second.data["gpu"]["xid"]["severity"]) == [13, 48]  # int keys stay ints
    assert second.where(("net", "interfaces", "ib*", "mtu")) == f"{f}:6"
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(next(cache.iterdir())).st_mode) == 0o600


HIT = """
import sys
from pathlib import Path
from healthcheck.core.config import yamlcache
doc = yamlcache.load_yaml(Path(sys.argv[1]))
print(doc.data["default_fabric"], "yaml" in sys.modules)
"""


def test_a_hit_imports_no_yaml(tmp_path, cache):
    f = tmp_path / "hc.yaml"
    f.write_text(MAIN)
    env = {**os.environ, "HC_CACHE_DIR": str(cache)}
    runs = [subprocess.run([sys.executable, "-c", HIT, str(f)], capture_output=True, text=True, cwd=REPO, env=env,
                           timeout=60).stdout.split() for _ in range(2)]
    assert runs == [["t", "True"], ["t", "False"]]


def test_changed_bytes_are_parsed_again(tmp_path, cache):
    f = tmp_path / "hc.yaml"
    f.write_text(MAIN)
    yamlcache.load_yaml(f)
    f.write_text(MAIN.replace("0.5", "0.7"))  # same size, and maybe the same mtime
    assert yamlcache.load_yaml(f).data["sys"]["disk_free_min_gib"]["/tmp"] == 0.7


def _entry(cache):
    (entry,) = cache.iterdir()
    return entry


@pytest.mark.parametrize("blob", [b"", b"\xc1garbage", b"\x93\x01\x02\x03", b"\x90"])
def test_a_corrupt_entry_is_ignored_and_replaced(tmp_path, cache, blob):
    f = tmp_path / "hc.yaml"
    f.write_text(MAIN)
    yamlcache.load_yaml(f)
    entry = _entry(cache)
    entry.write_bytes(blob)
    _same_doc(yamlcache.load_yaml(f), yamlsrc.load_yaml(f))
    assert entry.read_bytes() != blob


def test_an_entry_for_other_bytes_or_another_version_is_not_used(tmp_path, cache, monkeypatch):
    f, g = tmp_path / "hc.yaml", tmp_path / "other.yaml"
    f.write_text(MAIN)
    g.write_text(MAIN.replace("default_fabric: t", "default_fabric: lie"))
    yamlcache.load_yaml(g)
    lie = _entry(cache)
    f_entry = yamlcache.entry_for(cache, yamlcache._stamp(yamlcache.hashlib.sha256(f.read_bytes()).hexdigest()))
    os.rename(lie, f_entry)  # an entry under f's name that holds g's parse
    assert yamlcache.load_yaml(f).data["default_fabric"] == "t"
    yamlcache.load_yaml(f)
    monkeypatch.setattr(yamlcache, "__version__", "999")
    f_entry.write_bytes(f_entry.read_bytes().replace(b"t", b"t"))  # unchanged: stamped with the old version
    assert yamlcache._read_entry(cache, f_entry, yamlcache._stamp(yamlcache.hashlib.sha256(f.read_bytes()).hexdigest())) is None


def test_an_entry_or_directory_others_can_write_is_not_trusted(tmp_path, cache):
    f = tmp_path / "hc.yaml"
    f.write_text(MAIN)
    yamlcache.load_yaml(f)
    entry = _entry(cache)
    stamp = yamlcache._stamp(yamlcache.hashlib.sha256(f.read_bytes()).hexdigest())
    assert yamlcache._read_entry(cache, entry, stamp) is not None
    os.chmod(entry, 0o666)
    assert yamlcache._read_entry(cache, entry, stamp) is None
    os.chmod(entry, 0o600)
    os.chmod(cache, 0o777)
    assert yamlcache._read_entry(cache, entry, stamp) is None
    assert yamlcache.load_yaml(f).data["default_fabric"] == "t"  # parsed instead
    os.chmod(cache, 0o700)
    if os.geteuid() == 0:
        os.chown(entry, 65534, 65534)
        assert yamlcache._read_entry(cache, entry, stamp) is None


def test_a_link_in_place_of_an_entry_is_not_followed(tmp_path, cache):
    f = tmp_path / "hc.yaml"
    f.write_text(MAIN)
    yamlcache.load_yaml(f)
    entry = _entry(cache)
    real = tmp_path / "real.msgpack"
    os.rename(entry, real)
    entry.symlink_to(real)
    stamp = yamlcache._stamp(yamlcache.hashlib.sha256(f.read_bytes()).hexdigest())
    assert yamlcache._read_entry(cache, entry, stamp) is None


def test_a_parse_that_would_come_back_different_is_not_stored(tmp_path, cache):
    f = tmp_path / "hc.yaml"
    f.write_text("when: 2024-01-02\nwhich: !!set {a, b}\n")
    doc = yamlcache.load_yaml(f)
    assert not cache.exists() or list(cache.iterdir()) == []
    _same_doc(doc, yamlsrc.load_yaml(f))


def test_no_cache_dir_means_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HC_CACHE_DIR", "")
    assert yamlcache.cache_dir() is None
    f = tmp_path / "hc.yaml"
    f.write_text(MAIN)
    assert yamlcache.load_yaml(f).data["default_fabric"] == "t"


def _hook_setup(tmp_path, mtu):
    bin_dir = tmp_path / "bin"
    nodes = "\\n".join(f"node{i}|idle|Unknown|none" for i in range(1, 11))  # the guard lets 1 of 10 drain
    write_stub(bin_dir, "sinfo", f'printf "{nodes}\\n"\n')
    write_stub(bin_dir, "scontrol", f'echo "$@" >> {tmp_path}/scontrol.log\n')
    (tmp_path / "fabrics").mkdir()
    (tmp_path / "fabrics" / "t.yaml").write_text(f"net:\n  interfaces:\n    lo: {{mtu: {mtu}}}\n")
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nslurm:\n  state_dir: {tmp_path}/state\n  audit_log: {tmp_path}/audit.jsonl\n"
                   f"  report_dir: {tmp_path}/reports\nhistory: {{path: null}}\n")
    return {"HC_CONFIG": str(cfg), "HC_NODE_NAME": "node1", "SLURM_JOB_ID": "7", "HC_SYSLOG_SOCKET": "",
            "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}


def _break(cache, how: str) -> None:
    if how == "a file":
        cache.write_text("not a directory\n")
    elif how == "corrupt entries":
        for entry in cache.iterdir():
            entry.write_bytes(b"\x92\xff\x00")
    elif how == "unwritable":
        for entry in cache.iterdir():
            entry.unlink()
        os.chmod(cache, 0o500)
    elif how == "world-writable":
        os.chmod(cache, 0o777)


@pytest.mark.parametrize("how", ["a file", "corrupt entries", "unwritable", "world-writable"])
@pytest.mark.parametrize(("mtu", "code"), [(65536, 0), (1500, 2)])
def test_a_hook_exits_by_its_contract_whatever_the_cache(tmp_path, how, mtu, code):
    env = _hook_setup(tmp_path, mtu)
    cache = tmp_path / "cache"
    env["HC_CACHE_DIR"] = str(cache)
    assert run_hc("prologue", "--dry-run", env=env, timeout=60).returncode == code  # fills the cache
    if how != "a file":
        assert list(cache.iterdir())
    else:
        for entry in cache.iterdir():
            entry.unlink()
        cache.rmdir()
    _break(cache, how)
    try:
        r = run_hc("prologue", "--dry-run", env=env, timeout=60)
        assert r.returncode == code, r.stderr.decode()[-2000:]
        said = r.stderr.decode()
        assert said.startswith("hc prologue: node1; job 7; ") and said.rstrip().endswith(f"; exit {code}")
        assert ("; FAIL; net.E001; drain(dry-run) node1" in said) == bool(code)
        assert run_hc("epilogue", env=env, timeout=60).returncode == 0
    finally:
        if cache.is_dir():
            os.chmod(cache, 0o700)


def test_two_installs_keep_an_entry_each(tmp_path, cache, monkeypatch):
    """Another version (or parser file) on the same node stores beside this one's entry, so
    neither parses again at every run after the other ran."""
    f = tmp_path / "hc.yaml"
    f.write_text(MAIN)
    ours = yamlcache.__version__
    yamlcache.load_yaml(f)
    monkeypatch.setattr(yamlcache, "__version__", "999")
    yamlcache.load_yaml(f)
    assert len(list(cache.iterdir())) == 2
    monkeypatch.setattr(yamlcache, "_parse", lambda *_: pytest.fail("parsed again: the other install's entry was lost"))
    for version in (ours, "999"):
        monkeypatch.setattr(yamlcache, "__version__", version)
        yamlcache.load_yaml(f)


def test_the_cache_keeps_at_most_its_limit_the_newest_and_nothing_else_is_removed(tmp_path, cache, monkeypatch):
    # every edited config, every upgrade, every test made an entry and none was ever removed
    monkeypatch.setattr(yamlcache, "MAX_ENTRIES", 3)
    f = tmp_path / "hc.yaml"
    for n in range(6):
        f.write_text(MAIN.replace("0.5", f"0.{n + 1}"))
        yamlcache.load_yaml(f)
        if n == 0:
            (cache / "notes.txt").write_text("an operator's file")
    entries = sorted(p for p in cache.iterdir() if p.suffix == ".msgpack")
    assert len(entries) == 3
    assert (cache / "notes.txt").exists()
    # the newest stays: reading it again is a hit
    assert yamlcache.load_yaml(f).data["sys"]["disk_free_min_gib"]["/tmp"] == 0.6
    assert sorted(p for p in cache.iterdir() if p.suffix == ".msgpack") == entries
