"""The HTML report read back for tests: html.parser into a small element tree (SVG's
self-closing shapes included), every start tag listed, and the heat map's cells by row."""

from __future__ import annotations

from html.parser import HTMLParser

from healthcheck.report.svg import luminance


class Element:
    def __init__(self, tag: str, attrs: dict[str, str | None], parent: Element | None) -> None:
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.content: list[Element | str] = []  # children and text, in document order

    def walk(self):
        yield self
        for c in self.content:
            if isinstance(c, Element):
                yield from c.walk()

    def all_text(self) -> str:
        return "".join(c if isinstance(c, str) else c.all_text() for c in self.content)

    def find(self, tag: str | None = None, **attrs: str) -> list[Element]:
        return [e for e in self.walk() if (tag is None or e.tag == tag)
                and all(e.attrs.get(k.rstrip("_").replace("_", "-")) == v for k, v in attrs.items())]

    def by_id(self, id_: str) -> Element | None:
        found = self.find(id=id_)
        return found[0] if found else None


VOID = {"meta", "br", "img", "input", "link", "hr"}


class Tree(HTMLParser):
    """The document as elements (self-closing SVG shapes included), with every start tag seen."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {}, None)
        self.at = self.root
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        e = Element(tag, dict(attrs), self.at)
        self.at.content.append(e)
        self.tags.append((tag, dict(attrs)))
        if tag not in VOID:
            self.at = e

    def handle_startendtag(self, tag, attrs):
        self.at.content.append(Element(tag, dict(attrs), self.at))
        self.tags.append((tag, dict(attrs)))

    def handle_endtag(self, tag):
        e = self.at
        while e is not None and e.tag != tag:
            e = e.parent
        if e is not None and e.parent is not None:
            self.at = e.parent

    def handle_data(self, data):
        self.at.content.append(data)


def parse(text: str) -> Tree:
    tree = Tree()
    tree.feed(text)
    tree.close()
    return tree


def fill_rows(tree: Tree) -> dict[str, list[float]]:
    """The heat map's cells with a value, by row: the luminance of each one's fill."""
    rows: dict[str, list[float]] = {}
    for rect in tree.root.by_id("heatmap").find("rect"):
        if rect.attrs.get("data-value") is not None:
            rows.setdefault(rect.attrs["data-row"], []).append(luminance(rect.attrs["fill"]))
    return rows
