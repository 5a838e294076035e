"""Evidence bundles (`hc report bundle`, issue 23 section 5).

The history is written by real `hc health` runs (subprocesses, dry run) on a replayed node:
NVML from the recording tests/fixtures/nvml/healthy-8xh100.json, the kernel log the real
Xid 79 capture tests/fixtures/corpus/xid-dmesg/xid79-with-nvswitch-sxid-20034.txt read as
gpu.xid's file source. Secrets are planted in the environment, the config and the hook
reports, and looked for in every member of the tarball.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import tarfile
from pathlib import Path

import pytest
from support import CORPUS, FIXTURES, run_hc, write_stub

from healthcheck.core.config import load_config
from healthcheck.core.errors import HcError
from healthcheck.orchestrate import bundle as ob
from healthcheck.report.bundle import REDACTED, Caps, Item, Missing, Redactor, build, safe_name, secret_name

XID79 = CORPUS / "xid-dmesg" / "xid79-with-nvswitch-sxid-20034.txt"
REPLAY = FIXTURES / "nvml" / "healthy-8xh100.json"
ENV_TOKEN = "envtok-5f1c2a9d7e"
CONFIG_PASSWORD = "cfgpw-81d0c3aa"
WEBHOOK = "https://hooks.example.com/services/T000/B000/whsecret-77aa"
TOKEN_LINE = "Bearer tokfile-0a9b8c7d6e"
PLANTED = (ENV_TOKEN, CONFIG_PASSWORD, WEBHOOK, "whsecret-77aa", "tokfile-0a9b8c7d6e")


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as tar:
        out = {}
        for info in tar.getmembers():
            assert info.isfile(), info.name  # no links, no directories, no devices
            assert not info.name.startswith("/") and ".." not in info.name.split("/"), info.name
            assert info.mode == 0o644 and info.uid == 0 and info.gid == 0, info.name
            out[info.name] = tar.extractfile(info).read()  # type: ignore[union-attr]
    return out


def manifest(got: dict[str, bytes]) -> dict:
    (name,) = [n for n in got if n.endswith("/MANIFEST.json")]
    return json.loads(got[name])


def short(got: dict[str, bytes]) -> set[str]:
    return {n.split("/", 1)[1] for n in got}


def write_config(base: Path, extra: str = "", scontrol: str = "scontrol", gpu: str = "") -> Path:
    (base / "fabrics").mkdir(parents=True, exist_ok=True)
    (base / "kern.log").write_text(XID79.read_text())
    (base / "fabrics" / "t.yaml").write_text(f"extends: h100-ndr400\ngpu:\n  xid: {{source: file, file: "
                                             f"{base}/kern.log}}\n{gpu}")
    (base / "token").write_text(TOKEN_LINE + "\n")
    cfg = base / "hc.yaml"
    cfg.write_text(f"# the site database: db_password={CONFIG_PASSWORD}\n"
                   f"default_fabric: t\nslurm:\n  state_dir: {base}/state\n  audit_log: {base}/audit.jsonl\n"
                   f"  report_dir: {base}/reports\n  scontrol: {scontrol}\n  retries: 1\n"
                   f"history: {{path: {base}/h.sqlite}}\n"
                   f"tickets: {{webhook_url: '{WEBHOOK}', token_file: {base}/token}}\n{extra}")
    return cfg


def env_of(cfg: Path, node: str = "login1", **more: str) -> dict[str, str]:
    return {"HC_CONFIG": str(cfg), "HC_NODE_NAME": node, "HC_NVML_REPLAY": str(REPLAY), "HC_DRY_RUN": "1",
            "HC_SYSLOG_SOCKET": "", "HC_CACHE_DIR": "", "MY_API_TOKEN": ENV_TOKEN, **more}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """A site whose history two real `hc health` runs of gpu017 wrote (the Xid 79 log: FAIL)."""
    base = tmp_path_factory.mktemp("site")
    cfg = write_config(base)
    for _ in range(2):
        r = run_hc("health", env=env_of(cfg, "gpu017"))
        assert r.returncode == 2, r.stderr.decode()  # gpu.xid FAILs on the Xid 79 log
    # a hook report that carries a secret in its text (as a tool's stderr might)
    report = base / "reports" / "gpu017" / "health-latest.json"
    data = json.loads(report.read_text())
    data["nodes"][0]["findings"][0]["evidence"] = f"curl -H 'Authorization: {TOKEN_LINE}' {WEBHOOK}"
    report.write_text(json.dumps(data))
    return base


def bundle(site: Path, out: Path, *args: str, node: str = "login1", **env: str):
    return run_hc("report", "bundle", *args, "-o", str(out), env=env_of(site / "hc.yaml", node, **env))


# ------------------------------------------------------------------ from what hc stored


def test_a_login_node_bundles_the_history_and_says_what_it_could_not_collect(site, tmp_path):
    out = tmp_path / "gpu017.tar.gz"
    r = bundle(site, out, "gpu017")
    assert r.returncode == 0, r.stderr.decode()
    got = members(out)
    assert all(n.startswith("hc-bundle-gpu017/") for n in got)
    names = short(got)
    assert {"MANIFEST.json", "README.txt", "history/runs.json", "history/findings.json", "history/repairs.json",
            "history/xid-recurrences.json", "kernel-log/lines-hc-read.txt", "hook-reports/health-latest.json",
            "config/hc.yaml", "config/limits.json", "hc/environment.json"} <= names
    assert sum(n.startswith("reports/") for n in names) == 2  # both recorded runs' results of the node
    m = manifest(got)
    assert m["node"] == "gpu017" and m["live"] is False and m["schema"] == "hc.bundle/1"
    missing = {x["name"]: x["reason"] for x in m["missing"]}
    assert "not on this host" in missing["live/nvidia-smi-q.txt"] and "login1" in missing["live/ibstat.txt"]
    assert "DCGM did not run" in missing["dcgm/runs.json"]
    assert {row["name"] for row in m["items"]} == names - {"MANIFEST.json", "README.txt"}
    for row in m["items"]:  # every item: where from, its size
        assert row["source"] and row["size"] == len(got[f"hc-bundle-gpu017/{row['name']}"])
    kernel = got["hc-bundle-gpu017/kernel-log/lines-hc-read.txt"].decode()
    assert "Xid" in kernel and "79" in kernel
    xids = json.loads(got["hc-bundle-gpu017/history/xid-recurrences.json"])
    assert {row["code"] for row in xids["rows"]} == {79}
    findings = json.loads(got["hc-bundle-gpu017/history/findings.json"])
    assert {"gpu.E020"} <= {f["id"] for f in findings}
    readme = got["hc-bundle-gpu017/README.txt"].decode()
    assert "Not collected:" in readme and "live/nvidia-smi-q.txt: not on this host" in readme


def test_no_planted_secret_is_in_any_member_and_the_manifest_counts_them(site, tmp_path):
    out = tmp_path / "b.tar.gz"
    assert bundle(site, out, "gpu017").returncode == 0
    got = members(out)
    for name, data in got.items():
        for secret in PLANTED:
            assert secret.encode() not in data, (name, secret)
    m = manifest(got)
    counts = {row["name"]: row["redacted"] for row in m["items"]}
    assert counts["config/hc.yaml"] >= 2  # the password in its comment, the webhook URL
    assert counts["hc/environment.json"] >= 1 and counts["hook-reports/health-latest.json"] >= 2
    assert m["redacted"] == sum(counts.values())
    env = json.loads(got["hc-bundle-gpu017/hc/environment.json"])
    assert env["MY_API_TOKEN"] == REDACTED and env["HC_NODE_NAME"] == "login1"  # only the secret one


def test_the_same_evidence_gives_the_same_bytes(site, tmp_path):
    a, b = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    assert bundle(site, a, "gpu017").returncode == 0 and bundle(site, b, "gpu017").returncode == 0
    assert a.read_bytes() != b"" and a.read_bytes() == b.read_bytes()
    with tarfile.open(a, "r:gz") as tar:
        times = {i.mtime for i in tar.getmembers()}
        names = [i.name for i in tar.getmembers()]
    assert len(times) == 1 and times.pop() > 0 and names == sorted(names)


def test_the_size_caps_cut_and_leave_out_and_say_so(site, tmp_path):
    out = tmp_path / "small.tar.gz"
    r = bundle(site, out, "gpu017", "--max-item-mib", str(4096 / 2**20), "--max-total-mib", str(20000 / 2**20))
    assert r.returncode == 0, r.stderr.decode()
    got = members(out)
    m = manifest(got)
    assert sum(len(v) for k, v in got.items() if not k.endswith(("MANIFEST.json", "README.txt"))) <= 20000
    cut = [row for row in m["items"] if row.get("truncated")]
    assert cut and all(row["size"] <= 4096 < row["original_size"] for row in cut)
    assert any("total size cap" in x["reason"] for x in m["missing"])


def test_a_standard_run_gives_the_versions_and_dcgms_output(tmp_path):
    """gpu.dcgm on (the fabric's), dcgmi a stand-in printing the derived DCGM 3.3.9 `-r 2 -j` document
    of tests/fixtures/dcgmi-diag (GPU 5's double-bit ECC); gpu.versions reads the replay's versions."""
    dcgmi = write_stub(tmp_path / "bin", "dcgmi", f"cat {FIXTURES}/dcgmi-diag/derived-3.3-json-r2-h100-dbe-gpu5.txt; "
                                                  "exit 205\n")
    cfg = write_config(tmp_path, gpu=f"  dcgm: {{enabled: true, dcgmi: {dcgmi}}}\n")
    r = run_hc("health", "--tier", "standard", env=env_of(cfg, "gpu017"))
    assert r.returncode == 2, r.stderr.decode()
    out = tmp_path / "b.tar.gz"
    assert bundle(tmp_path, out, "gpu017").returncode == 0
    got = members(out)
    (dcgm,) = json.loads(got["hc-bundle-gpu017/dcgm/runs.json"])
    assert [c["name"] for c in dcgm["checks"]] == ["gpu.dcgm"]
    assert [(f["id"], f["component"]) for f in dcgm["findings"]] == [("gpu.E080", "GPU5:GPU Memory")]
    assert "dcgmi diag" in dcgm["findings"][0]["evidence"]
    versions = json.loads(got["hc-bundle-gpu017/versions/recorded.json"])
    names = {v["name"] for v in versions["versions"]}
    assert {"driver_version", "cuda_version", "vbios_version"} <= names
    assert "dcgm/runs.json" not in {x["name"] for x in manifest(got)["missing"]}


# ------------------------------------------------------------------- live, on the node


def test_on_the_node_live_commands_run_bounded_and_absent_or_hung_tools_are_said(site, tmp_path):
    bin_dir = tmp_path / "bin"
    smi_q = (CORPUS / "nvidia-smi-q" / "h100-8gpu-driver-535.183.01.txt").read_text()
    (tmp_path / "q.txt").write_text(smi_q)
    (tmp_path / "topo.txt").write_text((CORPUS / "nvidia-smi-topo" / "h100-8gpu-nv18.txt").read_text())
    write_stub(bin_dir, "nvidia-smi", f'if [ "$1" = topo ]; then cat {tmp_path}/topo.txt; else cat {tmp_path}/q.txt; fi\n')
    write_stub(bin_dir, "ibstat", "exec sleep 30\n")
    out = tmp_path / "live.tar.gz"
    path = f"{bin_dir}:/usr/bin:/bin"
    r = bundle(site, out, "--local", "--timeout", "1", node="gpu017", PATH=path)
    assert r.returncode == 0, r.stderr.decode()
    got = members(out)
    m = manifest(got)
    assert m["live"] is True
    names = short(got)
    assert {"live/nvidia-smi-q.txt", "live/nvidia-smi-topo.txt", "live/uname.txt", "live/versions.txt",
            "live/kernel-log.txt"} <= names
    assert got["hc-bundle-gpu017/live/nvidia-smi-q.txt"].decode().startswith(smi_q[:200])
    assert "Xid" in got["hc-bundle-gpu017/live/kernel-log.txt"].decode()
    missing = {x["name"]: x["reason"] for x in m["missing"]}
    assert missing["live/ibstat.txt"].startswith("timed out")
    write_stub(bin_dir, "ibstat", "exit 0\n")
    (bin_dir / "nvidia-smi").unlink()
    r = bundle(site, out, "gpu017", node="gpu017", PATH=path)  # NODE is this host: live too
    missing = {x["name"]: x["reason"] for x in manifest(members(out))["missing"]}
    assert r.returncode == 0 and missing["live/nvidia-smi-q.txt"].startswith("tool absent")


# -------------------------------------------------------------------------- a job


def job_site(site: Path, tmp_path: Path, answer: str) -> dict[str, str]:
    stub = write_stub(tmp_path / "bin", "scontrol", answer)
    cfg = tmp_path / "hc.yaml"
    cfg.write_text((site / "hc.yaml").read_text().replace("scontrol: scontrol", f"scontrol: {stub}")
                   + f"fabric_dirs: [{site}/fabrics]\n")
    return {"HC_CONFIG": str(cfg)}


RUNNING = ("echo 'JobId=4711 JobName=train UserId=u(1) JobState=RUNNING Reason=None NodeList=gpu[017-018] "
           "BatchHost=gpu017 StartTime=2026-01-01T00:00:00 EndTime=Unknown StdOut=/home/u/4711.out'\n")


def a_diagnosis(tmp_path: Path, job: str) -> Path:
    import msgspec
    from support import diagnose_saved

    from healthcheck.diagnose.verdict import encode

    verdict = diagnose_saved(FIXTURES / "diagnose-jobs" / "held-out" / "saved" / "h-oom-plain-w5-r3")
    path = tmp_path / f"diag-{job}.json"
    path.write_bytes(encode(msgspec.structs.replace(verdict, job=f"slurm job {job} (gpu[017-018])")))
    return path


def test_a_job_bundle_has_its_diagnosis_slurms_record_and_the_window(site, tmp_path):
    env = job_site(site, tmp_path, RUNNING)
    out = tmp_path / "job.tar.gz"
    r = bundle(site, out, "gpu017", "--job", "4711", "--diagnosis", str(a_diagnosis(tmp_path, "4711")), **env)
    assert r.returncode == 0, r.stderr.decode()
    got = members(out)
    assert all(n.startswith("hc-bundle-gpu017-job4711/") for n in got)
    names = short(got)
    assert {"job/diagnosis.json", "job/diagnosis.txt", "job/scontrol-show-job.txt", "job/health-in-window.json"} <= names
    diag = json.loads(got["hc-bundle-gpu017-job4711/job/diagnosis.json"])
    assert diag["job"] == "slurm job 4711 (gpu[017-018])" and diag["class"]
    window = json.loads(got["hc-bundle-gpu017-job4711/job/health-in-window.json"])
    assert window["failures"] and {f["id"] for x in window["failures"] for f in x["findings"]} >= {"gpu.E020"}
    assert manifest(got)["job"] == "4711"


def test_a_running_job_without_a_saved_diagnosis_says_how_to_get_one(site, tmp_path):
    env = job_site(site, tmp_path, RUNNING)
    out = tmp_path / "job.tar.gz"
    assert bundle(site, out, "gpu017", "--job", "4711", **env).returncode == 0
    missing = {x["name"]: x["reason"] for x in manifest(members(out))["missing"]}
    assert "--diagnose runs `hc diagnose job 4711`" in missing["job/diagnosis.json"]
    assert "--diagnosis FILE" in missing["job/diagnosis.json"]


def test_diagnose_runs_hc_diagnose_job_and_keeps_its_verdict_even_when_no_node_answers(site, tmp_path):
    env = job_site(site, tmp_path, RUNNING)
    srun = write_stub(tmp_path / "bin", "srun", "echo 'srun: error: Unable to confirm allocation for job 4711: "
                                                "Invalid job id specified' >&2; exit 1\n")
    cfg = Path(env["HC_CONFIG"])
    cfg.write_text(cfg.read_text().replace("  retries: 1\n", f"  retries: 1\n  srun: {srun}\n"))
    out = tmp_path / "job.tar.gz"
    r = bundle(site, out, "gpu017", "--job", "4711", "--diagnose", "--timeout", "2", **env)
    assert r.returncode == 0, r.stderr.decode()
    got = members(out)
    text = got["hc-bundle-gpu017-job4711/job/diagnosis.txt"].decode()
    assert "gpu017: node did not answer" in text and "Unable to confirm allocation" in text
    rows = {row["name"]: row for row in manifest(got)["items"]}
    assert "`hc diagnose job 4711`, run by the bundle" in rows["job/diagnosis.json"]["source"]


def test_an_ended_jobs_output_readable_here_is_diagnosed_for_the_bundle(site, tmp_path):
    output = tmp_path / "4711.out"
    output.write_text((FIXTURES / "h100-captures" / "torchrun-2.11-duplicate-gpu-nccl-invalid-usage.txt").read_text())
    ended = RUNNING.replace("RUNNING", "FAILED").replace("EndTime=Unknown", "EndTime=2030-01-01T00:00:00") \
        .replace("/home/u/4711.out", str(output))
    env = job_site(site, tmp_path, ended)
    out = tmp_path / "job.tar.gz"
    assert bundle(site, out, "gpu017", "--job", "4711", **env).returncode == 0
    got = members(out)
    diag = json.loads(got["hc-bundle-gpu017-job4711/job/diagnosis.json"])
    assert diag["class"] != "unknown" and diag["inputs"] >= 1
    rows = {row["name"]: row for row in manifest(got)["items"]}
    assert f"`hc diagnose logs {output}`" in rows["job/diagnosis.json"]["source"]
    output.unlink()  # not readable here: said, with what to run
    assert bundle(site, out, "gpu017", "--job", "4711", **env).returncode == 0
    missing = {x["name"]: x["reason"] for x in manifest(members(out))["missing"]}
    assert "has ended (FAILED)" in missing["job/diagnosis.json"] and "hc diagnose logs" in missing["job/diagnosis.json"]


def test_every_bundle_is_a_line_in_the_audit_log(site, tmp_path):
    out = tmp_path / "a.tar.gz"
    before = (site / "audit.jsonl").read_text().splitlines() if (site / "audit.jsonl").exists() else []
    assert bundle(site, out, "gpu017").returncode == 0
    after = (site / "audit.jsonl").read_text().splitlines()
    (line,) = [json.loads(x) for x in after[len(before):]]
    assert line["action"] == "bundle" and line["nodes"] == "gpu017" and line["path"] == str(out)
    assert line["redacted"] == manifest(members(out))["redacted"] and line["by"]


# ------------------------------------------------------------------ the pure assembly


def test_redaction_keeps_what_is_no_secret():
    r = Redactor([WEBHOOK])
    text = (f'status: PASS\n"key": "ib.rate_gbps"\ntoken_header: Authorization\nPASS=3 FAIL=1\n'
            f"password = hunter2hunter2\nAuthorization: Basic dXNlcjpwYXNz\nurl {WEBHOOK}\n"
            "git clone https://me:pat123@example.com/r.git\nX_SESSION_ID=abc\n")
    out, count = r.text(text)
    assert "status: PASS" in out and '"key": "ib.rate_gbps"' in out and "token_header: Authorization" in out
    assert "PASS=3 FAIL=1" in out
    for secret in ("hunter2hunter2", "dXNlcjpwYXNz", WEBHOOK, "pat123", "abc"):
        assert secret not in out
    assert count == 5
    value, n = r.value({"limit": {"key": "gpu.model"}, "env": {"AWS_SECRET_ACCESS_KEY": "x" * 10, "USER": "u"},
                        "on": None})
    assert value == {"limit": {"key": "gpu.model"}, "env": {"AWS_SECRET_ACCESS_KEY": REDACTED, "USER": "u"},
                     "on": None} and n == 1
    assert secret_name("GITHUB_TOKEN") and secret_name("apiKey") and not secret_name("PWD")


def test_member_names_are_safe_and_relative():
    assert safe_name("/etc/../../passwd") == "etc/__/__/passwd"
    assert safe_name("a b/$(x)") == "a_b/__x_"
    built = build("hc-bundle-n1", {"node": "n1"}, [Item("../../evil", "test", text="x\n")], [], Redactor())
    with tarfile.open(fileobj=io.BytesIO(built.data), mode="r:gz") as tar:
        assert sorted(tar.getnames()) == ["hc-bundle-n1/MANIFEST.json", "hc-bundle-n1/README.txt",
                                          "hc-bundle-n1/__/__/evil"]
    assert gzip.decompress(built.data)  # one gzip member


def test_a_log_cut_to_the_cap_keeps_its_newest_lines():
    text = "".join(f"line {i}\n" for i in range(1000))
    built = build("b", {}, [Item("k.txt", "t", text=text, keep="tail"), Item("j.txt", "t", text=text)],
                  [Missing("x", "why")], Redactor(), Caps(item=500, total=10_000))
    with tarfile.open(fileobj=io.BytesIO(built.data), mode="r:gz") as tar:
        tail = tar.extractfile("b/k.txt").read().decode()  # type: ignore[union-attr]
        head = tar.extractfile("b/j.txt").read().decode()  # type: ignore[union-attr]
    assert tail.endswith("line 999\n") and tail.startswith("line ") and len(tail) <= 500
    assert head.startswith("line 0\n") and head.endswith("\n") and len(head) <= 500
    assert built.manifest["missing"] == [{"name": "x", "reason": "why"}]


# -------------------------------------------------------------- atomic, never partial


def test_a_failed_write_leaves_no_file_and_no_temporary(site, tmp_path, monkeypatch):
    from healthcheck.core import atomic

    def refuse(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(atomic.os, "replace", refuse)
    monkeypatch.setenv("HC_NODE_NAME", "login1")
    out = tmp_path / "out" / "b.tar.gz"
    out.parent.mkdir()
    config = load_config(site / "hc.yaml")
    with pytest.raises(HcError, match="No space left"):
        ob.make_bundle(config, ob.BundleRequest(node="gpu017", output=out))
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("where", ["missing-dir/b.tar.gz", "a-dir", "a-link"])
def test_an_output_that_cannot_be_written_is_one_line_and_exit_4(site, tmp_path, where):
    (tmp_path / "a-dir").mkdir()
    (tmp_path / "victim").write_text("precious")
    (tmp_path / "a-link").symlink_to(tmp_path / "victim")
    r = bundle(site, tmp_path / where, "gpu017")
    err = r.stderr.decode().strip()
    if where == "a-dir":  # Click refuses it as it refuses any -o that is a directory (usage, then the line)
        assert r.returncode == 4 and err.splitlines()[-1].endswith("is a directory."), err
    else:
        assert r.returncode == 4 and len(err.splitlines()) == 1 and "cannot write" in err, err
    assert (tmp_path / "victim").read_text() == "precious" and not (tmp_path / "missing-dir").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-dir", "a-link", "victim"]


def test_an_unwritable_output_is_refused_before_anything_is_gathered(site, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only directory")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        r = bundle(site, ro / "b.tar.gz", "gpu017")
    finally:
        ro.chmod(0o755)
    err = r.stderr.decode().strip()
    assert r.returncode == 4 and len(err.splitlines()) == 1 and "not writable" in err
    assert list(ro.iterdir()) == []


def test_a_damaged_history_or_audit_log_costs_the_bundle_only_what_they_hold(site, tmp_path):
    """The hook reports are still bundled, the history's loss said in the manifest; an audit log
    that cannot take the line is a warning, and the bundle stands (exit 0)."""
    import shutil

    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    cfg = copy / "hc.yaml"
    cfg.write_text(cfg.read_text().replace(str(site), str(copy)))
    (copy / "h.sqlite").write_bytes(b"not a database" * 100)
    for stale in copy.glob("h.sqlite-*"):
        stale.unlink()
    (copy / "audit.jsonl").unlink(missing_ok=True)
    (copy / "audit.jsonl").mkdir()
    out = tmp_path / "b.tar.gz"
    r = bundle(copy, out, "gpu017")
    assert r.returncode == 0, r.stderr.decode()
    assert "hc: warning: bundle written, but not recorded in the audit log" in r.stderr.decode()
    got = members(out)
    missing = {x["name"]: x["reason"] for x in manifest(got)["missing"]}
    assert missing["history"].startswith("the run history could not be read")
    assert "hook-reports/health-latest.json" in short(got) and "history/runs.json" not in short(got)
