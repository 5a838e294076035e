"""An HCA port's netdev's carrier_changes, read beside its counters (probes/ib.py), on a
/sys tree laid out as the kernel lays it out: an IPoIB port's netdev under the HCA's PCI
function (`device/net/ib0`, its pkey child `ib0.8001` beside it), a RoCE port's named by
its GID table (`gid_attrs/ndevs/0`), a port with no netdev."""

from __future__ import annotations

from pathlib import Path

from healthcheck.checks.ib import counters
from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
from healthcheck.core.facts import ProbeContext
from healthcheck.core.model import Metric
from healthcheck.probes.ib import ib_counters_sysfs
from healthcheck.runners.local import LocalRunner
from tests.support import make_fake_sysfs_ib


def netdev(root: Path, name: str, changes: int, dev_port: int = 0) -> Path:
    d = root / "sys/class/net" / name
    d.mkdir(parents=True)
    (d / "carrier_changes").write_text(f"{changes}\n")
    (d / "dev_port").write_text(f"{dev_port}\n")
    return d


def tree(root: Path) -> None:
    base = make_fake_sysfs_ib(root, ["mlx5_0", "mlx5_1:Active:LinkUp:200:Ethernet", "mlx5_2", "mlx4_0::::::2"])
    # IPoIB: the HCA's PCI function lists its netdevs; the parent's count, not the child's
    pci = root / "sys/devices/pci0000:00/0000:19:00.0"
    (pci / "net").mkdir(parents=True)
    for name, changes in (("ib0", 3), ("ib0.8001", 9)):
        (pci / "net" / name).symlink_to(netdev(root, name, changes))
    (base / "mlx5_0" / "device").symlink_to(pci)
    # RoCE: the port's GID table names its netdev
    netdev(root, "ens1f0np0", 5)
    (base / "mlx5_1/ports/1/gid_attrs/ndevs").mkdir(parents=True)
    (base / "mlx5_1/ports/1/gid_attrs/ndevs/0").write_text("ens1f0np0\n")
    # mlx5_2: no netdev at all (no IPoIB configured)
    # a dual-port HCA: one PCI function, one netdev per port by dev_port
    pci4 = root / "sys/devices/pci0000:00/0000:3b:00.0"
    (pci4 / "net").mkdir(parents=True)
    (pci4 / "net" / "ib1").symlink_to(netdev(root, "ib1", 7, dev_port=1))
    (pci4 / "net" / "ib2").symlink_to(netdev(root, "ib2", 1, dev_port=0))
    (base / "mlx4_0" / "device").symlink_to(pci4)


def test_each_ports_netdev_carrier_changes_is_read_beside_its_counters(tmp_path):
    tree(tmp_path)
    facts = ib_counters_sysfs(ProbeContext(runner=LocalRunner(), root=tmp_path))
    got = {p.name: p.counters.get("carrier_changes") for p in facts.ports}
    assert got == {"mlx5_0/1": 3, "mlx5_1/1": 5, "mlx5_2/1": None, "mlx4_0/1": 1, "mlx4_0/2": 7}
    assert all(p.counters["symbol_error"] == 0 for p in facts.ports)


def test_ib_counters_records_it_as_a_metric_the_history_can_rate(tmp_path):
    tree(tmp_path)
    facts = ib_counters_sysfs(ProbeContext(runner=LocalRunner(), root=tmp_path))
    out = list(counters(ib_counters=facts, limits=Config(EMBEDDED_DEFAULT).fabric("generic")))
    metrics = {(m.component, m.value) for m in out if isinstance(m, Metric) and m.name == "carrier_changes"}
    assert metrics == {("mlx5_0/1", 3), ("mlx5_1/1", 5), ("mlx4_0/1", 1), ("mlx4_0/2", 7)}
    # no limit is set for it by default, so a port without a netdev is no ERROR
    assert not [f for f in out if not isinstance(f, Metric)]
