"""Config values, not only types: every number has a range, rules across keys hold, and a
value that validates can no longer fail every node or switch a check or the guard off.

Each error names the file, line and key, as type errors do.
"""

from __future__ import annotations

import math
import os
import textwrap
import typing
from pathlib import Path

import msgspec
import pytest
from support import run_hc, run_hc_inproc

from healthcheck.core.config import schema
from healthcheck.core.config.loader import Config
from healthcheck.core.errors import ConfigError


def files(tmp_path: Path, main: str, fabric: str | None = None) -> Path:
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    if fabric is not None:
        (tmp_path / "fabrics" / "x.yaml").write_text(textwrap.dedent(fabric))
    path = tmp_path / "hc.yaml"
    path.write_text(textwrap.dedent(main))
    return path


def load_everything(path: Path) -> None:
    cfg = Config(path)
    cfg.validate()
    cfg.for_node("gpu1")


FABRIC = "default_fabric: x\n"


@pytest.mark.parametrize(
    "main, fabric, error",
    [
        # an infinite threshold FAILs every node; NaN compares false and turns the check off
        (FABRIC, "ib:\n  rate_gbps: .inf\n", r"fabrics/x.yaml:2: ib.rate_gbps: expected a finite number, got inf"),
        (FABRIC, "gpu:\n  temp_max_c: .nan\n", r"fabrics/x.yaml:2: gpu.temp_max_c: expected a finite number, got nan"),
        (FABRIC, "sys:\n  mem_total_min_gib: -.inf\n", r"fabrics/x.yaml:2: sys.mem_total_min_gib: expected a finite number"),
        (FABRIC, "bandwidth:\n  all_reduce:\n    single_node: {busbw_min_gbytes_per_s: {16G: .nan}}\n",
         r"fabrics/x.yaml:3: bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s.16G: expected a finite number"),
        # a negative upper limit FAILs every healthy port
        (FABRIC, "ib:\n  counters_fail:\n    symbol_error: -1\n",
         r"fabrics/x.yaml:3: ib.counters_fail.symbol_error: expected int >= 0, got -1"),
        (FABRIC, "gpu:\n  nvlink_errors_fail: {replay_errors: -5}\n",
         r"fabrics/x.yaml:2: gpu.nvlink_errors_fail.replay_errors: expected int >= 0"),
        # rules across keys
        (FABRIC, "net:\n  mtu_min: 9000\n  mtu_max: 1500\n",
         r"fabrics/x.yaml:2: net.mtu_min: mtu_min 9000 is above mtu_max 1500 \(net.mtu_max is set at .*x.yaml:3\)"),
        (FABRIC, "net:\n  mtu_max: 100000\n", r"fabrics/x.yaml:2: net.mtu_max: expected int <= 65536"),
        (FABRIC, "net:\n  interfaces:\n    'ib*': {count: 0}\n",
         r"fabrics/x.yaml:3: net.interfaces.ib\*.count: count 0 with required: true fails every node"),
        (FABRIC, "bandwidth:\n  all_reduce:\n    pair: {busbw_min_gbytes_per_s: {16Q: 40}}\n",
         r"fabrics/x.yaml:3: bandwidth.all_reduce.pair.busbw_min_gbytes_per_s.16Q: expected a size in bytes, or with K, M, G or T"),
        (FABRIC, "bandwidth:\n  all_reduce:\n    pair: {busbw_min_gbytes_per_s: {16G: -40}}\n",
         r"fabrics/x.yaml:3: bandwidth.all_reduce.pair.busbw_min_gbytes_per_s.16G: expected float > 0.0, got -40"),
        (FABRIC, "bandwidth:\n  allreduce:\n    pair: {busbw_min_gbytes_per_s: {16G: 40}}\n",
         r"fabrics/x.yaml:2: bandwidth.allreduce: unknown key.*all_reduce"),
        (FABRIC, "bandwidth:\n  sizes: [1G, 0.3K]\n",
         r"fabrics/x.yaml:2: bandwidth.sizes\[1\]: '0.3K' is not a whole number of bytes"),
        (FABRIC, "bandwidth:\n  ib_write_bw:\n    per_hca_typical_gbps: 100\n    per_hca_min_gbps: 200\n",
         r"fabrics/x.yaml:4: bandwidth.ib_write_bw.per_hca_min_gbps: per_hca_min_gbps 200 is above per_hca_typical_gbps 100"),
        (FABRIC, "gpu:\n  xid: {source: file}\n", r"fabrics/x.yaml:2: gpu.xid.source: is 'file' but xid.file names no file"),
        (FABRIC, "gpu:\n  xid: {source: file, file: kern.log}\n", r"fabrics/x.yaml:2: gpu.xid.file: expected an absolute path"),
        (FABRIC, "gpu:\n  throttle_fail: [hw_slowdwon]\n", r"fabrics/x.yaml:2: gpu.throttle_fail\[0\]: unknown throttle reason 'hw_slowdwon'"),
        # paths the node resolves against an unknown cwd, or that cannot exist, FAIL every node
        (FABRIC, "sys:\n  disk_free_min_gib:\n    /tmp: 1\n    scratch: 2\n",
         r"fabrics/x.yaml:4: sys.disk_free_min_gib.scratch: expected an absolute path"),
        (FABRIC, "sys:\n  disk_free_min_gib:\n    '': 2\n", r"fabrics/x.yaml:3: sys.disk_free_min_gib\[''\]: expected an absolute path"),
        (FABRIC, "sys:\n  disk_free_min_gib:\n    /tmp: 1\n    /scratch: -2\n",
         r"fabrics/x.yaml:4: sys.disk_free_min_gib./scratch: expected float >= 0.0, got -2"),
        (FABRIC, "sys:\n  mounts: [/home, scratch]\n", r"fabrics/x.yaml:2: sys.mounts\[1\]: expected an absolute path"),
        (FABRIC, "sys:\n  services: {fm: /usr/bin/nv-fabricmanager}\n", r"fabrics/x.yaml:2: sys.services.fm: expected a process name"),
        # globs fnmatch would take literally, or that match nothing, FAIL every node
        (FABRIC, "net:\n  interfaces:\n    'ib[0-7': {mtu: 4092}\n",
         r"fabrics/x.yaml:3: net.interfaces\['ib\[0-7'\]: 'ib\[0-7': '\[' at 2 is never closed"),
        (FABRIC, "ib:\n  hcas: ['mlx5_[9-0]']\n", r"fabrics/x.yaml:2: ib.hcas\[0\]: 'mlx5_\[9-0\]': range 9-0 is reversed"),
        (FABRIC, "net:\n  ignore: ['']\n", r"fabrics/x.yaml:2: net.ignore\[0\]: expected str of length >= 1"),
        # the main file's policy
        ("default_fabric: generic\nslurm:\n  drain: {max_drain_fraction: 7.0}\n", None,
         r"hc.yaml:3: slurm.drain.max_drain_fraction: expected float <= 1.0, got 7.0"),
        ("default_fabric: generic\nslurm:\n  drain: {max_drain_fraction: -0.5}\n", None,
         r"hc.yaml:3: slurm.drain.max_drain_fraction: expected float >= 0.0, got -0.5"),
        ("default_fabric: generic\nssh:\n  max_parallel: 0\n", None, r"hc.yaml:3: ssh.max_parallel: expected int >= 1, got 0"),
        ("default_fabric: generic\nssh:\n  port: 70000\n", None, r"hc.yaml:3: ssh.port: expected int <= 65535, got 70000"),
        ("default_fabric: generic\nssh:\n  port: 0\n", None, r"hc.yaml:3: ssh.port: expected int >= 1, got 0"),
        ("default_fabric: generic\nssh:\n  connect_timeout_s: -1\n", None, r"hc.yaml:3: ssh.connect_timeout_s: expected float > 0.0"),
        ("default_fabric: generic\nslurm:\n  prologue: {deadline_s: -5}\n", None,
         r"hc.yaml:3: slurm.prologue.deadline_s: expected float > 0.0, got -5"),
        ("default_fabric: generic\nslurm:\n  command_timeout_s: .inf\n", None,
         r"hc.yaml:3: slurm.command_timeout_s: expected a finite number, got inf"),
        ("default_fabric: generic\nslurm:\n  error_escalation_runs: 1\n", None,
         r"hc.yaml:3: slurm.error_escalation_runs: expected int >= 2"),
        ("default_fabric: generic\nslurm:\n  state_dir: ''\n", None, r"hc.yaml:3: slurm.state_dir: expected str of length >= 1"),
        ("default_fabric: generic\nslurm:\n  state_dir: \"/var/lib/hc\\0x\"\n", None,
         r"hc.yaml:3: slurm.state_dir: expected non-empty text without control characters"),
        ("default_fabric: generic\nfleet:\n  flap_runs: 3\n  flap_transitions: 3\n", None,
         r"hc.yaml:4: fleet.flap_transitions: flap_transitions 3 can never be reached in flap_runs 3 runs"),
        ("default_fabric: generic\nfleet:\n  outlier_z: .nan\n", None, r"hc.yaml:3: fleet.outlier_z: expected a finite number"),
        ("default_fabric: generic\nhistory:\n  keep_runs: 0\n", None, r"hc.yaml:3: history.keep_runs: expected int >= 1"),
    ],
)
def test_values_out_of_range_name_file_line_and_key(tmp_path, main, fabric, error):
    with pytest.raises(ConfigError, match=error):
        load_everything(files(tmp_path, main, fabric))


def test_an_override_that_breaks_a_rule_with_the_shipped_fabric_is_named_at_the_override(tmp_path):
    # generic sets mtu_min 1280; the override's mtu_max 1000 is the mistake, and validate
    # finds it without a node to resolve
    path = files(tmp_path, "default_fabric: generic\noverrides:\n  'gpu[1-4]':\n    net: {mtu_max: 1000}\n")
    cfg = Config(path)
    with pytest.raises(ConfigError, match=r"hc.yaml:4: net.mtu_max: mtu_min 1280 is above mtu_max 1000 "
                                          r"\(net.mtu_min is set at .*generic.yaml:\d+\)"):
        cfg.validate()
    with pytest.raises(ConfigError, match=r"hc.yaml:4: net.mtu_max"):
        cfg.for_node("gpu2")


@pytest.mark.parametrize("text", ["", "# nothing but a comment\n", "null\n", "~\n", "{}\n"])
def test_an_empty_config_file_is_an_error(tmp_path, text):
    with pytest.raises(ConfigError, match=r"hc.yaml(:1)?: (the config file is empty|the top level must be a mapping)"):
        Config(files(tmp_path, text))


def test_a_fabric_dir_that_does_not_exist_is_an_error_not_a_silent_fallback(tmp_path):
    # without the check, h100-ndr400 would quietly be hc's shipped fabric, not the site's
    path = files(tmp_path, "fabric_dirs:\n  - fabrics\n  - site-fabrics\ndefault_fabric: h100-ndr400\n")
    with pytest.raises(ConfigError, match=r"hc.yaml:3: fabric_dirs\[1\]: .*site-fabrics does not exist"):
        Config(path)
    (tmp_path / "site-fabrics").write_text("a file, not a directory\n")
    with pytest.raises(ConfigError, match=r"hc.yaml:3: fabric_dirs\[1\]: .*site-fabrics is not a directory"):
        Config(path)


def test_the_default_fabric_dir_may_be_absent(tmp_path):
    path = tmp_path / "hc.yaml"
    path.write_text("default_fabric: generic\n")  # fabric_dirs not set: ["fabrics"], which need not exist
    assert Config(path).for_node("n1").fabric_name == "generic"


def test_a_fabric_that_extends_a_non_name_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"fabrics/x.yaml:1: extends: expected a fabric name, got list"):
        load_everything(files(tmp_path, FABRIC, "extends: [generic]\n"))


def test_a_type_error_in_a_lazily_loaded_fabric_is_a_config_error_with_its_line(tmp_path):
    path = files(tmp_path, "default_fabric: generic\nnodes:\n  'gpu[1-4]': x\n", "gpu:\n  count: eight\n")
    cfg = Config(path)  # fabrics are read when a node needs them
    with pytest.raises(ConfigError, match=r"fabrics/x.yaml:2: gpu.count: expected int \| null, got str"):
        cfg.for_node("gpu2")
    r = run_hc_inproc("config", "show", "gpu2", "--config", str(path))
    assert r.returncode == 4 and b"fabrics/x.yaml:2: gpu.count" in r.stderr and b"internal error" not in r.stderr
    r = run_hc_inproc("node", "--local", "--config", str(path), env={"HC_NODE_NAME": "gpu3"})
    assert r.returncode == 4 and b"fabrics/x.yaml:2: gpu.count" in r.stderr, r.stderr


def test_a_range_error_in_a_lazily_loaded_fabric_exits_4(tmp_path):
    path = files(tmp_path, "default_fabric: x\n", "ib:\n  rate_gbps: .inf\n")
    r = run_hc("node", "--local", "--config", str(path), env={"HC_NODE_NAME": "gpu3"})
    assert r.returncode == 4 and b"fabrics/x.yaml:2: ib.rate_gbps: expected a finite number" in r.stderr, r.stderr


def test_cli_validate_rejects_a_guard_switched_off(tmp_path):
    path = files(tmp_path, "default_fabric: generic\nslurm:\n  drain:\n    max_drain_fraction: 7.0\n")
    r = run_hc_inproc("config", "validate", str(path))
    assert r.returncode == 4
    assert f"{path}:4: slurm.drain.max_drain_fraction: expected float <= 1.0, got 7.0".encode() in r.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_among_the_fabric_files_is_an_error_not_a_hang(tmp_path):
    path = files(tmp_path, "default_fabric: generic\n")
    os.mkfifo(tmp_path / "fabrics" / "evil.yaml")
    r = run_hc("config", "validate", str(path), timeout=30)
    assert r.returncode == 4 and b"evil.yaml is not a regular file" in r.stderr, r.stderr
    # every run hashes the fabric files into the report's config digest: that read must
    # not block on the FIFO (it hung every prologue)
    r = run_hc("node", "--local", "--config", str(path), env={"HC_NODE_NAME": "n1"}, timeout=30)
    assert r.returncode == 4 and b"evil.yaml: cannot read fabric file" in r.stderr, r.stderr


def test_shipped_configs_still_validate():
    r = run_hc_inproc("config", "validate", str(Path(schema.__file__).resolve().parents[3] / "configs" / "default.yaml"))
    assert r.returncode == 0, r.stderr


# ------------------------------------------------------------------ every field


def _numeric_fields(model: type, at: str = "") -> typing.Iterator[tuple[str, typing.Any]]:
    """(key, annotated type) of every int or float a config can hold, at any depth."""
    hints = typing.get_type_hints(model, include_extras=True)
    for field in msgspec.structs.fields(model):
        yield from _numeric_in(hints[field.name], f"{at}{field.name}")


def _numeric_in(tp: typing.Any, key: str) -> typing.Iterator[tuple[str, typing.Any]]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        for arg in args:
            yield from _numeric_in(arg, key)
    elif origin is typing.Annotated:
        if args[0] in (int, float):
            yield key, tp
        else:
            yield from _numeric_in(args[0], key)
    elif origin in (dict, list):
        for i, arg in enumerate(args):
            yield from _numeric_in(arg, f"{key}[{'key' if origin is dict and i == 0 else '*'}]")
    elif tp in (int, float):
        yield key, tp
    elif isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        yield from _numeric_fields(tp, key + ".")


NUMERIC = sorted(
    {k: t for model in (schema.Fabric, schema.MainConfig) for k, t in _numeric_fields(model)}.items()
)


def test_the_walk_finds_the_numbers():
    keys = {k for k, _ in NUMERIC}
    assert {"ib.rate_gbps", "slurm.drain.max_drain_fraction", "ssh.port", "gpu.xid.severity[key]",
            "sys.disk_free_min_gib[*]", "net.interfaces[*].mtu"} <= keys
    assert len(keys) > 60


@pytest.mark.parametrize("key, tp", NUMERIC, ids=[k for k, _ in NUMERIC])
def test_every_numeric_field_has_a_lower_and_an_upper_bound(key, tp):
    assert typing.get_origin(tp) is typing.Annotated, f"{key} has no range"
    base, *metas = typing.get_args(tp)
    bounds = {name for m in metas if isinstance(m, msgspec.Meta) for name in ("ge", "gt", "le", "lt")
              if getattr(m, name) is not None}
    assert bounds & {"ge", "gt"} and bounds & {"le", "lt"}, f"{key}: {bounds}"
    if base is float:
        for bad in (math.inf, -math.inf, math.nan):
            with pytest.raises(msgspec.ValidationError):
                msgspec.convert(bad, tp)


def test_the_default_guard_never_drains_in_a_cluster_under_10_nodes():
    # what docs/slurm.md says: floor(0.1 x 9) = 0 nodes may be drained; 0.25 lets 4 nodes drain 1
    from healthcheck.actions.policy import guard

    assert guard(["n1"], 1, {}, schema.DrainPolicy(), cluster_size=9) is not None
    assert guard(["n1"], 1, {}, schema.DrainPolicy(), cluster_size=10) is None
    assert guard(["n1"], 1, {}, schema.DrainPolicy(max_drain_fraction=0.25), cluster_size=4) is None
