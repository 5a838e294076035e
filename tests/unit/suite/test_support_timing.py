"""The linear-time helper every parser test leans on tells linear from quadratic."""

import pytest
from support import assert_linear


def _linear(n: int) -> int:
    return sum(i for i in range(n * 100))


def _quadratic(n: int) -> int:
    return sum(i ^ j for i in range(n) for j in range(n))


def test_linear_work_passes():
    assert_linear(_linear, 2_000, 20_000, slack=0.0)


def test_quadratic_work_fails_every_attempt():
    with pytest.raises(AssertionError, match=r"not linear \('pairs'\): seconds for the 1x and 10x inputs"):
        assert_linear(_quadratic, 150, 1_500, slack=0.0, what="pairs")
