"""The `hc` command as operators run it: exit codes, catalogue, config commands, parse, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import CORPUS, FIXTURES, run_hc, run_hc_inproc, write_stub


def config_file(tmp_path: Path, fabric_yaml: str) -> Path:
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text(fabric_yaml)
    path = tmp_path / "hc.yaml"
    path.write_text("default_fabric: t\n")
    return path


def hc_node(tmp_path, fabric_yaml, *args, env=None, run=run_hc_inproc):
    """`hc node --local` on a config of this fabric; `run=run_hc` for the tests that hold the
    real process to an exit code (one per code), in process for the rest."""
    cfg = config_file(tmp_path, fabric_yaml)
    return run("node", "--local", "--config", str(cfg), *args, env={"HC_NODE_NAME": "gpu017", **(env or {})})


# loopback is 65536 on every Linux box: expectations about it are deterministic here
def test_exit_0_when_healthy(tmp_path, validate_report):
    r = hc_node(tmp_path, "net:\n  interfaces:\n    lo: {mtu: 65536}\n", "--format", "json", run=run_hc)
    assert r.returncode == 0, r.stderr
    report = validate_report(r.stdout)
    assert report["status"] == "PASS" and report["nodes"][0]["node"] == "gpu017"


def test_exit_2_on_fail_with_finding(tmp_path, validate_report):
    out = tmp_path / "report.json"
    r = hc_node(tmp_path, "net:\n  interfaces:\n    lo: {mtu: 1500}\n", "--output", str(out), run=run_hc)
    assert r.returncode == 2, r.stderr
    assert b"FAIL" in r.stdout and b"net.E001" in r.stdout and b"lo MTU is 65536, expected 1500" in r.stdout
    report = validate_report(out.read_bytes())
    (finding,) = report["nodes"][0]["findings"]
    assert finding["id"] == "net.E001" and finding["subject"] == "gpu017:lo"
    assert finding["limit"] == {"op": "==", "value": 1500, "key": "net.interfaces.lo.mtu",
                                "source": f"{tmp_path}/fabrics/t.yaml:3"}


def test_warn_exits_0_unless_fail_level_warn(tmp_path):
    fabric = "net:\n  mtu_max: 9000\n  ignore: []\n"
    assert hc_node(tmp_path, fabric).returncode == 0
    r = hc_node(tmp_path, fabric, "--fail-level", "warn", run=run_hc)
    assert r.returncode == 1 and b"net.E005" in r.stdout


def test_exit_3_when_a_check_cannot_run(tmp_path, validate_report):
    r = hc_node(tmp_path, "net:\n  interfaces:\n    lo: {mtu: 65536}\n", "--format", "json",
                env={"PATH": str(tmp_path / "nothing-here")}, run=run_hc)
    assert r.returncode == 3, r.stderr
    report = validate_report(r.stdout)
    assert report["status"] == "ERROR"
    assert [f["id"] for f in report["nodes"][0]["findings"]] == ["hc.E001"]


def test_fail_and_error_together_exit_2(tmp_path):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "ip", "exit 1\n")
    fabric = "net:\n  interfaces:\n    lo: {mtu: 65536}\nsys:\n  mem_total_min_gib: 100000000\n"
    r = hc_node(tmp_path, fabric, env={"PATH": str(bin_dir)})
    assert r.returncode == 2 and b"sys.E001" in r.stdout and b"hc.E003" in r.stdout


def test_hostile_interface_names_keep_json_valid_and_table_one_line_per_finding(tmp_path, validate_report):
    bin_dir = tmp_path / "bin"
    names = ['eth"0', "eth\n1", "ëth2", "eth3\x1b[31m"]
    links = [{"ifname": n, "mtu": 100, "flags": ["UP", "LOWER_UP"], "operstate": "UP"} for n in names]
    (tmp_path / "links.json").write_text(json.dumps(links))
    write_stub(bin_dir, "ip", f"exec /bin/cat {tmp_path / 'links.json'}\n")
    fabric = "net:\n  mtu_min: 1280\n"
    r = hc_node(tmp_path, fabric, "--format", "json", env={"PATH": str(bin_dir)})
    report = validate_report(r.stdout)
    assert sorted(f["component"] for f in report["nodes"][0]["findings"]) == sorted(names)
    r = hc_node(tmp_path, fabric, env={"PATH": str(bin_dir)})
    text = r.stdout.decode()
    # the findings table's rows; the CHECK table's net.mtu row names its worst finding too (issue 21, 7)
    lines = [line for line in text.splitlines() if "net.E005" in line and not line.startswith("net.mtu")]
    assert len(lines) == 4 and any("eth\\n1" in line for line in lines) and "\x1b" not in text


def test_checks_list_table_and_json():
    r = run_hc_inproc("checks", "list")
    assert r.returncode == 0
    for text in (b"net.mtu", b"ib.port_state", b"ib.counters", b"sys.memory", b"net.E001", b"ib.E001", b"hc.E002"):
        assert text in r.stdout
    data = json.loads(run_hc_inproc("checks", "list", "--format", "json").stdout)
    ids = {f["id"] for f in data["findings"]}
    assert {"net.E001", "net.E002", "net.E003", "net.E004", "net.E005", "ib.E001", "ib.E002", "ib.E003",
            "ib.E004", "ib.E005", "sys.E001", "sys.E002", "sys.E003", "sys.E004", "sys.E005",
            "hc.E001", "hc.E002", "hc.E003", "hc.E004", "hc.E005", "hc.E006"} <= ids
    assert all(f["hint"] and f["title"] and f["suggested_action"] for f in data["findings"])
    net = next(c for c in data["checks"] if c["name"] == "net.mtu")
    assert net["tiers"] == ["quick", "standard", "deep"] and net["summary"]


def test_checks_list_names_every_finding_issue_18_added():
    """What hc says when it does not act, cannot judge, or loses a file is looked up by its ID:
    each is listed with its meaning, hint and action (the table too), hc.E008 for every file."""
    added = {"act.E007": "investigate", "act.E008": "investigate", "act.E009": "fix-config",
             "act.E010": "investigate", "bw.E106": "fix-config", "bw.E109": "rerun", "hc.E008": "fix-config"}
    table = run_hc_inproc("checks", "list")
    assert table.returncode == 0
    listed = {line.split()[0] for line in table.stdout.decode().splitlines() if line.strip()}
    assert set(added) <= listed
    data = json.loads(run_hc_inproc("checks", "list", "--format", "json").stdout)
    by_id = {f["id"]: f for f in data["findings"]}
    for fid, action in added.items():
        assert by_id[fid]["title"] and by_id[fid]["hint"] and by_id[fid]["suggested_action"] == action, fid
    lost = by_id["hc.E008"]["title"]
    assert "audit log" in lost and "--output" in lost and "--prometheus" in lost


def test_every_catalogued_check_declares_findings_that_exist():
    from healthcheck.checks import load_all
    from healthcheck.core.catalogue import CATALOGUE
    from healthcheck.core.registry import REGISTRY

    load_all()
    for spec in REGISTRY.values():
        assert spec.summary, f"{spec.name} has no docstring invariant"
        for f in spec.findings:
            assert CATALOGUE[f.id] is f


def test_checks_list_by_tier():
    data = json.loads(run_hc_inproc("checks", "list", "--tier", "quick", "--format", "json").stdout)
    assert all("quick" in c["tiers"] for c in data["checks"])


def test_config_validate_ok_and_show(tmp_path):
    r = run_hc_inproc("config", "validate")
    assert r.returncode == 0 and r.stdout.startswith(b"ok: ")
    r = run_hc_inproc("config", "show", "gpu017", "--format", "json")
    data = json.loads(r.stdout)
    assert data["fabric"] == "generic"
    mtu_min = next(limit for limit in data["limits"] if limit["key"] == "net.mtu_min")
    assert mtu_min["value"] == 1280 and "configs/fabrics/generic.yaml:" in mtu_min["source"]
    r = run_hc_inproc("config", "show", "gpu017")
    assert b"gpu017: fabric generic" in r.stdout and b"net.mtu_min" in r.stdout


@pytest.mark.parametrize(
    "args, files, message",
    [
        (["config", "validate", "{tmp}/missing.yaml"], {}, "config file not found"),
        (["config", "validate", "{tmp}/hc.yaml"], {"hc.yaml": "nodes: [\n"}, "malformed YAML"),
        (["config", "validate", "{tmp}/hc.yaml"], {"hc.yaml": "default_fabric: nope\n"}, "unknown fabric 'nope'"),
        (["config", "validate", "{tmp}/hc.yaml"], {"hc.yaml": "default_fabric: t\n", "fabrics/t.yaml": "ib: {rate_gbps: x}\n"}, "ib.rate_gbps: expected float"),
        (["node", "--local", "--config", "{tmp}/hc.yaml"], {"hc.yaml": "bogus: 1\n"}, "unknown key 'bogus'"),
        (["node", "--local", "--config", "{tmp}/nope.yaml"], {}, "config file not found"),
        (["node"], {}, "name the nodes to check, or use --local"),
        (["node", "--local", "--tier", "bogus"], {}, "Invalid value for '--tier'"),
        (["node", "--local", "--checks", "nope"], {}, "unknown check or family: nope"),
        (["config", "show", "bad;name"], {}, "is not a valid node name"),
        (["nosuchcommand"], {}, "No such command"),
        (["parse", "ibstat", "{tmp}/missing.txt"], {}, "cannot read"),
        (["parse", "nosuchtool", "-"], {}, "'nosuchtool' is not one of"),
    ],
)
def test_bad_input_is_one_line_and_exit_4(tmp_path, args, files, message):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    r = run_hc_inproc(*[a.format(tmp=tmp_path) for a in args], input="")
    assert r.returncode == 4, (r.returncode, r.stderr)
    err = r.stderr.decode()
    assert message in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.startswith("hc: error:")]) == 1


def test_env_var_selects_config(tmp_path):
    cfg = config_file(tmp_path, "net:\n  interfaces:\n    lo: {mtu: 1500}\n")
    r = run_hc_inproc("node", "--local", env={"HC_CONFIG": str(cfg)})
    assert r.returncode == 2


def test_output_to_unwritable_path_is_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cfg = config_file(tmp_path, "net:\n  interfaces:\n    lo: {mtu: 65536}\n")
    r = run_hc("node", "--local", "--config", str(cfg), "--output", str(blocker / "sub" / "r.json"))
    assert r.returncode == 4 and b"cannot write" in r.stderr and b"Traceback" not in r.stderr


def test_version_and_help():
    assert run_hc("--version").stdout.startswith(b"hc, version ")
    r = run_hc("--help")
    assert r.returncode == 0 and b"Exit codes" in r.stdout


def test_the_help_lists_every_exit_code_the_docs_do():
    import re

    from support import REPO

    page = (REPO / "docs" / "commands.md").read_text()
    table = page.split("## Exit codes", 1)[1].split("\n\n", 2)[1]
    codes = re.findall(r"^\| (\d+(?: \+ N)?) \|", table, re.M)
    assert codes[:6] == ["0", "1", "2", "3", "4", "5"] and "128 + N" in codes
    shown = {line.split()[0] for line in run_hc_inproc("--help").stdout.decode().split("Exit codes:", 1)[1].splitlines()
             if line.startswith("  ") and line.split()[0][0].isdigit()}
    assert {c.replace(" ", "") for c in codes} <= shown


# ------------------------------------------------------------------------ hc parse


@pytest.mark.parametrize(
    "tool, path, check",
    [
        ("ibstat", CORPUS / "ibstat/h100-ib-some-down-disabled.txt", lambda f: len(f["ports"]) == 12),
        ("ibstatus", CORPUS / "ibstatus/a100-hdr200-all-active.txt", lambda f: f["ports"][0]["state"] == "Active"),
        ("perfquery", CORPUS / "perfquery/switch-port-xmitdiscards-linkdowned.txt", lambda f: f["ports"][0]["counters"]["link_downed"] == 1),
        ("ip-link", CORPUS / "ip-json-link/ipoib-7of8-missing-interface.txt", lambda f: len(f["links"]) == 7),
        ("ip-link", FIXTURES / "ip-link/netns-veth-detail.txt", lambda f: {link["name"] for link in f["links"]} == {"lo", "eth0", "ib0", "ib0p"}),
    ],
)
def test_parse_prints_facts_as_json(tool, path, check):
    r = run_hc_inproc("parse", tool, str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["tool"] == tool and check(data["facts"])


def test_parse_reads_stdin():
    r = run_hc("parse", "ibstat", "-", input=(CORPUS / "ibstat/a100-ib-hdr200-all-active.txt").read_text())
    assert r.returncode == 0 and len(json.loads(r.stdout)["facts"]["ports"]) == 9


def test_parse_empty_ibstat_is_an_input_error_like_every_parser():
    # empty input is nothing to parse (exit 4) for every tool (issue 8, 19); a node with
    # no HCA is judged from what ibstat says, not from silence
    r = run_hc_inproc("parse", "ibstat", "-", input="")
    assert r.returncode == 4 and b"Traceback" not in r.stderr


@pytest.mark.parametrize("tool", ["ip-link", "ibstatus", "perfquery"])
@pytest.mark.parametrize("data", [b"", b"complete garbage\n", b"\x00\x01\xff\xfe binary", b"\xff\xfe\xfd"])
def test_parse_unparsable_exits_4_with_one_line(tool, data):
    r = run_hc_inproc("parse", tool, "-", input=data)
    assert r.returncode == 4
    assert r.stderr.decode().count("\n") == 1 and r.stderr.startswith(b"hc: error: ")


def test_parse_truncated_nvidia_free_input_is_clean(tmp_path):
    text = (CORPUS / "ibstat/a100-ib-hdr200-all-active.txt").read_text()[:300]
    r = run_hc_inproc("parse", "ibstat", "-", input=text)
    assert r.returncode == 0 and json.loads(r.stdout)["facts"]["ports"]
