"""hc: health checks for Slurm/MPI GPU clusters."""

__version__ = "0.1.0"
