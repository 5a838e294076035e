"""`dcgmi diag` output (its `-j` JSON or its boxed table, DCGM 2.x to 4.x) -> DcgmDiag.

What dcgmi prints (NVIDIA/DCGM dcgmi/Diag.cpp, dcgmi/Command.cpp and
nvvs/include/NvvsJsonStrings.h, read at the tags v2.1.4, v2.4.7, v3.0.4, v3.1.8, v3.2.6,
v3.3.9, v4.0.0 and v4.6.0; tests/fixtures/dcgmi-diag/README.md has the details):

* JSON, 2.x and 3.x: `{"DCGM GPU Diagnostic": {"test_categories": [{"category":
  "Deployment", "tests": [{"name": "Blacklist" (2.x) / "Denylist" (3.x), "results":
  [{"status": "Pass"}]}]}, {"category": "Hardware", "tests": [{"name": "GPU Memory",
  "results": [{"gpu_ids" (2.x) / "gpu_id" (3.3), "status", "warnings", "info"}]}]}]}}`.
  `warnings` is one string (2.x), a string with an `error_id` beside it (3.2), or a list
  of `{"warning", "error_id", "error_category", "error_severity"}` (3.3; the Deployment
  entries spell the text `warnings`). 3.1+ adds `version`, `Driver Version Detected`,
  `GPU Device IDs` and (3.3) `GPU Device Serials` at the top level. A results list may
  hold nulls (a GPU that did not run the test keeps its slot).
* JSON, 4.x: `{"DCGM Diagnostic": {"test_categories": [...]}, "entity_groups": [{
  "entity_group": "GPU", "entities": [{"entity_id", "serial_num", "device_id"}]}],
  "metadata": {"version", "Driver Version Detected"}}`; each result names its entity
  (`entity_group`, `entity_id`), `info` is a list, and each test has a `test_summary`
  (its overall status, with every error, entity-bound or not).
* JSON, every version: a diagnostic that could not run is `{"DCGM ... Diagnostic":
  {"runtime_error": "Error: ..."}}`; `--iterations N` wraps the runs in `{"iterations":
  [...], "Overall Result"}`. dcgmi's JSON never says "Warn": a warning is written "Fail"
  (Diag::HelperDisplayDiagResult), which only the table and the errors' severity tell apart.
* The table: a 25-character name column and a 46-character result column; `|-----
  Deployment  ---...|` opens a category; a 2.x/3.x test row says `Pass`, `Pass - All`
  or `Fail - GPU: 0` / `Pass - GPUs: 1, 2` (a list too long for the column is cut with
  `...`); a 4.x test row says the test's result, then one `GPU0: Pass` row per entity.
  Messages are cut into 45-character pieces, one per row (`Warning`, `Error`, `Info`,
  4.x `Warning: GPU0`), the rows after the first with an empty name. 3.1+ opens with a
  `Metadata` category (`DCGM Version`, `Driver Version Detected`, `GPU Device IDs
  Detected`).
* dcgmi's own errors, on stdout: `Error: unable to establish a connection to the
  specified host: H` / `Error: Unable to connect to host engine. Host engine connection
  invalid/disconnected.` / `Error: Unable to start an embedded host engine. ...` (kept
  as `connection_error`), any other `Error: ...` line (`runtime_error`).

Anything else raises ParseError. Lines are cut at MAX_LINE, messages at MAX_TEXT, and
every pattern is anchored and bounded, so a hostile line costs its length.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from healthcheck.core import typed
from healthcheck.core.errors import ParseError
from healthcheck.core.inputs import clip
from healthcheck.parsers.lines import NOTHING_UNREAD, Unrecognized, UnrecognizedLines, untabbed
from healthcheck.parsers.unread import mended_numbered

MAX_LINE = 4096  # dcgmi's rows are 78 characters; anything longer is cut here
MAX_TEXT = 4096  # characters of a message kept (DCGM's own messages are at most ~1 kB)
MAX_LISTED = 10_000  # tests, results, messages kept per list
MAX_ERRORS = 20  # dcgmi's own `Error: ...` lines kept

# The result words dcgmi prints (Diag::HelperDisplayDiagResult; "Not Run" since 4.0)
STATUSES = ("Pass", "Fail", "Warn", "Skip", "Not Run")
_STATUS_WORDS = {"pass": "Pass", "passed": "Pass", "fail": "Fail", "failed": "Fail", "warn": "Warn",
                 "warning": "Warn", "skip": "Skip", "skipped": "Skip", "not run": "Not Run", "notrun": "Not Run"}

# DCGM's error severities (dcgm_errors.h, dcgmErrorSeverity_enum): what DCGM says a node may
# still do with the error, carried by each error of a 3.3+ JSON result
SEVERITIES = {0: "NONE", 1: "MONITOR", 2: "ISOLATE", 3: "UNKNOWN", 4: "TRIAGE", 5: "CONFIG", 6: "RESET"}
SEVERITY_MONITOR = 1  # "can perform workload, but needs to be monitored"
SEVERITY_CONFIG = 5  # "this error can be configured" (persistence mode, ECC off, ...)


class DcgmMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    """One error (dcgmi calls them warnings) or info line DCGM attached to a result.

    error_id is DCGM's `DCGM_FR_*` code (dcgm_errors.h), category and severity its
    classification (3.3+ JSON only); gpu is the GPU the text names ("GPU 0 Thermal
    violations ..."), which is how an old table ties a test's warning to a GPU."""

    text: str
    error_id: int | None = None
    category: int | None = None
    severity: int | None = None
    gpu: int | None = None

    @property
    def severity_name(self) -> str | None:
        return None if self.severity is None else SEVERITIES.get(self.severity, str(self.severity))


class DcgmResult(msgspec.Struct, frozen=True, omit_defaults=True):
    """A test's result on one entity (a GPU, or a CPU in 4.x), on every GPU (`every`: the
    table's "Pass - All"), or for the node as a whole (entity None: the Deployment tests
    of 2.x/3.x, which run once)."""

    status: str  # one of STATUSES, or the word dcgmi printed if it is none of them
    entity: str | None = None  # "GPU", "CPU" (4.x entity groups)
    index: int | None = None  # the entity's DCGM id (a GPU's is its NVML index)
    every: bool = False
    warnings: tuple[DcgmMessage, ...] = ()
    info: tuple[str, ...] = ()

    @property
    def gpu(self) -> int | None:
        return self.index if self.entity == "GPU" else None


class DcgmTest(msgspec.Struct, frozen=True, omit_defaults=True):
    """One DCGM test (a plugin: "memory", "pcie", "software"; 2.x/3.x: "GPU Memory",
    "PCIe", one per Deployment check) and its results."""

    name: str
    category: str | None = None  # Deployment, Hardware, Integration, Stress (Performance, Custom)
    status: str | None = None  # the test's own result: 4.x test_summary, the table's test row
    results: tuple[DcgmResult, ...] = ()
    warnings: tuple[DcgmMessage, ...] = ()  # not tied to one entity (4.x) / to no GPU row (old tables)
    info: tuple[str, ...] = ()
    iteration: int | None = None  # --iterations: which run (0-based)
    truncated: bool = False  # the table cut this test's GPU list ("Pass - GPUs: 0, 1, ...")


class DcgmGpu(msgspec.Struct, frozen=True, omit_defaults=True):
    index: int
    serial: str | None = None
    device_id: str | None = None  # PCI device id, e.g. "2330" (H100 SXM5)


class DcgmDiag(msgspec.Struct, frozen=True, omit_defaults=True):
    """What one `dcgmi diag` printed."""

    format: Literal["json", "text"]
    dcgm_version: str | None = None
    driver_version: str | None = None
    gpus: tuple[DcgmGpu, ...] = ()
    device_ids: tuple[str, ...] = ()  # the table's "GPU Device IDs Detected", in GPU order
    tests: tuple[DcgmTest, ...] = ()
    runtime_error: str | None = None  # dcgmi could not run the diagnostic (its `Error: ...` / runtime_error)
    connection_error: str | None = None  # dcgmi could not reach (or start) a host engine
    ran: bool = False  # "Successfully ran diagnostic for group."
    complete: bool = False  # the table's closing border was seen / the JSON document was whole
    overall: str | None = None  # --iterations: "Overall Result"
    # the table's text: lines outside the table that are none of dcgmi's (omitted when none)
    unrecognized: Unrecognized = NOTHING_UNREAD

    def results(self) -> list[tuple[DcgmTest, DcgmResult]]:
        """Every (test, result), in the order dcgmi printed them."""
        return [(t, r) for t in self.tests for r in t.results]


class DcgmRun(msgspec.Struct, frozen=True, omit_defaults=True):
    """The fact a DCGM probe gives: one `dcgmi diag -r LEVEL -j` on the node.

    `problem` says why there is no diagnostic to judge (`missing`: dcgmi is not there;
    `hostengine`: it could not reach or start a host engine; `failed`: DCGM's own runtime
    error, or dcgmi failing otherwise; `unparsable`: output hc cannot read; `no-gpu`: the
    job has no GPU, so dcgmi was not run; `gpus-busy`: level 2 or more, and the GPUs were not
    seen idle, so dcgmi was not run) and `reason` in words; evidence is the command and its
    output's tail."""

    level: int
    argv: tuple[str, ...] = ()
    returncode: int | None = None
    duration_s: float = 0.0
    diag: DcgmDiag | None = None
    problem: Literal["missing", "hostengine", "failed", "unparsable", "no-gpu", "gpus-busy"] | None = None
    reason: str | None = None
    evidence: str | None = None


# a message's pieces read (each a 45-column row): enough for MAX_TEXT
_MAX_PIECES = 256


def status_word(raw: str) -> str:
    """dcgmi's result word in its canonical spelling ("pass" -> "Pass"), or the word as printed."""
    word = raw.strip()
    return _STATUS_WORDS.get(word.lower(), clip(word, 32))


_GPU_IN_TEXT = re.compile(r"\bGPU ?(\d{1,4})\b", re.ASCII)


def _message(text: str, error_id: int | None = None, category: int | None = None,
             severity: int | None = None) -> DcgmMessage:
    text = text.strip()[:MAX_TEXT]
    m = _GPU_IN_TEXT.search(text)
    return DcgmMessage(text, error_id, category, severity, int(m.group(1)) if m else None)


# ---------------------------------------------------------------------------- JSON


class _JMsg(msgspec.Struct):
    warning: str | None = None
    warnings: str | None = None  # 3.3's Deployment entries spell the text so
    error_id: int | None = None
    error_category: int | None = None
    error_severity: int | None = None


class _JResult(msgspec.Struct):
    status: str | None = None
    gpu_ids: str | int | None = None  # 2.x: the GPU as a string (a CSV list in nvvs's own JSON)
    gpu_id: str | int | None = None  # 3.3
    cpu_id: str | int | None = None  # 3.3's CPU EUD test
    entity_group: str | None = None  # 4.x
    entity_group_id: int | None = None
    entity_id: int | None = None
    warnings: str | list[_JMsg | str | None] | None = None
    error_id: int | None = None  # 3.2: the code of the one warning string
    info: str | list[str | None] | None = None


class _JTest(msgspec.Struct):
    name: str = ""
    results: list[_JResult | None] = []
    test_summary: _JResult | None = None


class _JCategory(msgspec.Struct):
    category: str = ""
    tests: list[_JTest | None] = []


class _JBody(msgspec.Struct):
    test_categories: list[_JCategory | None] = []
    runtime_error: str | None = None
    version: str | None = None


class _JEntity(msgspec.Struct):
    entity_id: int
    serial_num: str | None = None
    device_id: str | None = None


class _JEntityGroup(msgspec.Struct):
    entity_group: str = ""
    entities: list[_JEntity] = []


class _JMeta(msgspec.Struct):
    version: str | None = None
    driver: str | None = msgspec.field(default=None, name="Driver Version Detected")


class _JDoc(msgspec.Struct):
    gpu_diag: _JBody | None = msgspec.field(default=None, name="DCGM GPU Diagnostic")  # 2.x, 3.x
    diag: _JBody | None = msgspec.field(default=None, name="DCGM Diagnostic")  # 4.x
    version: str | None = None  # 3.x
    driver: str | None = msgspec.field(default=None, name="Driver Version Detected")  # 3.x
    dev_ids: list[str] | None = msgspec.field(default=None, name="GPU Device IDs")  # 3.x
    serials: dict[str, str] | None = msgspec.field(default=None, name="GPU Device Serials")  # 3.3
    entity_groups: list[_JEntityGroup] = []  # 4.x
    metadata: _JMeta | None = None  # 4.x
    iterations: list[_JDoc | None] | None = None  # --iterations
    overall: str | None = msgspec.field(default=None, name="Overall Result")
    warning: str | None = None  # --iterations: why the runs stopped


def _known(value: str | None) -> str | None:
    """A serial or id as DCGM printed it, None for its placeholders ("<<<NOT_SUPPORTED>>>")."""
    if value is None or not value.strip() or value.startswith("<<<"):
        return None
    return clip(value.strip(), 128)


def _int(value: str | int | None) -> list[int]:
    """A GPU id as dcgmi writes it: 0, "0", or (nvvs's own JSON) "0,1,2"."""
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(p) for p in value.split(",")[:MAX_LISTED] if p.strip().isdigit() and len(p.strip()) < 10]


def _j_messages(r: _JResult) -> tuple[DcgmMessage, ...]:
    if r.warnings is None:
        return ()
    if isinstance(r.warnings, str):
        return (_message(r.warnings, r.error_id),) if r.warnings.strip() else ()
    out = []
    for w in r.warnings[:MAX_LISTED]:
        if isinstance(w, str):
            out.append(_message(w))
        elif w is not None and (w.warning or w.warnings):
            out.append(_message(w.warning or w.warnings or "", w.error_id, w.error_category, w.error_severity))
    return tuple(out)


def _j_info(r: _JResult) -> tuple[str, ...]:
    if r.info is None:
        return ()
    items = [r.info] if isinstance(r.info, str) else [i for i in r.info[:MAX_LISTED] if i]
    return tuple(i.strip()[:MAX_TEXT] for i in items if i.strip())


def _j_results(r: _JResult) -> list[DcgmResult]:
    status = status_word(r.status or "")
    warnings, info = _j_messages(r), _j_info(r)
    if r.entity_id is not None:  # 4.x
        group = r.entity_group or ("GPU" if r.entity_group_id == 1 else str(r.entity_group_id))
        return [DcgmResult(status, clip(group, 32), r.entity_id, warnings=warnings, info=info)]
    if r.cpu_id is not None:
        return [DcgmResult(status, "CPU", i, warnings=warnings, info=info) for i in _int(r.cpu_id)]
    gpus = _int(r.gpu_id if r.gpu_id is not None else r.gpu_ids)
    if not gpus:  # 2.x/3.x Deployment: one result for the node
        return [DcgmResult(status, warnings=warnings, info=info)]
    return [DcgmResult(status, "GPU", g, warnings=warnings, info=info) for g in gpus]


def _j_test(t: _JTest, category: str, iteration: int | None) -> DcgmTest:
    results = [x for r in t.results[:MAX_LISTED] if r is not None for x in _j_results(r)]
    summary = t.test_summary
    status = status_word(summary.status) if summary is not None and summary.status else None
    warnings: tuple[DcgmMessage, ...] = ()
    info: tuple[str, ...] = ()
    if summary is not None:
        # the summary repeats every error of the test; those no entity carries are the test's own
        bound = {(m.text, m.error_id) for r in results for m in r.warnings}
        warnings = tuple(m for m in _j_messages(summary) if (m.text, m.error_id) not in bound)
        info = _j_info(summary)
    return DcgmTest(name=clip(t.name, 128), category=clip(category, 64) or None, status=status,
                    results=tuple(results), warnings=warnings, info=info, iteration=iteration)


def _j_tests(body: _JBody | None, iteration: int | None) -> list[DcgmTest]:
    if body is None:
        return []
    return [_j_test(t, c.category, iteration) for c in body.test_categories[:MAX_LISTED] if c is not None
            for t in c.tests[:MAX_LISTED] if t is not None]


def _j_gpus(doc: _JDoc) -> tuple[DcgmGpu, ...]:
    gpus: dict[int, DcgmGpu] = {}
    for group in doc.entity_groups[:64]:
        if group.entity_group == "GPU":
            for e in group.entities[:MAX_LISTED]:
                gpus[e.entity_id] = DcgmGpu(e.entity_id, _known(e.serial_num), _known(e.device_id))
    for i, dev in enumerate((doc.dev_ids or [])[:MAX_LISTED]):
        gpus.setdefault(i, DcgmGpu(i, device_id=_known(dev)))
    for key, serial in list((doc.serials or {}).items())[:MAX_LISTED]:
        if key.isdigit() and len(key) < 10:
            index = int(key)
            gpus[index] = msgspec.structs.replace(gpus.get(index, DcgmGpu(index)), serial=_known(serial))
    return tuple(gpus[i] for i in sorted(gpus))


def _parse_json(text: str, start: int) -> DcgmDiag:
    end = text.rfind("}")
    try:
        doc = typed.decode_json(text[start:end + 1], _JDoc)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ParseError(f"dcgmi diag JSON: {clip(message)}") from None
    except RecursionError:
        raise ParseError("dcgmi diag JSON: nested too deeply") from None
    runs = [(doc, None)] if doc.iterations is None else [
        (d, i) for i, d in enumerate(doc.iterations[:MAX_LISTED]) if d is not None]
    if doc.iterations is None and doc.gpu_diag is None and doc.diag is None:
        raise ParseError('dcgmi diag JSON: neither "DCGM Diagnostic" nor "DCGM GPU Diagnostic" nor "iterations" '
                         f"(starts with {clip(text[start:].strip(), 60)!r})")
    tests: list[DcgmTest] = []
    errors: list[str] = []
    versions: list[str | None] = []
    drivers: list[str | None] = []
    gpus: tuple[DcgmGpu, ...] = ()
    for d, i in runs:
        for body in (d.gpu_diag, d.diag):
            tests += _j_tests(body, i)
            if body is not None and body.runtime_error:
                errors.append(body.runtime_error.strip())
            versions.append(body.version if body is not None else None)
        versions += [d.version, d.metadata.version if d.metadata else None]
        drivers += [d.driver, d.metadata.driver if d.metadata else None]
        gpus = gpus or _j_gpus(d)
    head = _Reader()  # what dcgmi printed around the document (a connection error before an embedded run)
    for line in (text[:start] + "\n" + text[end + 1:]).splitlines():
        head.line(line[:MAX_LINE])
    errors += head.errors
    runtime, connection = _split_errors(errors)
    return DcgmDiag(
        format="json", dcgm_version=_first(versions), driver_version=_first(drivers), gpus=gpus,
        tests=tuple(tests[:MAX_LISTED]), runtime_error=runtime, connection_error=connection, ran=head.ran,
        complete=True, overall=status_word(doc.overall) if doc.overall else None)


def _first(values: list[str | None]) -> str | None:
    return next((clip(v.strip(), 64) for v in values if v and v.strip()), None)


_CONNECTION = re.compile(r"Error: (?:unable to establish a connection to the specified host|unable to connect to "
                         r"host engine|unable to start an embedded host engine)", re.IGNORECASE)


def _split_errors(errors: list[str]) -> tuple[str | None, str | None]:
    """(runtime error, connection error) from dcgmi's `Error: ...` lines and runtime_error."""
    connection = [e for e in errors if _CONNECTION.match(e)]
    runtime = [e for e in errors if not _CONNECTION.match(e)]
    join = "; ".join
    return (clip(join(runtime), MAX_TEXT) if runtime else None,
            clip(join(connection), MAX_TEXT) if connection else None)


# ---------------------------------------------------------------------------- the table

_CATEGORY = re.compile(r"[+|]-{3,8} {1,4}(?P<name>[A-Za-z][A-Za-z ]{0,30}?) {1,4}-{2,40}\+-{2,80}[+|]", re.ASCII)
_MESSAGE = re.compile(r"(?P<kind>Warning|Error|Info)(?:: (?P<group>[A-Za-z][A-Za-z_ ]{0,15}?)(?P<id>\d{1,6}))?",
                      re.ASCII)
_WORD = r"(?P<status>Pass|Fail|Warn|Skip|Not Run)"
_ALL = re.compile(_WORD + r" - All", re.ASCII)
_LIST = re.compile(_WORD + r" - GPUs?: ?", re.ASCII)
_ENTITY = re.compile(r"(?P<group>[A-Za-z][A-Za-z_ ]{0,15}?)(?P<id>\d{1,6}): " + _WORD, re.ASCII)
_CODE = re.compile(r"Code: \(\d{1,20}\)", re.ASCII)
_CHUNK = 45  # dcgmi cuts messages into pieces this long (DATA_INFO_TAG_LEN)
_META = {"DCGM Version": "dcgm_version", "Driver Version Detected": "driver_version"}


def _is_metadata(name: str) -> bool:
    """A row of the `Metadata` category by its name alone (3.x-4.x: `DCGM Version`, `Driver
    Version Detected`, `GPU Device IDs Detected`), which no test is named."""
    return name in _META or (name.endswith("Device IDs Detected") and name.startswith("GPU"))


class _Test:
    def __init__(self, name: str, category: str | None, iteration: int) -> None:
        self.name, self.category, self.iteration = name, category, iteration
        self.status: str | None = None
        self.results: list[DcgmResult] = []
        self.warnings: list[DcgmMessage] = []
        self.info: list[str] = []
        self.truncated = False
        # entity -> messages of its 4.x `Warning: GPU0` / `Info: GPU0` rows
        self.bound: dict[tuple[str, int], tuple[list[DcgmMessage], list[str]]] = {}

    def done(self, iterations: int) -> DcgmTest:
        results = []
        bound = dict(self.bound)
        for r in self.results:
            warnings, info = bound.pop((r.entity or "", r.index if r.index is not None else -1), ([], []))
            if warnings or info:
                r = msgspec.structs.replace(r, warnings=tuple(warnings), info=tuple(info))
            results.append(r)
        # an entity's messages with no row of its own (a cut output) stay the test's, with their GPU
        orphans = [msgspec.structs.replace(m, gpu=index) if group == "GPU" else m
                   for (group, index), (warnings, _) in bound.items() for m in warnings]
        return DcgmTest(name=self.name, category=self.category, status=self.status, results=tuple(results),
                        warnings=tuple(self.warnings + orphans), info=tuple(self.info),
                        iteration=self.iteration if iterations > 1 else None, truncated=self.truncated)


class _Reader:
    """The table's rows, one at a time; also dcgmi's free-text lines around a JSON document."""

    def __init__(self) -> None:
        self.section: str | None = None
        self.tests: list[_Test] = []
        self.meta: dict[str, str] = {}
        self.device_ids: list[str] = []
        self.errors: list[str] = []
        self.ran = False
        self.rows = 0  # table rows (borders and headers included): the output was a table
        self.complete = False
        self.iteration = -1
        # the message being read: (where it goes, its kind, its pieces, whether the last one filled the column)
        self.message: tuple[list[Any], str, list[str], bool] | None = None

    # --------------------------------------------------------------- lines

    def line(self, raw: str) -> bool:
        """Read one line; False where it is none of dcgmi's (a wrapper's banner, another
        program's line): those say nothing about the GPUs."""
        line = raw.rstrip()
        if not line.strip():
            return True
        if line[0] == "+" or line.startswith("|-") or line.startswith("|="):
            self._border(line)
            return True
        if line[0] == "|":
            self.rows += 1
            self._row(line)
            return True
        text = line.strip()
        if text.startswith("Successfully ran diagnostic"):
            self.ran = True
        elif text.startswith("Error"):
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(clip(text, MAX_TEXT))
        else:
            return False
        return True

    def _border(self, line: str) -> None:
        self.rows += 1
        self.message = None
        m = _CATEGORY.fullmatch(line)
        if m:
            self.section = m.group("name").strip()
            return
        if line[0] == "+" and set(line) <= {"+", "-"} and self.tests:
            self.complete = True  # the closing border, after the results

    def _row(self, line: str) -> None:
        name, raw = self._cells(line)
        info = raw.strip()
        if name == "Diagnostic" and info == "Result":  # the header: a new table (--iterations prints one each)
            self.iteration += 1
            self.section, self.message = None, None
            return
        if not name and self.message is not None and self._continues(info):
            target, kind, pieces, _ = self.message
            if len(pieces) < _MAX_PIECES:  # past it the text is clipped anyway: rejoining would be quadratic
                pieces.append(raw[:_CHUNK])
                self._flush()
            self.message = (target, kind, pieces, len(raw.rstrip()) >= _CHUNK)
            return
        self.message = None
        # a metadata row before any category line: a fragment cut inside `Metadata`
        if self.section == "Metadata" or (self.section is None and _is_metadata(name)):
            self._metadata(name, info)
            return
        m = _MESSAGE.fullmatch(name) if name else None
        if m:
            self._open_message(m, raw)
            return
        if name:
            self._test(name, info)
        elif self.tests:
            self._more(self.tests[-1], info)

    def _cells(self, line: str) -> tuple[str, str]:
        """(name, the result cell as printed) of a row: by dcgmi's columns where the row
        has them (a message piece keeps its spaces), else split at the bars."""
        line = line[:MAX_LINE]
        if len(line) >= 30 and line[1] == " " and line[27:30] == " | ":
            cell = line[30:76] if len(line) >= 78 and line.endswith("|") else line[30:].removesuffix("|")
            return line[2:27].strip(), cell
        parts = line.strip().strip("|").split("|", 1)
        return parts[0].strip(), (parts[1] if len(parts) > 1 else "").strip()

    def _continues(self, info: str) -> bool:
        """Whether a nameless row goes on with the message before it: always after a piece
        that filled the column; after a shorter one, unless the row reads as a result."""
        if self.message is not None and self.message[3]:
            return True
        return not (_LIST.match(info) or _ALL.fullmatch(info) or _ENTITY.fullmatch(info) or _CODE.fullmatch(info))

    def _metadata(self, name: str, info: str) -> None:
        if name in _META:
            self.meta[_META[name]] = clip(info, 64)
        elif _is_metadata(name):
            # a list longer than the column ends in "..." (CommandOutputController cuts it): drop the cut one
            ids = [d.strip() for d in info.split(",")[:MAX_LISTED]]
            self.device_ids = [clip(d, 32) for d in ids if d and not d.endswith("...")]

    def _open_message(self, m: re.Match[str], raw: str) -> None:
        if not self.tests:  # a fragment that starts at a message: the test row is not in it
            self.tests.append(_Test("", self.section, max(self.iteration, 0)))
        test = self.tests[-1]
        kind = "info" if m.group("kind") == "Info" else "warning"
        if m.group("id") is not None:
            key = (m.group("group").strip(), int(m.group("id")))
            bound = test.bound.setdefault(key, ([], []))
            lists: tuple[list[Any], list[Any]] = (bound[1], bound[0])
        else:
            lists = (test.info, test.warnings)
        target = lists[0] if kind == "info" else lists[1]
        self.message = (target, kind, [raw[:_CHUNK]], len(raw.rstrip()) >= _CHUNK)
        target.append("")  # its place: _flush writes the message there, piece by piece
        self._flush()

    def _flush(self) -> None:
        if self.message is None:
            return
        target, kind, pieces, _ = self.message
        text = "".join(pieces).strip()[:MAX_TEXT]
        target[-1] = text if kind == "info" else _message(text)

    def _test(self, name: str, info: str) -> None:
        if len(self.tests) >= MAX_LISTED:
            return
        test = _Test(clip(name, 128), self.section, max(self.iteration, 0))
        self.tests.append(test)
        if info in STATUSES:
            test.status = info  # 2.x/3.x Deployment (the node's result) or 4.x (the test's, entity rows follow)
            return
        self._more(test, info)

    def _more(self, test: _Test, info: str) -> None:
        """A result cell: "Pass - All", "Fail - GPU: 0", "Pass - GPUs: 1, 2", "GPU0: Pass",
        "Code: (000000000000)" (the Diagnostic test's return code), or a line of text."""
        if len(test.results) >= MAX_LISTED:
            return
        m = _ALL.fullmatch(info)
        if m:
            test.status = test.status or m.group("status")
            test.results.append(DcgmResult(m.group("status"), "GPU", every=True))
            return
        m = _LIST.match(info)
        if m:
            listed = info[m.end():].strip()
            if listed.endswith("..."):  # the column cut the list: the last number may be cut too
                listed = listed[:-3].rsplit(",", 1)[0] if "," in listed else ""
                test.truncated = True
            for part in listed.split(",")[:MAX_LISTED]:
                part = part.strip()
                if part.isdigit() and len(part) < 7:
                    test.results.append(DcgmResult(m.group("status"), "GPU", int(part)))
            return
        m = _ENTITY.fullmatch(info)
        if m:
            test.results.append(DcgmResult(m.group("status"), m.group("group").strip(), int(m.group("id"))))
            return
        if info and len(test.info) < MAX_LISTED:
            test.info.append(info[:MAX_TEXT])

    def finish(self, text: str) -> DcgmDiag:
        runtime, connection = _split_errors(self.errors)
        if not self.rows and runtime is None and connection is None:
            raise ParseError("dcgmi diag: no result table, JSON document or dcgmi error in the output "
                             f"(starts with {clip(text.strip(), 60)!r})")
        if self.rows and not (self.tests or self.meta or self.device_ids) and runtime is None and connection is None:
            raise ParseError("dcgmi diag: table lines but no test, metadata or error in them "
                             f"(starts with {clip(text.strip(), 60)!r})")
        iterations = self.iteration + 1
        return DcgmDiag(
            format="text", dcgm_version=self.meta.get("dcgm_version"), driver_version=self.meta.get("driver_version"),
            device_ids=tuple(self.device_ids), tests=tuple(t.done(iterations) for t in self.tests),
            runtime_error=runtime, connection_error=connection, ran=self.ran, complete=self.complete)


_JSON_START = re.compile(r"^[ \t]*\{", re.MULTILINE)


def parse_dcgmi_diag(text: str) -> DcgmDiag:
    """`dcgmi diag [-j]` output (JSON or table, with dcgmi's own error lines) -> DcgmDiag."""
    if not isinstance(text, str):
        raise ParseError(f"dcgmi diag: expected text, got {type(text).__name__}")
    m = _JSON_START.search(text)
    if m is not None:
        return _parse_json(text, m.end() - 1)
    reader = _Reader()
    unread = UnrecognizedLines()
    for line in mended_numbered(text):
        if not reader.line(untabbed(line.text, MAX_LINE)):  # read by its columns: a tabified row's expanded
            unread.note(line)
    diag = reader.finish(text)
    return msgspec.structs.replace(diag, unrecognized=unread.frozen_or_nothing()) if unread.count else diag
