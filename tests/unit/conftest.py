"""tests/unit mirrors the package: tests/unit/<package>/test_*.py for healthcheck/<package>/,
and contracts/ and suite/ for what crosses packages. Some test modules reuse another's
helpers by its module name (`from test_hooks import ...`); pytest's default import mode puts
only a test module's own folder on sys.path, so every folder here goes on it, whichever file
a run starts from. Test file names stay unique across tests/unit (pytest refuses two
modules of one name in this mode)."""

from __future__ import annotations

import sys
from pathlib import Path

for _folder in sorted(p for p in Path(__file__).resolve().parent.iterdir() if p.is_dir() and p.name != "__pycache__"):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))
