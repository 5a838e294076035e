"""ibv_devinfo parser: public captures (rdma-core -vv, MLNX_OFED plain, -v and -l, soft-RoCE
with tabs expanded), this machine's real output, outputs derived from devinfo.c, garbage,
and `hc parse ibv_devinfo`."""

from __future__ import annotations

import json
import shutil
import subprocess

import msgspec
import pytest
from support import FIXTURES, run_hc_inproc

from healthcheck.core.errors import ParseError
from healthcheck.parsers.ibv_devinfo import IbvDevinfo, parse_ibv_devinfo

DIR = FIXTURES / "ibv_devinfo"
FILES = sorted(DIR.glob("*.txt"))


def read(name: str) -> IbvDevinfo:
    return parse_ibv_devinfo((DIR / name).read_text())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_capture_parses(path):
    facts = parse_ibv_devinfo(path.read_text())
    assert msgspec.json.decode(msgspec.json.encode(facts), type=IbvDevinfo) == facts
    for dev in facts.devices:
        assert dev.name and dev.transport == "InfiniBand" and dev.fw_ver and dev.node_guid
        assert dev.phys_port_cnt and 1 <= len(dev.ports) <= dev.phys_port_cnt
        for port in dev.ports:
            assert port.state in {"PORT_ACTIVE", "PORT_DOWN"} and port.link_layer in {"InfiniBand", "Ethernet"}
            assert port.max_mtu in {1024, 2048, 4096} and port.active_mtu in {1024, 2048, 4096}
            assert port.active_mtu <= port.max_mtu


def test_cx6_vv_two_hcas_one_port_down():
    facts = read("cx6-vv-2hca-port2-down-disabled.txt")
    a, b = facts.devices
    assert (a.name, a.fw_ver, a.vendor_id, a.vendor_part_id, a.board_id) == ("mlx5_0", "20.37.1700", "0x02c9", 4123, "MT_0000000594")
    (pa,) = a.ports
    assert (pa.state, pa.phys_state, pa.active_width, pa.active_speed, pa.rate_gbps) == ("PORT_ACTIVE", "LINK_UP", "4X", "50.0 Gbps", 200.0)
    assert (pa.sm_lid, pa.port_lid, pa.port_lmc, pa.active_mtu) == (1, 4, 0, 4096)
    assert [(g.index, g.gid) for g in pa.gids] == [(0, "fe80:0000:0000:0000:88e9:a4ff:ff25:a462")]
    (pb,) = b.ports
    assert (pb.state, pb.phys_state, pb.port_lid, pb.active_speed, pb.rate_gbps) == ("PORT_DOWN", "DISABLED", 65535, None, None)
    assert "MANAGED_FLOW_STEERING" in a.flags["device_cap_flags"] and a.flags["uc_odp_caps"] == ["NO SUPPORT"]
    assert a.fields["max_qp"] == "131072" and a.fields["hca_core_clock"] == "156250kHZ"


def test_mlnx_ofed_device_ports_and_list():
    facts = read("mlnx-ofed-mlx4-2hca-2port-device-ports-port2-down.txt")
    assert [d.name for d in facts.devices] == ["mlx4_1", "mlx4_0"]
    assert [(p.port, p.state) for p in facts.devices[0].ports] == [(1, "PORT_ACTIVE"), (2, "PORT_DOWN")]
    assert "Device ports" not in facts.devices[0].fields
    assert read("mlnx-ofed-l-2hcas.txt").listed == ["mlx4_1", "mlx4_0"]
    v = read("mlnx-ofed-v-i2-port-down-polling-exp-caps.txt")
    (port,) = v.devices[0].ports  # -i 2: only port 2
    assert (port.port, port.phys_state, port.rate_gbps) == (2, "POLLING", 10.0)
    dev = v.devices[0]
    assert dev.fields["ooo_rc_caps"] == "0x0" and dev.fields["log max atomic inline"] == "3"  # lines with no colon
    assert "EXP_CROSS_CHANNEL" in dev.flags["device_cap_exp_flags"]
    assert "Unknown flags: 0x056e8000" in dev.flags["device_cap_flags"]
    assert "Multi-Packet RQ is not supported" in dev.notes


def test_tabs_expanded_soft_roce():
    (dev,) = read("rxe-v-tabs-expanded-ethernet-two-gids.txt").devices
    (port,) = dev.ports
    assert (dev.name, port.link_layer, port.active_mtu, port.max_mtu, port.rate_gbps) == ("rxe0", "Ethernet", 1024, 4096, 2.5)
    assert [g.index for g in port.gids] == [0, 1]
    assert dev.notes == ["completion_timestamp_mask not supported", "core clock not supported", "tag matching not supported"]


def test_failures_are_facts():
    assert read("debian12-rdma-core-44-no-kernel-support.txt").error == "Failed to get IB devices list: Function not implemented"
    assert read("derived-no-ib-devices-found.txt").no_devices
    assert read("derived-d-device-not-found.txt").error == "IB device 'mlx5_9' wasn't found"


@pytest.mark.skipif(shutil.which("ibv_devinfo") is None, reason="ibverbs-utils not installed")
def test_this_machines_real_ibv_devinfo():
    """Debian's ibv_devinfo, run now: whatever it prints (devices or its failure) parses."""
    r = subprocess.run(["ibv_devinfo"], capture_output=True, text=True, timeout=30)
    facts = parse_ibv_devinfo(r.stdout + r.stderr)
    assert facts.devices or facts.error or facts.no_devices
    assert (r.returncode == 0) == bool(facts.devices)


@pytest.mark.parametrize(
    "text",
    ["hello world\n", "\t\t\tstate:\t\tPORT_ACTIVE (4)\n", "\x00\x01\x02\xff" * 50,
     bytes(range(256)).decode("latin-1") * 4],
    ids=["words", "fields-without-port", "binary", "all-bytes"],
)
def test_garbage_is_a_parse_error(text):
    with pytest.raises(ParseError):
        parse_ibv_devinfo(text)


def test_a_port_without_its_device_is_read_with_the_device_unnamed():
    """A `port:` line and its state with no `hca_id:` above (a paste's fragment) was pinned here
    as garbage; it holds a port and its state, what ibv_devinfo is read for, so it is read as
    ibstat reads a port with no CA line: the device unnamed (""), `incomplete` saying so."""
    facts = parse_ibv_devinfo("\t\tport:\t1\n\t\t\tstate:\t\tPORT_ACTIVE (4)\n")
    assert [(d.name, [(p.port, p.state) for p in d.ports]) for d in facts.devices] == [("", [(1, "PORT_ACTIVE")])]
    assert facts.incomplete


@pytest.mark.parametrize("fmt", [(), ("--format", "json")], ids=["default", "json"])
def test_hc_parse_ibv_devinfo(fmt):
    r = run_hc_inproc("parse", "ibv_devinfo", str(DIR / "cx6-vv-2hca-port2-down-disabled.txt"), *fmt)
    assert r.returncode == 0, r.stderr
    devices = json.loads(r.stdout)["facts"]["devices"]
    assert [d["ports"][0]["state"] for d in devices] == ["PORT_ACTIVE", "PORT_DOWN"]
    r = run_hc_inproc("parse", "ibv_devinfo", "-", input=b"garbage\n")
    assert r.returncode == 4 and r.stderr.startswith(b"hc: error: ibv_devinfo:") and r.stderr.count(b"\n") == 1


def test_every_fixture_has_its_source_listed():
    listed = (DIR / "SOURCES.md").read_text()
    assert [p.name for p in sorted(DIR.glob("*.txt")) if f"`{p.name}`" not in listed] == []
