"""The tiers and contexts a check can run in, written once. Imports nothing of hc (`hc --help`
and every CLI option that offers a tier read it), only typing.

Tiers are cumulative (a quick check also runs in standard and deep); a context is not a
tier: the epilogue runs what a job may have left behind, only the checks that name it.
"""

from __future__ import annotations

from typing import Literal, get_args

# The names as types (a config field typed TierOrContext accepts exactly ALL), and as
# tuples taken from those types, so the list stays written once.
Tier = Literal["quick", "standard", "deep"]
# Contexts that are not tiers: the epilogue runs what a job may have left behind.
Context = Literal["epilogue"]
# Every name a check can be registered for, and a command or config can select.
TierOrContext = Literal[Tier, Context]

TIERS: tuple[Tier, ...] = get_args(Tier)
EPILOGUE: Context = "epilogue"
CONTEXTS: tuple[Context, ...] = get_args(Context)
ALL: tuple[TierOrContext, ...] = TIERS + CONTEXTS
