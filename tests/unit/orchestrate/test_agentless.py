"""The agentless (ssh-transport) providers, fed by a local runner: the same commands and
parsers that run over SSH, on this machine's real tools."""

from __future__ import annotations

import msgspec
import pytest
from support import write_stub

from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.config.schema import Fabric
from healthcheck.core.facts import ProbeContext, provider_for
from healthcheck.core.registry import select
from healthcheck.core.status import Status
from healthcheck.orchestrate.engine import run_checks
from healthcheck.runners.local import LocalRunner

CFG = Config(EMBEDDED_DEFAULT)


def ssh_ctx(path=None, limits=None, **params) -> ProbeContext:
    env = {"PATH": path} if path else None
    return ProbeContext(runner=LocalRunner(env=env), transport="ssh", limits=limits or CFG.fabric("generic"),
                        params=params, timeout_s=10)


def test_every_fact_has_an_ssh_provider():
    from healthcheck.checks import load_all
    from healthcheck.core.registry import REGISTRY

    load_all()
    facts = {f for spec in REGISTRY.values() for f in spec.needs + spec.optional}
    for fact in facts:
        provider_for(fact, "ssh")  # raises when missing


def test_meminfo_mounts_processes_disk_over_the_ssh_providers(tmp_path):
    limits = msgspec.convert({"sys": {"disk_free_min_gib": {str(tmp_path): 0.0001, "/no/such": 1}}}, Fabric)
    ctx = ssh_ctx(limits=limits)
    assert provider_for("meminfo", "ssh")(ctx).total_kib > 0
    assert provider_for("mounts", "ssh")(ctx).at("/")
    assert "python3" in " ".join(provider_for("processes", "ssh")(ctx).names) or provider_for("processes", "ssh")(ctx).names
    space = {p.path: p for p in provider_for("disk_space", "ssh")(ctx).paths}
    assert space[str(tmp_path)].free_bytes > 0 and not space["/no/such"].exists


def test_ibstat_without_hca_is_zero_ports_and_perfquery_per_port(tmp_path):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "ibstat", "exit 0\n")
    ctx = ssh_ctx(f"{bin_dir}:/usr/bin:/bin")
    assert provider_for("ib_ports", "ssh")(ctx).ports == []
    assert provider_for("ib_counters", "ssh")(ctx).ports == []


def test_ibstat_and_perfquery_stand_ins_from_the_corpus(tmp_path):
    from support import CORPUS

    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "ibstat", f"exec /bin/cat {CORPUS / 'ibstat/h100-roce-down-polling.txt'}\n")
    write_stub(bin_dir, "perfquery", f"exec /bin/cat {CORPUS / 'perfquery/switch-port-xmitdiscards-linkdowned.txt'}\n")
    ctx = ssh_ctx(f"{bin_dir}:/usr/bin:/bin")
    ports = provider_for("ib_ports", "ssh")(ctx)
    counters = provider_for("ib_counters", "ssh")(ctx)
    assert len(ports.ports) == 12 and len(counters.ports) == 12
    assert counters.ports[0].ca == "mlx5_0" and counters.ports[0].counters["link_downed"] == 1


def test_perfquery_failure_falls_back_to_sysfs_counters(tmp_path):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "ibstat", "printf \"CA 'mlx5_0'\\n\\tPort 1:\\n\\t\\tState: Active\\n\\t\\tPhysical state: LinkUp\\n\\t\\tRate: 400\\n\"\n")
    write_stub(bin_dir, "perfquery", "echo 'ibwarn: can't open UMAD port' >&2; exit 255\n")
    write_stub(bin_dir, "grep", "echo '/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error:7'\n")
    ctx = ssh_ctx(f"{bin_dir}:/usr/bin:/bin")
    (port,) = provider_for("ib_counters", "ssh")(ctx).ports
    assert port.counters == {"symbol_error": 7}


def test_nvidia_smi_missing_means_no_driver_and_a_report_is_parsed(tmp_path):
    from support import CORPUS

    ctx = ssh_ctx(str(tmp_path / "empty"))
    assert "nvidia-smi not found" in provider_for("gpus", "ssh")(ctx).init_error
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "nvidia-smi", f"exec /bin/cat {CORPUS / 'nvidia-smi-q/h100-8gpu-driver-535.161.08.txt'}\n")
    facts = provider_for("gpus", "ssh")(ssh_ctx(f"{bin_dir}:/usr/bin:/bin"))
    assert len(facts.gpus) == 8 and facts.source == "nvidia-smi -q"


def test_nvidia_smi_driver_failure_is_an_init_error(tmp_path):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "nvidia-smi", "echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
                                      "Make sure that the latest NVIDIA driver is installed and running.\"\nexit 9\n")
    facts = provider_for("gpus", "ssh")(ssh_ctx(f"{bin_dir}:/usr/bin:/bin"))
    assert facts.init_error and not facts.gpus


def test_kernel_log_over_dmesg_stand_in_with_a_window(tmp_path):
    from support import CORPUS

    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "dmesg", f"exec /bin/cat {CORPUS / 'xid-dmesg/xid48-63-94-dbe-rowremap-contained.txt'}\n")
    log = provider_for("kernel_gpu_log", "ssh")(ssh_ctx(f"{bin_dir}:/usr/bin:/bin"))
    assert {x.code for x in log.xids} == {48, 63, 94}
    later = provider_for("kernel_gpu_log", "ssh")(ssh_ctx(f"{bin_dir}:/usr/bin:/bin", since=2e9))
    assert later.xids == []



def test_kernel_log_over_ssh_carries_the_boot_id_or_none(tmp_path):
    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "dmesg", "echo '[    0.000000] Linux version 6.1.0-18-amd64'\n")
    write_stub(bin_dir, "cat", "echo 24418349-706B-4a39-af73-980b0a22eb84\n")  # the node's boot id, as cat prints it
    log = provider_for("kernel_gpu_log", "ssh")(ssh_ctx(f"{bin_dir}:/usr/bin:/bin"))
    assert log.boot_id == "24418349-706b-4a39-af73-980b0a22eb84"
    write_stub(bin_dir, "cat", "echo 'cat: /proc/sys/kernel/random/boot_id: No such file' >&2\nexit 1\n")
    assert provider_for("kernel_gpu_log", "ssh")(ssh_ctx(f"{bin_dir}:/usr/bin:/bin")).boot_id is None


def test_agentless_h100_node_from_stand_ins_through_the_engine(tmp_path):
    from support import CORPUS

    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "nvidia-smi", f"exec /bin/cat {CORPUS / 'nvidia-smi-q/h100-8gpu-driver-535.161.08.txt'}\n")
    write_stub(bin_dir, "ibstat", f"exec /bin/cat {CORPUS / 'ibstat/h100-ib-some-down-disabled.txt'}\n")
    write_stub(bin_dir, "dmesg", "echo '[    0.000000] Linux version 6.1.0-18-amd64'\n")
    ctx = ProbeContext(runner=LocalRunner(env={"PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"}), transport="ssh")
    data, prov = CFG.fabric_raw("h100-ndr400")
    from healthcheck.core.config.loader import NodeConfig, _convert

    nc = NodeConfig("gpu017", "h100-ndr400", _convert(data, Fabric, prov, None), prov)
    result, _ = run_checks(nc, select("quick", ["gpu", "ib.port_state"]), ctx, mode="agentless", budget_floor=10)
    assert result.mode == "agentless"
    statuses = {c.name: c.status for c in result.checks}
    assert statuses["ib.port_state"] is Status.PASS and statuses["gpu.count"] is Status.PASS
    # the capture's real HW power brake on every GPU
    assert {f.id for f in result.findings} == {"gpu.E030"}


@pytest.mark.parametrize("text, expected", [
    ("a1\na2 slots=4\n# c\n\nb[1-2]:8\n", ["a1", "a2", "b1", "b2"]),
    ("x y z\n", ["x"]),
    ("a1\na1 slots=2\n", ["a1"]),
])
def test_hostfile_forms(text, expected):
    from healthcheck.parsers.hostfile import parse_hostfile

    assert parse_hostfile(text) == expected


@pytest.mark.parametrize("text", ["", "# only comments\n", "bad;name\n", "gpu[1-\n", "a_b\n"])
def test_bad_hostfiles(text):
    from healthcheck.core.errors import ParseError
    from healthcheck.parsers.hostfile import parse_hostfile

    with pytest.raises(ParseError):
        parse_hostfile(text)


def test_shipped_hostfile_examples_parse():
    from support import REPO

    from healthcheck.parsers.hostfile import parse_hostfile

    for path in sorted((REPO / "hostfiles").glob("*.txt")):
        assert parse_hostfile(path.read_text()), path


def test_nvidia_smi_query_gpu_is_the_fallback_for_an_unknown_q_layout(tmp_path):
    from support import CORPUS

    bin_dir = tmp_path / "bin"
    csv = CORPUS / "nvidia-smi-query-gpu/h100-590-all-fields-idle.txt"
    # -q prints something this parser does not know; --query-gpu answers with CSV
    write_stub(bin_dir, "nvidia-smi", f'case "$1" in -q) echo "a layout from the future";; *) exec /bin/cat {csv};; esac\n')
    facts = provider_for("gpus", "ssh")(ssh_ctx(f"{bin_dir}:/usr/bin:/bin"))
    assert facts.source == "nvidia-smi --query-gpu" and len(facts.gpus) == 1
    assert facts.gpus[0].name == "NVIDIA H100 80GB HBM3"


def test_shared_libs_over_both_transports():
    for transport in ("local", "ssh"):
        ctx = ProbeContext(runner=LocalRunner(env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}), transport=transport)
        assert provider_for("shared_libs", transport)(ctx).libs


def test_carrier_changes_over_the_shell_beside_perfquerys_counters(tmp_path):
    # the HCA's netdevs read as `grep -rH` prints them over SSH: the IPoIB parent ib0 (its pkey
    # child's count is not the port's), a dual-port HCA's second netdev by dev_port
    from support import CORPUS

    bin_dir = tmp_path / "bin"
    write_stub(bin_dir, "ibstat", f"exec /bin/cat {CORPUS / 'ibstat/h100-roce-down-polling.txt'}\n")
    write_stub(bin_dir, "perfquery", f"exec /bin/cat {CORPUS / 'perfquery/switch-port-xmitdiscards-linkdowned.txt'}\n")
    net = "/sys/class/infiniband/mlx5_0/device/net"
    write_stub(bin_dir, "grep", f"""case "$*" in *mlx5_0/device/net/*) printf '%s\\n' \\
        '{net}/ib0.8001/carrier_changes:9' '{net}/ib0.8001/dev_port:0' \\
        '{net}/ib0/carrier_changes:3' '{net}/ib0/dev_port:0' \\
        '{net}/ib1/carrier_changes:4' '{net}/ib1/dev_port:1' ;; *) exit 2 ;; esac\n""")
    counters = provider_for("ib_counters", "ssh")(ssh_ctx(f"{bin_dir}:/usr/bin:/bin"))
    got = {p.name: p.counters.get("carrier_changes") for p in counters.ports if p.ca in ("mlx5_0", "mlx5_1")}
    assert got == {"mlx5_0/1": 3, "mlx5_1/1": None}
    assert counters.ports[0].counters["link_downed"] == 1
