"""The documentation pages generated from the code, so they cannot drift from it:
docs/config-reference.md (the config schema), docs/findings.md (the check registry and
the finding catalogue) and docs/man/hc.1 (the Click commands).

    python -m healthcheck.cli.docgen           write them (from a checkout)
    python -m healthcheck.cli.docgen --check   exit 1 naming each page that is stale

tests/unit/cli/test_docs_generated.py runs the check, so a change to the schema, a check,
a finding or a command's help fails until the pages are written again.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from healthcheck.cli.docgen import config_reference, findings, manpage

# page, relative to the checkout's root -> its generator
PAGES: dict[str, Callable[[], str]] = {
    "docs/config-reference.md": config_reference.render,
    "docs/findings.md": findings.render,
    "docs/man/hc.1": manpage.render,
}


def checkout_root() -> Path:
    """The checkout this module lives in (the pages are not part of an installed hc)."""
    return Path(__file__).resolve().parents[3]


def stale(root: Path) -> list[str]:
    """The pages whose text is not what their generator makes now (missing ones too)."""
    out = []
    for page, render in PAGES.items():
        path = root / page
        if not path.is_file() or path.read_text() != render():
            out.append(page)
    return out


def write(root: Path) -> list[str]:
    """Write every page; return those that changed."""
    changed = []
    for page, render in PAGES.items():
        path = root / page
        text = render()
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            changed.append(page)
    return changed
