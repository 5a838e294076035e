"""`hc run -- CMD`: the job wrapper that makes a hang diagnosable after the fact.

envset.py    the per-job log directory, the NCCL/torch debug variables hc sets (never
             over the user's), the per-rank manifest (rank, host, pid, what was set)
preflight.py the checks before the job: launcher variables, CUDA_VISIBLE_DEVICES under
             torchrun, the master port, the node's quick tier (a subprocess)
straggler.py a short all-reduce + barrier across every rank (gloo or NCCL), per-rank step
             times against the median, every rank's preflight verdict exchanged
tee.py       the process between the command and its stdout/stderr: the console as before,
             every line with its time (and the exit) in the rank's output file
launcher.py  hc around a launcher: not a rank; torchrun's ranks wrapped through PYTHON_EXEC

The command is then exec'd in this process (same pid, same argv, the job's exit code):
NCCL's `%p` in the debug file name is the pid the manifest records for the rank.
"""
