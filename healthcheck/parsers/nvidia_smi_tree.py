"""`nvidia-smi -q`'s tree with its indentation lost, nested again (issue 20's paste shapes).

A web page or a chat client renders a paste's leading blanks away: every line of `-q` at the
left margin (`GPU 00000000:01:00.0`, `Product Name : ...`, `ECC Errors`, `Volatile`, `SRAM
Correctable : 0`, ...), and the tree nvidia_smi.py reads by path is gone. The lines still say
where they belong: each section of `-q` holds a known set of lines (`CHILDREN`, every section
and line of the real reports: tests/fixtures/corpus/nvidia-smi-q and the field's -q outputs,
drivers 375-610). `renested` puts each line of a GPU block under the innermost open section
that holds its key (a line none holds is the block's own, closing every section), and a
section opens where its key is one: what an indented report says, from its words alone.

A line's place is ambiguous where two open sections both hold its key: the innermost takes
it, as in every real report (`Total` under `BAR1 Memory Usage` after `FB Memory Usage`'s).
A section no real report shows is read as the block's own with its lines its siblings: its
values are kept (`fragment`-less, by key), never put under the wrong section's path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# a GPU block's first line, at the margin (nvidia_smi._GPU_HEADER's shape)
_GPU_LINE = re.compile(r"GPU\s+(?:[0-9A-Fa-f]{4,8}:)?[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]\s*")
INDENT = "    "  # -q indents each level by 4 blanks
MIN_TREE_LINES = 3  # lines of a GPU block whose keys the tree knows, for a margin-only text to be a flattened -q

# section -> the keys of its lines (lower case, blanks single), as the real reports print them
CHILDREN: dict[str, frozenset[str]] = {
    'aggregate': frozenset({
        'double bit', 'dram correctable', 'dram uncorrectable', 'single bit', 'sram correctable',
        'sram threshold exceeded', 'sram uncorrectable', 'sram uncorrectable parity', 'sram uncorrectable sec-ded',
    }),
    'aggregate uncorrectable sram sources': frozenset({
        'sram l2', 'sram microcontroller', 'sram other', 'sram pcie', 'sram sm',
    }),
    'applications clocks': frozenset({'graphics', 'memory'}),
    'bank remap availability histogram': frozenset({'high', 'low', 'max', 'none', 'partial'}),
    'bar1 memory usage': frozenset({'free', 'total', 'used'}),
    'bridge chip': frozenset({'firmware', 'type'}),
    'capabilities': frozenset({'egm'}),
    'clock policy': frozenset({'auto boost', 'auto boost default'}),
    'clocks': frozenset({'graphics', 'memory', 'sm', 'video'}),
    'clocks event reasons': frozenset({
        'applications clocks setting', 'display clock setting', 'hw slowdown', 'idle', 'invalid hw slowdown',
        'sw power cap', 'sw thermal slowdown', 'sync boost',
    }),
    'clocks event reasons counters': frozenset({
        'hw power braking', 'hw thermal slowdown', 'sw power capping', 'sw thermal slowdown', 'sync boost',
    }),
    'clocks throttle reasons': frozenset({
        'applications clocks setting', 'display clock setting', 'hw slowdown', 'idle', 'sw power cap',
        'sw thermal slowdown', 'sync boost',
    }),
    'conf compute protected memory usage': frozenset({'free', 'total', 'used'}),
    'default applications clocks': frozenset({'graphics', 'memory'}),
    'deferred clocks': frozenset({'memory'}),
    'device attributes': frozenset({'shared'}),
    'double bit': frozenset({
        'cbu', 'device memory', 'l1 cache', 'l2 cache', 'register file', 'texture memory', 'texture shared',
        'total',
    }),
    'dram encryption mode': frozenset({'current', 'pending'}),
    'driver model': frozenset({'current', 'pending'}),
    'ecc errors': frozenset({
        'aggregate', 'aggregate uncorrectable sram sources', 'channel repair pending', 'tpc repair pending',
        'unrepairable memory', 'volatile',
    }),
    'ecc mode': frozenset({'current', 'pending'}),
    'encoder stats': frozenset({'active sessions', 'average fps', 'average latency'}),
    'fabric': frozenset({'cliqueid', 'clusteruuid', 'health', 'state', 'status'}),
    'fb memory usage': frozenset({'free', 'reserved', 'total', 'used'}),
    'fbc stats': frozenset({'active sessions', 'average fps', 'average latency'}),
    'gpu base power': frozenset({'current base power', 'default base power', 'requested base power'}),
    'gpu ceiling power limit': frozenset({'current power limit', 'default power limit', 'requested power limit'}),
    'gpu link info': frozenset({'link width', 'pcie generation'}),
    'gpu memory power readings': frozenset({'average power draw', 'instantaneous power draw', 'power draw'}),
    'gpu operation mode': frozenset({'current', 'pending'}),
    'gpu power readings': frozenset({
        'average power draw', 'current power limit', 'default power limit', 'gpu base power',
        'gpu ceiling power limit', 'instantaneous power draw', 'max power limit', 'min power limit', 'power draw',
        'requested power limit',
    }),
    'gpu reset status': frozenset({'drain and reset recommended', 'reset required'}),
    'gpu virtualization mode': frozenset({'host vgpu mode', 'vgpu heterogeneous mode', 'virtualization mode'}),
    'health': frozenset({
        'access timeout recovery', 'bandwidth', 'incorrect configuration', 'partition assigned',
        'route recovery in progress', 'route unhealthy', 'summary',
    }),
    'hw slowdown': frozenset({'hw power brake slowdown', 'hw thermal slowdown'}),
    'ibmnpu': frozenset({'relaxed ordering mode'}),
    'inforom bbx object flush': frozenset({'latest duration', 'latest timestamp'}),
    'inforom time data': frozenset({'time run'}),
    'inforom version': frozenset({'ecc object', 'image version', 'oem object', 'power management object'}),
    'invalid hw slowdown': frozenset({'invalid hw power brake slowdown', 'invalid hw thermal slowdown'}),
    'link width': frozenset({'current', 'max'}),
    'max clocks': frozenset({'graphics', 'memory', 'sm', 'video'}),
    'max customer boost clocks': frozenset({'graphics'}),
    'mig device': frozenset({
        'compute instance id', 'device attributes', 'ecc errors', 'fb memory usage', 'gpu instance id', 'index',
        'shared bar1 memory', 'shared fb memory usage',
    }),
    'mig mode': frozenset({'current', 'pending'}),
    'module power readings': frozenset({
        'average power draw', 'current power limit', 'default power limit', 'instantaneous power draw',
        'max power limit', 'min power limit', 'power draw', 'requested power limit',
    }),
    'pci': frozenset({
        'atomic caps inbound', 'atomic caps outbound', 'base classcode', 'bridge chip', 'bus', 'bus id', 'device',
        'device id', 'domain', 'gpu link info', 'replay number rollovers', 'replays since reset', 'rx throughput',
        'sub classcode', 'sub system id', 'tx throughput',
    }),
    'pcie generation': frozenset({'current', 'device current', 'device max', 'host max', 'max'}),
    'platform info': frozenset({
        'chassis serial number', 'gpu fabric guid', 'host id', 'module id', 'peer type', 'slot number',
        'tray index',
    }),
    'power readings': frozenset({
        'default power limit', 'enforced power limit', 'max power limit', 'min power limit', 'power draw',
        'power limit', 'power management',
    }),
    'process id': frozenset({'name', 'type', 'used gpu memory'}),
    'processes': frozenset({'compute instance id', 'gpu instance id', 'process id'}),
    'remapped rows': frozenset({
        'bank remap availability histogram', 'correctable error', 'inactive correctable error',
        'inactive uncorrectable error', 'pending', 'remapping failure occurred', 'uncorrectable error',
    }),
    'retired pages': frozenset({'double bit ecc', 'pending page blacklist', 'single bit ecc'}),
    'shared': frozenset({
        'copy engine count', 'decoder count', 'encoder count', 'jpg count', 'multiprocessor count', 'ofa count',
    }),
    'shared bar1 memory': frozenset({'free', 'total', 'used'}),
    'shared fb memory usage': frozenset({'free', 'reserved', 'total', 'used'}),
    'single bit': frozenset({
        'cbu', 'device memory', 'l1 cache', 'l2 cache', 'register file', 'texture memory', 'texture shared',
        'total',
    }),
    'temperature': frozenset({
        'gpu current t.limit temp', 'gpu current temp', 'gpu max operating t.limit temp', 'gpu max operating temp',
        'gpu shutdown t.limit temp', 'gpu shutdown temp', 'gpu slowdown t.limit temp', 'gpu slowdown temp',
        'gpu t.limit temp', 'gpu target temperature', 'gpu target temperature specification', 'memory current temp',
        'memory max operating t.limit temp', 'memory max operating temp',
    }),
    'utilization': frozenset({'decoder', 'encoder', 'gpu', 'jpeg', 'memory', 'ofa'}),
    'volatile': frozenset({
        'double bit', 'dram correctable', 'dram uncorrectable', 'single bit', 'sram correctable',
        'sram uncorrectable', 'sram uncorrectable parity', 'sram uncorrectable sec-ded',
    }),
    'voltage': frozenset({'graphics'}),
    'workload power profiles': frozenset({'enforced profiles', 'requested profiles'}),}
_KNOWN = frozenset(CHILDREN).union(*CHILDREN.values())
# line key -> the sections that hold a line of that key
PARENTS: dict[str, frozenset[str]] = {
    key: frozenset(section for section, keys in CHILDREN.items() if key in keys) for key in _KNOWN}
ADOPT_MAX = 8  # levels of sections a fragment's first lines may be under (-q nests 5 deep)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def adopted(lines: Sequence[str]) -> list[str]:
    """-q's lines from a fragment that starts inside a section, its section's line cut off
    (`Volatile`, `SRAM Correctable : 0`, ... then `Retired Pages` less deep), with that
    section's line put back above them, where the keys of the first lines at their depth are held by one
    section only (`Volatile` and `Aggregate`: `ECC Errors`; `Bus Id`: `PCI`), level by level
    up to the fragment's shallowest lines; where they are held by none or several, as they are."""
    out = list(lines)
    for _ in range(ADOPT_MAX):
        rows = [line for line in out if line.strip()]
        if not rows or _indent(rows[0]) <= min(_indent(line) for line in rows):
            return out
        first = _indent(rows[0])
        run = []
        for line in rows:
            if _indent(line) < first:
                break
            if _indent(line) == first:
                run.append(key_of(line))
        parents = frozenset.intersection(*(PARENTS.get(key, frozenset()) for key in run))
        if len(parents) != 1:
            return out
        out.insert(0, " " * max(first - len(INDENT), 0) + next(iter(parents)))
    return out


def key_of(line: str) -> str:
    """A -q line's key as CHILDREN names it: before the first `:`, lower case, blanks single."""
    return " ".join(line.split(":", 1)[0].lower().split())


def flattened(lines: Sequence[str]) -> bool:
    """Every line after the first GPU block's line (but the next blocks' own) at one indentation (the margin where a web
    page dropped the blanks, one blank where HTML squeezed each run of them), and a few of them
    lines the tree knows: a -q report whose indentation a paste lost. A report as printed
    nests its sections deeper than their lines' block; a block with none of -q's lines is no
    report."""
    start = next((i for i, line in enumerate(lines) if _GPU_LINE.fullmatch(line.strip())), None)
    if start is None:
        return False
    known, indents = 0, set()
    for line in lines[start + 1:]:
        if line.strip() and not _GPU_LINE.fullmatch(line.strip()):  # each GPU block's own line at the margin
            indents.add(len(line) - len(line.lstrip()))
            known += key_of(line) in _KNOWN
        if len(indents) > 1:
            return False
    return known >= MIN_TREE_LINES


def renested(lines: Sequence[str]) -> list[str]:
    """The lines of a flattened -q (`flattened`) indented as the tree they are: each line of a
    GPU block under the innermost open section whose CHILDREN hold its key, else the block's
    own; lines outside the GPU blocks (the header's versions) and blank lines as they are."""
    out: list[str] = []
    open_sections: list[str] | None = None  # None outside a GPU block
    for line in lines:
        body = line.strip()
        if _GPU_LINE.fullmatch(body):
            open_sections = []
        if open_sections is None or not body or _GPU_LINE.fullmatch(body):
            out.append(line)
            continue
        key = key_of(body)
        depth = next((i + 1 for i in range(len(open_sections) - 1, -1, -1) if key in CHILDREN[open_sections[i]]), 0)
        del open_sections[depth:]
        out.append(INDENT * (depth + 1) + body)
        if key in CHILDREN:
            open_sections.append(key)
    return out
