"""docs/config-reference.md from the config schema (core/config/schema.py).

Every key of the main file and of a fabric file, with its type and range (from the
types' msgspec `Meta`), its default (from the schema) and what it means (the schema's
own comments and docstrings, read from its source). Nothing is written by hand, so the
page cannot drift from what `hc config validate` accepts.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import textwrap
import tokenize
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

import msgspec

from healthcheck.core.config import schema

UNSET = object()


@dataclass(frozen=True)
class Key:
    name: str
    kind: str  # the type in words
    default: str
    meaning: str
    section: type | None  # a nested section documented on its own


def field_comments(cls: type) -> dict[str, str]:
    """Field name -> the comments that say what it is: the lines right above it and the one
    after it, as the schema's author wrote them."""
    source = textwrap.dedent(inspect.getsource(cls))
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    out: dict[str, str] = {}
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line >= 1 and line in comments and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        after = [comments[n] for n in range(node.lineno, (node.end_lineno or node.lineno) + 1) if n in comments]
        out[node.target.id] = "; ".join(" ".join(part) for part in (above, after) if part)
    return out


def describe(tp: Any) -> tuple[str, type | None]:
    """A type in words (with its range), and the section struct it names, if any."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        base, *extras = typing.get_args(tp)
        words, section = describe(base)
        limits = [_meta_words(m) for m in extras if isinstance(m, msgspec.Meta)]
        return " ".join([words, *[w for w in limits if w]]), section
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        words, section = describe(args[0]) if len(args) == 1 else (" or ".join(describe(a)[0] for a in args), None)
        return f"{words}, or null", section
    if origin is Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(tp)), None
    if origin is list:
        words, section = describe(typing.get_args(tp)[0])
        return f"list of {words}", section
    if origin is dict:
        key, value = typing.get_args(tp)
        words, section = describe(value)
        return f"mapping of {describe(key)[0]} to {words}", section
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return "section", tp
    return {str: "text", int: "integer", float: "number", bool: "true/false", dict: "mapping"}.get(tp, str(tp)), None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _meta_words(meta: msgspec.Meta) -> str:
    low = f">= {_number(meta.ge)}" if meta.ge is not None else f"> {_number(meta.gt)}" if meta.gt is not None else ""
    high = f"<= {_number(meta.le)}" if meta.le is not None else f"< {_number(meta.lt)}" if meta.lt is not None else ""
    bounds = ", ".join(b for b in (low, high) if b)
    if meta.pattern is not None:
        return f"({schema.PATTERN_WORDS.get(meta.pattern, 'matching ' + meta.pattern)})"
    return f"({bounds})" if bounds else ""


def default_words(value: Any) -> str:
    if value is UNSET:
        return "required"
    if isinstance(value, msgspec.Struct) and value == type(value)():
        return "its keys' defaults"
    return f"`{json.dumps(msgspec.to_builtins(value))}`"  # a section with other defaults than its keys' shows them


def keys(cls: type) -> Iterator[Key]:
    hints = typing.get_type_hints(cls, include_extras=True)
    comments = field_comments(cls)
    for field in msgspec.structs.fields(cls):
        if field.default is not msgspec.NODEFAULT:
            default = field.default
        elif field.default_factory is not msgspec.NODEFAULT:
            default = field.default_factory()
        else:
            default = UNSET
        kind, section = describe(hints[field.name])
        yield Key(field.name, kind, default_words(default), comments.get(field.name, ""), section)


def cell(text: str) -> str:
    return text.replace("|", "\\|")


def sections(root: type, title: str) -> Iterator[str]:
    """One table per section struct, each documented once, at the first path it is met."""
    placed: dict[type, str] = {root: ""}  # section -> the one path it is documented at
    queue: list[tuple[str, type]] = [("", root)]
    while queue:
        path, cls = queue.pop(0)
        yield f"### `{path}`\n" if path else f"### {title}\n"
        doc = cls.__dict__.get("__doc__")  # its own, not the base class's
        if doc:
            yield " ".join(doc.split()) + "\n"
        yield "| key | type | default | meaning |\n|---|---|---|---|"
        for key in keys(cls):
            kind = key.kind
            if key.section is not None:
                if key.section not in placed:
                    here = f"{path}.{key.name}" if path else key.name
                    placed[key.section] = here + (".*" if kind.startswith("mapping") else "")
                    queue.append((placed[key.section], key.section))
                at = placed[key.section]
                kind = kind.replace("section", f"section [`{at}`](#{anchor(at)})")
            yield f"| `{key.name}` | {cell(kind)} | {cell(key.default)} | {cell(key.meaning)} |"
        yield ""


def anchor(path: str) -> str:
    """GitHub's anchor for a heading `` `path` ``: lower case, dots and backticks dropped."""
    return "".join(c for c in path.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


HEADER = """\
<!-- generated by `python -m healthcheck.cli.docgen` from healthcheck/core/config/schema.py: do not edit -->
# Configuration reference

Every key hc reads, with its type, range and default, generated from the schema
`hc config validate` checks against (`healthcheck/core/config/schema.py`). How the files
fit together is in [configuration.md](configuration.md). Units are in key names: `mtu`
(bytes), `*_gbps` (gigabits/s), `*_gbytes_per_s` (gigabytes/s, nccl-tests' busbw),
`*_gib` (GiB), `*_mib` (MiB), `*_c` (Celsius), `*_s` (seconds). In a fabric, a limit
left out (`null`) is no expectation: the check only looks at what is there; a key's
meaning says what `null` does elsewhere. Unknown keys are errors.
"""


def render() -> str:
    out = [HEADER, "## The main file (`/etc/hc/hc.yaml`)\n"]
    out += sections(schema.MainConfig, "Top level")
    out += ["## A fabric file (`fabrics/NAME.yaml`)\n",
            "The same keys are allowed under an `overrides:` pattern of the main file.\n"]
    out += sections(schema.Fabric, "Top level of a fabric")
    return "\n".join(out).rstrip() + "\n"
