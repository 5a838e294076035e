"""`hc report bundle`'s bad input: one line on stderr, the documented exit code, no file left.

The site's history is written by one real `hc health` run of gpu017 (test_bundle.py's site:
the Xid 79 capture replayed); Slurm is a stub that answers as scontrol does."""

from __future__ import annotations

import pytest
from support import run_hc, write_stub
from test_bundle import RUNNING, a_diagnosis, env_of, write_config


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    base = tmp_path_factory.mktemp("cli-site")
    stub = write_stub(base / "bin", "scontrol", f'exec sh "{base}/scontrol.sh"\n')
    (base / "scontrol.sh").write_text("echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n")
    cfg = write_config(base, scontrol=str(stub))
    assert run_hc("health", env=env_of(cfg, "gpu017")).returncode == 2
    return base


def hc_bundle(site, tmp_path, *args):
    out = tmp_path / "b.tar.gz"
    r = run_hc("report", "bundle", *args, "-o", str(out), env=env_of(site / "hc.yaml"))
    return r, out


@pytest.mark.parametrize(("args", "words"), [
    (("gpu999",), "hc knows nothing of node gpu999"),
    (("bad/name",), "not a valid node name"),
    (("gpu017", "--job", "4711"), "hc knows nothing of job 4711"),
    (("gpu017", "--job", "47x1"), "is not a Slurm job id"),
    (("gpu017", "--job", "4711", "--diagnosis", "/nonexistent/d.json"), "d.json"),
])
def test_bad_input_is_one_line_and_exit_4_and_no_file(site, tmp_path, args, words):
    r, out = hc_bundle(site, tmp_path, *args)
    err = r.stderr.decode().strip()
    assert r.returncode == 4, err
    assert len(err.splitlines()) == 1 and words in err and "Traceback" not in err, err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_job_that_ran_elsewhere_or_a_diagnosis_of_another_job_is_refused(site, tmp_path):
    (site / "scontrol.sh").write_text(RUNNING.replace("gpu[017-018]", "gpu[020-021]"))
    try:
        r, out = hc_bundle(site, tmp_path, "gpu017", "--job", "4711")
        err = r.stderr.decode().strip()
        assert r.returncode == 4 and len(err.splitlines()) == 1 and "did not run on gpu017" in err, err
        (site / "scontrol.sh").write_text(RUNNING)
        (tmp_path / "d").mkdir()
        other = a_diagnosis(tmp_path / "d", "4712")
        r, out = hc_bundle(site, tmp_path, "gpu017", "--job", "4711", "--diagnosis", str(other))
        err = r.stderr.decode().strip()
        assert r.returncode == 4 and len(err.splitlines()) == 1 and "not of job 4711" in err, err
        assert not out.exists()
    finally:
        (site / "scontrol.sh").write_text("echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n")


def test_a_diagnosis_alone_makes_the_job_known(site, tmp_path):
    (tmp_path / "d").mkdir()
    r, out = hc_bundle(site, tmp_path, "gpu017", "--job", "4711", "--diagnosis", str(a_diagnosis(tmp_path / "d",
                                                                                                 "4711")))
    assert r.returncode == 0, r.stderr.decode()
    assert out.exists() and "not collected" in r.stderr.decode()


@pytest.mark.parametrize(("args", "words"), [
    (("--local", "gpu017"), "--local bundles this machine"),
    ((), "name the node to bundle"),
    (("gpu017", "--diagnosis", "x.json"), "give --job ID with them"),
])
def test_usage_errors_exit_4(site, tmp_path, args, words):
    r, out = hc_bundle(site, tmp_path, *args)
    assert r.returncode == 4 and words in r.stderr.decode() and not out.exists()


def test_a_node_hc_never_checked_is_known_through_the_job_that_ran_on_it(site, tmp_path):
    (site / "scontrol.sh").write_text(RUNNING)
    try:
        r, out = hc_bundle(site, tmp_path, "gpu018", "--job", "4711")
        assert r.returncode == 0, r.stderr.decode()
        r, out = hc_bundle(site, tmp_path, "gpu018")  # without the job: nothing of it is stored
        assert r.returncode == 4 and "hc knows nothing of node gpu018" in r.stderr.decode()
    finally:
        (site / "scontrol.sh").write_text("echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1\n")
