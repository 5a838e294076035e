"""The preflight's straggler test picks a backend the job's own layout can run: NCCL only
where each local rank can have a GPU of its own (jobwrap/straggler.preflight_backend).

Seen on an H100 (tests/gpu/device-check.sh): `hc run -- torchrun --nproc-per-node 3` of a gloo
job on one GPU; the test chose NCCL for all three ranks on that GPU, NCCL refused ("invalid
usage", a duplicate GPU), and hc run stopped with exit 3 before the job ever started."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from healthcheck.jobwrap.straggler import local_world_size, preflight_backend


def torch_with(gpus: int) -> SimpleNamespace:
    return SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: gpus > 0, device_count=lambda: gpus))


@pytest.mark.parametrize(("gpus", "env", "expected"), [
    (1, {"LOCAL_WORLD_SIZE": "3"}, "gloo"),  # three ranks, one GPU: the H100 case
    (8, {"LOCAL_WORLD_SIZE": "8"}, "nccl"),  # one GPU a rank
    (4, {"OMPI_COMM_WORLD_LOCAL_SIZE": "8"}, "gloo"),
    (1, {"SLURM_NTASKS_PER_NODE": "8", "CUDA_VISIBLE_DEVICES": "5"}, "nccl"),  # srun bound each rank to one
    (1, {"LOCAL_WORLD_SIZE": "2", "CUDA_VISIBLE_DEVICES": ""}, "gloo"),
    (2, {}, "nccl"),  # the launcher does not say: as before
    (0, {"LOCAL_WORLD_SIZE": "2"}, "auto"),  # no GPU: choose_device's own gloo
], ids=["3-ranks-1-gpu", "8-on-8", "ompi-8-on-4", "srun-bound", "empty-cvd", "unsaid", "no-gpu"])
def test_auto_is_nccl_only_where_each_local_rank_has_a_gpu(gpus, env, expected):
    assert preflight_backend(torch_with(gpus), "auto", env) == expected


def test_a_backend_the_user_asked_for_is_kept():
    assert preflight_backend(torch_with(1), "nccl", {"LOCAL_WORLD_SIZE": "3"}) == "nccl"
    assert preflight_backend(torch_with(8), "gloo", {}) == "gloo"


def test_local_world_size_ignores_what_is_not_a_count():
    assert local_world_size({"LOCAL_WORLD_SIZE": "x", "OMPI_COMM_WORLD_LOCAL_SIZE": "0",
                             "SLURM_NTASKS_PER_NODE": "4"}) == 4
    assert local_world_size({}) is None
