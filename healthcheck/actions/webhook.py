"""Delivering ticket records to a webhook: POST each as JSON, retry, and never lose one.

An action with side effects outside hc (a ticketing system), so it lives with the
Slurm actions and is audited like them: one audit line per record delivered or kept.

- Each record is one POST (`Content-Type: application/json`, the record as the body),
  with `Idempotency-Key: <fingerprint>:<state>:<episode>` so the receiver can drop a
  repeat, and the token (read from a file, never printed, logged or spooled) in the
  configured header.
- Transient failures (no connection, a connection closed, a timeout, HTTP 408, 425,
  429 and 5xx) are retried with exponential backoff and jitter, up to `attempts` per
  record and `max_total_s` for the whole delivery; any other answer (3xx: redirects are
  never followed, the token must not go elsewhere; 4xx) is final at once. Each attempt
  has a hard deadline: the request runs in a daemon thread, abandoned at `timeout_s`
  (a server that trickles its answer a byte at a time would defeat a socket timeout).
- The first record that cannot be delivered stops the delivery: it and every later
  record are kept in the spool (a directory under hc's state dir, one file per record,
  written atomically) in order, and the next delivery sends the spool first. Stopping
  keeps the order: a ticket is never closed before it was opened.
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
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from healthcheck.core.errors import HcError

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
_HEADER_NAME_RE = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,256}$")
_RESERVED_HEADERS = {"content-type", "content-length", "idempotency-key", "host", "transfer-encoding", "connection"}
_RETRY_STATUS = {408, 425, 429}


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
    from urllib.parse import urlsplit

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
    from urllib.parse import urlsplit

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
    from healthcheck.core.inputs import read_bounded

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
        from healthcheck import __version__

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


def _snippet(body: bytes) -> str:
    from healthcheck.core.inputs import clip

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


def _answer(status: int, body: bytes, retry_after: str | None) -> Attempt:
    if 200 <= status < 300:
        return Attempt(True, False, status, f"HTTP {status}")
    said = _snippet(body)
    message = f"HTTP {status}" + (f": {said}" if said else "")
    if 300 <= status < 400:
        return Attempt(False, False, status, f"{message} (a redirect: not followed, the token stays with this URL)")
    return Attempt(False, status in _RETRY_STATUS or status >= 500, status, message, _retry_after(retry_after))


def _opener() -> Any:
    import urllib.request

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        """Refuses every redirect: the 3xx comes back as an HTTPError, the token goes nowhere else."""

        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    return urllib.request.build_opener(NoRedirect())


def post(target: WebhookTarget, body: bytes, key: str, timeout_s: float | None = None) -> Attempt:
    """One POST of `body`, within a hard deadline; never raises for what the network does."""
    import urllib.request

    timeout = target.timeout_s if timeout_s is None else timeout_s
    request = urllib.request.Request(target.url, data=body, headers=target.headers(key), method="POST")
    result: list[Attempt] = []

    def attempt() -> None:
        import http.client
        import socket
        import ssl
        import urllib.error

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
    def _hash(key: str) -> str:
        return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:32]

    def _names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.dir) if _ENTRY_RE.match(n))
        except OSError as exc:
            raise self._fail(f"cannot list: {exc.strerror or exc}") from None

    def entries(self) -> list[SpoolEntry]:
        """The waiting records, oldest first; a file that cannot be read is reported and left."""
        import json

        from healthcheck.core.inputs import read_bounded

        out = []
        for name in self._names():
            path = self.dir / name
            try:
                doc = json.loads(read_bounded(path, SPOOL_ENTRY_MAX, what="spooled ticket"))
                key, body = doc["key"], doc["body"]
                if not isinstance(key, str) or not isinstance(body, str) or self._hash(key) != _ENTRY_RE.match(
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
        import json

        from healthcheck.core.atomic import write_atomic

        digest = self._hash(key)
        if digest in waiting:
            return waiting[digest]
        path = self.dir / f"{sequence:020d}-{digest}.json"
        doc = {"key": key, "body": body.decode("utf-8", "surrogateescape"),
               "spooled_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        write_atomic(path, (json.dumps(doc, ensure_ascii=True) + "\n").encode(), mode=0o600)
        waiting[digest] = path
        return path

    def reject(self, key: str, body: bytes, why: str) -> Path:
        """Set aside a record the receiver refused for good: kept (never lost) in rejected/,
        never sent again, so it cannot hold back the records queued behind it."""
        import json

        from healthcheck.core.atomic import write_atomic

        folder = self.dir / "rejected"
        folder.mkdir(mode=0o700, exist_ok=True)
        path = folder / f"{self._hash(key)}.json"
        doc = {"key": key, "body": body.decode("utf-8", "surrogateescape"), "why": why,
               "rejected_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        write_atomic(path, (json.dumps(doc, ensure_ascii=True) + "\n").encode(), mode=0o600)
        return path

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
        from healthcheck.core.inputs import InputNotFound, read_bounded

        path = self.dir / LEDGER_NAME
        try:
            data = read_bounded(path, LEDGER_MAX_BYTES, what="ledger of delivered tickets")
        except InputNotFound:
            return set()
        keys = data.decode("utf-8", "replace").splitlines()
        if compact and len(keys) > 2 * LEDGER_KEEP:  # now and then, not at every delivery
            from healthcheck.core.atomic import write_atomic

            keys = keys[-LEDGER_KEEP:]
            write_atomic(path, ("\n".join(keys) + "\n").encode(), mode=0o600)
        return set(keys)

    def mark_delivered(self, keys: list[str]) -> None:
        """Add keys to the ledger: one append, one fsync, for a batch of deliveries."""
        from healthcheck.core.atomic import append

        append(self.dir / LEDGER_NAME, "".join(k + "\n" for k in keys).encode("utf-8", "surrogateescape"), mode=0o600)


# -------------------------------------------------------------------- the delivery


@dataclass
class Delivery:
    """What a delivery did; `failure` says why it stopped (records then wait in the spool)."""

    url: str
    delivered: int = 0  # POSTs the server accepted, spooled ones included
    from_spool: int = 0  # of those, records earlier deliveries had kept
    duplicates: int = 0  # records delivered before (same key): not sent again
    spooled: int = 0  # this run's records kept for the next delivery
    rejected: int = 0  # records the receiver refused for good (4xx): set aside, never resent
    waiting: int = 0  # records in the spool after this delivery
    attempts: int = 0  # POSTs tried
    failure: str | None = None
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


def _audit_entry(target: WebhookTarget, ticket: dict[str, Any] | None, key: str, ok: bool, attempt: Attempt | None,
                 made: int, kept: str | None) -> dict[str, Any]:
    ticket = ticket or {}
    return {
        "time": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "action": "ticket", "ok": ok, "url": shown_url(target.url), "key": key,
        "state": ticket.get("state"), "id": ticket.get("id"), "node": ticket.get("nodes"),
        "report_id": ticket.get("run_id"), "http_status": attempt.status if attempt else None,
        "attempts": made, "message": attempt.message if attempt else "already delivered", "spooled": kept,
    }


def _fields(body: bytes) -> dict[str, Any] | None:
    import json

    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def deliver(tickets: Iterable[Ticket], target: WebhookTarget, spool: Spool, *, audit: AuditLog | None = None,
            sleep: Callable[[float], None] = time.sleep, now: Callable[[], float] = time.monotonic) -> Delivery:
    """Send what the spool holds, then `tickets`, in order; keep in the spool whatever is not delivered.

    WebhookError (exit 4) before anything is sent where the spool cannot be used.
    """
    from healthcheck.report.tickets import encode_line

    clock = _Clock(sleep, now)
    out = Delivery(url=shown_url(target.url))
    spool.prepare()
    records = [(t.key, encode_line(t).rstrip(b"\n")) for t in tickets]
    base = time.time_ns()
    waiting = spool.waiting()

    def audit_line(entry: dict[str, Any]) -> None:
        if audit is None:
            return
        try:
            audit.append(entry)
        except OSError as exc:
            if not out.messages or "audit log" not in out.messages[-1]:
                out.messages.append(f"audit log {audit.path} not written: {exc.strerror or exc}")

    def keep(index: int, key: str, body: bytes) -> str:
        path = spool.add(key, body, base + index, waiting=waiting)
        out.spooled += 1
        return str(path)

    if not spool.try_lock():
        out.failure = f"another hc is delivering from {spool.dir}: records kept there for the next delivery"
        done = spool.delivered()
        for i, (key, body) in enumerate(records):
            if key not in done:
                keep(i, key, body)
        out.waiting = len(spool.waiting())
        return out
    # the ledger is written in batches (one fsync each), and a delivered spool file is removed
    # only after its key is in the ledger: a crash in between re-sends, with the same key
    marked: list[str] = []
    sent_entries: list[SpoolEntry] = []

    def settle() -> None:
        if marked:
            try:
                spool.mark_delivered(marked)
            except HcError as exc:  # the receiver has them; a resend would carry the same Idempotency-Key
                out.messages.append(f"ledger of delivered tickets not written: {exc}")
            marked.clear()
        for sent in sent_entries:
            spool.remove(sent)
        sent_entries.clear()

    try:
        done = spool.delivered(compact=True)
        deadline = clock.now() + target.max_total_s
        queue: list[tuple[SpoolEntry | None, int, str, bytes]] = [(e, -1, e.key, e.body) for e in spool.entries()]
        queue += [(None, i, key, body) for i, (key, body) in enumerate(records)]
        for entry, index, key, body in queue:
            if key in done:  # delivered before: sent once only
                if entry is None:
                    out.duplicates += 1
                if entry is not None:
                    spool.remove(entry)
                continue
            if out.failure is not None:  # stopped: keep the rest, in order
                if entry is None:
                    audit_line(_audit_entry(target, _fields(body), key, False, None, 0, keep(index, key, body)))
                continue
            attempt, made = _send(target, key, body, deadline, clock, out)
            if attempt.ok:
                done.add(key)
                marked.append(key)
                out.delivered += 1
                if entry is not None:
                    out.from_spool += 1
                    sent_entries.append(entry)
                audit_line(_audit_entry(target, _fields(body), key, True, attempt, made, None))
                if len(marked) >= LEDGER_BATCH:
                    settle()
                continue
            tries = f"after {made} attempt{'s' if made != 1 else ''}" if made else "before any attempt"
            if attempt.status is not None and 400 <= attempt.status < 500 and not attempt.retryable:
                # refused for good: resending it first on every run would block every record behind it
                try:
                    aside = str(spool.reject(key, body, f"{attempt.message} ({tries})"))
                except (OSError, HcError) as exc:
                    aside = None
                    out.messages.append(f"rejected record {key} not set aside: {exc}")
                if aside is not None:
                    done.add(key)  # in the ledger too: a key is never sent again once answered
                    marked.append(key)
                    out.rejected += 1
                    out.messages.append(f"the receiver refused a record for good ({attempt.message}): kept in {aside}, "
                                        "not sent again")
                    if entry is not None:
                        spool.remove(entry)
                    audit_line(_audit_entry(target, _fields(body), key, False, attempt, made, aside))
                    continue
            out.failure = f"{attempt.message} ({tries})"
            kept = str(entry.path) if entry is not None else keep(index, key, body)
            audit_line(_audit_entry(target, _fields(body), key, False, attempt, made, kept))
    finally:
        settle()
        spool.unlock()
    out.waiting = len(spool.waiting())
    out.messages.extend(spool.problems)
    return out


def describe(d: Delivery, spool: Spool) -> str:
    """One line for stderr: what was delivered, what waits and why."""
    parts = [f"{d.delivered} ticket record{'s' if d.delivered != 1 else ''} delivered to {d.url}"]
    if d.from_spool:
        parts.append(f"{d.from_spool} of them from the spool")
    if d.duplicates:
        parts.append(f"{d.duplicates} already delivered before, not sent again")
    line = ", ".join(parts)
    if d.rejected:
        line += f"; {d.rejected} refused by the receiver, set aside in {spool.dir / 'rejected'}"
    if d.failure is not None:
        line += f"; delivery stopped: {d.failure}"
    if d.waiting:
        line += f"; {d.waiting} record{'s' if d.waiting != 1 else ''} kept in {spool.dir} for the next delivery"
    return line
