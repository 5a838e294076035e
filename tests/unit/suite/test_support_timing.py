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


def _linear_held_off_the_cpu(n: int) -> int:
    """Linear work, and on the large input a wait with no CPU used: what a worker on CI's
    shared cores sees when other processes hold the CPU during one measurement."""
    import time

    if n >= 20_000:
        time.sleep(0.3)
    return _linear(n)


def test_time_other_processes_held_the_cpu_is_not_the_functions():
    assert_linear(_linear_held_off_the_cpu, 2_000, 20_000, slack=0.0)
