"""Tests between nodes judged against each other where the fabric sets no pair floor: the
reference a test is short against, and the threshold a node's best test must be below for
the sweep to call it slow beyond its own noise. Pure.

A node slow with every partner is in 2 of 3 tests at three nodes and in half of them at
four, so the median of the tests would be its own speed. The reference is instead the
median of the tests that involve no suspected node, a node being suspected whose best test
is below `1 - fraction` of the median of every node's best (the nodes' bests stay healthy
while fewer than half the nodes are slow). A test below `1 - fraction` of the reference is
short (`PeerReference.threshold`: the test WARNs, runs again, and a node short with every
partner is a candidate culprit).

Being short by `fraction` with every partner is not evidence enough to drain: on a noisy
fabric, with six tests among four nodes, one node's three tests are the three lowest about
one sweep in five by chance. A node is slow beyond the sweep's own noise only where its
best test is below `noise_threshold = noise_reference x min(1 - fraction, max(GROSS,
exp(-z x s)))`:

- `s` is the spread the sweep measured: the standard deviation of the logarithms of the
  figures (bandwidth noise is a ratio), pooled over the tests with no suspected node and,
  for each suspected node, its own tests with partners not suspected (around their own
  mean: a slow node's tests vary as much as healthy ones, only lower);
- `z` is the one-sided Student-t quantile for `PEER_ALPHA / nodes` with the pooled degrees
  of freedom, times `sqrt(1 + 1/c)` (c tests gave the reference): a bound a healthy test
  crosses about once in a thousand sweeps whatever the number of nodes, much wider where few
  tests measured the spread;
- with fewer than `MIN_DF` degrees of freedom (three nodes; four with two suspected) the
  spread is not measured, and only a quarter of the reference or less (`GROSS`) counts; a
  test that far below counts whatever the spread (the bound never goes lower), so a node an
  order of magnitude slower is named however noisy its peers.

The suspected nodes whose best is not below `noise_threshold` are given back to the
reference (their tests change the reference and the spread) and it is computed again,
until every node still suspected is below it (`PeerReference.suspected`).
`localize` names a node short with every partner the culprit only where its best is below
`noise_threshold`, and says the others are slower within the noise (bw.E109, no drain).
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence

import msgspec

PEER_ALPHA = 1e-3  # the chance, per sweep, that a healthy test falls below the noise bound
GROSS = 0.25  # a test this far below the reference (or further) is short whatever the spread
MIN_DF = 2  # fewer degrees of freedom than this: the spread is not measured


class PeerReference(msgspec.Struct, frozen=True):
    """What tests of one kind are judged against where the fabric sets no floor."""

    threshold: float  # below this a test is short: (1 - fraction) x reference
    reference: float  # the median of the tests with no suspected node
    # a node whose best test is below this is slow beyond the sweep's own spread (a culprit can be named)
    noise_threshold: float
    noise_reference: float  # the median of the tests with no node still suspected at that threshold
    spread: float | None  # the pooled log standard deviation there; None: too few tests to measure it
    suspected: tuple[str, ...] = ()  # the nodes whose best is below noise_threshold


Figures = list[tuple[tuple[str, ...], float]]


def peer_reference(tests: Iterable[tuple[Sequence[str], float]], fraction: float) -> PeerReference | None:
    """Tests (members, figure) judged against each other; None where fewer than three nodes
    or two tests: nothing to compare a test with."""
    got: Figures = [(tuple(dict.fromkeys(members)), v) for members, v in tests if math.isfinite(v)]
    best: dict[str, float] = {}
    for members, v in got:
        for m in members:
            best[m] = max(best.get(m, -math.inf), v)
    if len(got) < 2 or len(best) < 3:
        return None
    keep = 1 - fraction
    typical_best = statistics.median(best.values())
    suspected = {m for m, v in best.items() if v < keep * typical_best}
    clean = [v for members, v in got if not suspected.intersection(members)]
    reference = statistics.median(clean) if clean else typical_best
    while True:
        noise_reference, spread, factor = _noise_bound(got, suspected, len(best), typical_best)
        noise_threshold = noise_reference * min(keep, factor)
        # the suspected nodes not below it go back to the reference (their tests join it and
        # the spread); the set only shrinks, so this ends
        cleared = {m for m in suspected if best[m] >= noise_threshold}
        if not cleared:
            break
        suspected -= cleared
    return PeerReference(threshold=keep * reference, reference=reference, noise_threshold=noise_threshold,
                         noise_reference=noise_reference, spread=spread, suspected=tuple(sorted(suspected)))


def peer_threshold(tests: Iterable[tuple[Sequence[str], float]], fraction: float) -> float | None:
    """The figure below which a test (members, figure) is short (`peer_reference`)."""
    ref = peer_reference(tests, fraction)
    return ref.threshold if ref is not None else None


def _noise_bound(got: Figures, suspected: set[str], nodes: int, typical_best: float
                 ) -> tuple[float, float | None, float]:
    """The reference with these nodes suspected, the pooled spread (None: not measured) and
    the factor of the reference below which a test is beyond it: exp(-z x spread), never
    below GROSS, and GROSS where the spread is not measured."""
    clean: list[float] = []
    own: dict[str, list[float]] = {}  # each suspected node's tests with partners not suspected
    for members, v in got:
        mine = [m for m in members if m in suspected]
        if not mine:
            clean.append(v)
        elif len(mine) == 1:
            own.setdefault(mine[0], []).append(v)
    reference = statistics.median(clean) if clean else typical_best
    spread, df = _pooled_log_sd([clean, *own.values()])
    if spread is None or not clean:
        return reference, spread, GROSS
    z = t_quantile(PEER_ALPHA / nodes, df) * math.sqrt(1 + 1 / len(clean))
    return reference, spread, max(GROSS, math.exp(-z * spread))


def _pooled_log_sd(groups: list[list[float]]) -> tuple[float | None, int]:
    """The standard deviation of the figures' logarithms, each group around its own mean, and
    its degrees of freedom; None below MIN_DF (a figure of 0 or less has no logarithm and is
    left out: it is beyond any spread)."""
    ss, df = 0.0, 0
    for group in groups:
        logs = [math.log(v) for v in group if v > 0]
        if len(logs) < 2:
            continue
        mean = math.fsum(logs) / len(logs)
        ss += math.fsum((x - mean) ** 2 for x in logs)
        df += len(logs) - 1
    if df < MIN_DF:
        return None, df
    return math.sqrt(ss / df), df


# ------------------------------------------------------------------------ Student's t


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """t with P(T > t) = p (0 < p < 0.5) for Student's t with df degrees of freedom: bisection
    on the tail, which falls monotonically."""
    lo, hi = 0.0, 1.0
    while _t_tail(hi, df) > p:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        if _t_tail(mid, df) > p:
            lo = mid
        else:
            hi = mid
    return hi


def _t_tail(t: float, df: int) -> float:
    """P(T > t) for t >= 0: half the regularized incomplete beta I_x(df/2, 1/2), x = df/(df + t^2)."""
    return 0.5 * _beta_regularized(df / 2, 0.5, df / (df + t * t))


def _beta_regularized(a: float, b: float, x: float) -> float:
    """I_x(a, b) by its continued fraction (Lentz), on the side where it converges fast."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1 - front * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 3e-14:
            break
    return h
