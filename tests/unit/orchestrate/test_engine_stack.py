"""A check or a provider that raises is an ERROR whose evidence is its traceback, loaded
only then (orchestrate/engine.stack: a healthy run never imports traceback)."""

from __future__ import annotations

from healthcheck.orchestrate.engine import stack


def test_the_stack_of_the_exception_being_handled():
    def broken() -> None:
        raise ZeroDivisionError("deliberately")

    try:
        broken()
    except ZeroDivisionError:
        text = stack(limit=5)
    assert text.startswith("Traceback") and "in broken" in text and text.rstrip().endswith(
        "ZeroDivisionError: deliberately")
