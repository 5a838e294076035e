"""SVG drawn as text, for the HTML report: shapes, escaped labels, colour scales.

No plotting library: the report's charts are a few hundred shapes each, and a page that
must open offline from a ticket needs nothing but the text. Every string that comes from
a report (node names, messages, interface names) goes through `esc`, which escapes for
HTML and XML alike and makes control characters and lone surrogates visible, so a
hostile name is shown, never interpreted. Numbers are written with few digits: a
64-node heat map has 4,032 cells, and bytes per cell are the file's size.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence

from healthcheck.core.status import Status

# the status colours every chart and table shares (and the legend says)
STATUS_FILL: dict[str, str] = {
    Status.PASS.value: "#2e7d32",
    Status.WARN.value: "#f2a900",
    Status.FAIL.value: "#c62828",
    Status.ERROR.value: "#6a1b9a",
    Status.SKIP.value: "#9e9e9e",
}
UNKNOWN_FILL = "#bdbdbd"
# the heat map's scale: low bandwidth dark (the culprit's row reads as a dark band), high light
_RAMP = ((0.0, (0x08, 0x1d, 0x58)), (0.5, (0x22, 0x5e, 0xa8)), (0.8, (0x7f, 0xcd, 0xbb)),
         (1.0, (0xf7, 0xfc, 0xf0)))
# distinct line colours for highlighted series (colour-blind friendly, from Okabe and Ito)
SERIES = ("#d55e00", "#cc79a7", "#e69f00", "#0072b2", "#009e73", "#56b4e9", "#000000", "#f0e442")


def esc(text: object) -> str:
    """Text for HTML or SVG, as text or an attribute value: markup characters escaped,
    control characters and lone surrogates written out (\\x1b, \\ud800) instead."""
    s = str(text)
    if not s.isprintable():
        s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
    return html.escape(s, quote=True)


def clip(text: str, limit: int) -> str:
    """At most `limit` characters, an ellipsis marking a cut (for labels; titles keep all)."""
    return text if len(text) <= limit else text[:max(limit - 1, 0)] + "\u2026"


def num(x: float) -> str:
    """A coordinate or value with at most one decimal, no trailing zero."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


def status_fill(status: str) -> str:
    return STATUS_FILL.get(status, UNKNOWN_FILL)


def ramp(fraction: float) -> str:
    """The heat map's colour for a value at `fraction` of the scale (0 dark, 1 light), as #rrggbb."""
    f = min(max(fraction, 0.0), 1.0)
    for (f0, c0), (f1, c1) in zip(_RAMP, _RAMP[1:], strict=False):
        if f <= f1:
            t = 0.0 if f1 == f0 else (f - f0) / (f1 - f0)
            return "#" + "".join(f"{round(a + (b - a) * t):02x}" for a, b in zip(c0, c1, strict=True))
    return "#" + "".join(f"{v:02x}" for v in _RAMP[-1][1])


def luminance(colour: str) -> float:
    """Relative luminance (WCAG) of #rrggbb: 0 black, 1 white."""
    def channel(hex2: str) -> float:
        c = int(hex2, 16) / 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(colour[i:i + 2]) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _attrs(attrs: dict[str, object]) -> str:
    # keyword arguments name attributes: class_ -> class, stroke_width -> stroke-width
    return "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None)


class Svg:
    """One <svg> element built shape by shape; `render()` gives its text."""

    def __init__(self, width: float, height: float, *, label: str, id_: str | None = None,
                 class_: str | None = None) -> None:
        self.width, self.height = width, height
        self._head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{num(width)}" height="{num(height)}" '
                      f'viewBox="0 0 {num(width)} {num(height)}" role="img"'
                      + _attrs({"aria_label": label, "id": id_, "class_": class_}) + ">")
        self._parts: list[str] = [f"<title>{esc(label)}</title>"]

    def raw(self, markup: str) -> None:
        """Markup built by this module's callers from escaped parts (a <defs> gradient)."""
        self._parts.append(markup)

    def rect(self, x: float, y: float, w: float, h: float, fill: str, *, title: str | None = None,
             **attrs: object) -> None:
        head = f'<rect x="{num(x)}" y="{num(y)}" width="{num(w)}" height="{num(h)}" fill="{esc(fill)}"{_attrs(attrs)}'
        self._parts.append(f"{head}><title>{esc(title)}</title></rect>" if title else head + "/>")

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1.0,
             **attrs: object) -> None:
        self._parts.append(f'<line x1="{num(x1)}" y1="{num(y1)}" x2="{num(x2)}" y2="{num(y2)}" stroke="{esc(stroke)}"'
                           f' stroke-width="{num(width)}"{_attrs(attrs)}/>')

    def polyline(self, points: Sequence[tuple[float, float]], stroke: str, width: float = 1.5, *,
                 title: str | None = None, **attrs: object) -> None:
        pts = " ".join(f"{num(x)},{num(y)}" for x, y in points)
        head = (f'<polyline points="{pts}" fill="none" stroke="{esc(stroke)}" stroke-width="{num(width)}"'
                f' stroke-linejoin="round"{_attrs(attrs)}')
        self._parts.append(f"{head}><title>{esc(title)}</title></polyline>" if title else head + "/>")

    def polygon(self, points: Sequence[tuple[float, float]], fill: str, **attrs: object) -> None:
        pts = " ".join(f"{num(x)},{num(y)}" for x, y in points)
        self._parts.append(f'<polygon points="{pts}" fill="{esc(fill)}"{_attrs(attrs)}/>')

    def circle(self, x: float, y: float, r: float, fill: str, *, title: str | None = None,
               **attrs: object) -> None:
        head = f'<circle cx="{num(x)}" cy="{num(y)}" r="{num(r)}" fill="{esc(fill)}"{_attrs(attrs)}'
        self._parts.append(f"{head}><title>{esc(title)}</title></circle>" if title else head + "/>")

    def text(self, x: float, y: float, text: str, *, size: float = 11, anchor: str = "start",
             rotate: float | None = None, fill: str = "#222", title: str | None = None, **attrs: object) -> None:
        turn = f' transform="rotate({num(rotate)} {num(x)} {num(y)})"' if rotate is not None else ""
        inner = esc(text) + (f"<title>{esc(title)}</title>" if title else "")
        self._parts.append(f'<text x="{num(x)}" y="{num(y)}" font-size="{num(size)}" text-anchor="{esc(anchor)}"'
                           f' fill="{esc(fill)}"{turn}{_attrs(attrs)}>{inner}</text>')

    def render(self) -> str:
        return "".join((self._head, *self._parts, "</svg>"))


def gradient(id_: str, stops: Iterable[tuple[float, str]], *, vertical: bool = False) -> str:
    """A <defs> linear gradient (for a colour scale's legend)."""
    direction = 'x2="0" y2="1"' if vertical else 'x2="1" y2="0"'
    inner = "".join(f'<stop offset="{num(100 * o)}%" stop-color="{esc(c)}"/>' for o, c in stops)
    return f'<defs><linearGradient id="{esc(id_)}" x1="0" y1="0" {direction}>{inner}</linearGradient></defs>'


def nice_max(value: float) -> float:
    """A round axis maximum at or above `value` (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten)."""

    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if value <= step * power:
            return step * power
    return 10 * power


def measure(v: float) -> str:
    """A measurement for a label: two significant figures below 10, so 0.012 GB/s through a
    throttled link never reads as 0 beside 0.3."""
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return "0" if v == 0 else f"{v:.2g}"
