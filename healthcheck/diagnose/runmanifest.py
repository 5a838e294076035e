"""`hc run`'s manifest (schema hc.run/1) of a launcher, not of a rank.

Before issue 19, `hc run -- torchrun ...` wrote one manifest for the agent it wrapped,
claiming rank 0 of world 1 (launcher "none"): read as a rank, that world size makes every
real rank "beyond the world size" and throws away a correct finding. A manifest whose
command is itself a launcher (torchrun, python -m torch.distributed.run, mpirun/mpiexec,
srun) speaks of the process that started the ranks: its rank and world size are not a
rank's, whatever it claims.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

LAUNCHER_NAMES = frozenset({"torchrun", "mpirun", "mpiexec", "orterun", "prterun", "srun"})
TORCH_LAUNCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def starts_ranks(command: Sequence[object]) -> bool:
    """Whether a manifest's command is a launcher: its first word's name, or `python -m`
    with torch's launch module before the script."""
    words = [w for w in command[:64] if isinstance(w, str)]
    if not words:
        return False
    if os.path.basename(words[0]) in LAUNCHER_NAMES:
        return True
    if not os.path.basename(words[0]).startswith("python"):
        return False
    for i, word in enumerate(words[1:], 1):
        if word == "-m":
            return i + 1 < len(words) and words[i + 1] in TORCH_LAUNCH_MODULES
        if not word.startswith("-") or word == "-c":
            return False
    return False


def launcher_manifest(doc: dict) -> bool:
    """A manifest of a launcher (see the module's docstring), not of one rank."""
    command = doc.get("command")
    return isinstance(command, list) and starts_ranks(command)


__all__ = ["LAUNCHER_NAMES", "launcher_manifest", "starts_ranks"]
