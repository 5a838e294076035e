"""Round 19 of issue 19's rules (branch i19-r19), on the mechanisms field-10 missed (read in
this round, tests/fixtures/diagnose-field/issues-10): the store-based barrier of process-group
init that names no rank, Horovod's stall inspector, c10d's NCCL unique-id fetch from a rank
that went away, Open MPI's MPI_ABORT box, a TCPStore server that could not bind in a rank's
own init, and a CUDA error of the rank's own code. Texts are built here in the shapes those
pastes and the tools' sources show; one field-10 paste per mechanism is read from a neutral
folder."""

from __future__ import annotations

import shutil

from support import FIXTURES, diagnose_paste, diagnose_saved, named_ranks

FIELD10 = FIXTURES / "diagnose-field" / "issues-10" / "saved"



def _field(tmp_path, case: str):
    job = tmp_path / "job"
    shutil.copytree(FIELD10 / case, job)
    return diagnose_saved(job)


# ---------------------------------------------------------------- the store-based barrier

_TIMED_OUT = ("RuntimeError: Timed out initializing process group in store based barrier on rank: {r}, for key: "
              "store_based_barrier_key:1 (world_size={w}, worker_count={c}, timeout=0:30:00)\n")
_WAITING = ("Waiting in store based barrier to initialize process group for rank: {r}, key: store_based_barrier_key:1 "
            "(world_size={w}, worker_count={c}, timeout=0:30:00)\n")


def test_store_barrier_timeout_a_count_short_of_the_world_is_init_naming_none(tmp_path):
    v = diagnose_paste(tmp_path, _TIMED_OUT.format(r=5, w=8, c=4) + _TIMED_OUT.format(r=7, w=8, c=4))
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary
    assert "4 of 8" in v.summary


def test_store_barrier_more_workers_than_the_world_is_init_naming_none(tmp_path):
    v = diagnose_paste(tmp_path, _WAITING.format(r=0, w=4, c=8) * 3)
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary
    assert "more than the world" in v.summary


def test_store_barrier_alone_of_two_still_names_the_absent_rank(tmp_path):
    v = diagnose_paste(tmp_path, _TIMED_OUT.format(r=0, w=2, c=1))
    assert v.cls == "init-failure" and named_ranks(v) == [1], v.summary


def test_store_barrier_still_waiting_short_of_the_world_is_no_failure(tmp_path):
    # a member waiting with fewer workers than the world: the job may still be starting
    v = diagnose_paste(tmp_path, _WAITING.format(r=3, w=8, c=5) + _WAITING.format(r=1, w=8, c=5))
    assert v.cls != "init-failure" and named_ranks(v) == [], v.summary


def test_field10_store_barrier_timeout_of_a_subgroup_rank(tmp_path):
    v = _field(tmp_path, "store-barrier-timeout-rank-4330-of-2048-1792-arrived")
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


# ---------------------------------------------------------------- Horovod's stall inspector

_HVD_WARNING = ("One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are "
                "waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are "
                "trying to submit different tensors or that only subset of ranks is submitting tensors, which will "
                "cause deadlock. ")


def test_horovod_missing_ranks_block_names_the_missing_rank_not_the_reporter(tmp_path):
    # Horovod 0.21's stall_inspector.cc, behind mpirun --tag-output of the coordinator, rank 0
    text = (f"[1,0]<stderr>:[2021-01-01 10:00:00.000000: W horovod/common/stall_inspector.cc:105] {_HVD_WARNING}\n"
            "[1,0]<stderr>:Missing ranks:\n"
            "[1,0]<stderr>:2: [DistributedGradientTape_Allreduce/HorovodAllreduce_grad_0, "
            "DistributedGradientTape_Allreduce/HorovodAllreduce_grad_1]\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "stuck-rank" and named_ranks(v) == [2], v.summary


def test_horovod_missing_ranks_per_op_names_the_rank_missing_everywhere(tmp_path):
    text = (f"WARNING: {_HVD_WARNING}\nStalled ops:\n"
            "HorovodBroadcast_w_0 [missing ranks: 3]\nHorovodBroadcast_b_0 [missing ranks: 3]\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "stuck-rank" and named_ranks(v) == [3], v.summary


def test_horovod_different_ranks_missing_different_ops_names_none(tmp_path):
    text = (f"WARNING: {_HVD_WARNING}\nStalled ops:\n"
            "HorovodAllreduce_a_0 [missing ranks: 0]\nHorovodAllreduce_b_0 [missing ranks: 1]\n")
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [] and v.cls == "collective-mismatch", v.summary


def test_horovod_ready_ranks_name_none_above_the_highest_without_the_world(tmp_path):
    # round 20: ranks below the highest ready one are members (0..world-1) and named where no
    # op lists them ready (test_diagnose_rules20.py); those above it are unknown, never named
    text = f"WARNING: {_HVD_WARNING}Stalled ops: HorovodAllreduce_a_0 [ready ranks: 3, 1, 0, 2]\n"
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [], v.summary


def test_horovod_oldest_wording_reads_the_ready_ranks():
    from healthcheck.parsers.torch_log import parse_torch_log

    log = parse_torch_log(f"WARNING: {_HVD_WARNING}Stalled ops: a_0 [ready ranks: 5, 1, 4], b_0 [ready ranks: 1, 0], "
                          "[missing ranks: 2]\n")
    assert [(s.op, s.ready, s.missing) for s in log.stalled] == [("a_0", (5, 1, 4), ()), ("b_0", (1, 0), (2,))]


def test_field10_horovod_tag_output_report_of_rank_0_names_rank_1(tmp_path):
    v = _field(tmp_path, "horovod-tag-output-rank-0-reports-missing-rank-1")
    assert v.cls == "stuck-rank" and named_ranks(v) == [1], v.summary


# ---------------------------------------------------------------- Open MPI's MPI_ABORT box

_ABORT_BOX = ("--------------------------------------------------------------------------\n"
              "MPI_ABORT was invoked on rank {r} in communicator {c} \nwith errorcode 1.\n\n"
              "NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.\n"
              "You may or may not see output from other processes, depending on\n"
              "exactly when Open MPI kills them.\n"
              "--------------------------------------------------------------------------\n")


def test_mpi_abort_box_is_the_death_of_the_rank_that_called_it(tmp_path):
    v = diagnose_paste(tmp_path, "mpirun -n 4 ./solver -in input.xml\n" + _ABORT_BOX.format(r=2, c="MPI_COMM_WORLD"))
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


def test_mpi_abort_in_a_derived_communicator_names_no_world_rank(tmp_path):
    v = diagnose_paste(tmp_path, _ABORT_BOX.format(r=5, c="MPI COMMUNICATOR 7 CREATE FROM 4"))
    assert named_ranks(v) == [], v.summary


def test_mpi_abort_sentence_survives_a_wrap_at_any_word_or_inside_one():
    from healthcheck.parsers.torch_log import parse_torch_log

    sentence = "MPI_ABORT was invoked on rank 3 in communicator MPI_COMM_WORLD with errorcode 7."
    cuts = [i for i, ch in enumerate(sentence) if ch == " "] + [sentence.index("COMM") + 2]
    for cut in cuts:
        text = "some output\n" + sentence[:cut] + "\n" + sentence[cut:].lstrip() + "\nmore output\n"
        found = [(e.type, e.rank) for e in parse_torch_log(text).exceptions]
        assert found == [("MPI_ABORT", 3)], (cut, text)


# ---------------------------------------------------------------- the NCCL unique id's store fetch

_FETCH = ("RuntimeError: [{r}] is setting up NCCL communicator and retrieving ncclUniqueId from [{s}] via c10d "
          "key-value store by key '0', but store->get('0') got error: {err}. This may indicate a possible "
          "application crash on rank {s} or a network set up issue.\n")
_BARRIER_TB = ("Traceback (most recent call last):\n"
               "  File \"train.py\", line 40, in <module>\n    dist.barrier()\n"
               "  File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py\", line 3696, "
               "in barrier\n    work = default_pg.barrier(opts=opts)\n")


def test_unique_id_fetch_reset_names_the_store_host_rank_0(tmp_path):
    v = diagnose_paste(tmp_path, _BARRIER_TB + _FETCH.format(r=3, s=0, err="Connection reset by peer"))
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_unique_id_fetch_broken_pipe_names_rank_0_too(tmp_path):
    v = diagnose_paste(tmp_path, _BARRIER_TB + _FETCH.format(r=5, s=0, err="Broken pipe"))
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


def test_unique_id_fetch_timeout_names_no_one_dead(tmp_path):
    # a timeout is no broken connection: rank 0 is alive, so never dead; round 20 names it
    # stuck, behind (uniqueid.unpublished_id, test_diagnose_rules20.py)
    v = diagnose_paste(tmp_path, _BARRIER_TB + _FETCH.format(r=3, s=0, err="Socket Timeout"))
    assert v.cls == "stuck-rank" and named_ranks(v) == [0], v.summary


def test_unique_id_fetch_under_torchrun_names_no_one(tmp_path):
    # torchrun's agent hosts the store: a worker's death does not close it
    text = ("torchrun --nnodes=2 --nproc_per_node=4 train.py\n" + _BARRIER_TB
            + _FETCH.format(r=5, s=0, err="Connection reset by peer"))
    v = diagnose_paste(tmp_path, text)
    assert named_ranks(v) == [], v.summary


def test_unique_id_fetch_with_rank_0_alive_after_names_no_one(tmp_path):
    text = ("[rank3]:" + _FETCH.format(r=3, s=0, err="Connection reset by peer")
            + "[rank0]:[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=1, OpType=BROADCAST, NumelIn=10, NumelOut=10, Timeout(ms)=600000) "
              "ran for 600081 milliseconds before timing out.\n")
    v = diagnose_paste(tmp_path, text)
    assert 0 not in named_ranks(v), v.summary


def test_pdsh_host_labels_are_taken_off_for_the_torch_log():
    from healthcheck.parsers.torch_log import parse_torch_log

    text = "".join(f"gpu004: {line}\n" for line in (_BARRIER_TB + _FETCH.format(r=15, s=0, err="Connection reset "
                                                                                  "by peer")).splitlines())
    log = parse_torch_log(text)
    assert [(e.rank, e.type) for e in log.exceptions] == [(15, "RuntimeError")]


def test_field10_pdsh_prefixed_fetch_reset_names_rank_0(tmp_path):
    v = _field(tmp_path, "pdsh-prefixed-rank-15-store-reset-by-rank-0")
    assert v.cls == "dead-rank" and named_ranks(v) == [0], v.summary


# ---------------------------------------------------------------- a TCPStore server that could not bind

_SITE = "/usr/lib/python3.10/site-packages/torch/distributed"
_RANK_INIT_TB = ("Traceback (most recent call last):\n"
                 "  File \"train.py\", line 74, in setup\n    dist.init_process_group(\"nccl\")\n"
                 f"  File \"{_SITE}/distributed_c10d.py\", line 754, in init_process_group\n"
                 "    store, rank, world_size = next(rendezvous_iterator)\n"
                 f"  File \"{_SITE}/rendezvous.py\", line 246, in _env_rendezvous_handler\n"
                 "    store = _create_c10d_store(master_addr, master_port, rank, world_size, timeout)\n"
                 f"  File \"{_SITE}/rendezvous.py\", line 177, in _create_c10d_store\n    return TCPStore(\n")
_BIND_FAILED = ("RuntimeError: The server socket has failed to listen on any local network address. The server "
                "socket has failed to bind to [::]:{p} (errno: 98 - Address already in use).\n")
_C10D_BIND = ("[W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:{p} (errno: 98 - Address "
              "already in use).\n[E socket.cpp:500] [c10d] The server socket has failed to listen on any local "
              "network address.\n")


def test_store_bind_failure_in_a_ranks_init_is_rank_0s(tmp_path):
    v = diagnose_paste(tmp_path, _RANK_INIT_TB + _BIND_FAILED.format(p=44796))
    assert v.cls == "init-failure" and named_ranks(v) == [0], v.summary


def test_store_bind_lines_before_a_ranks_cut_init_traceback_are_rank_0s(tmp_path):
    cut = _RANK_INIT_TB.split("  File \"" + _SITE + "/rendezvous.py")[0]  # the traceback cut in init_process_group
    v = diagnose_paste(tmp_path, _C10D_BIND.format(p=47531) + cut)
    assert v.cls == "init-failure" and named_ranks(v) == [0], v.summary


def test_store_bind_failure_in_torchruns_own_traceback_names_no_rank(tmp_path):
    text = (_C10D_BIND.format(p=29500) + "Traceback (most recent call last):\n"
            "  File \"/usr/local/bin/torchrun\", line 8, in <module>\n    sys.exit(main())\n"
            f"  File \"{_SITE}/run.py\", line 879, in main\n    run(args)\n"
            f"  File \"{_SITE}/launcher/api.py\", line 254, in launch_agent\n    result = agent.run()\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "init-failure" and named_ranks(v) == [], v.summary


def test_a_bind_failure_no_traceback_places_names_no_rank(tmp_path):
    v = diagnose_paste(tmp_path, _C10D_BIND.format(p=29500) + "RuntimeError: Address already in use\n")
    assert named_ranks(v) == [], v.summary


def test_a_loops_own_counter_label_is_no_host():
    from healthcheck.parsers.lines import host_labelled

    assert host_labelled(["gpu004: line one", "gpu005: line two", "gpu004: line three"])
    assert not host_labelled(["Epoch1: loss 3.2", "Epoch2: loss 2.9", "Epoch3: loss 2.5"])
    assert not host_labelled(["RuntimeError: boom", "ValueError: bad"])
    # HPE PALS's own `HOST: rank N died from signal S`: the host is the launcher's word (rankends.py)
    assert not host_labelled(["x1000c0s1b0n0: rank 3 died from signal 9", "x1000c0s2b0n0: rank 10 exited with code 1"])


# ---------------------------------------------------------------- a CUDA fault of the program's own

_IMA = ("[rank{r}]:[E907 22:34:22.823452114 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) Rank {r}] Process group "
        "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
        "be incorrect.\n")


def test_an_illegal_memory_access_without_an_xid_is_the_ranks_death_not_the_gpus(tmp_path):
    v = diagnose_paste(tmp_path, _IMA.format(r=2))
    assert v.cls == "dead-rank" and named_ranks(v) == [2], v.summary


def test_a_cuda_error_that_points_at_the_device_stays_gpu_failure(tmp_path):
    text = ("[rank1]:[E907 22:34:22.823452114 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) Rank 1] Process group "
            "watchdog thread terminated with exception: CUDA error: uncorrectable ECC error encountered\n")
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "gpu-failure" and named_ranks(v) == [1], v.summary


# ---------------------------------------------------------------- torch 1.11's one-sided fingerprint report

_FP_OLD = ("RuntimeError: Detected mismatch between collectives on ranks. Rank {r} is running inconsistent "
           "collective: CollectiveFingerPrint(OpType={op}, TensorShape=[34112], TensorDtypes=Float, "
           "TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda))\n")


def test_torch_1_11_report_names_its_reporter_only_not_a_culprit(tmp_path):
    # ProcessGroupWrapper.cpp (1.10/1.11) prints pg->getRank(), its own rank, with its own
    # fingerprint, on every rank whose fingerprint differs from any other's: every rank of a
    # desync raises it. One report says who printed it, not who is odd: no rank (kept as is)
    v = diagnose_paste(tmp_path, _FP_OLD.format(r=0, op="BROADCAST"))
    assert v.cls == "collective-mismatch" and named_ranks(v) == [], v.summary


def test_torch_1_11_reports_of_several_ranks_name_the_minority_fingerprint(tmp_path):
    text = "".join(f"[rank{r}]:" + _FP_OLD.format(r=r, op=op) for r, op in ((0, "BROADCAST"), (1, "BROADCAST"),
                                                                          (2, "ALLREDUCE")))
    v = diagnose_paste(tmp_path, text)
    assert v.cls == "collective-mismatch" and named_ranks(v) == [2], v.summary
