"""`nvidia-smi -q -x` (the XML form of -q) -> the -q text its parser reads, so both forms
give the same facts under the same keys (parsers/nvidia_smi.py).

The XML is -q's tree with snake_case tags (`<nvidia_smi_log>`, `<driver_version>`,
`<gpu id="00000000:84:00.0">`, `<fb_memory_usage><total>`, DTDs nvsmi_device_v11/v12;
real outputs in tests/fixtures/nvidia-smi-q-xml and field/issues-11): each element
becomes the -q line of the same name (`product_name` -> `Product Name`; -q compares keys
without case), the few whose -q words differ by `_KEYS` (`uuid` -> `GPU UUID`,
`remapped_row_corr` -> `Correctable Error`, `pcie_gen` -> `PCIe Generation`, ...), the
throttle reasons without their `clocks_event_reason_` prefix, a retirement's count and a
process's fields as -q prints them.

Read with the standard library's expat, bounded: no DTD is processed (parameter entities
never parsed, the external DTD never fetched) and any entity declaration refuses the text,
so no entity can expand; only XML's five predefined and character references are. A paste
cut mid-element (or broken by junk) is read up to the cut: every element closed before it
is kept, an element still open keeps what it holds, and a value whose closing tag never
came is dropped (`535.8` of a cut `535.86.05` is no version). Elements nested deeper than
DEPTH_MAX are read past, each value keeps VALUE_MAX characters: linear in the text's length.
"""

from __future__ import annotations

import re
from xml.parsers import expat

from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import pasted_lines

_START = re.compile(r"<\?xml[^<>]{0,256}\?>|<!DOCTYPE nvidia_smi_log|<nvidia_smi_log[\s>]")
_LOOK = 65_536  # characters before the XML starts that are looked at (a prompt, a fence, prose)
VALUE_MAX = 1024  # characters of an element's text kept
DEPTH_MAX = 16  # elements nested deeper are not read: -q's tree is 6 deep (a MIG device's counters)

# the tags whose -q line has other words (the others: the tag's words, `_` a blank)
_KEYS = {
    "uuid": "GPU UUID", "serial": "Serial Number", "gpu_temp": "GPU Current Temp",
    "current_mig": "Current", "pending_mig": "Pending", "current_ecc": "Current", "pending_ecc": "Pending",
    "current_dm": "Current", "pending_dm": "Pending",
    "pci_bus_id": "Bus Id", "pci_gpu_link_info": "GPU Link Info", "pcie_gen": "PCIe Generation",
    "max_link_gen": "Max", "current_link_gen": "Current", "device_current_link_gen": "Device Current",
    "max_device_link_gen": "Device Max", "max_host_link_gen": "Host Max",
    "link_widths": "Link Width", "max_link_width": "Max", "current_link_width": "Current",
    "replay_counter": "Replays Since Reset",
    "remapped_row_corr": "Correctable Error", "remapped_row_unc": "Uncorrectable Error",
    "remapped_row_pending": "Pending", "remapped_row_failure": "Remapping Failure Occurred",
    "pending_blacklist": "Pending Page Blacklist", "pending_retirement": "Pending Page Retirement",
    "attached_gpus": "Attached GPUs", "cuda_version": "CUDA Version",
}
_REASON_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")
# a retirement section's count is -q's line: `Single Bit ECC : 0`
_RETIREMENTS = {"multiple_single_bit_retirement": "Single Bit ECC", "double_bit_retirement": "Double Bit ECC"}
# a process's fields as -q names them, under its `Process ID` line
_PROCESS_FIELDS = {"type": "Type", "process_name": "Name", "used_memory": "Used GPU Memory"}


class _Element:
    __slots__ = ("children", "closed", "gpu_id", "size", "tag", "text")

    def __init__(self, tag: str, gpu_id: str) -> None:
        self.tag = tag
        self.gpu_id = gpu_id
        self.text: list[str] = []
        self.size = 0  # characters in `text`
        self.children: list[_Element] = []
        self.closed = False

    def value(self) -> str:
        return clip(" ".join("".join(self.text).split()), VALUE_MAX)


class _Refused(Exception):
    """An entity declared: nvidia-smi declares none, and none may expand."""


def _refuse(*_args: object) -> int:
    """Every entity handler: refuse (expat's external-entity handler returns an int; this never returns)."""
    raise _Refused


def xml_start(text: str) -> int:
    """Where `nvidia-smi -q -x`'s XML starts in `text` (after a prompt or a fence); -1: none
    (also XML that is not nvidia-smi's: no `nvidia_smi_log` in its head)."""
    if "nvidia_smi_log" not in text[:_LOOK]:
        return -1
    m = _START.search(text, 0, _LOOK)
    return m.start() if m else -1


def _tree(text: str) -> _Element:
    """The elements read, up to a cut or junk; `_Refused` on an entity declaration."""
    root = _Element("", "")
    stack = [root]

    def start(tag: str, attrs: dict[str, str]) -> None:
        element = _Element(tag, attrs.get("id", "") if tag == "gpu" else "")
        if len(stack) <= DEPTH_MAX:  # deeper: read past, kept nowhere (no -q line is so deep)
            stack[-1].children.append(element)
        stack.append(element)

    def end(tag: str) -> None:
        stack.pop().closed = True

    def data(chunk: str) -> None:
        element = stack[-1]
        if len(stack) > 1 and element.size < VALUE_MAX * 2:
            element.text.append(chunk)
            element.size += len(chunk)

    parser = expat.ParserCreate()
    parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    parser.EntityDeclHandler = _refuse
    parser.UnparsedEntityDeclHandler = _refuse
    parser.ExternalEntityRefHandler = _refuse
    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = data
    parser.buffer_text = True
    try:
        parser.Parse(text, True)
    except expat.ExpatError:
        pass  # a cut, or junk after the log (a fence): what came before is read
    return root


def _key(tag: str) -> str:
    for prefix in _REASON_PREFIXES:
        if tag.startswith(prefix):
            tag = tag[len(prefix):]
            break
    return _KEYS.get(tag) or tag.replace("_", " ")


def _process(element: _Element, depth: int, out: list[str]) -> None:
    """`<process_info>` as -q's `Process ID : N` with its fields under it."""
    fields = {c.tag: c.value() for c in element.children if c.closed and not c.children}
    if "pid" not in fields:
        return
    pad = "    " * depth
    out.append(f"{pad}Process ID : {fields['pid']}")
    out.extend(f"{pad}    {name} : {fields[tag]}" for tag, name in _PROCESS_FIELDS.items() if tag in fields)


def _lines(element: _Element, depth: int, out: list[str]) -> None:
    """`element`'s -q lines (no recursion: a hostile text can nest deep)."""
    stack = [(element, depth)]
    while stack:
        node, level = stack.pop()
        pad = "    " * level
        if node.tag == "process_info":
            _process(node, level, out)
        elif node.tag in _RETIREMENTS:
            count = next((c.value() for c in node.children if c.tag == "retired_count" and c.closed), None)
            if count is not None:
                out.append(f"{pad}{_RETIREMENTS[node.tag]} : {count or 'N/A'}")
        elif node.children:
            out.append(f"{pad}{_key(node.tag)}")
            stack.extend((c, level + 1) for c in reversed(node.children))
        elif node.closed:  # a value whose closing tag never came (the cut) is no value
            empty = "None" if node.tag == "processes" else "N/A"
            out.append(f"{pad}{_key(node.tag)} : {node.value() or empty}")


def xml_as_q_text(text: str) -> str:
    """`nvidia-smi -q -x`'s XML in `text` as the -q text of the same facts (see the
    module's docstring). ParseError where it holds no element of nvidia_smi_log's."""
    start = xml_start(text)
    body = "\n".join(pasted_lines(text[start:] if start >= 0 else text))
    try:
        root = _tree(body)
    except _Refused:
        raise ParseError("nvidia-smi -q -x: an XML entity declaration (nvidia-smi declares none; "
                         "refused, never expanded)") from None
    log = next((e for e in root.children if e.tag == "nvidia_smi_log"), None)
    if log is None or not log.children:
        raise ParseError(f"nvidia-smi -q -x: no <nvidia_smi_log> element read (starts with {clip(body.strip(), 60)!r})")
    out: list[str] = []
    for element in log.children:
        if element.tag == "gpu":
            if element.gpu_id:
                out.append(f"GPU {element.gpu_id}")
                for child in element.children:
                    _lines(child, 1, out)
        else:
            _lines(element, 0, out)
    return "\n".join(out) + "\n"


__all__ = ["DEPTH_MAX", "VALUE_MAX", "xml_as_q_text", "xml_start"]
