"""`hc gpu record`: write down what NVML says on this node, for replay elsewhere."""

from __future__ import annotations

import json
from pathlib import Path

import click

from healthcheck.core.errors import ExitCode, HcError
from healthcheck.probes.nvml import NvmlProbe, RecordingNvml
from healthcheck.report.jsonio import write_atomic


class NothingToRecord(HcError):
    """NVML cannot start or lists no GPU: exit 3, like a check that could not run."""

    exit_code = ExitCode.ERROR


@click.group()
def gpu() -> None:
    """NVML recordings: capture a node's GPUs to replay them where there are none."""


@gpu.command()
@click.option("--output", "-o", type=click.Path(path_type=Path, dir_okay=False), help="Write here (default: stdout).")
@click.option("--note", default="", help="What this recording shows (e.g. 'GPU3 row remap pending').")
def record(output: Path | None, note: str) -> int:
    """Query every GPU through NVML as the checks do and write each call and its answer.

    Where NVML cannot start or lists no GPU there is nothing to record: exit 3, one line.

    Replay a recording with HC_NVML_REPLAY=FILE: the GPU checks then run the same NVML
    code against the recorded answers (how hc's tests cover GPU failures without GPUs).
    """

    try:
        import pynvml
    except ImportError:
        raise HcError("pynvml (nvidia-ml-py) is not installed") from None
    recorder = RecordingNvml(pynvml)
    facts = NvmlProbe(recorder).facts()
    if facts.init_error or (not facts.gpus and not facts.lost):
        # a recording of no GPU records nothing: a capture script must not mistake it
        # for one (exit 3, as a check that could not run)
        why = f"NVML could not start ({facts.init_error})" if facts.init_error else "NVML lists no GPU"
        raise NothingToRecord(f"nothing to record: {why}; no recording written")
    data = (json.dumps(recorder.recording(note), indent=1, sort_keys=True) + "\n").encode()
    if output is None:
        click.echo(data.decode(), nl=False)
    else:
        write_atomic(output, data)
        what = f"{len(facts.gpus)} GPUs, {len(facts.lost)} lost"
        click.echo(f"recorded {len(recorder.calls)} NVML calls ({what}) to {output}", err=True)
    return 0
