"""pyproject.toml's dependencies: every one bounded above at a next major version, and
what this environment runs hc with inside those bounds."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import pytest
from support import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+
requirements = pytest.importorskip("packaging.requirements")


def declared() -> list[tuple[str, str]]:
    """(group, requirement) for the dependencies and every optional group."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    groups = {"dependencies": project["dependencies"], **project.get("optional-dependencies", {})}
    return [(group, req) for group, reqs in groups.items() for req in reqs]


def test_every_group_is_read():
    groups = {group for group, _ in declared()}
    assert {"dependencies", "bandwidth", "test", "lint"} <= groups


@pytest.mark.parametrize("group, text", declared())
def test_each_dependency_has_a_lower_bound_and_a_next_major_upper_bound(group, text):
    req = requirements.Requirement(text)
    lower = [s for s in req.specifier if s.operator == ">="]
    upper = [s for s in req.specifier if s.operator == "<"]
    assert len(lower) == 1 and len(upper) == 1, f"{group}: {text}: want >=LOW,<MAJOR"
    # "<9", never "<8.3": a bound at a major release, the next after the newest tested
    assert upper[0].version.isdigit(), f"{group}: {text}: upper bound is not a major version"
    assert int(upper[0].version) > int(lower[0].version.split(".")[0]), f"{group}: {text}: empty range"


@pytest.mark.parametrize("group, text", declared())
def test_the_installed_version_is_within_the_bounds(group, text):
    req = requirements.Requirement(text)
    try:
        installed = version(req.name)
    except PackageNotFoundError:
        pytest.skip(f"{req.name} is not installed here")
    assert req.specifier.contains(installed, prereleases=True), f"{req.name} {installed} is outside {req.specifier}"
