"""The Slurm transport's merge of labelled srun output, with an srun stand-in that runs
the real `hc node --local` once per node (the real srun is covered on the rig)."""

from __future__ import annotations

import sys

from support import run_hc, write_stub


def srun_stand_in(tmp_path, script_tail: str = "", dead: str = "none") -> str:
    bin_dir = tmp_path / "bin"
    # like `srun --label`: run the command once per node of --nodelist, prefix each line
    write_stub(bin_dir, "srun", f"""
nodes=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nodelist=*) nodes="${{1#--nodelist=}}" ;;
    --*) ;;
    *) break ;;
  esac
  shift
done
shift  # the hc command itself
i=0
for n in $({sys.executable} -c 'import sys; from ClusterShell.NodeSet import NodeSet; print(" ".join(NodeSet(sys.argv[1])))' "$nodes"); do
  [ "$n" = "{dead}" ] && continue  # a node whose task never started
  HC_NODE_NAME=$n {sys.executable} -m healthcheck "$@" | sed "s/^/$i: /"
  i=$((i+1))
done
{script_tail}
exit 2
""")
    return str(bin_dir)


def config(tmp_path, mtu=65536):
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text(f"net:\n  interfaces:\n    lo: {{mtu: {mtu}}}\n")
    path = tmp_path / "hc.yaml"
    path.write_text(f"default_fabric: t\nhistory: {{path: {tmp_path}/h.sqlite}}\n")
    return path


def test_sweep_via_slurm_merges_every_nodes_report(tmp_path, validate_report):
    bin_dir = srun_stand_in(tmp_path)
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n[1-3]", "--tier", "quick", "--config", str(config(tmp_path)),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    report = validate_report(r.stdout)
    assert r.returncode == 0, r.stderr
    assert [(n["node"], n["mode"], n["status"]) for n in report["nodes"]] == [("n1", "slurm", "PASS"), ("n2", "slurm", "PASS"), ("n3", "slurm", "PASS")]
    assert report["command"] == "sweep"


def test_a_node_srun_gave_no_report_for_is_error_not_fail(tmp_path, validate_report):
    bin_dir = srun_stand_in(tmp_path, 'echo "srun: error: n4: task 3: Exited with exit code 1" >&2', dead="n4")
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n[1-3]", "--tier", "quick", "--config", str(config(tmp_path, 1500)),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    report = validate_report(r.stdout)
    assert r.returncode == 2
    assert {n["status"] for n in report["nodes"]} == {"FAIL"}
    r = run_hc("sweep", "--via", "slurm", "--nodes", "n[1-4]", "--tier", "quick", "--config", str(config(tmp_path)),
               "--format", "json", env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    report = validate_report(r.stdout)
    n4 = next(n for n in report["nodes"] if n["node"] == "n4")
    assert n4["status"] == "ERROR" and n4["findings"][0]["id"] == "hc.E006"
    assert "Exited with exit code 1" in n4["findings"][0]["message"]


def test_sweep_input_errors(tmp_path):
    cfg = config(tmp_path)
    for args, text in [
        (["sweep"], "give exactly one of --nodes, --hostfile, --partition"),
        (["sweep", "--nodes", "a", "--partition", "p"], "give exactly one"),
        (["sweep", "--nodes", "bad;name"], "not a valid"),
        (["sweep", "--hostfile", str(tmp_path / "missing")], "cannot read"),
        (["sweep", "--nodes", "a", "--dry-run"], "--dry-run only applies with --act"),
        (["sweep", "--nodes", "a", "--checks", "nope"], "unknown check or family"),
    ]:
        r = run_hc(*args, "--config", str(cfg))
        assert r.returncode == 4 and text in r.stderr.decode(), (args, r.stderr)
    (tmp_path / "hosts").write_text("ok1\nbad;host\n")
    r = run_hc("sweep", "--hostfile", str(tmp_path / "hosts"), "--config", str(cfg))
    assert r.returncode == 4 and b"line 2" in r.stderr
