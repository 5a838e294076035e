"""Where commands run: a local subprocess, SSH, srun. Runners own timeouts and process groups."""
