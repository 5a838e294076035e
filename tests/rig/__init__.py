"""hc's integration-test rig: fake hosts (network namespaces + sshd) and a private
Slurm cluster on one machine. The Python API is in rig.py; the shell scripts next to
it do the work and can be used by hand (see each script's header)."""

from .rig import (  # noqa: F401
    Host,
    NetnsRig,
    Result,
    RigError,
    RigTimeout,
    SlurmRig,
    rig_available,
    run,
    wait_for,
)
