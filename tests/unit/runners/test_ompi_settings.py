"""What hc sets on its own mpirun command lines (runners/ompi.py): hc's ssh settings as
mpirun's ssh options, and nothing over what the site set itself."""

from __future__ import annotations

from healthcheck.core.config.schema import SshSettings
from healthcheck.runners import ompi


def test_hcs_ssh_settings_become_mpiruns_ssh_options(tmp_path):
    config = tmp_path / "ssh_config"
    config.write_text("Host n1\n  HostName 10.0.0.1\n")
    ssh = SshSettings(config_file=str(config), known_hosts=[str(tmp_path / "known")],
                      identity_files=[str(tmp_path / "id_ed25519"), str(tmp_path / "id_rsa")], user="ops",
                      port=2222, connect_timeout_s=7.5, accept_new_host_keys=True)
    words = ompi.rsh_args(ssh).split(" ")
    assert words[:2] == ["-F", str(config)]
    pairs = {(words[i], words[i + 1]) for i in range(len(words) - 1)}
    assert {("-o", "BatchMode=yes"), ("-o", "ConnectTimeout=7"), ("-o", "StrictHostKeyChecking=accept-new"),
            ("-o", f"GlobalKnownHostsFile={tmp_path}/known"), ("-i", f"{tmp_path}/id_ed25519"),
            ("-i", f"{tmp_path}/id_rsa"), ("-l", "ops"), ("-p", "2222")} <= pairs


def test_defaults_add_only_what_keeps_ssh_from_prompting():
    words = ompi.rsh_args(SshSettings(config_file="/nonexistent/ssh_config")).split(" ")
    assert words == ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "StrictHostKeyChecking=yes"]


def test_a_path_open_mpi_would_cut_at_its_spaces_is_left_out(tmp_path):
    spaced = tmp_path / "my keys"
    spaced.mkdir()
    (spaced / "ssh_config").write_text("")
    ssh = SshSettings(config_file=str(spaced / "ssh_config"), identity_files=[str(spaced / "id")],
                      known_hosts=[str(spaced / "known")])
    assert "my keys" not in ompi.rsh_args(ssh) and "-F" not in ompi.rsh_args(ssh).split(" ")


def test_the_sites_own_settings_win(tmp_path, monkeypatch):
    ssh = SshSettings()
    with monkeypatch.context() as m:  # this machine's own Open MPI files aside
        m.setattr(ompi, "param_files", lambda environ, mpirun="mpirun": [])
        assert ompi.site_args(ssh, {}, mpirun="/nonexistent/mpirun")[:2] == ("--mca", "plm_rsh_args")
    for name in ("OMPI_MCA_plm_rsh_agent", "OMPI_MCA_plm_rsh_args"):
        assert ompi.site_args(ssh, {"HOME": str(tmp_path), name: "ssh"}, mpirun="/nonexistent/mpirun") == ()
    prefix = tmp_path / "openmpi"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "etc").mkdir()
    (prefix / "bin" / "mpirun").write_text("#!/bin/sh\n")
    (prefix / "bin" / "mpirun").chmod(0o755)
    (prefix / "etc" / "openmpi-mca-params.conf").write_text("  plm_rsh_agent = /usr/bin/ssh -x\n")
    assert ompi.site_args(ssh, {"HOME": str(tmp_path)}, mpirun=str(prefix / "bin" / "mpirun")) == ()
    assert ompi.site_args(ssh, {"HOME": str(tmp_path), "PATH": str(prefix / "bin")}) == ()
