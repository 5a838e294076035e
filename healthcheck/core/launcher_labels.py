"""The labels a launcher writes before each line of its ranks' output: one grammar.

Both readers of labelled output use it: parsers/lines.py (any tool's text pasted or
captured through a launcher) and runners/launch.py (the output of a launcher hc started
itself). They are layers apart (parsers | runners), so the grammar lives here, below both.

- srun --label: `%*d: ` (the task id right-aligned to the width of the largest id), so
  "0: text" or "  3: text" in a job of 100 tasks. The space after the colon is part of
  the label; "12:34:56" is no label.
- mpirun --tag-output (Open MPI): `[jobid,rank]<stdout|stderr|stddiag>:` with the rank's
  text glued to it; the tag also comes mid-line where a rank's print arrived in pieces.
  horovodrun's own launcher (gloo) writes the same tag without the job id, `[rank]<stdout>:`
  (horovod/runner/common/util/safe_shell_exec.py's prefix, `time.asctime()` before it with
  --prefix-timestamp).
- torchrun --tee: `[<role><local rank>]:` ("[default3]:"); torch's own `[rank<N>]:`
  (the global rank, >= 2.2) is not a role.
- torchx: `<role>/<replica> [<local rank>]:` ("trainer/0 [0]:"), its own label before
  torchrun's with an empty role.
- MPICH / Intel MPI `-prepend-rank`: `[<rank>] `. A bare `[N]` is also NCCL's `[cudaDev]`
  and torch's desync report's, so a reader takes it only where the parser says what
  follows it (parsers/lines.py `relabelled`).

Every pattern is anchored where it is used and bounded, so a hostile line costs at most
the pattern's bound at each place it is tried.
"""

from __future__ import annotations

import re

from healthcheck.core.lazyre import lazy_compile

# srun --label: up to 8 spaces of padding, the task id, ": " (or the end of an empty line)
SRUN_LABEL = lazy_compile(r" {0,8}(\d{1,7}):(?: |$)", re.ASCII)
# mpirun --tag-output (and horovodrun's, no job id): the tag alone, nothing after it taken
# (a chunk is glued to the next)
MPIRUN_TAG = lazy_compile(r"\[(?:\d{1,9},)?(\d{1,9})\]<(stdout|stderr|stddiag)>:", re.ASCII)
# torchrun --tee: `[default3]:`; the role's trailing digits are the local rank
TORCHRUN_ROLE = lazy_compile(r"\[(?!rank\d)([A-Za-z_][\w\-]{0,63}?)(\d{1,7})\]:", re.ASCII)
# torch's own global-rank prefix (>= 2.2): `[rank3]:`
TORCH_RANK = lazy_compile(r"\[rank(\d{1,7})\]:", re.ASCII)
# torchx: `trainer/0 [0]:` (role, replica, local rank)
TORCHX_LABEL = lazy_compile(r"([A-Za-z_][\w\-]{0,63})/(\d{1,7}) \[(\d{1,7})\]: ?", re.ASCII)
# MPICH / Intel MPI -prepend-rank: `[155] ` (only where the parser says what follows: see above)
MPICH_RANK = lazy_compile(r"\[(\d{1,9})\] ", re.ASCII)


def torchrun_role(role: str) -> re.Pattern[str]:
    """The `--tee` label of one role ("default" -> `[default3]:`)."""
    return re.compile(rf"\[{re.escape(role[:64])}(\d{{1,7}})\]:", re.ASCII)
