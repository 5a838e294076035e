"""The tiers and contexts a check can run in, written once. Imports nothing (`hc --help`
and every CLI option that offers a tier read it).

Tiers are cumulative (a quick check also runs in standard and deep); a context is not a
tier: the epilogue runs what a job may have left behind, only the checks that name it.
"""

from __future__ import annotations

TIERS = ("quick", "standard", "deep")
EPILOGUE = "epilogue"
# Contexts that are not tiers: the epilogue runs what a job may have left behind.
CONTEXTS = (EPILOGUE,)
# Every name a check can be registered for, and a command or config can select.
ALL = TIERS + CONTEXTS
