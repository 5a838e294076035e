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


# ------------------------------------------------------------------------------ constraints.txt (issue 18, 0)


def pins() -> dict[str, str]:
    """constraints.txt as {normalized name: exact version}; every line must be NAME==VERSION."""
    out = {}
    for line in (REPO / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = requirements.Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==" and "*" not in spec.version, f"not an exact pin: {line}"
            out[_normal(req.name)] = spec.version
    return out


def _normal(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


@pytest.mark.parametrize("group, text", declared())
def test_every_dependency_is_pinned_for_ci_within_its_range(group, text):
    """CI installs constraints.txt's versions (bin/install --dev): a dependency's new release
    cannot turn main red overnight, and the pins cannot leave the ranges users get."""
    req = requirements.Requirement(text)
    pinned = pins().get(_normal(req.name))
    assert pinned is not None, f"{group}: {req.name} is not pinned in constraints.txt"
    assert req.specifier.contains(pinned, prereleases=True), f"{req.name}=={pinned} is outside {req.specifier}"


def test_torch_is_pinned_to_the_ci_build():
    assert pins()["torch"] == "2.13.0"


def test_the_bandwidth_extra_brings_numpy_along_with_torch():
    """Without numpy every torch start warns 'Failed to initialize NumPy' (into every pair test's evidence)."""
    bandwidth = [requirements.Requirement(r).name for g, r in declared() if g == "bandwidth"]
    assert {"torch", "numpy"} <= set(bandwidth)


def test_torch_starts_without_a_numpy_warning_here():
    import subprocess
    import sys

    pytest.importorskip("torch")
    r = subprocess.run([sys.executable, "-W", "always", "-c", "import torch; torch.zeros(1)"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "NumPy" not in r.stderr, r.stderr[-500:]


def test_ci_installs_with_the_constraints_and_a_users_install_with_the_ranges(tmp_path):
    """bin/install with a stand-in python: which pip commands it runs for --dev and for users."""
    import os
    import subprocess

    log = tmp_path / "pip.log"
    python = tmp_path / "python3"
    # a stand-in interpreter: `-m venv DIR` makes DIR/bin/{python,hc}; `-m pip ...` is noted
    python.write_text(f"""#!/bin/sh
case "$1 $2" in
  "-m venv") mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; printf '#!/bin/sh\\necho hc 0.0\\n' > "$3/bin/hc"
             chmod +x "$3/bin/hc" ;;
  "-m pip") shift 2; echo "$*" >> {log} ;;
  "-c "*) case "$2" in *torch*) exit 1 ;; *sys.executable*) echo "$0"; echo "$0" ;; esac ;;
esac
exit 0
""")
    python.chmod(0o755)
    env = dict(os.environ, PYTHON=str(python))
    for args in (["--dev", "--prefix", str(tmp_path / "dev")], ["--dev", "--no-torch", "--prefix", str(tmp_path / "nt")],
                 ["--prefix", str(tmp_path / "user")]):
        r = subprocess.run([str(REPO / "bin" / "install"), *args], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    installs = log.read_text().splitlines()
    constraint = f"-c {REPO}/constraints.txt"
    dev = [line for line in installs if "-e " in line]
    assert len(dev) == 2 and all(constraint in line for line in dev), installs
    assert any("torch==2.13.0" in line and constraint in line for line in installs), installs
    (user,) = [line for line in installs if "-e " not in line and "torch==" not in line]
    assert "-c " not in user  # users keep pyproject.toml's ranges
