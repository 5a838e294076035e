"""The house rules issue 21 measured, held by the suite so they cannot drift back: no import
cycle between hc's files (a lazy import inside a function counts: it is a cycle deferred,
not removed), no private name taken from another module, no docstring or comment that
sends the reader to a document outside the repository."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest
from support import REPO

PACKAGE = REPO / "healthcheck"


def modules() -> dict[str, Path]:
    """{dotted module name: its file} for every module of the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


@functools.cache
def parsed(path: Path) -> tuple[str, ast.Module]:
    """A file's source and its syntax tree, read and parsed once for all the rules here (each
    rule walked every file's tree: parsing ~400 files three times cost ~25 s of CI's CPU)."""
    source = path.read_text()
    return source, ast.parse(source, str(path))


@pytest.fixture(scope="module")
def package_parsed() -> None:
    """Every file parsed once, for the rules that walk them all: a module-scoped fixture also
    keeps those tests in one xdist worker (tests/riggroup.py), where the cache is shared."""
    for path in modules().values():
        parsed(path)


def imported_names(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, str | None]]:
    """(module imported, name taken from it or None) for every import in the file, at any depth,
    except those under `if TYPE_CHECKING:` (annotations only: no import at run time)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    out: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.extend((base, alias.name) for alias in node.names)
    return out


def import_graph() -> tuple[dict[str, set[str]], list[tuple[str, str, str]]]:
    """The file-to-file import graph of the package, and every (importer, module, name) taken."""
    mods = modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    taken: list[tuple[str, str, str]] = []
    for module, path in mods.items():
        _, tree = parsed(path)
        for target, name in imported_names(tree, module, path.name == "__init__.py"):
            if name and f"{target}.{name}" in mods:  # `from pkg import module`: the module itself
                target, name = f"{target}.{name}", None
            if target in mods and target != module:
                graph[module].add(target)
                if name:
                    taken.append((module, target, name))
    return graph, taken


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one file (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_cycle_between_files(package_parsed):
    graph, _ = import_graph()
    assert cycles(graph) == []


def test_the_cycle_finder_finds_one():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_attributes_used() -> list[str]:
    """`alias._name` where alias is another hc module the file imported (`import
    healthcheck.x as alias`, `from healthcheck.pkg import module as alias`)."""
    mods = modules()
    found = []
    for module, path in mods.items():
        _, tree = parsed(path)
        aliases: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                aliases.update({a.asname: a.name for a in node.names if a.asname and a.name in mods})
            elif isinstance(node, ast.ImportFrom) and node.module:
                aliases.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names
                                if f"{node.module}.{a.name}" in mods})
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and aliases[node.value.id] != module and private(node.attr)):
                found.append(f"{module}:{node.lineno} uses {node.attr} of {aliases[node.value.id]}")
    return found


def test_no_private_name_is_taken_from_another_module(package_parsed):
    _, taken = import_graph()
    assert [f"{importer} takes {name} from {target}" for importer, target, name in taken if private(name)] == []
    assert private_attributes_used() == []


OUTSIDE = re.compile(r"shared/notes|shared/DESIGN|\.\./shared|/work/|/tmp/studio")


def test_no_module_sends_the_reader_outside_the_repository():
    """A docstring or comment may cite the repository's own files and public sources (a URL,
    a project's file by name), never a path on the machine it was written on."""
    found = [f"{path.relative_to(REPO)}:{number}: {line.strip()}"
             for path in modules().values()
             for number, line in enumerate(path.read_text().splitlines(), 1) if OUTSIDE.search(line)]
    assert found == []


# The files that may still import inside a function something other than the heavy
# libraries (pyproject.toml: per-file-ignores of PLC0415 under healthcheck/). It may only
# shrink: a file that gains such an import fails here (and in ruff); a file that has none
# left must leave the list.
IMPORT_BASELINE = frozenset({
    "healthcheck/actions/slurm.py",
    "healthcheck/checks/dcgm.py",
    "healthcheck/runners/ssh/connection.py",
    "healthcheck/runners/ssh/paramiko_import.py",
})


def ruff_settings() -> dict:
    tomllib = __import__("tomllib")  # Python 3.11+; the project supports 3.10, the suite runs on 3.11
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]


def imports_inside_functions(source: str, lazy: tuple[str, ...], tree: ast.Module | None = None) -> list[int]:
    """Lines of the imports inside a function, except those of the heavy libraries (`lazy`,
    ruff's banned-module-level-imports) and those with a `noqa: PLC0415` saying why."""
    tree = ast.parse(source) if tree is None else tree
    lines = source.splitlines()
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = ["." if node.level else node.module or ""]
            else:
                continue
            if all(n.split(".")[0] in lazy for n in names) or "noqa: PLC0415" in lines[node.lineno - 1]:
                continue
            found.append(node.lineno)
    return sorted(set(found))


def test_imports_are_at_the_top_outside_a_baseline_that_only_shrinks(package_parsed):
    lint = ruff_settings()
    lazy = tuple(lint["flake8-tidy-imports"]["banned-module-level-imports"])
    assert {"torch", "pynvml", "paramiko"} <= set(lazy)
    ignored = {path for path, rules in lint["per-file-ignores"].items()
               if path.startswith("healthcheck/") and "PLC0415" in rules}
    assert ignored == IMPORT_BASELINE, "the PLC0415 baseline in pyproject.toml may only shrink, with this list"
    inside = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source, tree = parsed(path)
        lines = imports_inside_functions(source, lazy, tree)
        if lines:
            inside[str(path.relative_to(REPO))] = lines
    assert {f: n for f, n in inside.items() if f not in IMPORT_BASELINE} == {}
    assert sorted(IMPORT_BASELINE - set(inside)) == [], "no import left inside a function: leave the baseline"


def test_the_import_finder_sees_a_function_level_import():
    source = ("import os\n\ndef f():\n    from healthcheck.core import units\n    import torch\n"
              "    import json  # noqa: PLC0415 -- why\n    return units\n")
    assert imports_inside_functions(source, ("torch",)) == [4]
