"""Delivering ticket records to a webhook: POST each as JSON, retry, and never lose one.

An action with side effects outside hc (a ticketing system), so it lives with the
Slurm actions and is audited like them: one audit line per record delivered, kept or
rejected (`outcome`), saying why a record kept was not sent.

- Each record is one POST (`Content-Type: application/json`, the record as the body),
  with `Idempotency-Key: <fingerprint>:<state>:<episode>` so the receiver can drop a
  repeat, and the token (read from a file, never printed, logged or spooled) in the
  configured header.
- Transient failures (no connection, a connection closed, a timeout, HTTP 408, 425,
  429 and 5xx) are retried with exponential backoff and jitter, up to `attempts` per
  record and `max_total_s` for the whole delivery; any other answer is final at once.
  Each attempt has a hard deadline: the request runs in a daemon thread, abandoned at
  `timeout_s` (a server that trickles its answer a byte at a time would defeat a
  socket timeout).
- The first record that cannot be delivered stops the delivery: it and every later
  record are kept in the spool (a directory under hc's state dir, one file per record,
  written atomically) in order, and the next delivery sends the spool first. Stopping
  keeps the order: a ticket is never closed before it was opened. An answer about hc's
  configuration rather than the record (a redirect: never followed, the token must not
  go elsewhere; 401, 403, 404, 405, 407, 410: CONFIG_STATUS) stops it the same way, as
  a configuration error (the command exits 4): no record can get through until the URL
  or token is fixed, so none is set aside.
- A record the receiver refuses for good (400, 409, 422, any other 4xx) is set aside in
  `rejected/` with its place in the queue, so it holds back nothing; it is not
  delivered (never in the ledger), a later delivery of the same record does not send it
  again, and `resend_rejected` moves it back into the spool at its place.
- A ledger of delivered keys (`delivered`, the newest LEDGER_KEEP) makes a record that
  was delivered once never sent again (the same run's tickets twice, a spooled record
  that was also delivered by a later run).
- One delivery at a time holds the spool's lock; a delivery that finds it held keeps
  its records in the spool for the next one instead of waiting.

Only the stdlib is used (urllib.request, honouring the usual proxy variables); only
http and https URLs without credentials in them are accepted; answers are read up to
RESPONSE_MAX bytes.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import hashlib
import http
import http.client
import json
import os
import random
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from healthcheck import __version__
from healthcheck.core.atomic import append, write_atomic
from healthcheck.core.errors import HcError
from healthcheck.core.inputs import InputNotFound, clip, read_bounded
from healthcheck.report.tickets import encode_line

if TYPE_CHECKING:
    from healthcheck.actions.audit import AuditLog
    from healthcheck.report.tickets import Ticket

RESPONSE_MAX = 4096  # bytes of an answer read: the status is what counts, the start of the body says why
TOKEN_MAX = 16 * 1024
SPOOL_ENTRY_MAX = 4 * 1024 * 1024
LEDGER_KEEP = 100_000  # delivered keys remembered (a 2,000-node fleet's tickets for months)
LEDGER_MAX_BYTES = 64 * 1024 * 1024
LEDGER_BATCH = 100  # deliveries recorded in the ledger per write
BACKOFF_MAX_S = 60.0  # the longest wait between two attempts
LOCK_NAME = "lock"
LEDGER_NAME = "delivered"
_ENTRY_RE = re.compile(r"^(\d{20})-([0-9a-f]{32})\.json$")
_REJECTED_RE = re.compile(r"^([0-9a-f]{32})\.json$")
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
_RESERVED_HEADERS = {"content-type", "content-length", "idempotency-key", "host", "transfer-encoding", "connection"}
_RETRY_STATUS = {408, 425, 429}
# Answers about the URL or the token, not about the record: Unauthorized, Forbidden, Not
# Found, Method Not Allowed, Proxy Authentication Required, Gone (and every redirect).
CONFIG_STATUS = frozenset({401, 403, 404, 405, 407, 410})
REJECTED_DIR = "rejected"


class WebhookError(HcError):
    """The delivery cannot start: a bad URL, header or token file, an unusable spool (exit 4)."""


class Secret:
    """A token that never shows itself: repr and str are masked, so no message or log can carry it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__


# ------------------------------------------------------------------ inputs, checked


def check_url(url: str) -> str:
    """`url` if it is an http or https URL hc may POST to; WebhookError otherwise."""

    if not url or len(url) > 2048 or any(c.isspace() or not c.isprintable() for c in url):
        raise WebhookError("webhook URL: not a URL (empty, longer than 2048 characters, or with spaces or "
                           "control characters)")
    try:
        parts = urlsplit(url)
        port = parts.port  # a port that is not a number raises here
    except ValueError as exc:
        raise WebhookError(f"webhook URL: not a valid URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https"):
        raise WebhookError(f"webhook URL: scheme {parts.scheme or '(none)'!r} is not http or https")
    if not parts.hostname:
        raise WebhookError("webhook URL: names no host")
    if parts.username is not None or parts.password is not None:
        # a URL is printed and logged; credentials go in --token-file, which never is
        raise WebhookError("webhook URL: has credentials in it; put the token in a file (--token-file)")
    if port == 0:
        raise WebhookError("webhook URL: port 0")
    return parts._replace(fragment="").geturl()


def shown_url(url: str) -> str:
    """The URL as messages and the audit log show it: scheme, host and port only (a
    webhook's path or query is often its secret, as Slack's are)."""

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def check_header_name(name: str) -> str:
    if not _HEADER_NAME_RE.match(name):
        raise WebhookError(f"token header {name[:80]!r} is not a valid HTTP header name")
    if name.lower() in _RESERVED_HEADERS:
        raise WebhookError(f"token header {name!r} is one hc sets itself; name another (e.g. Authorization)")
    return name


def read_token(path: Path | str) -> Secret:
    """The token in `path`: its first line, whole (e.g. "Bearer abc..." for Authorization).

    Errors name the file, never its content.
    """

    data = read_bounded(path, TOKEN_MAX, what="token file")
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise WebhookError(f"{path}: token file is not ASCII text (an HTTP header cannot carry it)") from None
    lines = text.strip().splitlines()
    token = lines[0].strip() if lines else ""
    if not token:
        raise WebhookError(f"{path}: token file is empty")
    if len(lines) > 1:
        raise WebhookError(f"{path}: token file has more than one line (a header value is one line)")
    if any(not (c == "\t" or " " <= c <= "~") for c in token):
        raise WebhookError(f"{path}: token contains control characters (an HTTP header cannot carry them)")
    return Secret(token)


@dataclass(frozen=True)
class WebhookTarget:
    """Where and how records are POSTed."""

    url: str
    token: Secret | None = None
    token_header: str = "Authorization"
    timeout_s: float = 10.0
    attempts: int = 5
    backoff_s: float = 1.0
    max_total_s: float = 300.0

    def headers(self, key: str) -> dict[str, str]:
        out = {"Content-Type": "application/json", "Idempotency-Key": key, "User-Agent": f"hc/{__version__}"}
        if self.token is not None:
            out[self.token_header] = self.token.reveal()
        return out


# ------------------------------------------------------------------------ one POST


@dataclass(frozen=True)
class Attempt:
    ok: bool
    retryable: bool
    status: int | None  # the HTTP status, None where no answer came
    message: str  # what happened, for people: never the token, never the URL's path
    retry_after: float | None = None
    # the answer says hc is configured wrong (a redirect, 401, 403, 404, 405, 407, 410): no
    # record can get through until someone fixes the URL or the token, so none is set aside
    configuration: bool = False

    @property
    def refused(self) -> bool:
        """The receiver refused this one record for good (400, 409, 422, ...): set it aside."""
        return (not self.ok and not self.retryable and not self.configuration and self.status is not None
                and 400 <= self.status < 500)


def _snippet(body: bytes) -> str:
    text = body.decode("utf-8", "replace").strip()
    text = "".join(c if c.isprintable() else " " for c in text)
    return clip(text, 200)


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None  # an HTTP date: the backoff decides
    return seconds if 0 <= seconds <= 86_400 else None


def _status_text(status: int) -> str:
    """"HTTP 404 Not Found": the number, and its standard name where it has one."""

    try:
        return f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        return f"HTTP {status}"


def _answer(status: int, body: bytes, retry_after: str | None) -> Attempt:
    if 200 <= status < 300:
        return Attempt(True, False, status, f"HTTP {status}")
    said = _snippet(body)
    message = _status_text(status) + (f": {said}" if said else "")
    if 300 <= status < 400:
        return Attempt(False, False, status, f"{message} (a redirect: not followed, the token stays with this URL)",
                       configuration=True)
    if status in CONFIG_STATUS:
        return Attempt(False, False, status, message, configuration=True)
    return Attempt(False, status in _RETRY_STATUS or status >= 500, status, message, _retry_after(retry_after))


def _opener() -> Any:
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        """Refuses every redirect: the 3xx comes back as an HTTPError, the token goes nowhere else."""

        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(NoRedirect())


def post(target: WebhookTarget, body: bytes, key: str, timeout_s: float | None = None) -> Attempt:
    """One POST of `body`, within a hard deadline; never raises for what the network does."""

    timeout = target.timeout_s if timeout_s is None else timeout_s
    request = urllib.request.Request(target.url, data=body, headers=target.headers(key), method="POST")
    result: list[Attempt] = []

    def attempt() -> None:
        try:
            with _opener().open(request, timeout=timeout) as response:
                body = response.read(RESPONSE_MAX)
                result.append(_answer(response.status, body, response.headers.get("Retry-After")))
        except urllib.error.HTTPError as exc:  # an answer that is not 2xx
            try:
                data = exc.read(RESPONSE_MAX)
            except (OSError, http.client.HTTPException):
                data = b""
            result.append(_answer(exc.code, data, exc.headers.get("Retry-After") if exc.headers else None))
        except ssl.SSLCertVerificationError as exc:
            result.append(Attempt(False, False, None, f"TLS certificate not accepted: {exc.verify_message}"))
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                result.append(Attempt(False, False, None, f"TLS certificate not accepted: {reason.verify_message}"))
            elif isinstance(reason, (TimeoutError, socket.timeout)):
                result.append(Attempt(False, True, None, f"no answer within {timeout:g} s"))
            else:
                why = getattr(reason, "strerror", None) or reason
                result.append(Attempt(False, True, None, f"cannot connect: {why}"))
        except TimeoutError:
            result.append(Attempt(False, True, None, f"no answer within {timeout:g} s"))
        except http.client.RemoteDisconnected:
            result.append(Attempt(False, True, None, "the server closed the connection without an answer"))
        except (OSError, http.client.HTTPException) as exc:
            result.append(Attempt(False, True, None, f"connection failed: {type(exc).__name__}: {exc}"))

    # the socket timeout bounds each read, not the whole exchange: the thread is the deadline
    worker = threading.Thread(target=attempt, name="hc-webhook", daemon=True)
    worker.start()
    worker.join(timeout + 1.0)
    if not result:
        return Attempt(False, True, None, f"no complete answer within {timeout:g} s")
    return result[0]


# ----------------------------------------------------------------------- the spool


@dataclass(frozen=True)
class SpoolEntry:
    path: Path
    key: str
    body: bytes


class Spool:
    """Records waiting for delivery, one file each (`<sequence>-<key hash>.json`), and the
    ledger of keys delivered; everything written atomically (core/atomic.py)."""

    def __init__(self, directory: Path | str) -> None:
        self.dir = Path(directory).expanduser()
        self.problems: list[str] = []  # spool files that could not be read (kept, never deleted)
        self._lock_fd: int | None = None

    def _fail(self, why: str) -> WebhookError:
        return WebhookError(f"tickets spool {self.dir}: {why} (set tickets.spool_dir or slurm.state_dir)")

    def prepare(self) -> None:
        """Create the directory (0700: records may name nodes and evidence) or fail at once, before
        anything is sent: a delivery that could not keep a failed record must not start."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise self._fail(f"cannot create: {exc.strerror or exc}") from None
        if not self.dir.is_dir() or self.dir.is_symlink():
            raise self._fail("is not a directory")
        if not os.access(self.dir, os.W_OK | os.X_OK):
            raise self._fail("is not writable")

    def try_lock(self) -> bool:
        """Take the spool's lock without waiting; False while another delivery holds it."""
        try:
            fd = os.open(self.dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0), 0o600)
        except OSError as exc:
            raise self._fail(f"cannot open its lock: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    # -- entries

    @staticmethod
    def key_hash(key: str) -> str:
        return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]

    def _names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.dir) if _ENTRY_RE.match(n))
        except OSError as exc:
            raise self._fail(f"cannot list: {exc.strerror or exc}") from None

    def entries(self) -> list[SpoolEntry]:
        """The waiting records, oldest first; a file that cannot be read is reported and left."""

        out = []
        for name in self._names():
            path = self.dir / name
            try:
                doc = json.loads(read_bounded(path, SPOOL_ENTRY_MAX, what="spooled ticket"))
                key, body = doc["key"], doc["body"]
                if not isinstance(key, str) or not isinstance(body, str) or self.key_hash(key) != _ENTRY_RE.match(
                        name).group(2):  # type: ignore[union-attr]
                    raise ValueError("key or body missing, or not the file's key")
            except (HcError, ValueError, KeyError, TypeError) as exc:
                self.problems.append(f"{path}: not delivered, left in place: {exc}")
                continue
            out.append(SpoolEntry(path, key, body.encode("utf-8", "surrogateescape")))
        return out

    def waiting(self) -> dict[str, Path]:
        """Key hash -> the file of each record waiting."""
        return {m.group(2): self.dir / n for n in self._names() if (m := _ENTRY_RE.match(n))}

    def add(self, key: str, body: bytes, sequence: int, *, waiting: dict[str, Path]) -> Path:
        """Keep one record for the next delivery (once: a key already waiting keeps its place)."""

        digest = self.key_hash(key)
        if digest in waiting:
            return waiting[digest]
        path = self.dir / f"{sequence:020d}-{digest}.json"
        doc = {"key": key, "body": body.decode("utf-8", "surrogateescape"),
               "spooled_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        write_atomic(path, (json.dumps(doc, ensure_ascii=True) + "\n").encode(), mode=0o600)
        waiting[digest] = path
        return path

    # -- records the receiver refused for good

    @property
    def rejected_dir(self) -> Path:
        return self.dir / REJECTED_DIR

    def rejected(self) -> set[str]:
        """Key hashes of the records set aside in rejected/ (never delivered: not in the ledger)."""
        try:
            names = os.listdir(self.rejected_dir)
        except FileNotFoundError:
            return set()
        except OSError as exc:
            raise self._fail(f"cannot list {REJECTED_DIR}/: {exc.strerror or exc}") from None
        return {m.group(1) for n in names if (m := _REJECTED_RE.match(n))}

    def reject(self, key: str, body: bytes, why: str, sequence: int) -> Path:
        """Set aside a record the receiver refused for good: kept (never lost) in rejected/,
        with its place in the queue (`sequence`) for `resend_rejected`, so it cannot hold back
        the records queued behind it. It is not delivered: its key stays out of the ledger."""

        self.rejected_dir.mkdir(mode=0o700, exist_ok=True)
        path = self.rejected_dir / f"{self.key_hash(key)}.json"
        doc = {"key": key, "body": body.decode("utf-8", "surrogateescape"), "why": why, "sequence": sequence,
               "rejected_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        write_atomic(path, (json.dumps(doc, ensure_ascii=True) + "\n").encode(), mode=0o600)
        return path

    def unreject(self, key: str) -> None:
        """Drop a set-aside copy of a record that has now been delivered (from the spool)."""
        try:
            (self.rejected_dir / f"{self.key_hash(key)}.json").unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            self.problems.append(f"{self.rejected_dir}: a delivered record's rejected copy stays: "
                                 f"{exc.strerror or exc}")

    def requeue_rejected(self, waiting: dict[str, Path]) -> int:
        """Move every record of rejected/ back into the queue at its old place (under the lock),
        and out of the ledger, where an older hc wrote the keys it had refused; returns how many."""

        moved: list[str] = []
        for digest in sorted(self.rejected()):
            path = self.rejected_dir / f"{digest}.json"
            try:
                doc = json.loads(read_bounded(path, SPOOL_ENTRY_MAX, what="rejected ticket"))
                key, body, sequence = doc["key"], doc["body"], doc.get("sequence")
                if not isinstance(key, str) or not isinstance(body, str) or self.key_hash(key) != digest:
                    raise ValueError("key or body missing, or not the file's key")
                if not isinstance(sequence, int) or not 0 <= sequence < 10**20:
                    sequence = os.stat(path).st_mtime_ns  # set aside by an older hc: in the order refused
            except (HcError, ValueError, KeyError, TypeError, OSError) as exc:
                self.problems.append(f"{path}: not sent again, left in place: {exc}")
                continue
            self.add(key, body.encode("utf-8", "surrogateescape"), sequence, waiting=waiting)
            moved.append(key)
            try:
                path.unlink()  # after the spool holds it; a copy left is dropped once it is delivered
            except OSError as exc:
                self.problems.append(f"{path}: queued again, but cannot remove it: {exc.strerror or exc}")
        self.forget(moved)
        return len(moved)

    def remove(self, entry: SpoolEntry) -> None:
        try:
            entry.path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:  # it stays; the ledger keeps it from being sent twice
            self.problems.append(f"{entry.path}: delivered, but cannot remove it: {exc.strerror or exc}")

    # -- the ledger of delivered keys

    def delivered(self, *, compact: bool = False) -> set[str]:
        """The keys delivered so far; with `compact` (under the lock), the ledger is cut to the
        newest LEDGER_KEEP once it holds twice as many."""

        path = self.dir / LEDGER_NAME
        try:
            data = read_bounded(path, LEDGER_MAX_BYTES, what="ledger of delivered tickets")
        except InputNotFound:
            return set()
        keys = data.decode("utf-8", "replace").splitlines()
        if compact and len(keys) > 2 * LEDGER_KEEP:  # now and then, not at every delivery
            keys = keys[-LEDGER_KEEP:]
            write_atomic(path, ("\n".join(keys) + "\n").encode(), mode=0o600)
        return set(keys)

    def mark_delivered(self, keys: list[str]) -> None:
        """Add keys to the ledger: one append, one fsync, for a batch of deliveries."""

        append(self.dir / LEDGER_NAME, "".join(k + "\n" for k in keys).encode("utf-8", "surrogateescape"), mode=0o600)

    def forget(self, keys: Iterable[str]) -> None:
        """Take keys out of the ledger (under the lock): records that were never delivered."""

        gone = set(keys)
        path = self.dir / LEDGER_NAME
        if not gone:
            return
        try:
            lines = read_bounded(path, LEDGER_MAX_BYTES, what="ledger of delivered tickets").decode(
                "utf-8", "surrogateescape").splitlines()
        except InputNotFound:
            return
        kept = [k for k in lines if k not in gone]
        if len(kept) != len(lines):
            write_atomic(path, "".join(k + "\n" for k in kept).encode("utf-8", "surrogateescape"), mode=0o600)


# -------------------------------------------------------------------- the delivery


@dataclass
class Delivery:
    """What a delivery did; `failure` says why it stopped (records then wait in the spool)."""

    url: str
    delivered: int = 0  # POSTs the server accepted, spooled ones included
    from_spool: int = 0  # of those, records earlier deliveries had kept
    duplicates: int = 0  # records delivered before (same key): not sent again
    spooled: int = 0  # this run's records kept for the next delivery
    rejected: int = 0  # records the receiver refused for good (400, 409, 422...): set aside in rejected/
    rejected_before: int = 0  # this run's records an earlier delivery set aside: not sent (--resend-rejected)
    resent: int = 0  # records moved back from rejected/ into the queue (--resend-rejected)
    waiting: int = 0  # records in the spool after this delivery
    attempts: int = 0  # POSTs tried
    failure: str | None = None
    configuration: bool = False  # the failure is an answer about hc's URL or token (exit 4)
    messages: list[str] = field(default_factory=list)  # warnings for stderr

    @property
    def complete(self) -> bool:
        return self.failure is None and self.waiting == 0 and self.rejected == 0


@dataclass
class _Clock:
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], float] = time.monotonic


def _send(target: WebhookTarget, key: str, body: bytes, deadline: float, clock: _Clock,
          out: Delivery) -> tuple[Attempt, int]:
    """POST one record until it is accepted, a final answer comes, its attempts are used up or
    the delivery's time is; returns the last attempt and how many were made."""
    delay = target.backoff_s
    made = 0
    last = Attempt(False, True, None, "no time left to try")
    while made < target.attempts:
        left = deadline - clock.now()
        if left <= 0:
            return Attempt(False, True, last.status, f"{last.message}; out of time (max_total_s)"
                           if made else "out of time (max_total_s)"), made
        last = post(target, body, key, timeout_s=min(target.timeout_s, left))
        made += 1
        out.attempts += 1
        if last.ok or not last.retryable or made >= target.attempts:
            break
        wait = min(delay, BACKOFF_MAX_S) * (0.5 + random.random() / 2)  # jitter: many nodes' crons
        if last.retry_after is not None:
            wait = max(wait, min(last.retry_after, BACKOFF_MAX_S))
        if clock.now() + wait >= deadline:
            return Attempt(False, True, last.status, f"{last.message}; out of time (max_total_s) to retry"), made
        clock.sleep(wait)
        delay *= 2
    return last, made


def _fields(body: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(body)
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _tries(made: int) -> str:
    return f"after {made} attempt{'s' if made != 1 else ''}" if made else "before any attempt"


@dataclass
class _Queued:
    """One record on its way: from the spool (`entry`) or from this run (`index` in its records)."""

    entry: SpoolEntry | None
    index: int
    key: str
    body: bytes

    @property
    def sequence(self) -> int | None:
        """Its place in the spool's order, where it has one already."""
        if self.entry is None:
            return None
        m = _ENTRY_RE.match(self.entry.path.name)
        return int(m.group(1)) if m else None


class _Delivering:
    """One delivery under the spool's lock: sends in order, keeps, sets aside, audits."""

    def __init__(self, target: WebhookTarget, spool: Spool, audit: AuditLog | None, clock: _Clock,
                 out: Delivery) -> None:
        self.target, self.spool, self.audit, self.clock, self.out = target, spool, audit, clock, out
        self.base = time.time_ns()
        self.waiting = spool.waiting()
        self.rejected = spool.rejected()
        # the ledger is written in batches (one fsync each), and a delivered spool file is removed
        # only after its key is in the ledger: a crash in between re-sends, with the same key
        self.marked: list[str] = []
        self.sent_entries: list[SpoolEntry] = []
        self.done: set[str] = set()
        self.deadline = 0.0

    # -- what is written

    def audit_line(self, item: _Queued, outcome: str, attempt: Attempt | None, made: int, where: str | None,
                   message: str) -> None:
        """One line per record delivered, kept or set aside: `outcome` says which, and
        `message` what happened (for a record kept unsent, why it was not sent)."""
        if self.audit is None:
            return
        ticket = _fields(item.body)
        entry = {
            "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "action": "ticket", "outcome": outcome, "ok": outcome == "delivered", "url": shown_url(self.target.url),
            "key": item.key, "state": ticket.get("state"), "id": ticket.get("id"), "node": ticket.get("nodes"),
            "report_id": ticket.get("run_id"), "http_status": attempt.status if attempt else None,
            "attempts": made, "message": message, "spooled": where if outcome == "kept" else None,
            "rejected": where if outcome == "rejected" else None,
        }
        try:
            self.audit.append(entry)
        except OSError as exc:
            if not self.out.messages or "audit log" not in self.out.messages[-1]:
                self.out.messages.append(f"audit log {self.audit.path} not written: {exc.strerror or exc}")

    def keep(self, item: _Queued) -> str:
        """This run's record, into the spool for the next delivery (a spooled one stays where it is)."""
        if item.entry is not None:
            return str(item.entry.path)
        path = self.spool.add(item.key, item.body, self.base + item.index, waiting=self.waiting)
        self.out.spooled += 1
        return str(path)

    def settle(self) -> None:
        if self.marked:
            try:
                self.spool.mark_delivered(self.marked)
            except HcError as exc:  # the receiver has them; a resend would carry the same Idempotency-Key
                self.out.messages.append(f"ledger of delivered tickets not written: {exc}")
            self.marked.clear()
        for sent in self.sent_entries:
            self.spool.remove(sent)
        self.sent_entries.clear()

    # -- one record

    def skipped(self, item: _Queued) -> bool:
        """Whether `item` is not to be sent: delivered before, or (this run's) set aside before."""
        digest = Spool.key_hash(item.key)
        if item.entry is None and digest in self.rejected:
            # refused for good earlier (an older hc may have put its key in the ledger too: it
            # was never delivered, and is not counted as such)
            self.out.rejected_before += 1
            return True
        if item.key in self.done:
            if item.entry is None:
                self.out.duplicates += 1
            else:
                self.spool.remove(item.entry)
            return True
        return False

    def handle(self, item: _Queued) -> None:
        if self.skipped(item):
            return
        if self.out.failure is not None:  # stopped: keep the rest, in order
            if item.entry is None:
                self.audit_line(item, "kept", None, 0, self.keep(item),
                                f"not sent: the delivery stopped at an earlier record ({self.out.failure})")
            return
        attempt, made = _send(self.target, item.key, item.body, self.deadline, self.clock, self.out)
        if attempt.ok:
            self.delivered(item, attempt, made)
        elif attempt.refused:
            self.set_aside(item, attempt, made)
        else:
            self.stop(item, attempt, made)

    def delivered(self, item: _Queued, attempt: Attempt, made: int) -> None:
        self.done.add(item.key)
        self.marked.append(item.key)
        self.out.delivered += 1
        if item.entry is not None:
            self.out.from_spool += 1
            self.sent_entries.append(item.entry)
            if Spool.key_hash(item.key) in self.rejected:  # queued again by --resend-rejected, copy left
                self.spool.unreject(item.key)
        self.audit_line(item, "delivered", attempt, made, None, attempt.message)
        if len(self.marked) >= LEDGER_BATCH:
            self.settle()

    def set_aside(self, item: _Queued, attempt: Attempt, made: int) -> None:
        """Refused for good: resending it first on every run would block every record behind it."""
        why = f"{attempt.message} ({_tries(made)})"
        sequence = item.sequence if item.sequence is not None else self.base + max(item.index, 0)
        try:
            aside = str(self.spool.reject(item.key, item.body, why, sequence))
        except (OSError, HcError) as exc:
            self.out.messages.append(f"rejected record {item.key} not set aside: {exc}")
            self.stop(item, attempt, made)  # kept in the spool instead: never lost
            return
        self.rejected.add(Spool.key_hash(item.key))  # the same key later in this queue is not sent again
        self.out.rejected += 1
        if item.entry is not None:
            self.spool.remove(item.entry)
        self.audit_line(item, "rejected", attempt, made, aside, f"refused by the receiver: {why}")

    def stop(self, item: _Queued, attempt: Attempt, made: int) -> None:
        if attempt.configuration:
            self.out.configuration = True
            self.out.failure = (f"{shown_url(self.target.url)} answered {attempt.message} ({_tries(made)}): the "
                                "webhook URL or its token is wrong (--webhook or tickets.webhook_url; --token-file "
                                "or tickets.token_file); nothing was set aside")
        else:
            self.out.failure = f"{attempt.message} ({_tries(made)})"
        self.audit_line(item, "kept", attempt, made, self.keep(item), attempt.message)

    # -- the whole delivery

    def run(self, records: list[tuple[str, bytes]], resend_rejected: bool) -> None:
        if resend_rejected:
            self.out.resent = self.spool.requeue_rejected(self.waiting)
            self.rejected = self.spool.rejected()  # what could not be moved (said in problems)
        self.done = self.spool.delivered(compact=True)
        self.deadline = self.clock.now() + self.target.max_total_s
        queue = [_Queued(e, -1, e.key, e.body) for e in self.spool.entries()]
        queue += [_Queued(None, i, key, body) for i, (key, body) in enumerate(records)]
        for item in queue:
            self.handle(item)

    def locked_out(self, records: list[tuple[str, bytes]], resend_rejected: bool) -> None:
        """Another delivery holds the spool: keep this run's records for the next one, send nothing."""
        self.out.failure = f"another hc is delivering from {self.spool.dir}: records kept there for the next delivery"
        if resend_rejected:
            self.out.failure += f"; the records in {self.spool.rejected_dir} were not queued again"
        self.done = self.spool.delivered()
        for i, (key, body) in enumerate(records):
            item = _Queued(None, i, key, body)
            if not self.skipped(item):
                self.keep(item)


def deliver(tickets: Iterable[Ticket], target: WebhookTarget, spool: Spool, *, audit: AuditLog | None = None,
            resend_rejected: bool = False, sleep: Callable[[float], None] = time.sleep,
            now: Callable[[], float] = time.monotonic) -> Delivery:
    """Send what the spool holds, then `tickets`, in order; keep in the spool whatever is not delivered.

    resend_rejected: first move the records set aside in rejected/ back into the spool, at
    their places, and send them with the rest.
    WebhookError (exit 4) before anything is sent where the spool cannot be used.
    """

    out = Delivery(url=shown_url(target.url))
    spool.prepare()
    records = [(t.key, encode_line(t).rstrip(b"\n")) for t in tickets]
    run = _Delivering(target, spool, audit, _Clock(sleep, now), out)
    if not spool.try_lock():
        run.locked_out(records, resend_rejected)
    else:
        try:
            run.run(records, resend_rejected)
        finally:
            run.settle()
            spool.unlock()
    out.waiting = len(spool.waiting())
    out.messages.extend(spool.problems)
    return out


def _count(n: int, what: str = "record") -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def describe(d: Delivery, spool: Spool) -> str:
    """One line for stderr: how many were delivered, kept and rejected, and why any wait."""
    delivered = f"{d.delivered} delivered" + (f" ({d.from_spool} of them from the spool)" if d.from_spool else "")
    line = (f"ticket records to {d.url}: {delivered}, {d.waiting} kept in the spool, "
            f"{d.rejected} rejected by the receiver")
    notes = []
    if d.resent:
        notes.append(f"{_count(d.resent)} set aside before queued again (--resend-rejected)")
    if d.duplicates:
        notes.append(f"{d.duplicates} already delivered before, not sent again")
    if d.rejected_before:
        notes.append(f"{_count(d.rejected_before)} rejected by an earlier delivery, not sent again")
    if d.failure is not None:
        notes.append(f"delivery stopped: {d.failure}")
    if d.waiting:
        notes.append(f"{_count(d.waiting)} kept in {spool.dir}, in order, for the next delivery")
    if d.rejected or d.rejected_before:
        notes.append(f"rejected records are kept in {spool.rejected_dir}: `hc report tickets --resend-rejected` "
                     "sends them again once the receiver takes them")
    return "; ".join([line, *notes])
