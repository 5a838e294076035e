"""The docs pages generated from the code (healthcheck/cli/docgen): current in the
checkout, and a stale one caught (issue 21, section 6)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import msgspec
import pytest
from support import REPO

from healthcheck.cli import COMMANDS
from healthcheck.cli.docgen import config_reference, findings, manpage
from healthcheck.core import catalogue
from healthcheck.core.config import schema


def docgen(*args: str) -> subprocess.CompletedProcess:
    """The generator in a process of its own: the pages are made from hc's catalogue and
    registry as an install loads them, not from this test process's (where other tests
    declare findings and checks of their own)."""
    return subprocess.run([sys.executable, "-m", "healthcheck.cli.docgen", *args], capture_output=True, text=True,
                          timeout=120, cwd=REPO)


def stale_pages(root) -> list[str]:
    r = docgen("--check", "--root", str(root))
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, r.stderr
    return sorted(re.findall(r"(docs/\S+) is stale", r.stderr))


def test_every_generated_page_is_current():
    """Fails after a change to the schema, a check, a finding or a command's help until
    `python -m healthcheck.cli.docgen` writes the pages again."""
    assert stale_pages(REPO) == []


def test_a_changed_or_missing_page_is_stale_and_check_exits_1(tmp_path):
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    assert docgen("--check", "--root", str(tmp_path)).returncode == 0
    page = tmp_path / "docs" / "findings.md"
    page.write_text(page.read_text().replace("ib.E002", "ib.E099", 1))
    (tmp_path / "docs" / "man" / "hc.1").unlink()
    assert stale_pages(tmp_path) == ["docs/findings.md", "docs/man/hc.1"]
    assert docgen("--check", "--root", str(tmp_path)).returncode == 1
    assert docgen("--root", str(tmp_path)).returncode == 0 and stale_pages(tmp_path) == []


def test_the_check_runs_as_a_module_outside_a_checkout(tmp_path):
    r = subprocess.run([sys.executable, "-m", "healthcheck.cli.docgen", "--check", "--root", str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 4 and "is not a directory" in r.stderr and "Traceback" not in r.stderr


def structs(cls: type, seen: set[type]) -> None:
    seen.add(cls)
    for field in msgspec.structs.fields(cls):
        for inner in re.findall(r"\w+", str(field.type)):
            nested = getattr(schema, inner, None)
            if isinstance(nested, type) and issubclass(nested, msgspec.Struct) and nested not in seen:
                structs(nested, seen)


def test_the_config_reference_has_a_row_for_every_key_of_every_section():
    page = config_reference.render()
    seen: set[type] = set()
    structs(schema.MainConfig, seen)
    structs(schema.Fabric, seen)
    assert len(seen) > 25
    rows = set(re.findall(r"^\| `(\w+)` \|", page, re.M))
    assert {f.name for cls in seen for f in msgspec.structs.fields(cls)} <= rows
    assert page.count("\n### ") == len(seen)  # each section once


def test_a_section_reused_with_other_defaults_shows_them():
    """slurm.epilogue is the prologue's type with its own defaults: its row says them."""
    page = config_reference.render()
    assert re.search(r'^\| `epilogue` \| section \[`slurm.prologue`\].*\| `\{"tier": "epilogue", "deadline_s": 30', page, re.M)
    assert re.search(r'^\| `deadline_s` \| number \(> 0, <= 86400\) \| `5.0` \|', page, re.M)


def test_the_schema_comments_are_the_meaning():
    comments = config_reference.field_comments(schema.IbWriteBwSettings)
    assert comments["size"] == "-s"
    assert comments["per_hca_min_gbps"].startswith("Gb/s a healthy HCA reaches; None: rate_fraction")
    assert "port_base" in comments and "#" not in comments["port_base"]


def test_the_findings_page_has_every_catalogued_id_once():
    page = findings.render()
    assert re.findall(r"^#### (\S+)$", page, re.M) == sorted(catalogue.CATALOGUE)
    assert "| `net.mtu` | quick, standard, deep |" in page


def test_rendering_the_man_page_leaves_hc_help_as_an_operator_sees_it():
    """Click caches a command's help option from the first context that asks for it: the
    page once built bare contexts, documented `--help` without `-h` and left every later
    in-process `hc --help` that way (a CI failure that depended on test order)."""
    page = manpage.render()
    assert "\\fB\\-h, \\-\\-help\\fR" in page
    from click.testing import CliRunner

    from healthcheck.cli import cli
    for argv in (["--help"], ["report", "diff", "--help"], ["diagnose", "--help"]):
        out = CliRunner().invoke(cli, argv).output
        assert "-h, --help" in out, (argv, out[-300:])


def test_the_man_page_has_every_command_and_renders():
    page = manpage.render()
    sections = re.findall(r'^\.SS "(.+)"$', page, re.M)
    assert {f"hc {name}" for name in COMMANDS} <= set(sections)
    assert "hc report tickets" in sections and "hc diagnose job" in sections
    requests = {line.split()[0] for line in page.splitlines() if line.startswith((".", "'"))}
    assert requests == {'.\\"', ".TH", ".SH", ".SS", ".B", ".PP", ".TP", ".nf", ".fi"}  # help text never one
    if not shutil.which("man"):
        pytest.skip("no man to render it")
    r = subprocess.run(["man", "-l", str(REPO / "docs" / "man" / "hc.1")], capture_output=True, text=True,
                       env={"MANWIDTH": "80", "PATH": "/usr/bin:/bin", "MANPAGER": "cat", "PAGER": "cat"}, timeout=60)
    assert r.returncode == 0 and "hc sweep" in r.stdout



def test_the_readme_links_every_page_of_docs():
    readme = (REPO / "README.md").read_text()
    pages = {p.relative_to(REPO).as_posix() for p in (REPO / "docs").rglob("*") if p.suffix in (".md", ".1")}
    assert {"docs/config-reference.md", "docs/findings.md", "docs/man/hc.1"} <= pages
    assert {page for page in pages if f"]({page})" not in readme} == set()


def github_anchor(heading: str) -> str:
    kept = "".join(c for c in heading.strip().lower() if c.isalnum() or c in "-_ ")
    return kept.replace(" ", "-")


def test_every_relative_link_of_the_docs_reaches_a_file_and_heading():
    """Pages moved out of the README: a link to a file or an anchor that moved is caught."""
    sources = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = []
    for source in sources:
        text = re.sub(r"```.*?```", "", source.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto: not ours to check
            path, _, anchor = target.partition("#")
            file = (source.parent / path).resolve() if path else source
            if not file.exists():
                broken.append(f"{source.name}: {target}")
            elif anchor and file.suffix == ".md":
                headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", file.read_text(), flags=re.S), re.M)
                if anchor not in {github_anchor(h) for h in headings}:
                    broken.append(f"{source.name}: {target}")
    assert broken == []
