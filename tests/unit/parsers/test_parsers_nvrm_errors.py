"""The NVIDIA driver's error messages read from its source (parsers/nvrm_errors.py's table):
each family surfaces as a fault with its meaning, bus and device id, in the wordings the
driver's tags print, and the gpu.xid check judges the ones that say the node is unhealthy.

The lines are the driver's format strings (github.com/NVIDIA/open-gpu-kernel-modules, the
file and tag in each case's comment) filled the way the driver fills them: `%04x:%02x:%02x.%x`
a bus id, `%d` a number, NV_DEV_PRINTF's `NVRM: GPU <bus>: ` prefix, NV_PRINTF's `NVRM:
<function>: `, each line of a multi-line message as dmesg prints it (its further lines
indented under the first one's stamp) unless a case says otherwise. Only
syslog-old-rminitadapter-failed-no-bus-id.txt and the 2014 file the old closed driver's cases
cite (field/issues-16) are real captures.
"""

from __future__ import annotations

import pytest
from support import FIXTURES

from healthcheck.parsers.nvrm_errors import (
    DRIVER_ERRORS,
    DRIVER_MISMATCH,
    INIT_CAUSE,
    INIT_FAILED,
    NONE_PROBED,
    PROBE,
    RESET_REQUIRED,
)
from healthcheck.parsers.xid import GpuFault, parse_kernel_log


def faults(text: str) -> list[GpuFault]:
    return parse_kernel_log(text).faults


def dmesg(*lines: str, at: str = "[   42.123456] ") -> str:
    """A multi-line driver message as dmesg prints it: the first line stamped, the rest
    indented under the stamp."""
    return "\n".join([at + lines[0], *(" " * len(at) + line for line in lines[1:])]) + "\n"


# (case, the driver's text filled in, kind, bus, device id, stage)
FAMILIES = [
    # kernel-open/nvidia/nv.c nv_start_device NV_DEV_PRINTF "rm_init_adapter failed, device minor number %d"
    # (515.43.04 .. 595.45.04), without the "RmInitAdapter failed!" line before it (rate-limited away)
    ("rm_init_adapter", dmesg("NVRM: GPU 0000:c1:00.0: rm_init_adapter failed, device minor number 3"),
     INIT_FAILED, "0000:c1:00.0", None, None),
    # nv.c nv_start_device NV_DEV_PRINTF (515.43.04 .. 595.45.04)
    ("no interrupts", dmesg("NVRM: GPU 0000:3b:00.0: No interrupts of any type are available. Cannot use this GPU."),
     INIT_FAILED, "0000:3b:00.0", None, None),
    ("request_irq", dmesg("NVRM: GPU 0000:3b:00.0: request_irq() failed (-16)"), INIT_FAILED, "0000:3b:00.0",
     None, None),
    # kernel-open/nvidia/nv-pci.c nv_pci_probe (515.43.04 .. 595.45.04)
    ("bar invalid", dmesg("NVRM: This PCI I/O region assigned to your NVIDIA device is invalid:",
                          "NVRM: BAR1 is 0M @ 0x0 (PCI:0000:65:00.0)"), INIT_FAILED, "0000:65:00.0", None, PROBE),
    ("request_mem_region", dmesg("NVRM: request_mem_region failed for 16M @ 0xfa000000. This can",
                                 "NVRM: occur when a driver such as rivatv is loaded and claims",
                                 "NVRM: ownership of the device's registers."), INIT_FAILED, None, None, PROBE),
    ("pci_enable_device", dmesg("NVRM: pci_enable_device failed, aborting"), INIT_FAILED, None, None, PROBE),
    ("no irq", dmesg("NVRM: Can't find an IRQ for your NVIDIA card!"), INIT_FAILED, None, None, PROBE),
    ("rm_init_private_state", dmesg("NVRM: GPU 0000:18:00.0: rm_init_private_state() failed!"), INIT_FAILED,
     "0000:18:00.0", None, PROBE),
    # nv-pci.c nv_pci_probe NV_DEV_PRINTF (550.163.01 .. 595.45.04)
    ("open queue", dmesg("NVRM: GPU 0000:18:00.0: nv_linux_init_open_q() failed!"), INIT_FAILED, "0000:18:00.0",
     None, PROBE),
    # nv-pci.c nv_pci_probe (595.45.04) "Device start failed for %04x:%02x:%02x.%x (ret=%d)"
    ("device start", dmesg("NVRM: Device start failed for 0000:18:00.0 (ret=-5)"), INIT_FAILED, "0000:18:00.0",
     None, PROBE),
    # nv-pci.c (535.288.01 .. 595.45.04)
    ("resize bars", dmesg("NVRM: Fatal Error while attempting to resize PCIe BARs."), INIT_FAILED, None, None,
     PROBE),
    # src/nvidia/arch/nvalloc/unix/src/osapi.c RmIsSupportedDevice (515.43.04 .. 595.45.04)
    ("not supported by release", dmesg("NVRM: The NVIDIA GPU 0000:41:00.0 (PCI ID: 10de:1b06)",
                                       "NVRM: installed in this system is not supported by the",
                                       "NVRM: NVIDIA 515.43.04 driver release.",
                                       "NVRM: Please see 'Appendix A - Supported NVIDIA GPU Products'"),
     INIT_FAILED, "0000:41:00.0", "10de:1b06", PROBE),
    # osapi.c (535.288.01 .. 595.45.04): the open modules on a GPU without a GSP
    ("not supported by open", dmesg("NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1e04)",
                                    "NVRM: installed in this system is not supported by open",
                                    "NVRM: nvidia.ko because it does not include the required GPU",
                                    "NVRM: System Processor (GSP)."), INIT_FAILED, "0000:01:00.0", "10de:1e04", PROBE),
    # osinit.c (515.43.04, 535.288.01)
    ("open only data center", dmesg("NVRM: Open nvidia.ko is only ready for use on Data Center GPUs."),
     INIT_FAILED, None, None, PROBE),
    # kernel-open/nvidia/os-interface.c (550.163.01 .. 595.45.04): one nv_printf, its lines as dmesg splits them
    ("memory onlining", dmesg("NVRM: Failing GPU memory onlining as the onlining zone is not movable. "
                              "pa: 0x400000000000 size: 0x1000000000",
                              "NVRM: The NVIDIA GPU 0009:01:00.0 installed in the system",
                              "NVRM: requires auto onlining mode online_movable enabled in",
                              "NVRM: /sys/devices/system/memory/auto_online_blocks"), INIT_FAILED, "0009:01:00.0",
     None, None),
    # nv.c nvidia_init_module (515.43.04 .. 595.45.04)
    ("none initialized", dmesg("NVRM: None of the NVIDIA devices were initialized."), INIT_FAILED, None, None,
     PROBE),
    ("no devices probed", dmesg("NVRM: No NVIDIA devices probed."), NONE_PROBED, None, None, None),
    ("no gpu found", dmesg("NVRM: No NVIDIA GPU found."), NONE_PROBED, None, None, None),
    # the closed drivers before 515, each line alone (real: field/issues-16/xid/2014-steamos-two-lines-no-
    # nvidia-graphics-adapter-found-init-module-failed.txt, its two lines as they stand there)
    ("old no adapter found", "[  441.170986] NVRM: No NVIDIA graphics adapter found!\n", NONE_PROBED, None, None, None),
    ("old init module failed", "[  441.171021] NVRM: NVIDIA init module failed!\n", INIT_FAILED, None, None, PROBE),
    # nv-pci.c nv_pci_mmio_enabled NV_DEV_PRINTF (515.43.04 .. 550.163.01)
    ("unreachable after mmio", dmesg("NVRM: GPU 0000:81:00.0: The kernel has enabled MMIO for the device,",
                                     "NVRM: but it still appears unreachable. The device",
                                     "NVRM: will not function properly until it is reset."),
     RESET_REQUIRED, "0000:81:00.0", None, None),
    ("pci fatal error", dmesg("NVRM: GPU 0000:81:00.0: A fatal error was detected."), RESET_REQUIRED,
     "0000:81:00.0", None, None),
    # src/nvidia/src/kernel/gpu/mmu/kern_gmmu.c (595.45.04) NV_PRINTF, naming the GPU by its index only
    ("memory subsystem", dmesg("NVRM: GPU6 kgmmuCheckMemSubsysError_IMPL: Memory Subsystem Error detected. "
                               "kgmmuInvalidateTlb failed."), RESET_REQUIRED, None, None, None),
    # nv.c NV_DEV_PRINTF (515.43.04 .. 550.163.01)
    ("channel offline", dmesg("NVRM: GPU 0000:81:00.0: PCI channel for the device is offline"), RESET_REQUIRED,
     "0000:81:00.0", None, None),
    # osapi.c RmCheckRmApiVersion (515.43.04 .. 570.211.01) and its 595.45.04 wording
    ("api mismatch 535", dmesg("NVRM: API mismatch: the client has the version 535.104.05, but",
                               "NVRM: this kernel module has the version 535.183.01.  Please",
                               "NVRM: make sure that this kernel module and all NVIDIA driver",
                               "NVRM: components have the same version."), DRIVER_MISMATCH, None, None, None),
    ("api mismatch 595", dmesg("NVRM: API mismatch: the client 'nvidia-smi' (pid 4242)",
                               "NVRM: has the version 590.48.01, but this kernel module has",
                               "NVRM: the version 595.45.04.  Please make sure that this",
                               "NVRM: kernel module and all NVIDIA driver components",
                               "NVRM: have the same version."), DRIVER_MISMATCH, None, None, None),
    # osinit.c RmInitAdapter NV_PRINTF (515.43.04 .. 595.45.04)
    ("power cables", dmesg("NVRM: RmInitAdapter: GPU does not have the necessary power cables connected."),
     INIT_CAUSE, None, None, None),
    # kern_gpu_tu102.c gpuWaitForGfwBootComplete_TU102 NV_PRINTF (535.288.01 .. 595.45.04)
    ("gfw boot", dmesg("NVRM: gpuWaitForGfwBootComplete_TU102: failed to wait for GFW_BOOT: (progress 0x0)"),
     INIT_CAUSE, None, None, None),
    # osinit.c RmInitAdapter NV_PRINTF (535.288.01 .. 570.211.01)
    ("fsp boot", dmesg("NVRM: RmInitAdapter: FSP boot command failed."), INIT_CAUSE, None, None, None),
    ("cannot attach", dmesg("NVRM: RmInitAdapterHw: *** Cannot attach gpu"), INIT_CAUSE, None, None, None),
]


@pytest.mark.parametrize(("case", "text", "kind", "bus", "device", "stage"), FAMILIES,
                         ids=[f[0] for f in FAMILIES])
def test_each_driver_error_family_is_a_fault_with_its_meaning(case, text, kind, bus, device, stage):
    found = faults(text)
    assert [(f.kind, f.pci_bus_id, f.pci_device_id, f.stage) for f in found] == [(kind, bus, device, stage)], case
    assert found[0].meaning


def test_every_row_has_a_case():
    """Each row of the table is read by one of the cases above (a row nothing tests is a guess)."""
    texts = [case[1] for case in FAMILIES]
    for row in DRIVER_ERRORS:
        assert any(row.pattern.search(text) for text in texts), row.pattern.pattern


def test_a_message_whose_lines_came_apart_borrows_the_gpu_named_on_its_first_line():
    """syslog stamps each line of a multi-line message: `installed in this system is not
    supported` names no GPU; `The NVIDIA GPU <bus> (PCI ID: ...)` just before it does."""
    text = ("Nov 28 08:00:01 node7 kernel: NVRM: The NVIDIA GPU 0000:41:00.0 (PCI ID: 10de:1b06)\n"
            "Nov 28 08:00:01 node7 kernel: NVRM: installed in this system is not supported by the\n"
            "Nov 28 08:00:01 node7 kernel: NVRM: NVIDIA 595.45.04 driver release.\n")
    [fault] = faults(text)
    assert (fault.kind, fault.pci_bus_id, fault.pci_device_id) == (INIT_FAILED, "0000:41:00.0", "10de:1b06")


def test_rm_init_adapter_after_rminitadapter_failed_is_one_failure():
    """The driver prints `rm_init_adapter failed` right after `RmInitAdapter failed!` for the
    same GPU (nv.c after osinit.c); the old drivers' `rm_init_adapter(0) failed` after a
    bus-less one (real: fixtures/kernel-log/syslog-old-rminitadapter-failed-no-bus-id.txt)."""
    text = dmesg("NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x24:0x1c:1436)") + dmesg(
        "NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0")
    assert [(f.kind, f.pci_bus_id) for f in faults(text)] == [(INIT_FAILED, "0000:01:00.0")]
    old = (FIXTURES / "kernel-log" / "syslog-old-rminitadapter-failed-no-bus-id.txt").read_text()
    log = parse_kernel_log(old)
    assert [f.kind for f in log.faults] == [INIT_FAILED]
    assert not any("rm_init_adapter" in u.text for u in log.unrecognized.sample)  # read, not left unread


def test_a_node_wide_message_never_borrows_a_gpu():
    text = dmesg("NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x24:0x1c:1436)") + dmesg(
        "NVRM: No NVIDIA devices probed.")
    assert [(f.kind, f.pci_bus_id) for f in faults(text)] == [(INIT_FAILED, "0000:01:00.0"), (NONE_PROBED, None)]


# --- what gpu.xid makes of them ----------------------------------------------------------

def _judged(text: str) -> list[tuple[str, str, str, str]]:
    import msgspec

    from healthcheck.checks import gpu as g
    from healthcheck.core.config.loader import EMBEDDED_DEFAULT, Config
    from healthcheck.core.model import Finding

    log = msgspec.structs.replace(parse_kernel_log(text), source="dmesg", source_lines=len(text.splitlines()))
    out = g.xid(kernel_gpu_log=log, gpus=None, limits=Config(EMBEDDED_DEFAULT).fabric("generic"))
    return [(f.id, f.status.value, f.component, f.message) for f in out if isinstance(f, Finding)]


def test_a_gpu_the_driver_does_not_support_fails_saying_so():
    [(fid, status, component, message)] = _judged(_text("not supported by release"))
    assert (fid, status, component) == ("gpu.E022", "FAIL", "0000:41:00.0:init-failed")
    assert "does not support" in message


def test_a_gpu_unreachable_after_a_pcie_error_needs_a_reset():
    [(fid, status, component, message)] = _judged(_text("unreachable after mmio"))
    assert (fid, status, component) == ("gpu.E024", "FAIL", "0000:81:00.0:reset-required")
    assert "unreachable" in message and "None" not in message


@pytest.mark.parametrize("case", ["api mismatch 595", "power cables", "no devices probed"])
def test_facts_no_check_judges_fail_nothing(case):
    assert _judged(_text(case)) == []


def _text(case: str) -> str:
    [text] = [f[1] for f in FAMILIES if f[0] == case]
    return text


def test_a_mig_attributed_xid_keeps_its_bus_and_names_its_instances():
    """src/nvidia/src/kernel/gpu/rc/kernel_rc.c (515.43.04 .. 595.45.04): "NVRM: Xid (PCI:%04x:%02x:%02x
    GPU-I:%02u GPU-CI:%02u): %d, pid=%s, name=%s, %s" and its GPU-instance-only form, filled in."""
    text = ("[  100.500000] NVRM: Xid (PCI:0000:01:00 GPU-I:05 GPU-CI:01): 94, pid=7194, name=python3, "
            "Contained: CE User Channel (0x9). RST: No, D-RST: No\n"
            "[  101.500000] NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, name=python3, "
            "Contained: CE User Channel (0x9). RST: No, D-RST: No\n")
    xids = parse_kernel_log(text).xids
    assert [(x.code, x.pci_bus_id, x.gpu_instance, x.compute_instance, x.process) for x in xids] == [
        (94, "0000:01:00.0", 5, 1, "python3"), (94, "0000:01:00.0", 5, None, "python3")]


def test_a_stuck_memory_subsystem_in_a_real_gsp_timeout_is_a_reset_required_fault():
    """real (tuning): field/issues/xid/gsp-heartbeat-timeout-driver-595-load.txt, GPU6's GSP heartbeat
    timing out, then `Memory Subsystem Error detected. kbusSendSysmembarSingle failed.` (was: unread)."""
    text = (FIXTURES / "field" / "issues" / "xid" / "gsp-heartbeat-timeout-driver-595-load.txt").read_text()
    log = parse_kernel_log(text)
    assert [(f.kind, f.pci_bus_id) for f in log.faults] == [(RESET_REQUIRED, None)]
    assert "kbusSendSysmembarSingle" in log.faults[0].message and log.gsp_errors  # the GSP errors read as before


def test_rm_init_adapter_after_another_gpus_probe_failure_is_its_own_failure():
    """The summary rule repeats only `RmInitAdapter failed!`: a GPU refused at probe before
    (`The NVIDIA probe routine was not called for 1 device(s).`, nv.c) is another failure."""
    text = dmesg("NVRM: The NVIDIA probe routine was not called for 1 device(s).") + dmesg(
        "NVRM: GPU 0000:c1:00.0: rm_init_adapter failed, device minor number 3")
    assert [(f.kind, f.pci_bus_id, f.stage) for f in faults(text)] == [
        (INIT_FAILED, None, PROBE), (INIT_FAILED, "0000:c1:00.0", None)]


OLD_NO_ADAPTER = FIXTURES / "field" / "issues-16" / "xid" / (
    "2014-steamos-two-lines-no-nvidia-graphics-adapter-found-init-module-failed.txt")


def test_an_old_closed_driver_that_found_no_adapter_is_the_none_probed_fact():
    """real: a 2014 kernel log of a node whose only GPU is an AMD card, the closed driver
    before 515 saying `No NVIDIA graphics adapter found!` then `NVIDIA init module failed!`
    (was: both lines unread). The first is today's `No NVIDIA GPU found.` (none-probed, a fact);
    the second the module failing because of it, read and not kept as a GPU's failure."""
    log = parse_kernel_log(OLD_NO_ADAPTER.read_text())
    assert [(f.kind, f.pci_bus_id) for f in log.faults] == [(NONE_PROBED, None)]
    assert "No NVIDIA graphics adapter found" in log.faults[0].message
    assert not any("NVRM" in u.text for u in log.unrecognized.sample)
    assert _judged(OLD_NO_ADAPTER.read_text()) == _judged(_text("no gpu found")) == []


def test_an_old_init_module_failure_alone_is_judged_like_todays_none_initialized():
    """The old `NVIDIA init module failed!` with no cause in the log (the real file's second
    line alone) fails the node as `None of the NVIDIA devices were initialized.` does."""
    old = [(fid, status, component) for fid, status, component, _ in _judged(_text("old init module failed"))]
    new = [(fid, status, component) for fid, status, component, _ in _judged(_text("none initialized"))]
    assert old == new and old and old[0][1] == "FAIL"
