"""GPU facts through NVML, and a recorder and a replay of NVML for nodes without GPUs.

`NvmlProbe` takes any object with pynvml's function names: the real `pynvml` module,
`RecordingNvml` (pynvml, with every call and its result written down), or `ReplayNvml`
(a recording played back, including its errors and hangs). So the code that runs on a
real GPU node is the code the tests run.

NVML can hang on a failing GPU; the probe runs in an engine thread that is abandoned at
its deadline (see orchestrate/engine.py), so a hang costs the budget and becomes an ERROR.
"""

from __future__ import annotations

import json
import os
import time
import types
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from healthcheck.core.gpu_vocabulary import THROTTLE_REASONS
from healthcheck.parsers.gpu_common import (
    Gpu,
    GpuFacts,
    GpuProcess,
    LostGpu,
    NvLink,
    RemapHistogram,
    normalize_pci,
    throttle_names,
)

RECORDING_FORMAT = "hc.nvml-recording/1"

# NVML constants the probe needs; values are part of NVML's ABI (nvml.h), so a replay
# needs no pynvml to know them.
CORRECTED, UNCORRECTED = 0, 1
VOLATILE, AGGREGATE = 0, 1
TEMPERATURE_GPU = 0
RETIRE_SBE, RETIRE_DBE = 0, 1
NVLINK_REPLAY, NVLINK_RECOVERY, NVLINK_CRC_FLIT, NVLINK_CRC_DATA = 0, 1, 2, 3
NVLINK_MAX_LINKS = 18  # the most any GPU has had (H100 SXM); newer pynvml says 36
ERROR_NOT_SUPPORTED = 3
ERROR_INVALID_ARGUMENT = 2
ERROR_GPU_IS_LOST = 15
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_UNKNOWN = 999

# Errors that mean "this GPU stopped answering", as opposed to "not supported here".
_LOST = {ERROR_GPU_IS_LOST, ERROR_UNKNOWN, 10}  # 10 = NVML_ERROR_TIMEOUT


def _error_name(exc: BaseException) -> str:
    name = type(exc).__name__
    return name if name.startswith("NVMLError_") else f"NVMLError({getattr(exc, 'value', '?')})"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else None


def _histogram(value: Any) -> RemapHistogram | None:
    """NVML's nvmlRowRemapperHistogramValues_t as a RemapHistogram; None unless every level was given."""
    levels = [getattr(value, name, None) for name in ("max", "high", "partial", "low", "none")]
    counts = [v for v in levels if isinstance(v, int) and not isinstance(v, bool)]
    if value is None or len(counts) != len(levels):
        return None
    return RemapHistogram(*counts)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    value = str(value).strip()
    return value or None


class _GpuGone(Exception):
    def __init__(self, error: str) -> None:
        self.error = error


class NvmlProbe:
    """Reads GpuFacts through an NVML binding (pynvml, a recording or a replay)."""

    def __init__(self, nvml: Any, source: str = "nvml") -> None:
        self.nvml = nvml
        self.source = source
        self._nvml_error: type[Exception] = getattr(nvml, "NVMLError", Exception)

    def facts(self, indexes: Iterable[int] | None = None, *, nvlink: bool = True) -> GpuFacts:
        """Every GPU's facts, or only those of `indexes` (the job's GPUs)."""
        nv = self.nvml
        try:
            nv.nvmlInit()
        except self._nvml_error as exc:
            return GpuFacts(source=self.source, init_error=_error_name(exc))
        try:
            wanted = sorted(set(indexes)) if indexes is not None else None
            driver = self._opt(nv.nvmlSystemGetDriverVersion)
            cuda = self._opt(nv.nvmlSystemGetCudaDriverVersion)
            count = nv.nvmlDeviceGetCount()
            gpus: list[Gpu] = []
            lost: list[LostGpu] = []
            for index in range(count):
                if wanted is not None and index not in wanted:
                    continue
                try:
                    gpus.append(self._gpu(index, nvlink=nvlink))
                except _GpuGone as gone:
                    lost.append(LostGpu(pci_bus_id=self._lost_pci(index), index=index, error=gone.error))
            return GpuFacts(
                source=self.source,
                gpus=gpus,
                lost=lost,
                driver_version=_text(driver),
                cuda_version=f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
                scoped_to=wanted,
            )
        finally:
            try:
                nv.nvmlShutdown()
            except self._nvml_error:
                pass

    # ------------------------------------------------------------------ helpers

    def _opt(self, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args), or None where NVML says the query is not supported (or not available).

        An error that means the GPU stopped answering raises _GpuGone instead.
        """
        try:
            return fn(*args)
        except self._nvml_error as exc:
            if getattr(exc, "value", None) in _LOST:
                raise _GpuGone(_error_name(exc)) from None
            return None
        except AttributeError:  # an older pynvml without this function
            return None

    def _lost_pci(self, index: int) -> str | None:
        return None  # without a handle NVML cannot say which bus it was on; Xids will

    def _gpu(self, index: int, *, nvlink: bool) -> Gpu:
        nv = self.nvml
        try:
            h = nv.nvmlDeviceGetHandleByIndex(index)
        except self._nvml_error as exc:
            raise _GpuGone(_error_name(exc)) from None
        opt = self._opt
        pci = opt(nv.nvmlDeviceGetPciInfo, h)
        bus_id = _text(getattr(pci, "busId", None)) if pci is not None else None
        ecc = opt(nv.nvmlDeviceGetEccMode, h)
        mig = opt(nv.nvmlDeviceGetMigMode, h)
        remap = opt(nv.nvmlDeviceGetRemappedRows, h)
        histogram = opt(nv.nvmlDeviceGetRowRemapperHistogram, h)
        utilization = opt(nv.nvmlDeviceGetUtilizationRates, h)
        # renamed in newer drivers; an old driver under a new pynvml lacks the new name
        reasons = opt(nv.nvmlDeviceGetCurrentClocksEventReasons, h)
        if reasons is None:
            reasons = opt(nv.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        mem = opt(nv.nvmlDeviceGetMemoryInfo, h)
        pstate = opt(nv.nvmlDeviceGetPerformanceState, h)
        sbe = opt(nv.nvmlDeviceGetRetiredPages, h, RETIRE_SBE)
        dbe = opt(nv.nvmlDeviceGetRetiredPages, h, RETIRE_DBE)
        pending = opt(nv.nvmlDeviceGetRetiredPagesPendingStatus, h)
        persistence = opt(nv.nvmlDeviceGetPersistenceMode, h)
        return Gpu(
            index=index,
            pci_bus_id=normalize_pci(bus_id) if bus_id else f"nvml-index-{index}",
            name=_text(opt(nv.nvmlDeviceGetName, h)),
            uuid=_text(opt(nv.nvmlDeviceGetUUID, h)),
            serial=_text(opt(nv.nvmlDeviceGetSerial, h)),
            vbios_version=_text(opt(nv.nvmlDeviceGetVbiosVersion, h)),
            persistence_mode=bool(persistence) if persistence is not None else None,
            mig_mode=bool(mig[0]) if mig is not None else None,
            performance_state=f"P{pstate}" if isinstance(pstate, int) and pstate < 32 else None,
            ecc_enabled=bool(ecc[0]) if ecc is not None else None,
            ecc_volatile_corrected=opt(nv.nvmlDeviceGetTotalEccErrors, h, CORRECTED, VOLATILE),
            ecc_volatile_uncorrected=opt(nv.nvmlDeviceGetTotalEccErrors, h, UNCORRECTED, VOLATILE),
            ecc_aggregate_corrected=opt(nv.nvmlDeviceGetTotalEccErrors, h, CORRECTED, AGGREGATE),
            ecc_aggregate_uncorrected=opt(nv.nvmlDeviceGetTotalEccErrors, h, UNCORRECTED, AGGREGATE),
            retired_pages_sbe=len(sbe) if sbe is not None else None,
            retired_pages_dbe=len(dbe) if dbe is not None else None,
            retired_pages_pending=bool(pending) if pending is not None else None,
            remapped_rows_correctable=remap[0] if remap is not None else None,
            remapped_rows_uncorrectable=remap[1] if remap is not None else None,
            remapped_rows_pending=bool(remap[2]) if remap is not None else None,
            remapped_rows_failure=bool(remap[3]) if remap is not None else None,
            remap_histogram=_histogram(histogram),
            temperature_c=opt(nv.nvmlDeviceGetTemperature, h, TEMPERATURE_GPU),
            utilization_gpu_pct=_number(getattr(utilization, "gpu", None)),
            throttle_reasons=throttle_names(reasons) if isinstance(reasons, int) else None,
            pcie_gen_current=opt(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
            pcie_gen_max=opt(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
            pcie_width_current=opt(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
            pcie_width_max=opt(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
            pcie_replays=opt(nv.nvmlDeviceGetPcieReplayCounter, h),
            nvlinks=self._nvlinks(h) if nvlink else None,
            memory_total_mib=int(mem.total) // 2**20 if mem is not None else None,
            memory_used_mib=int(mem.used) // 2**20 if mem is not None else None,
            processes=self._processes(h),
        )

    def _nvlinks(self, h: Any) -> list[NvLink] | None:
        nv = self.nvml
        links: list[NvLink] = []
        for link in range(NVLINK_MAX_LINKS):
            try:
                state = nv.nvmlDeviceGetNvLinkState(h, link)
            except self._nvml_error as exc:
                value = getattr(exc, "value", None)
                if value in _LOST:
                    raise _GpuGone(_error_name(exc)) from None
                # past the last link (or no NVLink at all): NOT_SUPPORTED / INVALID_ARGUMENT
                break
            active = bool(state)
            counters = {}
            if active:
                for name, counter in (
                    ("crc_flit_errors", NVLINK_CRC_FLIT),
                    ("crc_data_errors", NVLINK_CRC_DATA),
                    ("replay_errors", NVLINK_REPLAY),
                    ("recovery_errors", NVLINK_RECOVERY),
                ):
                    counters[name] = self._opt(nv.nvmlDeviceGetNvLinkErrorCounter, h, link, counter)
            links.append(NvLink(link=link, active=active, **counters))
        return links

    def _processes(self, h: Any) -> list[GpuProcess] | None:
        nv = self.nvml
        procs = self._opt(nv.nvmlDeviceGetComputeRunningProcesses, h)
        if procs is None:
            return None
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            name = _text(self._opt(nv.nvmlSystemGetProcessName, p.pid))
            out.append(
                GpuProcess(
                    pid=int(p.pid),
                    name=name,
                    used_memory_mib=int(used) // 2**20 if isinstance(used, int) else None,
                    type="C",
                )
            )
        return out


# --------------------------------------------------------------- record/replay


def _jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    fields = getattr(value, "_fields_", None)
    if fields:  # a ctypes Structure (PciInfo, Memory, ProcessInfo)
        return {"__struct__": {name: _jsonable(getattr(value, name)) for name, *_ in fields}}
    if isinstance(value, types.SimpleNamespace):
        return {"__struct__": {k: _jsonable(v) for k, v in vars(value).items()}}
    return repr(value)


def _from_json(value: Any) -> Any:
    if isinstance(value, dict) and "__struct__" in value:
        return types.SimpleNamespace(**{k: _from_json(v) for k, v in value["__struct__"].items()})
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    return value


def call_key(name: str, args: tuple) -> str:
    return f"{name}({','.join(str(a) for a in args)})"


class _Handle:
    """Stands for an NVML device handle in a recording or replay: 'gpu3'."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __str__(self) -> str:
        return f"gpu{self.index}"


class RecordingNvml:
    """pynvml with every call (and its result or error) written to `self.calls`."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self.NVMLError = nvml.NVMLError
        self.calls: dict[str, Any] = {}
        self._handles: dict[int, Any] = {}

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._nvml, name)
        if not callable(real) or not name.startswith("nvml"):
            return real

        def call(*args: Any) -> Any:
            real_args = tuple(self._handles[a.index] if isinstance(a, _Handle) else a for a in args)
            key = call_key(name, args)
            try:
                result = real(*real_args)
            except self._nvml.NVMLError as exc:
                self.calls[key] = {"error": getattr(exc, "value", ERROR_UNKNOWN)}
                raise
            if name == "nvmlDeviceGetHandleByIndex":
                self._handles[args[0]] = result
                self.calls[key] = {"ok": {"handle": args[0]}}
                return _Handle(args[0])
            self.calls[key] = {"ok": _jsonable(result)}
            return result

        return call

    def recording(self, note: str = "") -> dict[str, Any]:
        return {
            "format": RECORDING_FORMAT,
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "host": os.uname().nodename,  # socket.gethostname(), without importing socket
            "note": note,
            "calls": self.calls,
        }


class ReplayError(Exception):
    """Stands in for pynvml.NVMLError when replaying (same `.value` codes)."""

    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


def _replay_error_class(code: int) -> type:
    try:  # the real exception classes where pynvml is importable, so names match
        import pynvml

        return type(pynvml.NVMLError(code))
    except Exception:
        return ReplayError


class ReplayNvml:
    """A recording played back through pynvml's function names.

    A call missing from the recording answers NOT_SUPPORTED (as NVML does for a query a
    GPU lacks). `hangs` maps a call key to seconds to block first: a hung GPU, replayed.
    """

    def __init__(self, recording: dict[str, Any], source: str = "nvml replay") -> None:
        if recording.get("format") != RECORDING_FORMAT:
            raise ValueError(f"not an NVML recording (format {recording.get('format')!r}, expected {RECORDING_FORMAT})")
        self.calls: dict[str, Any] = recording.get("calls", {})
        self.hangs: dict[str, float] = recording.get("hangs", {})
        self.source = source
        try:
            import pynvml

            self.NVMLError: type = pynvml.NVMLError
        except Exception:
            self.NVMLError = ReplayError

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayNvml:
        return cls(json.loads(Path(path).read_text()), source=f"nvml replay: {path}")

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(*args: Any) -> Any:
            key = call_key(name, args)
            if key in self.hangs:
                time.sleep(float(self.hangs[key]))
            entry = self.calls.get(key)
            if entry is None:
                if name in ("nvmlInit", "nvmlShutdown"):
                    return None
                raise self._error(ERROR_NOT_SUPPORTED)
            if "error" in entry:
                raise self._error(int(entry["error"]))
            value = entry.get("ok")
            if name == "nvmlDeviceGetHandleByIndex":
                return _Handle(int(value["handle"]))
            return _from_json(value)

        return call

    def _error(self, code: int) -> Exception:
        cls = _replay_error_class(code)
        return cls(code) if cls is not ReplayError else ReplayError(code)


def recording_from_facts(facts: GpuFacts, note: str = "") -> dict[str, Any]:
    """The NVML calls that would yield `facts`: turns an `nvidia-smi -q` capture (or a
    scenario written by hand) into a recording the real probe code can replay."""
    calls: dict[str, Any] = {}

    def put(name: str, args: tuple, value: Any) -> None:
        calls[call_key(name, args)] = {"ok": value} if value is not None else {"error": ERROR_NOT_SUPPORTED}

    put("nvmlSystemGetDriverVersion", (), facts.driver_version)
    if facts.cuda_version:
        major, _, minor = facts.cuda_version.partition(".")
        put("nvmlSystemGetCudaDriverVersion", (), int(major) * 1000 + int(minor or 0) * 10)
    every = sorted([(g.index, g) for g in facts.gpus]
                   + [(lost.index, lost) for lost in facts.lost if lost.index is not None],
                   key=lambda t: t[0])
    put("nvmlDeviceGetCount", (), len(every))
    for index, g in every:
        if isinstance(g, LostGpu):
            calls[call_key("nvmlDeviceGetHandleByIndex", (index,))] = {"error": ERROR_GPU_IS_LOST}
            continue
        h = f"gpu{index}"
        calls[call_key("nvmlDeviceGetHandleByIndex", (index,))] = {"ok": {"handle": index}}
        pci = g.pci_bus_id
        put("nvmlDeviceGetPciInfo", (h,), {"__struct__": {"busId": f"0000{pci.upper()}" if len(pci) == 12 else pci}})
        put("nvmlDeviceGetName", (h,), g.name)
        put("nvmlDeviceGetUUID", (h,), g.uuid)
        put("nvmlDeviceGetSerial", (h,), g.serial)
        put("nvmlDeviceGetVbiosVersion", (h,), g.vbios_version)
        put("nvmlDeviceGetPersistenceMode", (h,), None if g.persistence_mode is None else int(g.persistence_mode))
        put("nvmlDeviceGetMigMode", (h,), None if g.mig_mode is None else [int(g.mig_mode), int(g.mig_mode)])
        put("nvmlDeviceGetPerformanceState", (h,), int(g.performance_state[1:]) if g.performance_state else None)
        put("nvmlDeviceGetEccMode", (h,), None if g.ecc_enabled is None else [int(g.ecc_enabled), int(g.ecc_enabled)])
        put("nvmlDeviceGetTotalEccErrors", (h, CORRECTED, VOLATILE), g.ecc_volatile_corrected)
        put("nvmlDeviceGetTotalEccErrors", (h, UNCORRECTED, VOLATILE), g.ecc_volatile_uncorrected)
        put("nvmlDeviceGetTotalEccErrors", (h, CORRECTED, AGGREGATE), g.ecc_aggregate_corrected)
        put("nvmlDeviceGetTotalEccErrors", (h, UNCORRECTED, AGGREGATE), g.ecc_aggregate_uncorrected)
        put("nvmlDeviceGetRetiredPages", (h, RETIRE_SBE),
            None if g.retired_pages_sbe is None else [0] * g.retired_pages_sbe)
        put("nvmlDeviceGetRetiredPages", (h, RETIRE_DBE),
            None if g.retired_pages_dbe is None else [0] * g.retired_pages_dbe)
        put("nvmlDeviceGetRetiredPagesPendingStatus", (h,),
            None if g.retired_pages_pending is None else int(g.retired_pages_pending))
        if g.remapped_rows_pending is not None:
            put("nvmlDeviceGetRemappedRows", (h,),
                [g.remapped_rows_correctable or 0, g.remapped_rows_uncorrectable or 0,
                 int(g.remapped_rows_pending), int(bool(g.remapped_rows_failure))])
        if g.remap_histogram is not None:
            put("nvmlDeviceGetRowRemapperHistogram", (h,), {"__struct__": {
                level: getattr(g.remap_histogram, level) for level in ("max", "high", "partial", "low", "none")}})
        if g.utilization_gpu_pct is not None:
            put("nvmlDeviceGetUtilizationRates", (h,), {"__struct__": {
                "gpu": round(g.utilization_gpu_pct), "memory": round(g.utilization_memory_pct or 0)}})
        put("nvmlDeviceGetTemperature", (h, TEMPERATURE_GPU), g.temperature_c)
        if g.throttle_reasons is not None:
            bits = {name: bit for bit, name in THROTTLE_REASONS.items()}
            put("nvmlDeviceGetCurrentClocksEventReasons", (h,), sum(bits[r] for r in g.throttle_reasons if r in bits))
        put("nvmlDeviceGetCurrPcieLinkGeneration", (h,), g.pcie_gen_current)
        put("nvmlDeviceGetMaxPcieLinkGeneration", (h,), g.pcie_gen_max)
        put("nvmlDeviceGetCurrPcieLinkWidth", (h,), g.pcie_width_current)
        put("nvmlDeviceGetMaxPcieLinkWidth", (h,), g.pcie_width_max)
        put("nvmlDeviceGetPcieReplayCounter", (h,), g.pcie_replays)
        for link in g.nvlinks or []:
            put("nvmlDeviceGetNvLinkState", (h, link.link), int(link.active))
            for name, counter in (("crc_flit_errors", NVLINK_CRC_FLIT), ("crc_data_errors", NVLINK_CRC_DATA),
                                  ("replay_errors", NVLINK_REPLAY), ("recovery_errors", NVLINK_RECOVERY)):
                put("nvmlDeviceGetNvLinkErrorCounter", (h, link.link, counter), getattr(link, name))
        if g.memory_total_mib is not None:
            put("nvmlDeviceGetMemoryInfo", (h,), {"__struct__": {
                "total": g.memory_total_mib * 2**20, "used": (g.memory_used_mib or 0) * 2**20,
                "free": (g.memory_total_mib - (g.memory_used_mib or 0)) * 2**20}})
        if g.processes is not None:
            put("nvmlDeviceGetComputeRunningProcesses", (h,), [
                {"__struct__": {"pid": p.pid,
                                "usedGpuMemory": None if p.used_memory_mib is None else p.used_memory_mib * 2**20}}
                for p in g.processes])
            for p in g.processes:
                put("nvmlSystemGetProcessName", (p.pid,), p.name)
    return {"format": RECORDING_FORMAT, "recorded_at": None, "host": None, "note": note, "calls": calls}
