"""Config loading: shipped configs, node -> fabric resolution, provenance, and every kind of bad input."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config, default_config_path
from healthcheck.core.errors import ConfigError


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def site(tmp_path):
    write(tmp_path, "fabrics/site-h100.yaml", """\
        extends: h100-ndr400
        net:
          interfaces:
            "ib*": {mtu: 2044, count: 8}
        """)
    return write(tmp_path, "hc.yaml", """\
        default_fabric: generic
        nodes:
          "gpu[001-128]": site-h100
          "gpu[129-160]": h200-ndr400
        overrides:
          "gpu017":
            ib: {hca_count: 7}
        """)


def test_embedded_default_and_every_shipped_fabric_validate():
    cfg = Config(EMBEDDED_DEFAULT)
    assert cfg.validate() == []
    assert {"generic", "h100-ndr400", "h200-ndr400", "a100-hdr200", "h100-roce400"} <= set(cfg.fabric_names())
    assert cfg.fabric_of("anything") == "generic"


def test_reference_figures_of_shipped_fabrics():
    cfg = Config(EMBEDDED_DEFAULT)
    h100, h200, a100, roce = (cfg.fabric(n) for n in ("h100-ndr400", "h200-ndr400", "a100-hdr200", "h100-roce400"))
    assert (h100.gpu.count, h100.ib.hca_count, h100.ib.rate_gbps, h100.ib.link_layer) == (8, 8, 400, "InfiniBand")
    assert h100.bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s == {"16G": 460}
    assert h100.bandwidth.all_reduce.pair.busbw_min_gbytes_per_s == {"16G": 340}
    assert h100.bandwidth.ib_write_bw.per_hca_min_gbps == 380
    assert h200.gpu.model == "NVIDIA H200" and h200.ib.rate_gbps == 400  # inherited
    assert (a100.ib.rate_gbps, a100.bandwidth.all_reduce.single_node.busbw_min_gbytes_per_s) == (200, {"16G": 228})
    assert a100.bandwidth.ib_write_bw.per_hca_typical_gbps == 195
    assert roce.ib.link_layer == "Ethernet" and "ib*" not in roce.net.interfaces
    assert roce.net.interfaces["enp*np0"].mtu == 9000
    assert h100.net.interfaces["ib*"].mtu == 4092


def test_default_config_path_precedence(tmp_path, monkeypatch):
    assert default_config_path({}) in (EMBEDDED_DEFAULT, Path("/etc/hc/hc.yaml"))
    assert default_config_path({"HC_CONFIG": str(tmp_path / "x.yaml")}) == tmp_path / "x.yaml"


def test_node_resolution_overrides_and_provenance(site):
    cfg = Config(site)
    assert cfg.validate() == []
    nc = cfg.for_node("gpu017")
    assert nc.fabric_name == "site-h100"
    assert nc.limits.ib.hca_count == 7
    assert nc.source("ib.hca_count") == f"{site}:7"
    assert nc.limits.net.interfaces["ib*"].mtu == 2044
    assert nc.source("net.interfaces.ib*.mtu").endswith("fabrics/site-h100.yaml:4")
    assert nc.limits.ib.rate_gbps == 400
    assert nc.source("ib.rate_gbps").endswith("configs/fabrics/h100-ndr400.yaml:" + _line_of("h100-ndr400", "rate_gbps"))
    assert cfg.for_node("gpu018").limits.ib.hca_count == 8
    assert cfg.for_node("gpu130").fabric_name == "h200-ndr400"
    assert cfg.for_node("login1").fabric_name == "generic"
    leaves = {k: (v, s) for k, v, s in nc.leaves()}
    assert leaves["ib.hca_count"] == (7, f"{site}:7")
    assert leaves["gpu.count"][1].endswith("h100-ndr400.yaml:" + _line_of("h100-ndr400", "count"))
    assert leaves["sys.mounts"] == ([], "default")


def _line_of(fabric: str, key: str) -> str:
    text = (EMBEDDED_DEFAULT.parent / "fabrics" / f"{fabric}.yaml").read_text().splitlines()
    return str(next(i for i, line in enumerate(text, 1) if line.strip().startswith(key + ":")))


def test_node_without_pattern_and_no_default_is_an_error(tmp_path):
    path = write(tmp_path, "hc.yaml", "nodes:\n  'gpu[1-2]': generic\n")
    with pytest.raises(ConfigError, match="login1 matches no pattern and there is no default_fabric"):
        Config(path).for_node("login1")


def test_overlapping_patterns_with_different_fabrics(tmp_path):
    path = write(tmp_path, "hc.yaml", "nodes:\n  'gpu[1-10]': generic\n  'gpu[5-20]': h100-ndr400\n")
    cfg = Config(path)
    with pytest.raises(ConfigError, match=r"hc.yaml:3: nodes: 'gpu\[5-20\]' overlaps"):
        cfg.validate()
    with pytest.raises(ConfigError, match="gpu7 matches patterns of different fabrics"):
        cfg.for_node("gpu7")


@pytest.mark.parametrize(
    "files, pattern",
    [
        ({"hc.yaml": "nodes: [unclosed\n"}, r"hc.yaml:\d+: malformed YAML"),
        ({"hc.yaml": "default_fabric: generic\nnodes:\n  a: b\n  a: c\n"}, r"hc.yaml:4: key 'a' appears twice \(first at line 3\)"),
        ({"hc.yaml": "- just\n- a list\n"}, r"hc.yaml:1: the top level must be a mapping"),
        ({"hc.yaml": "default_fabrik: generic\n"}, r"hc.yaml:1: default_fabrik: unknown key 'default_fabrik' \(did you mean 'default_fabric'\?\)"),
        ({"hc.yaml": "default_fabric: h100-ndr40\n"}, r"hc.yaml:1: default_fabric: unknown fabric 'h100-ndr40' \(known: .*h100-ndr400"),
        ({"hc.yaml": "nodes:\n  'gpu[001-128]': nope\n"}, r"hc.yaml:2: nodes.gpu\[001-128\]: unknown fabric 'nope'"),
        ({"hc.yaml": "nodes:\n  'gpu[001-': generic\n"}, r"hc.yaml:2: nodes: 'gpu\[001-' is not a valid hostlist"),
        ({"hc.yaml": "nodes: 5\n"}, r"hc.yaml:1: nodes: expected object, got int"),
        ({"hc.yaml": "default_fabric: x\n", "fabrics/x.yaml": "ib:\n  rate_gbps: fast\n"}, r"fabrics/x.yaml:2: ib.rate_gbps: expected float \| null, got str"),
        ({"hc.yaml": "default_fabric: x\n", "fabrics/x.yaml": "net:\n  interfaces:\n    'ib*': {mtu: 4092}\n    eth0:\n      mtuu: 9000\n"}, r"fabrics/x.yaml:5: net.interfaces.eth0.mtuu: unknown key 'mtuu' \(did you mean 'mtu'\?\)"),
        ({"hc.yaml": "default_fabric: x\n", "fabrics/x.yaml": "net:\n  interfaces:\n    'ib*': {mtu: 4092}\n    eth0: {mtu: '9000'}\n"}, r"fabrics/x.yaml:4: net.interfaces.eth0.mtu: expected int \| null, got str"),
        ({"hc.yaml": "default_fabric: x\n", "fabrics/x.yaml": "ib:\n  link_layer: IB\n"}, r"fabrics/x.yaml:2: ib.link_layer: invalid enum value 'IB'"),
        ({"hc.yaml": "default_fabric: x\n", "fabrics/x.yaml": "gpu:\n  count: 8\n  colour: green\n"}, r"fabrics/x.yaml:3: gpu.colour: unknown key 'colour' \(allowed: count, model, "),
        ({"hc.yaml": "default_fabric: x\n", "fabrics/x.yaml": "extends: y\n", "fabrics/y.yaml": "extends: x\n"}, r"extends: cycle x -> y -> x"),
        ({"hc.yaml": "default_fabric: x\n", "fabrics/x.yaml": "extends: nope\n"}, r"fabrics/x.yaml:1: extends: unknown fabric 'nope'"),
        ({"hc.yaml": "default_fabric: generic\noverrides:\n  gpu1:\n    ib: {hca_cnt: 3}\n"}, r"hc.yaml:4: ib.hca_cnt: unknown key 'hca_cnt' \(did you mean 'hca_count'\?\)"),
        ({"hc.yaml": "default_fabric: x\n", "fabrics/x.yaml": "sys:\n  disk_free_min_gib: {/tmp: lots}\n"}, r"fabrics/x.yaml:2: sys.disk_free_min_gib\['/tmp'\]|fabrics/x.yaml:2: sys.disk_free_min_gib./tmp: expected float, got str"),
        ({"hc.yaml": b"default_fabric: \xff\xfe\n"}, r"hc.yaml: not UTF-8 text"),
        ({"hc.yaml": "default_fabric: x\n", "fabrics/x.yaml": "7\n"}, r"fabrics/x.yaml:1: the top level must be a mapping"),
    ],
)
def test_bad_configs_name_file_line_and_key(tmp_path, files, pattern):
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ConfigError, match=pattern):
        cfg = Config(tmp_path / "hc.yaml")
        cfg.validate()
        cfg.for_node("gpu1")


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.yaml: config file not found"):
        Config(tmp_path / "nope.yaml")


def test_directory_as_config(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        Config(tmp_path)


def test_null_drops_an_inherited_key(tmp_path):
    write(tmp_path, "fabrics/f.yaml", "extends: h100-ndr400\nib:\n  hca_count: null\nnet:\n  interfaces:\n    'ib*': null\n")
    cfg = Config(write(tmp_path, "hc.yaml", "default_fabric: f\n"))
    limits = cfg.for_node("n1").limits
    assert limits.ib.hca_count is None and limits.net.interfaces == {} and limits.ib.rate_gbps == 400


def test_site_fabric_shadows_a_shipped_one(tmp_path):
    write(tmp_path, "fabrics/h100-ndr400.yaml", "ib:\n  hca_count: 4\n")
    cfg = Config(write(tmp_path, "hc.yaml", "default_fabric: h100-ndr400\n"))
    assert cfg.for_node("n1").limits.ib.hca_count == 4


def test_digest_changes_with_any_config_file(tmp_path, site):
    before = Config(site).digest
    assert before == Config(site).digest and before.startswith("sha256:")
    (tmp_path / "fabrics/site-h100.yaml").write_text("extends: h100-ndr400\n")
    assert Config(site).digest != before


def test_a_config_without_default_fabric_names_unmatched_nodes(tmp_path):
    cfg = Config(write(tmp_path, "hc.yaml", "ssh: {port: 22}\n"))
    with pytest.raises(ConfigError, match="no default_fabric"):
        cfg.for_node("x")
