"""Labelled node scenarios from real captures: healthy nodes of several kinds and nodes with
each fault family, each with its truth (the finding IDs and statuses hc should give, and so
whether it should drain) and a note saying where its captures come from and what, if
anything, was changed in them to make the fault.

Three ways a scenario reaches hc (`how`):

- `local`: the real `hc node --local` command in a subprocess, its GPUs an NVML recording
  replayed through the real NVML probe (HC_NVML_REPLAY), its kernel log a file the fabric's
  `gpu.xid` reads (as tests/unit/checks/test_gpu_scenarios.py does). `hc node --local` reads
  /sys and /proc of the machine it runs on, with no knob to point it elsewhere, so these
  scenarios judge the GPU checks only.
- `agentless`: the engine (`run_checks`) over the ssh transport's real providers, their
  tools stand-ins on PATH that print real captures: `nvidia-smi -q`, `ibstat`, `perfquery
  -x`, `ip -j -d link`, `dmesg` (as tests/unit/orchestrate/test_agentless.py does): the
  same parsers and checks as `hc node NODE` over SSH, every check family of a node at once.
- `deep`: the engine over the local transport with tests/standins/nccl-tests on the fabric's
  `bandwidth.nccl_tests.bin_dir` replaying real nccl-tests captures (as
  tests/unit/checks/test_bw_node.py does): `bw.nccl`.

Derived variants change only the values that make the fault, from a healthy real capture
(as tests/fixtures/nvml/make_recordings.py and the history tests do); each says so in its note.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS = FIXTURES / "corpus"
NVML = FIXTURES / "nvml"
KERNEL_LOG = FIXTURES / "kernel-log"
FIELD = FIXTURES / "field"

# a kernel log with no NVIDIA line (an empty one would be a log that was not read)
CLEAN_KERNEL_LOG = ("[    0.000000] Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org)\n"
                    "[    0.000000] Command line: BOOT_IMAGE=/boot/vmlinuz-6.1.0-18-amd64 ro quiet\n")

HEALTHY = "healthy"


@dataclass(frozen=True)
class Scenario:
    """One node: its captures, how hc is run on them, and the truth."""

    name: str
    family: str  # HEALTHY, or the fault family ("xid", "ecc", "ib port", ...)
    kind: str  # the node ("H100 8-GPU", "A100 IB", "CPU-only", ...)
    how: str  # local | agentless | deep
    note: str
    fabric: str = "h100-ndr400"  # the shipped fabric it extends
    fabric_extra: str = ""  # YAML appended to the scenario's fabric (keys of its own)
    checks: tuple[str, ...] = ("gpu",)
    tier: str = "standard"
    nvml: str | None = None  # local: an NVML recording's JSON text
    smi: str | None = None  # agentless: `nvidia-smi -q` text (None: nvidia-smi not installed)
    kernel_log: str = CLEAN_KERNEL_LOG
    ibstat: str | None = None  # agentless: `ibstat` text (None: no HCA, ibstat prints nothing)
    perfquery: dict[str, str] = field(default_factory=dict)  # CA (or "*") -> `perfquery -x` text
    ip_link: str | None = None  # agentless: `ip -j -d link show` JSON
    nccl: str | None = None  # deep: the nccl-tests stand-in's scenario
    expect: tuple[tuple[str, str], ...] = ()  # (finding ID, status) hc should give; () = healthy
    check_family: str = ""  # the check family of the fault (gpu, ib, net, bw), from expect

    @property
    def healthy(self) -> bool:
        return self.family == HEALTHY

    @property
    def drains(self) -> bool:
        """Whether the truth is a FAIL (hc's drain), not only a WARN."""
        return any(status == "FAIL" for _, status in self.expect)

    @property
    def families(self) -> tuple[str, ...]:
        """The check families this scenario judges (a healthy node counts in each)."""
        if not self.healthy:
            return (self.expect[0][0].split(".")[0],)
        return tuple(sorted({c.split(".")[0] for c in self.checks}))


# ------------------------------------------------------------------ capture edits


def read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


@cache
def recordings() -> Any:
    """tests/fixtures/nvml/make_recordings.py as a module: its real 8x H100 base and `change`."""
    spec = importlib.util.spec_from_file_location("make_recordings", NVML / "make_recordings.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def healthy_h100() -> Any:
    """make_recordings' healthy node: the 535.161.08 capture, idle, 18 NVLinks a GPU."""
    mod = recordings()
    real = mod.base_h100()
    return mod.replace(real, gpus=[mod.replace(g, throttle_reasons=["gpu_idle"]) for g in real.gpus])


def derived_recording(note: str, index: int, **fields: Any) -> str:
    """The healthy 8x H100 recording with GPU `index`'s fields changed."""
    from healthcheck.probes.nvml import recording_from_facts

    mod = recordings()
    return mod.render(recording_from_facts(mod.change(healthy_h100(), index, **fields), note))


def committed_recording(name: str) -> str:
    return read(NVML / f"{name}.json")


def ibstat_port(text: str, ca: str, **fields: str) -> str:
    """ibstat text with CA's port lines changed ("State", "Physical state", "Rate")."""
    head = f"CA '{ca}'\n"
    start = text.index(head)
    end = text.find("CA '", start + len(head))
    block = text[start:end if end >= 0 else len(text)]
    for name, value in fields.items():
        block, n = re.subn(rf"(\t\t{re.escape(name)}: ).*", lambda m, v=value: m.group(1) + v, block, count=1)
        assert n == 1, (ca, name)
    return text[:start] + block + (text[end:] if end >= 0 else "")


def ibstat_without(text: str, ca: str) -> str:
    """ibstat text with CA's whole block gone (the HCA not seen)."""
    head = f"CA '{ca}'\n"
    start = text.index(head)
    end = text.find("CA '", start + len(head))
    return text[:start] + (text[end:] if end >= 0 else "")


def perfquery_set(text: str, **counters: int) -> str:
    """perfquery -x text with counters ("SymbolErrorCounter") set to new values."""
    for name, value in counters.items():
        text, n = re.subn(rf"^({name}:\.+)\d+$", lambda m, v=value: f"{m.group(1)}{v}", text, count=1, flags=re.M)
        assert n == 1, name
    return text


def ip_link_set(text: str, ifname: str, **fields: Any) -> str:
    """ip -j link JSON with one interface's fields changed (mtu, operstate, flags)."""
    links = json.loads(text)
    (link,) = [x for x in links if x["ifname"] == ifname]
    link.update(fields)
    return json.dumps(links)


# ------------------------------------------------------------------ the set


H100_SMI = CORPUS / "nvidia-smi-q/h100-8gpu-driver-535.183.01.txt"
H100_SMI_THROTTLED = CORPUS / "nvidia-smi-q/h100-8gpu-driver-535.161.08.txt"
H100_IBSTAT = CORPUS / "ibstat/h100-ib-some-down-disabled.txt"
A100_IBSTAT = CORPUS / "ibstat/a100-ib-hdr200-all-active.txt"
CLEAN_PERFQUERY = CORPUS / "perfquery/hca-extended-capmask-5a00.txt"
IPOIB_8 = CORPUS / "ip-json-link/ipoib-8x-mtu2044-up-filtered.txt"
# the H100 fabric's IPoIB at the 2K IB MTU (the fabric file's comment: sites that keep it use 2044)
IPOIB_2044 = "net:\n  interfaces:\n    \"ib*\": {mtu: 2044, count: 8}\n"
NODE = ("gpu", "ib", "net")


def local_gpu(name: str, family: str, note: str, nvml: str, expect: tuple = (), *, tier: str = "standard",
              kernel_log: str = CLEAN_KERNEL_LOG, fabric: str = "h100-ndr400", kind: str = "H100 8-GPU") -> Scenario:
    return Scenario(name, family, kind, "local", note, nvml=nvml, expect=expect, tier=tier,
                    kernel_log=kernel_log, fabric=fabric)


def xid(name: str, log: Path, expect: tuple, what: str) -> Scenario:
    """The healthy 8x H100 recording with a real kernel log capture holding the Xid."""
    return local_gpu(name, "xid", f"{what}: {log.relative_to(FIXTURES)} (real), GPUs healthy-8xh100",
                     committed_recording("healthy-8xh100"), expect, kernel_log=read(log))


def h100_smi_cool() -> str:
    """nvidia-smi -q 535.183.01 with GPU2's two active clock reasons (HW Power Brake Slowdown,
    SW Thermal Slowdown, 2 C from its slowdown limit under load) set Not Active: the only change."""
    text = read(H100_SMI)
    gpu2 = text.index("GPU 00000000:75:00.0")
    end = text.index("GPU 00000000:86:00.0")
    block = text[gpu2:end]
    for reason in ("HW Power Brake Slowdown", "SW Thermal Slowdown"):
        block, n = re.subn(rf"({reason} +: )Active", r"\1Not Active", block)
        assert n == 1, reason
    return text[:gpu2] + block + text[end:]


def h100_node(name: str, family: str, note: str, expect: tuple = (), **captures: Any) -> Scenario:
    """The agentless H100 node: every capture healthy unless `captures` replaces one."""
    base: dict[str, Any] = {"smi": h100_smi_cool(), "ibstat": read(H100_IBSTAT),
                            "perfquery": {"*": read(CLEAN_PERFQUERY)}, "ip_link": read(IPOIB_8)}
    base.update(captures)
    return Scenario(name, family, "H100 node", "agentless", note, fabric_extra=IPOIB_2044, checks=NODE,
                    expect=expect, **base)


def a100_ib(name: str, family: str, note: str, expect: tuple = (), **captures: Any) -> Scenario:
    """The agentless A100 HDR node's fabric side (no 8-GPU A100 `nvidia-smi -q` capture is held)."""
    base: dict[str, Any] = {"ibstat": read(A100_IBSTAT), "perfquery": {"*": read(CLEAN_PERFQUERY)},
                            "ip_link": read(IPOIB_8)}
    base.update(captures)
    return Scenario(name, family, "A100 IB", "agentless", note, fabric="a100-hdr200", checks=("ib", "net"),
                    expect=expect, **base)


def healthy_set() -> list[Scenario]:
    return [
        local_gpu("h100-8gpu-nvml", HEALTHY, "healthy-8xh100.json: the 535.161.08 capture, idle (its real HW "
                  "slowdown cleared), 18 NVLinks each from the H100 nvlink capture", committed_recording("healthy-8xh100")),
        h100_node("h100-node", HEALTHY, "nvidia-smi -q 535.183.01 (8x H100) with GPU2's power brake and thermal "
                  "slowdown set Not Active (derived; as captured it is the clocks scenario h100-535-as-captured), "
                  "ibstat h100-ib-some-down-disabled (8 CX-7 NDR Active, frontend ports down), perfquery -x "
                  "clean HCA port, 8 IPoIB at 2044: real, unchanged"),
        h100_node("h100-frontend-port-errors", HEALTHY, "derived: as h100-node, with the MT4125 Ethernet frontend "
                  "port mlx5_7 (not a compute HCA of the fabric: ib.hca_types) at LinkDownedCounter 12 and "
                  "SymbolErrorCounter 1500; the compute fabric is clean",
                  perfquery={"*": read(CLEAN_PERFQUERY), "mlx5_7": perfquery_set(
                      read(CLEAN_PERFQUERY), LinkDownedCounter=12, SymbolErrorCounter=1500)}),
        h100_node("h100-node-switch-clean", HEALTHY, "as h100-node with the clean 2-port switch perfquery "
                  "capture on every port (real, unchanged)",
                  perfquery={"*": read(CORPUS / "perfquery/switch-2port-extended-clean.txt")}),
        local_gpu("h100-idle-pcie-gen1", HEALTHY, "derived: GPU0 idle with its PCIe link at gen 1 (power saving, "
                  "back to gen 5 under load)", derived_recording("GPU0: idle at PCIe gen 1", 0, pcie_gen_current=1)),
        local_gpu("h100-boot-log-no-xid", HEALTHY, "kernel log of an HGX H100 booting driver 550.90.07 with its "
                  "NVSwitch probes, no Xid (field/repos/xid, real), GPUs healthy-8xh100",
                  committed_recording("healthy-8xh100"),
                  kernel_log=read(FIELD / "repos/xid/hgx-h100-boot-550.90.07-nvswitch-probe-no-xid.txt")),
        local_gpu("xid43-only", HEALTHY, "derived: the Xid 13/43 flood capture's seven Xid 43 lines only (the "
                  "application was stopped: ignored), GPUs healthy-8xh100", committed_recording("healthy-8xh100"),
                  kernel_log="".join(line for line in read(CORPUS / "xid-dmesg/xid13-43-sm-warp-exception-flood.txt")
                                     .splitlines(keepends=True) if "): 43," in line)),
        local_gpu("user-segfault-in-libnccl", HEALTHY, "kernel log of a user process segfaulting in libnccl (corpus "
                  "xid-dmesg, real): the job's fault, not the node's", committed_recording("healthy-8xh100"),
                  kernel_log=read(CORPUS / "xid-dmesg/libnccl-segfault.txt")),
        *(Scenario(f"{kind.lower().replace(' ', '-')}-smi", HEALTHY, kind, "agentless",
                   f"nvidia-smi -q {path.name} (real, unchanged; generic fabric)", fabric="generic",
                   checks=("gpu",), smi=read(path))
          for kind, path in (("H200 MIG", CORPUS / "nvidia-smi-q/h200-mig-driver-590.48.01.txt"),
                             ("H800 1-GPU", CORPUS / "nvidia-smi-q/h800-1gpu-driver-525.105.17.txt"),
                             ("TITAN V", CORPUS / "nvidia-smi-q/titanv-driver-560.35.03.txt"),
                             ("RTX 4090 8-GPU busy", CORPUS / "nvidia-smi-q/rtx4090-8gpu-driver-535.154.05.txt"))),
        Scenario("h100-1gpu-device-580", HEALTHY, "H100 1-GPU (VM)", "agentless",
                 "nvidia-smi -q 580.159.04 captured by this project on a lent H100 (field/device, real, "
                 "unchanged), generic fabric", fabric="generic", checks=("gpu",),
                 smi=read(FIELD / "device/nvidia-smi-q/h100-q-full-580.159.04.txt")),
        h100_node("h100-ib-bluefield-bond", HEALTHY, "ibstat of an H100 node: 8 CX-7 NDR Active and a BlueField-3 "
                  "Ethernet bond (field/repos, real, unchanged; space-indented), perfquery -x clean",
                  ibstat=read(FIELD / "repos/ibstat/h100-ib-ndr400-space-indented-bond-bluefield.txt")),
        a100_ib("a100-ib-node", HEALTHY, "ibstat a100-ib-hdr200-all-active (8 HDR200 + Ethernet frontend), "
                "perfquery -x clean, 8 IPoIB at 2044 (the A100 fabric's MTU): real, unchanged"),
        Scenario("cpu-only-agentless", HEALTHY, "CPU-only", "agentless",
                 "generic fabric, no nvidia-smi, ibstat prints nothing (no HCA), ip -j -d link of a "
                 "virtio VM (real)", fabric="generic", checks=NODE,
                 ip_link=read(FIXTURES / "ip-link/vm-virtio-json.txt")),
        local_gpu("cpu-only-nvml", HEALTHY, "generic fabric, NVML cannot start (driver-not-loaded.json): "
                  "every GPU check SKIPs", committed_recording("driver-not-loaded"), fabric="generic", kind="CPU-only"),
        Scenario("h100-1gpu-under-load", HEALTHY, "H100 1-GPU", "agentless",
                 "nvidia-smi -q 590.48.01 of one H100 under load (real, unchanged), generic fabric",
                 fabric="generic", checks=("gpu",),
                 smi=read(CORPUS / "nvidia-smi-q/h100-1gpu-driver-590.48.01-load.txt")),
        Scenario("a100-40gb-vm-mig", HEALTHY, "A100 VM (MIG)", "agentless",
                 "nvidia-smi -q -x of an A100-SXM4-40GB in MIG mode, pass-through VM (real, unchanged), "
                 "generic fabric", fabric="generic", checks=("gpu",),
                 smi=read(FIXTURES / "nvidia-smi-q-xml/a100-sxm4-mig.xml")),
        Scenario("bw-slow-once", HEALTHY, "A100 8-GPU", "deep",
                 "nccl-tests stand-in 'slow-then-healthy': half the bandwidth on the first try (derived), the real "
                 "8x A100 capture on the repeat: a shortfall that does not repeat", fabric="generic",
                 checks=("bw.nccl",), tier="deep", nccl="slow-then-healthy"),
        Scenario("bw-a100-8gpu", HEALTHY, "A100 8-GPU", "deep",
                 "nccl-tests all_reduce on 8x A100 (235.26 GB/s at 8G, real) against the A100 floor 228",
                 fabric="generic", checks=("bw.nccl",), tier="deep", nccl="healthy"),
    ]


def gpu_fault_set() -> list[Scenario]:
    rec = derived_recording
    links = healthy_h100().gpus[2].nvlinks
    return [
        xid("xid79-fallen-off-bus", KERNEL_LOG / "journal-short-xid79-sxid.txt",
            (("gpu.E020", "FAIL"), ("gpu.E021", "FAIL")), "Xid 79 and SXid 20034"),
        xid("xid79-crash-dump", KERNEL_LOG / "dmesg-xid79-serial-crash-dump.txt", (("gpu.E020", "FAIL"),),
            "Xid 79 with the driver's crash dump"),
        xid("xid48-dbe", KERNEL_LOG / "journal-short-iso-xid48-63-94.txt",
            (("gpu.E020", "FAIL"), ("gpu.E020", "WARN")), "Xid 48 (FAIL), 63 and 94 (WARN)"),
        xid("xid63-row-remap", CORPUS / "xid-dmesg/xid63-row-remapper-oneline.txt", (("gpu.E020", "WARN"),),
            "Xid 63 alone (row remap recorded: WARN)"),
        xid("xid64-remap-failed", FIELD / "unseen/xid/xid64-row-remapper-all-rows-remapped-dmesg-line.txt",
            (("gpu.E020", "FAIL"),), "Xid 64 (all rows of a bank remapped)"),
        xid("xid74-nvlink", FIELD / "unseen/xid/xid74-nvlink-fatal-link14-md-backticks.txt",
            (("gpu.E020", "FAIL"),), "Xid 74 (NVLink fatal on link 14), as pasted with backticks"),
        xid("xid13-app", CORPUS / "xid-dmesg/xid13-43-sm-warp-exception-flood.txt", (("gpu.E020", "WARN"),),
            "Xid 13 flood and 43 (application)"),
        xid("xid31-app", FIELD / "unseen/xid/xid31-mmu-fault-three-lines-no-stamp.txt", (("gpu.E020", "WARN"),),
            "Xid 31 MMU fault (application)"),
        xid("xid94-contained", KERNEL_LOG / "journal-short-iso-precise-cet-xid94.txt", (("gpu.E020", "WARN"),),
            "Xid 94 alone (contained ECC error: the application was stopped)"),
        xid("xid43-31-94", FIELD / "issues-4/xid/dmesg-T-grep-nvrm-535-xid-43-31-94-gpu-uuids.txt",
            (("gpu.E020", "WARN"),), "Xids 43, 31 and 94 from dmesg -T | grep NVRM"),
        xid("b200-fallen-off-bus", FIELD / "repos/xid/b200-fallen-off-bus-at-probe-multiline-nvrm-journal.txt",
            (("gpu.E020", "FAIL"),), "a B200 fallen off the bus at probe, the NVRM message over several lines"),
        xid("rminitadapter-failed", KERNEL_LOG / "dmesg-rminitadapter-failed-gsp.txt", (("gpu.E022", "FAIL"),),
            "RmInitAdapter failed (GSP): a GPU the driver could not bring up"),
        xid("xid119-gsp", KERNEL_LOG / "syslog-kernel-uptime-xid119.txt", (("gpu.E020", "FAIL"),),
            "Xid 119 GSP RPC timeout"),
        xid("fallen-off-bus-no-xid", KERNEL_LOG / "syslog-probe-fallen-off-bus-three-lines.txt",
            (("gpu.E020", "FAIL"),), "a GPU fallen off the bus at probe, no Xid number (judged as Xid 79)"),
        local_gpu("ecc-uncorrected", "ecc", "ecc-errors.json: GPU3 2 uncorrected, 1500 corrected (derived)",
                  committed_recording("ecc-errors"), (("gpu.E010", "FAIL"), ("gpu.E011", "WARN"))),
        Scenario("a10-remap-pending-real", "remap", "A10 1-GPU", "agentless", "nvidia-smi -q 535.129.03 of an A10 "
                 "as captured (real; its source calls it healthy): 4 uncorrectable remapped rows, a remap Pending",
                 fabric="generic", checks=("gpu",), smi=read(CORPUS / "nvidia-smi-q/a10-1gpu-driver-535.129.03.txt"),
                 expect=(("gpu.E013", "FAIL"),)),
        local_gpu("ecc-corrected-only", "ecc", "derived: GPU4 1500 corrected volatile ECC, 0 uncorrected",
                  rec("GPU4: 1500 corrected volatile ECC errors", 4, ecc_volatile_corrected=1500),
                  (("gpu.E011", "WARN"),)),
        local_gpu("retired-pages-pending", "ecc", "derived: GPU6 a page retirement pending",
                  rec("GPU6: page retirement pending", 6, retired_pages_pending=True), (("gpu.E012", "FAIL"),)),
        local_gpu("row-remap-pending", "remap", "row-remap-pending.json: GPU3 uncorrectable remap pending (derived)",
                  committed_recording("row-remap-pending"), (("gpu.E013", "FAIL"),)),
        local_gpu("row-remap-failed", "remap", "derived: GPU1 row remapping failed",
                  rec("GPU1: row remapping failed", 1, remapped_rows_failure=True), (("gpu.E014", "FAIL"),)),
        local_gpu("nvlink-down", "nvlink", "nvlink-down.json: GPU2 NVLink 7 down (derived)",
                  committed_recording("nvlink-down"), (("gpu.E050", "FAIL"),)),
        local_gpu("nvlink-recovery-errors", "nvlink", "derived: GPU2 NVLink 3 with 12 recovery errors",
                  rec("GPU2: NVLink 3 recovery errors 12", 2,
                      nvlinks=[recordings().replace(x, recovery_errors=12) if x.link == 3 else x for x in links]),
                  (("gpu.E051", "FAIL"),)),
        local_gpu("pcie-downtrained", "pcie", "pcie-downtrained.json: GPU5 x16 trained x8 (derived)",
                  committed_recording("pcie-downtrained"), (("gpu.E040", "FAIL"),)),
        local_gpu("pcie-gen-low", "pcie", "derived: GPU0 PCIe at gen 3 of 5 and not idle (its idle reason cleared)",
                  rec("GPU0: PCIe gen 3 of 5, busy", 0, pcie_gen_current=3, throttle_reasons=[]),
                  (("gpu.E041", "FAIL"),)),
        local_gpu("clocks-throttled", "clocks", "throttled-8xh100.json: the 535.161.08 capture as captured, "
                  "HW slowdown and power brake on every GPU (real)", committed_recording("throttled-8xh100"),
                  (("gpu.E030", "FAIL"),)),
        h100_node("h100-535-as-captured", "clocks", "nvidia-smi -q 535.183.01 as captured (real; its source calls "
                  "it healthy): GPU2 under load with HW Power Brake Slowdown and SW Thermal Slowdown Active",
                  (("gpu.E030", "FAIL"), ("gpu.E030", "WARN")), smi=read(H100_SMI)),
        local_gpu("gpu-too-hot", "clocks", "derived: GPU7 at 93 C (the fabric's limit 85)",
                  rec("GPU7: 93 C", 7, temperature_c=93.0), (("gpu.E031", "FAIL"),)),
        local_gpu("gpu-missing", "gpu presence", "gpu-missing-7xh100.json: GPU5 gone, 7 listed (derived)",
                  committed_recording("gpu-missing-7xh100"), (("gpu.E002", "FAIL"),)),
        local_gpu("gpu-lost", "gpu presence", "gpu-lost.json: GPU6 answers GPU_IS_LOST (derived)",
                  committed_recording("gpu-lost"), (("gpu.E004", "FAIL"),)),
        local_gpu("driver-not-loaded", "gpu presence", "driver-not-loaded.json: NVML cannot start on an H100 node",
                  committed_recording("driver-not-loaded"), (("gpu.E001", "FAIL"),)),
        local_gpu("leftover-process", "processes", "leftover-process.json: python3 holds 30000 MiB on GPU1 "
                  "after the job (derived), the deep tier (no job on the node)", committed_recording("leftover-process"),
                  (("gpu.E070", "FAIL"),), tier="deep"),
        local_gpu("leaked-memory", "processes", "derived: GPU4 holds 20000 MiB with no process, the deep tier",
                  rec("GPU4: 20000 MiB used, no process", 4, memory_used_mib=20000, processes=[]),
                  (("gpu.E071", "FAIL"),), tier="deep"),
        h100_node("throttled-agentless", "clocks", "nvidia-smi -q 535.161.08 as captured (HW slowdown and power "
                  "brake on every GPU, real) on the otherwise healthy H100 node", (("gpu.E030", "FAIL"),),
                  smi=read(H100_SMI_THROTTLED)),
    ]


def fabric_fault_set() -> list[Scenario]:
    ib = read(H100_IBSTAT)
    clean = read(CLEAN_PERFQUERY)
    ipoib = read(IPOIB_8)
    return [
        h100_node("ib-port-down", "ib port", "derived: mlx5_0 Down/Polling in h100-ib-some-down-disabled",
                  (("ib.E002", "FAIL"),), ibstat=ibstat_port(ib, "mlx5_0", State="Down", **{"Physical state": "Polling"})),
        Scenario("roce-port-down", "ib port", "H100 RoCE", "agentless",
                 "ibstat h100-roce-down-polling (real: two ports Down/Polling) on the RoCE fabric",
                 fabric="h100-roce400", checks=("ib.port_state",),
                 ibstat=read(CORPUS / "ibstat/h100-roce-down-polling.txt"), expect=(("ib.E002", "FAIL"),)),
        Scenario("roce-2-ports-disabled", "ib port", "H100 RoCE", "agentless",
                 "ibstat of an H100 RoCE node, 2 CX-7 ports Down/Disabled (field/repos, real) on the RoCE fabric",
                 fabric="h100-roce400", checks=("ib.port_state",),
                 ibstat=read(FIELD / "repos/ibstat/h100-roce-2-ports-down-disabled.txt"), expect=(("ib.E002", "FAIL"),)),
        Scenario("cx7-down-polling", "ib port", "one CX-7", "agentless",
                 "ibstat of one CX-7 Down/Polling at rate 10 (field/issues-3, real; four-space indent, GUIDs "
                 "elided), generic fabric", fabric="generic", checks=("ib.port_state",),
                 ibstat=read(FIELD / "issues-3/ibstat/cx7-down-polling-rate10-guids-elided-4-space.txt"),
                 expect=(("ib.E002", "FAIL"),)),
        Scenario("sriov-vf-down-linkup", "ib port", "SR-IOV VF (pod)", "agentless",
                 "ibstat of an SR-IOV VF in a pod: State Down, Physical state LinkUp, lid 65535 (field/issues-5, "
                 "real, its shell prompt line included), generic fabric", fabric="generic", checks=("ib.port_state",),
                 ibstat=read(FIELD / "issues-5/ibstat/pod-prompt-ibstat-one-ca-down-linkup-lid-65535.txt"),
                 expect=(("ib.E002", "FAIL"),)),
        h100_node("ib-link-not-up", "ib port", "derived: mlx5_4 Active but LinkErrorRecovery",
                  (("ib.E003", "FAIL"),), ibstat=ibstat_port(ib, "mlx5_4", **{"Physical state": "LinkErrorRecovery"})),
        h100_node("ib-hca-missing", "ib port", "derived: mlx5_0's block gone from ibstat (7 CX-7 seen)",
                  (("ib.E001", "FAIL"),), ibstat=ibstat_without(ib, "mlx5_0")),
        h100_node("ib-rate-200", "ib degraded", "derived: mlx5_3 Rate 400 -> 200 (half the lanes or speed)",
                  (("ib.E004", "FAIL"),), ibstat=ibstat_port(ib, "mlx5_3", Rate="200")),
        a100_ib("ib-rate-100-a100", "ib degraded", "derived: mlx5_4 Rate 200 -> 100 on the A100 HDR node",
                (("ib.E004", "FAIL"),), ibstat=ibstat_port(read(A100_IBSTAT), "mlx5_4", Rate="100")),
        h100_node("ib-symbol-errors", "ib counters", "derived: mlx5_0 SymbolErrorCounter 0 -> 1500",
                  (("ib.E005", "FAIL"),), perfquery={"*": clean, "mlx5_0": perfquery_set(clean, SymbolErrorCounter=1500)}),
        h100_node("ib-link-downed", "ib counters", "derived: mlx5_5 LinkDownedCounter 0 -> 12",
                  (("ib.E005", "FAIL"),), perfquery={"*": clean, "mlx5_5": perfquery_set(clean, LinkDownedCounter=12)}),
        h100_node("ib-link-recovery-warn", "ib counters", "derived: mlx5_6 LinkErrorRecoveryCounter 0 -> 7",
                  (("ib.E005", "WARN"),),
                  perfquery={"*": clean, "mlx5_6": perfquery_set(clean, LinkErrorRecoveryCounter=7)}),
        h100_node("ib-xmit-discards", "ib counters", "perfquery switch-port-xmitdiscards-linkdowned (real: 20046 "
                  "discards, link_downed 1) on mlx5_9", (("ib.E005", "WARN"),),
                  perfquery={"*": clean, "mlx5_9": read(CORPUS / "perfquery/switch-port-xmitdiscards-linkdowned.txt")}),
        h100_node("mtu-mismatch", "mtu", "derived: ibp75s0's MTU 2044 -> 4092 (the others 2044)",
                  (("net.E001", "FAIL"),), ip_link=ip_link_set(ipoib, "ibp75s0", mtu=4092)),
        h100_node("ipoib-missing", "net interface", "ip -j link ipoib-7of8-missing-interface (real: 7 of 8 IPoIB)",
                  (("net.E003", "FAIL"),), ip_link=read(CORPUS / "ip-json-link/ipoib-7of8-missing-interface.txt")),
        h100_node("ipoib-down", "net interface", "derived: ibp141s0 operstate DOWN, no UP flag",
                  (("net.E004", "FAIL"),),
                  ip_link=ip_link_set(ipoib, "ibp141s0", operstate="DOWN", flags=["BROADCAST", "MULTICAST"])),
        Scenario("bw-slow", "bandwidth", "A100 8-GPU", "deep",
                 "nccl-tests stand-in 'slow': the 8x A100 capture at half the bandwidth (derived), floor 228",
                 fabric="generic", checks=("bw.nccl",), tier="deep", nccl="slow", expect=(("bw.E001", "FAIL"),)),
        Scenario("bw-wrong-results", "bandwidth", "A100 8-GPU", "deep",
                 "nccl-tests stand-in 'wrong': the 8x A100 capture with #wrong on its largest rows (derived)",
                 fabric="generic", checks=("bw.nccl",), tier="deep", nccl="wrong", expect=(("bw.E002", "FAIL"),)),
        Scenario("bw-nccl-failure", "bandwidth", "A100 8-GPU", "deep",
                 "nccl-tests stand-in 'nccl-failure': a real nccl-tests failure (a 2-host RTX 4090 run, NCCL error, exit 3)",
                 fabric="generic", checks=("bw.nccl",), tier="deep", nccl="nccl-failure", expect=(("bw.E004", "FAIL"),)),
    ]


@cache
def scenarios() -> tuple[Scenario, ...]:
    """Every scenario, healthy first."""
    out = [*healthy_set(), *gpu_fault_set(), *fabric_fault_set()]
    names = [s.name for s in out]
    assert len(names) == len(set(names)), "scenario names are unique"
    return tuple(out)


def by_name(name: str) -> Scenario:
    return next(s for s in scenarios() if s.name == name)


# the handful tests/unit/checks/test_node_detector.py runs on every CI run: both ways into hc
# that take seconds, healthy nodes of three kinds (one with a frontend port's errors, which
# ib.counters once drained), and faults of the GPU, IB and net families
CI_SUBSET = ("h100-8gpu-nvml", "h100-node", "h100-frontend-port-errors", "cpu-only-agentless", "xid79-fallen-off-bus",
             "xid13-app", "row-remap-pending", "ib-port-down", "ib-symbol-errors", "mtu-mismatch")
