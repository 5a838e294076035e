"""A tool's one-line statement that a numbered member of the job ended, whatever the tool.

Launchers and MPI runtimes each word a rank's end their own way (Paddle's launcher: `the
trainer process with rank=[3] was aborted`; HPE MPT: `MPT ERROR: Rank 0(g:0) received signal
SIGSEGV(11).`; `worker 3 died`, `task 5 exited with code 1`, `replica 2 crashed`), and a rule
per sentence misses the next tool's. The statements share one grammar, read here in general:

* SUBJECT: an indexed member of the job: `rank`, `process`, `proc`, `task`, `trainer`,
  `worker`, `replica`, `local_rank`, its index as tools print it (`rank 3`, `Rank 3`,
  `rank=3`, `rank: 3`, `rank=[3]`, a list `rank=[1, 2, 3]`, a named worker process
  `Worker proc VllmWorker-1` as vLLM v1's executor prints it), then at most a bracketed
  aside (`(g:0)`, `(pid 123)`), `with pid N`, `on host H` / `on node H` or `of N`;
* not after a preposition (`Proxy Call to rank 1 failed`: the member is the object);
* PREDICATE, right after it (`was`, `has been`, `has`, `had`, `got`, `is` allowed before):
  an ending: aborted, exited/exits, died, killed, terminated, crashed, `is aborting` /
  `is exiting` (HPE MPT's `Rank 1(g:1) is aborting with error code 1.`: read as their past), failed (not
  `failed to`: an attempt, not an end; a bare `failed` only ending its sentence or with its
  cause: `rank 1 failed (Connect)` says an operation failed), received/caught signal, segfaulted, a segmentation
  fault, core dumped, called MPI_Abort / abort;
* the CAUSE where the rest of the line gives one: a signal by name or number
  (`SIGSEGV(11)`, `signal 11`, `signal: 9`) or an exit code/status (`code 1`,
  `status=139`, `exit code: 2`).

Each such statement is a MemberEnd (the member noun, the indices, the verb, the cause); which
of them names a culprit is the diagnosis' to judge (diagnose/memberends.py: this reader is a
fallback source; the tools hc has a rule of its own for are read by theirs too). A line's
world where the same sentence states it (`Out of all 4 trainers`, `rank 3 of 4`) is kept, so
an index can be bounded. Linear: every pattern's runs are bounded, nothing nests.
"""

from __future__ import annotations

import re

from healthcheck.parsers.lines import Handler, Line
from healthcheck.parsers.torch_log.facts import SIGNALS, MemberEnd
from healthcheck.parsers.torch_log.state import TorchState, agent_where

_NOUNS = r"(?P<noun>[Rr]ank|RANK|[Pp]rocess|[Pp]roc|[Tt]ask|TASK|[Tt]rainer|[Ww]orker|[Rr]eplica|local_rank)"
_INDEX = (r"(?:=\[(?P<list>\d{1,7}(?:, {0,2}\d{1,7}){0,63})\]"
          r"|(?:=|: ?| {1,3}#?|(?P<named> {1,3}[A-Za-z]{0,24}(?:Worker|Proc|Process|Rank)[-_]))"
          r"(?P<one>\d{1,7})(?![\d.:/-]\d))")
_ASIDE = (r"(?: {0,2}\([^()]{1,64}\))?"
          r"(?: with pid \d{1,10}| on (?:host|node) \S{1,256}| of (?P<of>\d{1,7}))?")
_VERB = (r",? {1,3}(?:(?:was|has been|has|had|got|is|just) {1,3})?"
         r"(?P<verb>aborted|exited|exits|died|killed|terminated|crashed|failed(?! to\b)(?! with [Tt]imeout)"
         r"|received signal|caught signal|received SIG|segfaulted|segmentation fault|core dumped"
         r"|called MPI_Abort|called abort|(?<=\bis )aborting|(?<=\bis )exiting)\b")
_STATEMENT = re.compile(rf"(?<![\w-]){_NOUNS}{_INDEX}{_ASIDE}{_VERB}")
# a member after a preposition is an object, not the subject (`Proxy Call to rank 1 failed`)
_OBJECT = re.compile(r"\b(?:to|from|with|for|by|of|at|on|in|into|than|against|via) {1,3}(?:the {1,3})?$", re.IGNORECASE)
# ... but `with` after a member's own noun names it: `the trainer process with rank=[3] was aborted`
_OWNED = re.compile(r"\b(?:process|proc|trainer|worker|task|replica) {1,3}with {1,3}$", re.IGNORECASE)
# a bare `failed` ends its sentence (`Worker 3 has failed.`), or its cause follows a colon
_FAILED_END = re.compile(r" {0,3}(?:[.!:;]|$)")
_SIGNAL = re.compile(r"\b(SIG[A-Z]{2,7})\b|[Ss]ignal(?: number)?[:=]? {0,2}(\d{1,3})\b")
_CODE = re.compile(r"\b(?:exit )?(?:code|status)[:=]? {0,2}(-?\d{1,4})\b")
_WORLD = re.compile(r"\b(?:[Oo]ut of (?:all )?|[Aa]ll )(\d{1,7}) (?:trainers|ranks|processes|workers|tasks|replicas)\b")
# a progressive after `is` is the end under way (HPE MPT's `Rank 1(g:1) is aborting with error
# code 1.`), read as its past
_PROGRESSIVE = {"aborting": "aborted", "exiting": "exited"}
_WORDS = ("aborted", "aborting", "exited", "exits", "exiting", "died", "killed", "terminated", "crashed", "failed",
          "signal", "SIG", "segfault", "egmentation fault", "core dumped", "called MPI_Abort", "called abort")
_NOUN_WORDS = ("ank", "roc", "ask", "TASK", "rainer", "orker", "eplica")
_CAUSE_SPAN = 96  # characters after the verb its cause may take
_MEMBERS_MAX = 64


def looks_like_end(text: str) -> bool:
    """The cheap test: a member noun and an ending word somewhere in the line."""
    return any(w in text for w in _WORDS) and any(w in text for w in _NOUN_WORDS)


def _signal_of(rest: str) -> str:
    m = _SIGNAL.search(rest, 0, _CAUSE_SPAN)
    if m is None:
        return ""
    if m.group(1):
        return m.group(1) if m.group(1) in SIGNALS.values() else ""
    return SIGNALS.get(int(m.group(2)), "")


def _code_of(rest: str) -> int | None:
    m = _CODE.search(rest, 0, _CAUSE_SPAN)
    return int(m.group(1)) if m is not None else None


def _world_of(text: str, m: re.Match[str]) -> int | None:
    if m.group("of"):
        return int(m.group("of"))
    w = _WORLD.search(text)
    return int(w.group(1)) if w is not None else None


def read_member_end(state: TorchState, line: Line) -> bool:
    """Every statement of a member's end in the line (module doc)."""
    text = line.text
    found = False
    for m in _STATEMENT.finditer(text):
        rest = text[m.end("verb"):]
        verb = _PROGRESSIVE.get(m.group("verb"), m.group("verb"))
        before = max(0, m.start() - 24)
        if _OBJECT.search(text, before, m.start()) is not None and _OWNED.search(text, before, m.start()) is None:
            continue
        if verb == "failed" and _FAILED_END.match(rest) is None and _code_of(rest) is None and not _signal_of(rest):
            continue  # `rank 1 failed (Connect)`: what failed is not said to be the member's end
        members = tuple(int(x) for x in (m.group("list") or m.group("one")).split(","))[:_MEMBERS_MAX]
        signal = _signal_of(text[m.start("verb"):] if verb.startswith(("received", "caught")) else rest)
        if not signal and verb in ("segmentation fault", "segfaulted"):
            signal = "SIGSEGV"
        code = _code_of(rest) if not signal else None
        # a named worker's index is its place among the workers, not a pid
        noun = "worker" if m.group("named") else m.group("noun").lower()
        state.add("member_ends", MemberEnd(
            **agent_where(line), noun=noun, members=members, verb=verb, signal=signal,
            exitcode=code, world=_world_of(text, m)))
        found = True
    return found


HANDLERS: tuple[Handler[TorchState], ...] = (
    Handler("member-end", looks_like_end, read_member_end),
)

__all__ = ["HANDLERS", "looks_like_end", "read_member_end"]
