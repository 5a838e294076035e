"""Whether a live look took enough samples to call a rank still: judged by the samples
actually taken and the time they span, not by the rate the sampler was asked for.

Asked for 4 samples over 1.5 s, an idle node gives a sample every half second, and a rank
"still for a second" has been seen the same three times. On a loaded node (other jobs
beside it, hc itself niced) py-spy's dumps come late and fewer: two samples 1.3 s apart
that show the same stack are "still for a second" too, though a busy rank's loop or a
healthy rank's next wait at the same line can show the same stack twice. So a rank is
still only when at least MIN_STILL_SAMPLES samples, spanning STILL_S or more, saw it
unchanged; a rank sampled live but fewer times, or over less than STILL_S (motion.py then
has no RankMotion for it), is neither still nor moving: sampling could not tell. Such a
rank is named by no rule that reads the stacks, nor counted as waiting; where nothing
else decides, the diagnosis says it could not tell, with how many samples over how long,
rather than guess.

A job whose ranks have a single sample each (`--samples 1`; a saved dump has none) was
given one look, judged as one look by the rules (stuck.py): there was no sampling to
distrust. One sample of a rank whose peers had more is a look cut short: unsure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from healthcheck.diagnose.findings import JobFinding, job_finding
from healthcheck.diagnose.motion import MIN_STILL_SAMPLES, JobMotion, StackSample
from healthcheck.diagnose.stacks import rank_words


def unsure_ranks(samples: Mapping[int, Sequence[StackSample]], motion: JobMotion | None) -> tuple[int, ...]:
    """Ranks sampled live whose motion the samples cannot tell: no RankMotion (a look
    shorter than STILL_S; or one sample where other ranks had more: its later dumps
    failed, py-spy timing out on a loaded node), or not moving with fewer than
    MIN_STILL_SAMPLES samples since they last changed. Where every rank has one sample,
    that was one look (`--samples 1`): none is unsure."""
    if all(len(s) < 2 for s in samples.values()):
        return ()
    ranks = motion.ranks if motion is not None else {}
    out = []
    for r, s in sorted(samples.items()):
        if not s:
            continue
        m = ranks.get(r)
        if m is None or (not m.moved and m.still_samples < MIN_STILL_SAMPLES):
            out.append(r)
    return tuple(out)


def look_words(samples: Mapping[int, Sequence[StackSample]], ranks: Sequence[int]) -> str:
    """"2 samples over 1.3 s": the fewest samples of those ranks, and the longest span."""
    looks = [samples[r] for r in ranks if samples.get(r)]
    if not looks:
        return "no samples"
    fewest = min(len(s) for s in looks)
    span = max(s[-1].at - s[0].at for s in looks)
    return f"{fewest} sample{'s' if fewest != 1 else ''} over {span:.1f} s"


def could_not_tell(samples: Mapping[int, Sequence[StackSample]], unsure: Sequence[int]) -> JobFinding:
    """The finding that says so (class unknown: no rank is named)."""
    look = look_words(samples, unsure)
    return job_finding(cls="unknown", confidence="low",
                       summary=f"could not tell whether {rank_words(unsure)} {'is' if len(unsure) == 1 else 'are'} "
                               f"stuck or slow: {look} (a loaded node's samples come late and fewer; look again, "
                               f"or give --window and --samples more)")
