"""GPU facts on a node reached without hc (agentless, over SSH): `nvidia-smi -q`, with
`--query-gpu` where a -q layout is unknown and a PCI scan where nothing answers.

Loaded only when a run gathers `gpus` over SSH (probes.TRANSPORT_MODULES): a local run,
the prologue's, never imports these parsers.
"""

from __future__ import annotations

from healthcheck.core.errors import ParseError
from healthcheck.core.facts import ProbeContext, ProbeError, provides, timeout_error
from healthcheck.parsers.gpu_common import GpuFacts
from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q
from healthcheck.parsers.nvidia_smi_query import QUERY_FIELDS, parse_nvidia_smi_query
from healthcheck.probes.gpu import NVIDIA_SMI_Q, PCI_SCAN, nothing_answers, parse_pci_scan, with_pci_gpus


@provides("gpus", "ssh", prefetch=lambda ctx: [NVIDIA_SMI_Q, PCI_SCAN])
def gpus_nvidia_smi(ctx: ProbeContext) -> GpuFacts:
    """`nvidia-smi -q` on a node reached without hc: the same facts, from text."""
    facts = _nvidia_smi_facts(ctx)
    return with_pci_gpus(facts, _ssh_pci_gpus(ctx)) if nothing_answers(facts) else facts


def _ssh_pci_gpus(ctx: ProbeContext) -> list[tuple[str, str, str]]:
    result = ctx.runner.run(PCI_SCAN, timeout_s=ctx.timeout_s)
    if not result.ok:
        detail = (result.stderr or result.stdout).strip()[-200:]
        raise ProbeError("failed", f"NVIDIA GPUs cannot be ruled out: the PCI scan failed ({detail or 'no output'})",
                         detail or None)
    return parse_pci_scan(result.stdout)


def _nvidia_smi_facts(ctx: ProbeContext) -> GpuFacts:
    result = ctx.runner.run(NVIDIA_SMI_Q, timeout_s=ctx.timeout_s)
    if result.not_found:
        return GpuFacts(source="nvidia-smi -q", init_error="nvidia-smi not found (no NVIDIA driver installed)")
    if result.timed_out:
        raise timeout_error(result, "nvidia-smi -q (a hung GPU?)", ctx.timeout_s)
    # a driver failure is printed instead of a report, with a non-zero exit: the parser
    # turns it into init_error, which the checks judge
    try:
        return parse_nvidia_smi_q(result.stdout + result.stderr)
    except ParseError as exc:
        # a -q layout this parser does not know: the CSV query has stable field names
        return _query_gpu(ctx, f"nvidia-smi -q: {exc}")


def _query_gpu(ctx: ProbeContext, why: str) -> GpuFacts:
    argv = ("nvidia-smi", f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv")
    result = ctx.runner.run(argv, timeout_s=ctx.timeout_s)
    if not result.ok:
        failed = (result.stderr or result.stdout).strip()[-200:]
        raise ProbeError("unparsable", f"{why}; and --query-gpu failed: {failed}")
    return ctx.parse(parse_nvidia_smi_query, result.stdout, "nvidia-smi --query-gpu")
