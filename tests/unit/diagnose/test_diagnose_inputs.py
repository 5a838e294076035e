"""Every relevant real capture through `hc diagnose logs`: a verdict or a reasoned
unknown, never a traceback; bad input (unrelated, binary, truncated files, ranks that
disagree about the world size) gives unknown with why."""

from __future__ import annotations

import shutil

import pytest
from support import CORPUS, FIXTURES, run_hc, run_hc_inproc

from healthcheck.diagnose.sources import collect, rank_from_name
from healthcheck.diagnose.verdict import build

FOLDERS = [CORPUS / d for d in ("torch-watchdog", "torch-nccl-error", "torchrun", "nccl-debug", "py-spy",
                                "flight-recorder", "xid-dmesg")]
FOLDERS += [FIXTURES / d for d in ("py-spy", "flight-recorder", "h100-captures", "nccl-ras", "kernel-log")]
FILES = sorted(p for d in FOLDERS if d.is_dir() for p in d.iterdir() if p.is_file())


@pytest.mark.parametrize("path", FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_capture_gives_a_verdict(path):
    v = build(collect([path]))
    assert v.cls and v.summary
    if v.cls == "unknown":
        assert v.why_unknown
    for f in v.findings:
        for r in f.ranks:  # never a rank without a line or a dump that speaks of it
            assert any(e.rank == r or str(r) in e.text for e in f.lines) or f.cls != "unknown"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_folder_through_the_cli(folder):
    r = run_hc_inproc("diagnose", "logs", str(folder), "--format", "json")
    assert r.returncode in (0, 3), r.stderr
    assert b"Traceback" not in r.stderr and b"internal error" not in r.stderr


def test_known_captures_are_classified():
    cases = {
        CORPUS / "torch-watchdog" / "heartbeat-monitor-timed-out-watchdog-stuck-600s-multi-rank.txt": "host-wedged",
        CORPUS / "nccl-debug" / "azure-ib-completion-error12.txt": "network",
        CORPUS / "torchrun" / "childfailederror-accelerate-deepspeed-exitcode-9-sigkill.txt": "dead-rank",
        CORPUS / "torchrun" / "eaddrinuse-init-process-group-tcpstore-runtimeerror.txt": "init-failure",
        FIXTURES / "h100-captures" / "torchrun-2.11-duplicate-gpu-nccl-invalid-usage.txt": "init-failure",
        CORPUS / "torch-nccl-error" / "detail-mismatch-allreduce-shape-mismatch-seq3104.txt": "shape-mismatch",
        FIXTURES / "nccl-ras" / "derived-2.28-mismatch-allreduce-one-rank-behind.txt": "stuck-rank",
    }
    for path, cls in cases.items():
        v = build(collect([path]))
        assert v.cls == cls, (path.name, v.cls, v.summary)


def test_unrelated_files_are_unknown_with_why(tmp_path):
    (tmp_path / "notes.txt").write_text("shopping list\nmilk\n")
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 8)
    (tmp_path / "empty.log").write_text("")
    v = build(collect([tmp_path]))
    assert v.cls == "unknown" and "none of the 3 file(s)" in v.why_unknown
    whys = {u.source.rsplit("/", 1)[-1]: u.why for u in v.unreadable}
    assert "binary" in whys["blob.bin"] and whys["empty.log"] == "empty"
    r = run_hc_inproc("diagnose", "logs", str(tmp_path))
    assert r.returncode == 3 and b"no diagnosis" in r.stdout


def test_truncated_and_binary_dumps_are_listed_not_fatal(tmp_path):
    src = FIXTURES / "diagnose" / "skip"
    shutil.copytree(src, tmp_path / "skip")
    dump = tmp_path / "skip" / "nccl_trace_rank_1"
    dump.write_bytes(dump.read_bytes()[:200])  # a dump cut short
    (tmp_path / "skip" / "rank0.log").write_bytes(b"\x00\x01garbage" * 100)
    v = build(collect([tmp_path]))
    whys = {u.source.rsplit("/", 1)[-1]: u.why for u in v.unreadable}
    assert whys["nccl_trace_rank_1"].startswith("Flight Recorder dump:")
    assert "binary" in whys["rank0.log"]
    assert v.cls in ("collective-mismatch", "stuck-rank") and [o.rank for o in v.odd_ranks] == [3]


def test_world_size_disagreement_is_unknown(tmp_path):
    shutil.copytree(FIXTURES / "diagnose" / "stuck", tmp_path / "job")
    shutil.copy(FIXTURES / "flight-recorder" / "gloo-2.13-skip-rank1.pickle", tmp_path / "job" / "nccl_trace_rank_1")
    v = build(collect([tmp_path / "job"]))
    assert v.cls == "unknown" and "world size" in v.why_unknown
    assert "rank 1 say 2" in v.why_unknown


def test_links_out_of_the_directory_are_not_followed(tmp_path):
    (tmp_path / "job").mkdir()
    (tmp_path / "secret.log").write_text("x")
    (tmp_path / "job" / "link.log").symlink_to(tmp_path / "secret.log")
    v = build(collect([tmp_path / "job"]))
    assert v.unreadable[0].why.startswith("a link out of the directory")


def test_missing_path_is_bad_input():
    r = run_hc("diagnose", "logs", "/nonexistent/logs")
    assert r.returncode == 4 and r.stderr.count(b"\n") == 1 and b"Traceback" not in r.stderr


def test_rank_from_name():
    assert rank_from_name("logs/rank3.log") == 3
    assert rank_from_name("py-spy-12.json") == 12
    assert rank_from_name("dumps/nccl_trace_rank_7") == 7
    assert rank_from_name("job/rank_5/stdout.txt") == 5
    assert rank_from_name("train.log") is None


def test_a_healthy_one_gpu_job_under_hc_run_on_an_h100_is_no_failure():
    """The log directory `hc run` wrote around an 8-all_reduce job on one H100 (NCCL 2.28.9
    chose sockets: there is no HCA, and a one-node communicator never uses the network): no
    socket-fallback finding, nothing failed, and the manifest gives rank 0's host and pid."""
    from support import FIXTURES

    from healthcheck.diagnose.sources import collect
    from healthcheck.diagnose.verdict import build

    verdict = build(collect([str(FIXTURES / "h100-captures" / "hc-run-1gpu")]))
    assert verdict.cls == "unknown" and not verdict.odd_ranks
    (row,) = verdict.ranks
    assert (row.rank, row.host, row.pid) == (0, "vm", 465)


def test_nccl_lines_without_their_host_prefix_name_no_empty_host(tmp_path):
    """A log whose NCCL lines lost their host:pid:tid prefix (a grep, a wrapper) forms a
    process with no host: the socket-fallback finding names only real hosts. The bare lines
    are the fixture's own with the prefix cut off."""
    import re

    from support import FIXTURES

    from healthcheck.diagnose.sources import collect
    from healthcheck.diagnose.verdict import build

    text = (FIXTURES / "corpus" / "nccl-debug" / "nccl-2.4-era-aws-many-hosts-ib-no-device-socket-fallback.txt").read_text()
    bare = [re.sub(r"^\S+:\d+:\d+ \[\d+\] ", "", ln) for ln in text.splitlines() if "NCCL INFO NET/" in ln][:3]
    assert bare and all(ln.startswith("NCCL INFO") for ln in bare)
    (tmp_path / "nccl.log").write_text(text + "\n" + "\n".join(bare) + "\n")
    verdict = build(collect([str(tmp_path)]))
    fallback = [f for f in verdict.findings if f.cls == "socket-fallback"]
    assert fallback, verdict.summary
    assert all(not e.text.startswith(" ") and not e.text.startswith("pid") for f in fallback for e in f.lines)
    assert ", ," not in fallback[0].message and "sockets on ," not in fallback[0].message
