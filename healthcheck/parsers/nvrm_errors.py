"""The NVIDIA driver's errors that say a GPU, or the driver, is not usable on this node, read
from the driver's own source rather than from samples: one table, pattern -> meaning.

The closed drivers before 515 printed some of these families in other words (`No NVIDIA
graphics adapter found!`, `NVIDIA init module failed!`): a row reads those as the same kind,
where a real capture establishes the wording (cited beside it), so a check judges an old log
the way it judges today's.

Each pattern is a format string the driver prints at NV_DBG_ERRORS (kernel-open/nvidia/) or
from the RM's GPU bring-up (src/nvidia/arch/nvalloc/unix/src/), in the open kernel modules
(github.com/NVIDIA/open-gpu-kernel-modules), its source file and the tags that print it
cited beside it. Messages the driver prints through NV_DEV_PRINTF start `NVRM: GPU
<bus>: ` (kernel-open/common/inc/os-interface.h); NV_PRINTF's start `NVRM: <function>: `.
A message the driver splits over lines is read joined (xid.py joins a driver message's
continuation lines); where its lines came apart, the line with the words names no bus and
the GPU is the one a driver line just before it named (`nearby`).

What a row means, as the kinds xid.py's GpuFault carries:

- INIT_FAILED: the driver could not bring the GPU up (at probe, `stage` PROBE, or when it
  was first opened); judged like `RmInitAdapter failed!`. A `summary` row repeats a failure
  a line before it already gave (`rm_init_adapter failed` after `RmInitAdapter failed!`; the
  module's own failure after the line that says why, a failed probe or no device at all):
  kept only when that line is not in the log.
- RESET_REQUIRED: after a PCIe error the driver finds the GPU unreachable or offline: it
  takes no work until it is reset.
- NONE_PROBED: the driver found or bound no NVIDIA device at all (a fact: a node without
  NVIDIA GPUs says it too).
- DRIVER_MISMATCH: a client's NVIDIA libraries are another version than the kernel module
  (a fact: the client may be a container's, carrying its own libraries).
- INIT_CAUSE: a step of the GPU's bring-up that failed, before the driver's
  `RmInitAdapter failed!` (which is what is judged): the cause, as a fact.

The driver's other NV_DBG_ERRORS messages are about a caller (an ioctl's size, a client
opening a minor that is not there), a kernel-side allocation, a platform feature (Tegra's
device tree, SMMU, devfreq) or advice continuing one of the messages here: none says this
node's GPU is unhealthy, so none is a row. GSP errors are nvrm_load.gsp_error's, the
probe routine's counts and `No NVIDIA graphics adapter probed!` xid.py's.

Linear: every pattern is literal words with bounded repeats, tried after a cheap word test.
"""

from __future__ import annotations

import re

import msgspec

from healthcheck.core.lazyre import lazy_compile
from healthcheck.parsers.gpu_common import normalize_pci

INIT_FAILED = "init-failed"
NONE_PROBED = "none-probed"
RESET_REQUIRED = "reset-required"
DRIVER_MISMATCH = "driver-mismatch"
INIT_CAUSE = "init-cause"
PROBE = "probe"


class DriverError(msgspec.Struct, frozen=True):
    """One row: a message family the driver prints, and what it says of the node."""

    pattern: re.Pattern[str]
    kind: str  # INIT_FAILED, RESET_REQUIRED, NONE_PROBED, DRIVER_MISMATCH, INIT_CAUSE
    meaning: str  # what it says, in words an operator reads in a finding
    stage: str | None = None  # PROBE: printed while the driver probed the GPU
    summary: bool = False  # repeats a failure a line before it gave: kept only without that line
    gpu: bool = True  # about one GPU (False: the driver's or the node's, never a GPU a line before named)


def _row(words: str, kind: str, meaning: str, stage: str | None = None, *, summary: bool = False,
         gpu: bool = True) -> DriverError:
    return DriverError(lazy_compile(words, re.ASCII), kind, meaning, stage, summary, gpu)


_HEX = r"0x[0-9A-Fa-f]{1,16}"

# pattern -> meaning. Sources: open-gpu-kernel-modules at the tags named (515.43.04, 535.288.01,
# 550.163.01, 570.211.01, 595.45.04 checked); `%d` and friends are filled as the driver fills them.
DRIVER_ERRORS: tuple[DriverError, ...] = (
    # kernel-open/nvidia/nv.c nv_start_device, NV_DEV_PRINTF (515..595): "rm_init_adapter failed,
    # device minor number %d", right after osinit.c's "RmInitAdapter failed! (0x%x:0x%x:%d)"; the
    # pre-open drivers' "rm_init_adapter(%d) failed" (real: tests/fixtures/kernel-log/
    # syslog-old-rminitadapter-failed-no-bus-id.txt)
    _row(r"rm_init_adapter(?: failed, device minor number \d{1,6}|\(\d{1,6}\) failed)", INIT_FAILED,
         "RmInitAdapter failed", summary=True),
    # nv.c nv_start_device, NV_DEV_PRINTF (515..595)
    _row(r"No interrupts of any type are available\. Cannot use this GPU", INIT_FAILED,
         "no interrupt of any type is available to it"),
    # nv.c nv_start_device, NV_DEV_PRINTF "request_irq() failed (%d)" (515..595), after "Tried to get
    # IRQ %d, but another driver / has it and is not sharing it."
    _row(r"request_irq\(\) failed \(-?\d{1,6}\)", INIT_FAILED, "its interrupt could not be requested"),
    # kernel-open/nvidia/nv-pci.c nv_pci_probe (515..595): nv_printf(NV_DBG_ERRORS, ...)
    _row(r"Can't find an IRQ for your NVIDIA card", INIT_FAILED, "the system gave it no IRQ", PROBE),
    _row(r"pci_enable_device failed, aborting", INIT_FAILED, "its PCI device could not be enabled", PROBE),
    # nv-pci.c nv_pci_probe (515..595): "This PCI I/O region assigned to your NVIDIA device is
    # invalid:\nNVRM: BAR%d is %uM @ 0x%x (PCI:%04x:%02x:%02x.%x)"
    _row(r"BAR\d{1,2} is \d{1,12}M @ " + _HEX + r" \(PCI:", INIT_FAILED,
         "a PCI I/O region (BAR) assigned to it is invalid", PROBE),
    # nv-pci.c nv_pci_probe (515..595): "request_mem_region failed for %uM @ 0x%x. This can\nNVRM: occur
    # when a driver such as rivatv is loaded and claims\nNVRM: ownership of the device's registers."
    _row(r"request_mem_region failed for \d{1,12}M @ " + _HEX, INIT_FAILED,
         "its registers could not be claimed (another driver holds them)", PROBE),
    # nv-pci.c nv_pci_probe, NV_DEV_PRINTF (515..595) / (550..595)
    _row(r"rm_init_private_state\(\) failed", INIT_FAILED, "the driver could not set up its state", PROBE),
    _row(r"nv_linux_init_open_q\(\) failed", INIT_FAILED, "the driver could not set up its queue", PROBE),
    # nv-pci.c nv_pci_probe (595): "Device start failed for %04x:%02x:%02x.%x (ret=%d)"
    _row(r"Device start failed for ", INIT_FAILED, "the device could not be started", PROBE),
    # nv-pci.c nv_resize_pcie_bars / nv_pci_probe (535..595)
    _row(r"Fatal Error while attempting to resize PCIe BARs|FATAL: Failed to re-allocate BAR1", INIT_FAILED,
         "its PCIe BARs could not be resized", PROBE),
    # src/nvidia/arch/nvalloc/unix/src/osapi.c RmIsSupportedDevice: "The NVIDIA GPU %04x:%02x:%02x.%x
    # (PCI ID: %04x:%04x)\nNVRM: installed in this system is not supported by the\nNVRM: NVIDIA %s driver
    # release." (515..595), "... is not supported by open\nNVRM: nvidia.ko because it does not include the
    # required GPU\nNVRM: System Processor (GSP)." (535..595), "installed in this vGPU host system is not
    # supported by" (535..595); osinit.c "Open nvidia.ko is only ready for use on Data Center GPUs." (515, 535)
    _row(r"installed in this (?:vGPU host )?system is not supported by|"
         r"Open nvidia\.ko is only ready for use on Data Center GPUs", INIT_FAILED,
         "this driver does not support the GPU", PROBE),
    # kernel-open/nvidia/os-interface.c (550..595), a coherent GPU's (Grace Hopper) memory: "Failing GPU
    # memory onlining as the onlining zone is not movable. pa: 0x%llx size: 0x%llx\nNVRM: The NVIDIA GPU
    # %04x:%02x:%02x.%x installed in the system\nNVRM: requires auto onlining mode online_movable ...",
    # "GPU memory zone movable auto onlining failed!"
    _row(r"Failing GPU memory onlining|GPU memory zone movable auto onlining failed", INIT_FAILED,
         "its memory could not be onlined (auto_online_blocks must be online_movable)"),
    # nv.c nvidia_init_module (515..595): after "The NVIDIA probe routine failed for %d device(s)."
    _row(r"None of the NVIDIA devices were initialized", INIT_FAILED, "none of the NVIDIA devices was initialised",
         PROBE, summary=True, gpu=False),
    # the closed drivers before 515, the same place (their nvidia_init_module): "NVIDIA init module failed!",
    # the module's load failing after the line that says why (real: field/issues-16/xid/2014-steamos-two-
    # lines-no-nvidia-graphics-adapter-found-init-module-failed.txt, after "No NVIDIA graphics adapter found!");
    # a summary like "None of the NVIDIA devices were initialized": kept only when no cause is in the log
    _row(r"NVIDIA init module failed", INIT_FAILED, "the NVIDIA kernel module failed to load", PROBE,
         summary=True, gpu=False),
    # nv.c nvidia_init_module (515..595): the driver found no device ("No NVIDIA GPU found.", "No NVIDIA PCI
    # devices found.") or bound none ("No NVIDIA devices probed.": the older closed drivers' "No NVIDIA
    # graphics adapter probed!" is read in xid.py); the closed drivers before 515 said "No NVIDIA graphics
    # adapter found!" (real: the 2014 file above, a node whose only GPU is an AMD card)
    _row(r"No NVIDIA (?:devices probed|GPU found|PCI devices found|graphics adapter found)", NONE_PROBED,
         "no NVIDIA device was probed", gpu=False),
    # nv-pci.c nv_pci_mmio_enabled, NV_DEV_PRINTF (515..550): "The kernel has enabled MMIO for the
    # device,\nNVRM: but it still appears unreachable. The device\nNVRM: will not function properly until
    # it is reset." after "A fatal error was detected." (the driver's PCIe error handler)
    _row(r"still appears unreachable", RESET_REQUIRED, "it is unreachable after a PCIe error"),
    _row(r"A fatal error was detected", RESET_REQUIRED, "the driver's PCIe error handler saw a fatal error"),
    # src/nvidia/src/kernel/gpu/mmu/kern_gmmu.c kgmmuCheckMemSubsysError_IMPL (595), NV_PRINTF after a GSP
    # timeout: "Memory Subsystem Error detected. kgmmuInvalidateTlb failed." / "... kbusSendSysmembarSingle
    # failed." / "... kgmmuInvalidateTlb with sysmembar failed." (the caller returns MEMORY_SUBSYSTEM_ERROR;
    # real: field/issues/xid/gsp-heartbeat-timeout-driver-595-load.txt, a tuning file)
    _row(r"Memory Subsystem Error detected", RESET_REQUIRED,
         "its memory subsystem is stuck (a TLB invalidate or a sysmembar timed out)"),
    # nv.c nv_pci_trigger_recovery, NV_DEV_PRINTF (515..550)
    _row(r"PCI channel for the device is offline", RESET_REQUIRED, "its PCI channel is offline"),
    # osapi.c RmCheckRmApiVersion: "API mismatch: the client has the version %s, but\nNVRM: this kernel
    # module has the version %s." (515..570); "API mismatch: the client '%s' (pid %u)\nNVRM: has the
    # version %s, but this kernel module has\nNVRM: the version %s." (595)
    _row(r"API mismatch: the client ", DRIVER_MISMATCH,
         "a client's NVIDIA libraries are another version than the kernel module", gpu=False),
    # osinit.c RmInitAdapter (515..595), NV_PRINTF: "GPU does not have the necessary power cables connected."
    _row(r"GPU does not have the necessary power cables connected", INIT_CAUSE,
         "the GPU's power cables are not connected"),
    # kern_gpu_tu102.c gpuWaitForGfwBootComplete_TU102 "failed to wait for GFW_BOOT: (progress 0x%x)"
    # (535..595); its GSP siblings ("GSP failed to halt with GFW_BOOT", kgspWaitForGfwBootOk's "failed to
    # wait for GFW boot complete") name the GSP: nvrm_load.gsp_error's
    _row(r"failed to wait for GFW_BOOT", INIT_CAUSE,
         "the GPU's firmware (GFW) did not finish booting"),
    # osinit.c RmInitAdapter (535..570): "FSP boot command failed."
    _row(r"FSP boot command failed", INIT_CAUSE, "the GPU's FSP did not boot"),
    # osinit.c RmInitAdapter's steps (515..595), NV_PRINTF: "*** Cannot attach gpu", "*** Cannot
    # pre-initialize the device", "*** Cannot initialize the device", "*** Cannot load state into the device"
    _row(r"\*\*\* Cannot (?:attach (?:bc )?gpu|pre-initialize the device|initialize the device"
         r"|load state into the device)", INIT_CAUSE, "a step of the GPU's bring-up failed"),
)

# a word every row's message holds, tested before any pattern (most driver lines hold none)
_WORDS = ("fail", "FAIL", "Fail", "Can't", "No ", "None of", "support", "unreachable", "offline", "fatal error",
          "mismatch", "power cables", "Cannot", "BAR", "interrupts", "only ready", "Error detected")
_BUS = lazy_compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]", re.ASCII)
_MESSAGE_MAX = 300


class DriverErrorLine(msgspec.Struct, frozen=True):
    """A driver line one of DRIVER_ERRORS's rows read."""

    row: DriverError
    message: str  # the driver's words after `NVRM: `
    pci_bus_id: str | None  # the bus the message prints, normalised; None when it prints none


def driver_error(body: str) -> DriverErrorLine | None:
    """The row a driver message (`NVRM: ...`, continuation lines joined) is, if any."""
    at = body.find("NVRM:")
    if at < 0 or not any(word in body for word in _WORDS):
        return None
    text = body[at + len("NVRM:"):].strip()
    for row in DRIVER_ERRORS:
        if row.pattern.search(text):
            bus = _BUS.search(text) if row.gpu else None
            return DriverErrorLine(row=row, message=text[:_MESSAGE_MAX],
                                   pci_bus_id=normalize_pci(bus.group(0)) if bus else None)
    return None
