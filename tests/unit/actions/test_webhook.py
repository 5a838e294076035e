"""Delivering tickets to a real HTTP server on 127.0.0.1 that fails some requests (500s, a
hang past the timeout, a connection closed without an answer, redirects, 4xx) before it
succeeds: retries, the token header, the idempotency key, the spool after a total failure
and its delivery by the next run, and never the same record twice."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import re
import threading
import time
from pathlib import Path

import msgspec
import pytest
from support import free_port, run_hc, run_hc_inproc

from healthcheck.actions.audit import AuditLog
from healthcheck.actions.webhook import (
    LEDGER_NAME,
    Spool,
    WebhookError,
    WebhookTarget,
    check_header_name,
    check_url,
    deliver,
    describe,
    read_token,
    shown_url,
)
from healthcheck.core.model import CheckResult, Finding, NodeResult
from healthcheck.core.stamp import stamp
from healthcheck.core.status import Status
from healthcheck.report.build import make_report
from healthcheck.report.history import History
from healthcheck.report.jsonio import encode
from healthcheck.report.tickets import build, decode_run

TOKEN = "Bearer s3cr3t-T0KEN-never-shown"
T0 = dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.timezone.utc)


class Server:
    """A real HTTP server on loopback whose answers follow a script: each request takes the
    next action ("ok", "500", "503", "400", "hang", "close", "redirect", "big"), then "ok"
    once the script is used up (or `then`, if set). Every request is recorded."""

    def __init__(self, script: list[str] | None = None, then: str = "ok", hang_s: float = 2.0) -> None:
        self.script = list(script or [])
        self.then = then
        self.hang_s = hang_s
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with outer.lock:
                    action = outer.script.pop(0) if outer.script else outer.then
                    outer.requests.append({"path": self.path, "headers": dict(self.headers.items()),
                                           "body": body, "action": action})
                if action == "hang":
                    time.sleep(outer.hang_s)
                    return  # then closes without an answer
                if action == "close":
                    self.close_connection = True
                    return  # the connection closes with nothing said
                if action == "redirect":
                    self.send_response(302)
                    self.send_header("Location", f"http://127.0.0.1:{outer.port}/elsewhere")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                status = {"ok": 200, "big": 500, "429-retry-after": 429}.get(action) or int(action)
                payload = b"x" * (10 * 1024 * 1024) if action == "big" else b'{"ok": true}'
                self.send_response(status)
                if action == "429-retry-after":
                    self.send_header("Retry-After", "7")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except OSError:
                    pass  # the client read what it wanted and went

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/T0/B0/secretpath?k=v"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def keys(self, action: str | None = None) -> list[str]:
        return [r["headers"]["Idempotency-Key"] for r in self.requests if action is None or r["action"] == action]

    def accepted(self) -> list[str]:
        return self.keys("ok")


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """urllib honours the proxy variables: loopback must be reached directly, here and in hc's subprocesses."""
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


# ------------------------------------------------------------------ records to deliver


def f(node, fid="ib.E002", status=Status.FAIL):
    return stamp(Finding(id=fid, status=status, message=f"mlx5_0/1 {fid}", component="mlx5_0/1"),
                 check="ib.port_state", node=node)


def run(k, failing, nodes=("n1", "n2", "n3")):
    start = T0 + dt.timedelta(hours=k)
    results = [NodeResult(node=x, fabric="f1", status=Status.FAIL if x in failing else Status.PASS,
                          checks=[CheckResult("ib.port_state", Status.FAIL if x in failing else Status.PASS, 0.1)],
                          findings=[f(x)] if x in failing else []) for x in nodes]
    return make_report(command="sweep", tier="quick", config_digest="sha256:" + "0" * 64, config_path="/x",
                       started=start, finished=start, nodes=results)


def records(*reports):
    *earlier, last = reports
    return build(last, [decode_run(encode(r), "t") for r in earlier])


def target(url, token=None, **kw):
    settings = {"timeout_s": 0.5, "attempts": 5, "backoff_s": 0.01, "max_total_s": 30.0, **kw}
    return WebhookTarget(url=check_url(url), token=token, **settings)


# ------------------------------------------------------------------------ in process


def test_retries_through_500_hang_and_closed_connection_then_delivers(tmp_path):
    tickets = records(run(0, {"n1", "n2"}))
    token = TOKEN
    (tmp_path / "token").write_text(token + "\n")
    with Server(["500", "hang", "close", "ok"], hang_s=1.5) as s:
        audit = AuditLog(tmp_path / "audit.jsonl")
        d = deliver(tickets, target(s.url, token=read_token(tmp_path / "token")), Spool(tmp_path / "spool"),
                    audit=audit)
    assert d.complete and d.delivered == 2 and d.attempts == 5
    assert [r["action"] for r in s.requests] == ["500", "hang", "close", "ok", "ok"]
    first = tickets[0].key
    assert s.keys() == [first] * 4 + [tickets[1].key]  # the same record retried, then the next
    for r in s.requests:
        assert r["headers"]["Authorization"] == token
        assert r["headers"]["Content-Type"] == "application/json"
        assert r["path"] == "/hooks/T0/B0/secretpath?k=v"
    sent = json.loads(s.requests[-1]["body"])
    assert sent["key"] == tickets[1].key and sent["state"] == "new" and sent["fingerprint"] == tickets[1].fingerprint
    assert sent == json.loads(msgspec.json.encode(tickets[1]))
    lines = audit.read()
    assert [(x["action"], x["ok"], x["key"], x["attempts"]) for x in lines] == [
        ("ticket", True, first, 4), ("ticket", True, tickets[1].key, 1)]
    logged = (tmp_path / "audit.jsonl").read_text()
    assert "s3cr3t" not in logged and "secretpath" not in logged and lines[0]["url"] == f"http://127.0.0.1:{s.port}"


def test_total_failure_spools_in_order_and_the_next_run_delivers_the_spool_first(tmp_path):
    r0, r1 = run(0, {"n1", "n2"}), run(1, {"n2", "n3"})
    first, second = records(r0), records(r0, r1)
    spool = Spool(tmp_path / "spool")
    with Server(then="500") as s:
        d = deliver(first, target(s.url, attempts=3), spool)
    assert not d.complete and d.delivered == 0 and d.spooled == 2 and d.waiting == 2
    assert "HTTP 500" in (d.failure or "") and "after 3 attempts" in (d.failure or "")
    assert len(s.requests) == 3 and set(s.keys()) == {first[0].key}  # stopped at the first record: order kept
    waiting = sorted(p.name for p in (tmp_path / "spool").glob("*.json"))
    assert len(waiting) == 2 and oct(os.stat(tmp_path / "spool" / waiting[0]).st_mode & 0o777) == "0o600"

    with Server() as s:  # the next run: spool first, then its own records, each once
        d = deliver(second, target(s.url), spool)
    assert d.complete and d.from_spool == 2 and d.waiting == 0
    spooled_keys = [t.key for t in first]
    assert s.keys()[:2] == spooled_keys and s.keys()[2:] == [t.key for t in second]
    assert list((tmp_path / "spool").glob("*.json")) == []

    with Server() as s:  # the same records again: nothing is sent twice
        d = deliver(second, target(s.url), spool)
        d_first = deliver(first, target(s.url), spool)
    assert s.requests == [] and d.duplicates == len(second) and d_first.duplicates == 2 and d.complete


def test_no_duplicate_delivery_of_the_same_fingerprint_and_state(tmp_path):
    r0, r1, r2 = run(0, {"n1"}), run(1, {"n1"}), run(2, {"n1"})
    spool = Spool(tmp_path / "spool")
    with Server() as s:
        for recs in (records(r0), records(r0), records(r0, r1), records(r0, r1, r2), records(r0, r1, r2)):
            assert deliver(recs, target(s.url), spool).complete
    (fp,) = {k.split(":")[0] for k in s.keys()}
    # new once per episode; an update per run that saw it again (r1, r2), each once
    assert [k.split(":")[1] for k in s.keys()] == ["new", "ongoing", "ongoing"]
    assert len(set(s.keys())) == 3
    assert len((tmp_path / "spool" / LEDGER_NAME).read_text().splitlines()) == 3


def test_a_record_already_spooled_is_kept_once(tmp_path):
    tickets = records(run(0, {"n1"}))
    spool = Spool(tmp_path / "spool")
    with Server(then="503") as s:
        deliver(tickets, target(s.url, attempts=1), spool)
        deliver(tickets, target(s.url, attempts=1), spool)
    assert len(list((tmp_path / "spool").glob("*.json"))) == 1


@pytest.mark.parametrize("action, retried", [("400", False), ("redirect", False), ("429", True), ("503", True)])
def test_final_answers_are_not_retried_and_redirects_not_followed(tmp_path, action, retried):
    tickets = records(run(0, {"n1"}))
    with Server(then=action) as s:
        d = deliver(tickets, target(s.url, attempts=3), Spool(tmp_path / "spool"))
    assert not d.complete
    assert (d.rejected, d.spooled) == ((1, 0) if action == "400" else (0, 1))
    assert len(s.requests) == (3 if retried else 1)
    assert all(r["path"] != "/elsewhere" for r in s.requests)


def ledger(tmp_path: Path) -> list[str]:
    path = tmp_path / "spool" / LEDGER_NAME
    return path.read_text().splitlines() if path.exists() else []


def set_aside(tmp_path: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((tmp_path / "spool" / "rejected").glob("*.json"))]


@pytest.mark.parametrize("status", ["400", "409", "422"])
def test_a_record_the_receiver_refuses_is_set_aside_never_delivered_and_blocks_nothing(tmp_path, status):
    """A receiver refusing one record for good: it is kept in rejected/ (audited as rejected,
    never lost), never written into the ledger of delivered keys, never sent again by a plain
    delivery, and the records behind it are delivered, in this run and the next."""
    tickets = records(run(0, {"n1", "n2"}))
    assert len(tickets) == 2
    spool = Spool(tmp_path / "spool")
    audit = AuditLog(tmp_path / "audit.jsonl")
    with Server([status]) as s:
        d = deliver(tickets, target(s.url, attempts=3), spool, audit=audit)
        assert (d.rejected, d.delivered, d.waiting) == (1, 1, 0) and not d.complete
        refused = s.keys(status)[0]
        assert [x["key"] for x in set_aside(tmp_path)] == [refused]
        assert refused not in ledger(tmp_path)  # refused is not delivered
        again = deliver(tickets, target(s.url, attempts=3), spool, audit=audit)  # the next run: nothing resent
    assert again.delivered == 0 and again.duplicates == 1 and again.rejected_before == 1
    assert s.keys().count(refused) == 1 and len(s.accepted()) == 1
    assert ledger(tmp_path) == s.accepted()
    first = {a["key"]: a for a in audit.read()[:2]}
    assert (first[refused]["outcome"], first[refused]["ok"], first[refused]["http_status"]) == (
        "rejected", False, int(status))
    assert "already delivered" not in first[refused]["message"] and first[refused]["rejected"] is not None
    line = describe(again, spool)
    assert "1 record rejected by an earlier delivery, not sent again" in line and "--resend-rejected" in line


@pytest.mark.parametrize("status", ["401", "403", "404", "405"])
def test_an_answer_about_the_url_or_token_keeps_every_record_spooled_in_order(tmp_path, status):
    """401/403/404/405 say hc is configured wrong, not that the record is: nothing is set
    aside, nothing goes into the ledger, every record waits in the spool in order (audited as
    kept, never as delivered), and once the URL or token is fixed each is delivered once."""
    tickets = records(run(0, {"n1", "n2", "n3"}))
    spool = Spool(tmp_path / "spool")
    audit = AuditLog(tmp_path / "audit.jsonl")
    with Server(then=status) as s:
        d = deliver(tickets, target(s.url, attempts=3), spool, audit=audit)
    assert (d.delivered, d.rejected, d.spooled, d.waiting) == (0, 0, 3, 3) and not d.complete
    assert len(s.requests) == 1  # neither retried nor tried with the next record
    failure = d.failure or ""
    assert f"HTTP {status}" in failure and f"http://127.0.0.1:{s.port}" in failure and "secretpath" not in failure
    assert set_aside(tmp_path) == [] and ledger(tmp_path) == []
    spooled = [json.loads(p.read_text())["key"] for p in sorted((tmp_path / "spool").glob("*.json"))]
    assert spooled == [t.key for t in tickets]
    lines = audit.read()
    assert [(a["outcome"], a["ok"]) for a in lines] == [("kept", False)] * 3
    assert lines[0]["http_status"] == int(status) and lines[1]["http_status"] is None
    assert all("already delivered" not in a["message"] for a in lines)
    assert "not sent: the delivery stopped at an earlier record" in lines[1]["message"]

    with Server() as s:  # the URL or token fixed
        d = deliver(tickets, target(s.url), spool)
    assert d.complete and (d.delivered, d.from_spool) == (3, 3)  # the spool first; this run's copies are not resent
    assert s.keys() == [t.key for t in tickets] and ledger(tmp_path) == s.keys()


def test_resend_rejected_queues_the_refused_records_again_at_their_place(tmp_path):
    tickets = records(run(0, {"n1", "n2", "n3"}))
    spool = Spool(tmp_path / "spool")
    with Server(["422", "ok", "422"]) as s:
        d = deliver(tickets, target(s.url, attempts=1), spool)
    assert (d.delivered, d.rejected) == (1, 2)
    refused = [tickets[0].key, tickets[2].key]
    with Server() as s:
        plain = deliver(tickets, target(s.url), spool)
        assert s.requests == [] and plain.rejected_before == 2 and plain.duplicates == 1
        d = deliver(tickets, target(s.url), spool, resend_rejected=True)
    assert d.complete and (d.resent, d.delivered, d.from_spool, d.duplicates) == (2, 2, 2, 3)
    assert s.keys() == refused  # in the order they were first queued
    assert set_aside(tmp_path) == [] and sorted(ledger(tmp_path)) == sorted(t.key for t in tickets)


def test_records_an_older_hc_set_aside_and_called_delivered_are_sent_again(tmp_path):
    """What hc before issue 18 left after a 404: every record in rejected/ (without its place
    in the queue) and its key in the ledger of delivered keys. The plain delivery says they
    were rejected, not delivered; --resend-rejected sends them, in the order refused."""
    tickets = records(run(0, {"n1", "n2"}))
    spool = Spool(tmp_path / "spool")
    spool.prepare()
    (tmp_path / "spool" / "rejected").mkdir()
    for k, t in enumerate(tickets):
        path = tmp_path / "spool" / "rejected" / f"{spool.key_hash(t.key)}.json"
        path.write_text(json.dumps({"key": t.key, "body": msgspec.json.encode(t).decode(), "why": "HTTP 404",
                                    "rejected_at": "2026-11-22T03:00:00+00:00"}))
        os.utime(path, ns=(10**18 + k, 10**18 + k))
    (tmp_path / "spool" / LEDGER_NAME).write_text("".join(t.key + "\n" for t in tickets))
    with Server() as s:
        plain = deliver(tickets, target(s.url), spool)
        assert s.requests == [] and (plain.rejected_before, plain.duplicates) == (2, 0)
        d = deliver(tickets, target(s.url), spool, resend_rejected=True)
    assert d.complete and d.resent == 2 and d.delivered == 2 and s.keys() == [t.key for t in tickets]
    assert ledger(tmp_path) == [t.key for t in tickets] and set_aside(tmp_path) == []


def test_backoff_doubles_between_attempts_and_honours_retry_after(tmp_path):
    waits: list[float] = []
    tickets = records(run(0, {"n1"}))
    with Server(["500", "503", "500", "ok"]) as s:
        d = deliver(tickets, target(s.url, backoff_s=1.0), Spool(tmp_path / "a"), sleep=waits.append)
    assert d.complete and len(s.requests) == 4 and len(waits) == 3
    for k, w in enumerate(waits):  # 1, 2, 4 s, each with jitter down to half
        assert 2**k * 0.5 <= w <= 2**k, waits
    waits.clear()
    with Server(["429-retry-after", "ok"]) as s:
        assert deliver(tickets, target(s.url, backoff_s=0.01), Spool(tmp_path / "b"), sleep=waits.append).complete
    assert waits == [7.0]


def test_the_ledger_is_compacted_under_the_lock(tmp_path, monkeypatch):
    import healthcheck.actions.webhook as webhook

    monkeypatch.setattr(webhook, "LEDGER_KEEP", 5)
    spool = Spool(tmp_path / "spool")
    spool.prepare()
    (tmp_path / "spool" / LEDGER_NAME).write_text("".join(f"old{i}\n" for i in range(11)))
    tickets = records(run(0, {"n1"}))
    with Server() as s:
        assert deliver(tickets, target(s.url), spool).complete
    assert (tmp_path / "spool" / LEDGER_NAME).read_text().splitlines() == [f"old{i}" for i in range(6, 11)] + [
        tickets[0].key]


def test_the_total_time_bounds_the_delivery(tmp_path):
    tickets = records(run(0, {"n1", "n2", "n3"}))
    with Server(then="hang", hang_s=1.0) as s:
        d = deliver(tickets, target(s.url, timeout_s=0.3, attempts=100, max_total_s=1.2), Spool(tmp_path / "spool"))
    assert "max_total_s" in (d.failure or "") and d.spooled == 3
    assert 1 <= d.attempts < 100  # stopped by the time, not by the attempts


def test_a_server_that_is_not_there(tmp_path):
    tickets = records(run(0, {"n1"}))
    d = deliver(tickets, target(f"http://127.0.0.1:{free_port()}/x", attempts=2), Spool(tmp_path / "spool"))
    assert not d.complete and "cannot connect" in (d.failure or "") and d.attempts == 2 and d.waiting == 1


def test_a_large_answer_is_read_bounded(tmp_path):
    tickets = records(run(0, {"n1"}))
    with Server(["big"], then="ok") as s:
        d = deliver(tickets, target(s.url, attempts=1), Spool(tmp_path / "spool"))
    assert d.spooled == 1 and d.failure is not None and len(d.failure) < 400


def test_a_held_lock_spools_without_sending(tmp_path):
    import fcntl

    tickets = records(run(0, {"n1"}))
    spool = Spool(tmp_path / "spool")
    spool.prepare()
    fd = os.open(tmp_path / "spool" / "lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with Server() as s:
            d = deliver(tickets, target(s.url), Spool(tmp_path / "spool"))
    finally:
        os.close(fd)
    assert s.requests == [] and d.spooled == 1 and "another hc is delivering" in (d.failure or "")


def test_a_damaged_spool_file_is_left_and_said(tmp_path):
    spool = Spool(tmp_path / "spool")
    spool.prepare()
    bad = tmp_path / "spool" / ("0" * 20 + "-" + "a" * 32 + ".json")
    bad.write_text("{not json")
    tickets = records(run(0, {"n1"}))
    with Server() as s:
        d = deliver(tickets, target(s.url), spool)
    assert d.delivered == 1 and bad.exists() and any(str(bad) in m for m in d.messages)


def test_an_unusable_spool_refuses_before_sending(tmp_path):
    (tmp_path / "spool").write_text("a file, not a directory")
    with Server() as s, pytest.raises(WebhookError, match="tickets spool"):
        deliver(records(run(0, {"n1"})), target(s.url), Spool(tmp_path / "spool"))
    assert s.requests == []


@pytest.mark.parametrize("url", ["ftp://127.0.0.1/x", "file:///etc/passwd", "http://user:pw@127.0.0.1/x",
                                 "http:///nohost", "http://127.0.0.1:notaport/", "http://a b/", "", "gopher://x"])
def test_only_http_and_https_urls_without_credentials(url):
    with pytest.raises(WebhookError):
        check_url(url)


def test_urls_and_headers_accepted_and_shown_without_their_secret():
    assert check_url("https://tickets.example.org/api/v1?x=1#frag") == "https://tickets.example.org/api/v1?x=1"
    assert shown_url("https://hooks.slack.com/services/T0/B0/XYZ") == "https://hooks.slack.com"
    assert check_header_name("X-Api-Key") == "X-Api-Key"
    for bad in ("Bad Header", "Idempotency-Key", "content-type", "X\r\nY", ""):
        with pytest.raises(WebhookError):
            check_header_name(bad)


@pytest.mark.parametrize("content, message", [
    (b"", "empty"), (b"one\ntwo\n", "more than one line"), (b"tok\x01en", "control characters"),
    ("t\u00f6ken".encode(), "not ASCII"),
])
def test_bad_token_files_are_named_never_shown(tmp_path, content, message):
    path = tmp_path / "token"
    path.write_bytes(content)
    with pytest.raises(Exception, match=message) as caught:
        read_token(path)
    assert content.decode("latin-1").strip() not in str(caught.value) or not content.strip()


def test_the_token_never_shows_itself():
    secret = read_token_text(TOKEN)
    assert "s3cr3t" not in repr(secret) and "s3cr3t" not in str(secret) and secret.reveal() == TOKEN
    assert "s3cr3t" not in repr(WebhookTarget(url="http://x/", token=secret))


def read_token_text(text):
    from healthcheck.actions.webhook import Secret

    return Secret(text)


# ------------------------------------------------------------------------ the command


def hc_config(tmp_path, url, **tickets):
    (tmp_path / "fabrics").mkdir(exist_ok=True)
    (tmp_path / "fabrics" / "t.yaml").write_text("{}\n")
    settings = {"timeout_s": 0.5, "attempts": 3, "backoff_s": 0.01, "max_total_s": 20, **tickets}
    if url:
        settings["webhook_url"] = url
    body = "\n".join(f"  {k}: {json.dumps(v)}" for k, v in settings.items())
    cfg = tmp_path / "hc.yaml"
    cfg.write_text(f"default_fabric: t\nhistory: {{path: {tmp_path}/history.sqlite}}\n"
                   f"slurm: {{state_dir: {tmp_path}/state, audit_log: {tmp_path}/audit.jsonl}}\n"
                   f"tickets:\n{body}\n")
    return cfg


def test_the_command_spools_on_failure_exit_3_and_the_next_run_delivers(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    r0, r1 = run(0, {"n1", "n2"}), run(1, {"n2"})
    with History(tmp_path / "history.sqlite") as h:
        h.record(r0)
    with Server(then="500") as s:
        cfg = hc_config(tmp_path, s.url, token_file=str(token_file), token_header="X-Ticket-Token")
        r = run_hc("report", "tickets", "--format", "jsonl", "--config", str(cfg))
        refused = list(s.requests)
    assert r.returncode == 3, r.stderr
    err = r.stderr.decode()
    assert "kept in" in err and f"{tmp_path}/state/tickets" in err and "HTTP 500" in err
    assert len(refused) == 3 and all(q["headers"]["X-Ticket-Token"] == TOKEN for q in refused)
    printed = [json.loads(x) for x in r.stdout.splitlines()]
    assert [p["state"] for p in printed] == ["new", "new"]  # the records are printed whatever the delivery
    spooled = [json.loads(p.read_text()) for p in sorted((tmp_path / "state" / "tickets").glob("*.json"))]
    assert [x["key"] for x in spooled] == [p["key"] for p in printed]
    for where in (r.stdout, r.stderr, (tmp_path / "audit.jsonl").read_bytes(),
                  *(p.read_bytes() for p in (tmp_path / "state" / "tickets").iterdir() if p.is_file())):
        assert b"s3cr3t" not in where and b"secretpath" not in where

    with History(tmp_path / "history.sqlite") as h:
        h.record(r1)
    with Server() as s:
        cfg = hc_config(tmp_path, s.url, token_file=str(token_file), token_header="X-Ticket-Token")
        r = run_hc("report", "tickets", "--format", "jsonl", "--config", str(cfg))
        again = run_hc("report", "tickets", "--format", "jsonl", "--config", str(cfg))
        only_print = run_hc("report", "tickets", "--no-webhook", "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    now = [json.loads(x) for x in r.stdout.splitlines()]
    assert {(p["state"], p["nodes"]) for p in now} == {("fixed", "n1"), ("ongoing", "n2")}
    assert s.keys()[:2] == [p["key"] for p in printed]  # the spool first, in order
    assert sorted(s.keys()[2:]) == sorted(p["key"] for p in now) and len(s.requests) == 4
    assert b"2 of them from the spool" in r.stderr
    assert again.returncode == 0 and b"already delivered before, not sent again" in again.stderr
    assert only_print.returncode == 0 and only_print.stderr == b""
    audit = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [a["ok"] for a in audit] == [False, False, True, True, True, True]
    assert all(a["action"] == "ticket" and re.fullmatch(r"http://127\.0\.0\.1:\d+", a["url"]) for a in audit)
    assert [a["spooled"] is not None for a in audit] == [True, True, False, False, False, False]


def test_the_command_with_webhook_and_token_options(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    with History(tmp_path / "history.sqlite") as h:
        h.record(run(0, {"n1"}))
    with Server() as s:
        cfg = hc_config(tmp_path, None)
        r = run_hc_inproc("report", "tickets", "--webhook", s.url, "--token-file", str(token_file),
                   "--config", str(cfg))
    assert r.returncode == 0, r.stderr
    (q,) = s.requests
    body = json.loads(q["body"])
    assert q["headers"]["Authorization"] == TOKEN
    assert q["headers"]["Idempotency-Key"] == f"{body['fingerprint']}:new:{body['run_id']}" == body["key"]
    assert b"s3cr3t" not in r.stdout + r.stderr


@pytest.mark.parametrize("status", ["401", "404"])
def test_the_command_exits_4_on_a_wrong_url_or_token_and_delivers_everything_once_fixed(tmp_path, status):
    """A URL typo or a bad token: exit 4 naming the answer and the URL (never its path, never
    the token), every record kept; the run after the fix delivers them all, none called
    'already delivered'."""
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with History(tmp_path / "history.sqlite") as h:
        h.record(run(0, {"n1", "n2", "n3"}))
    with Server(then=status) as s:
        cfg = hc_config(tmp_path, s.url, token_file=str(token_file))
        r = run_hc_inproc("report", "tickets", "--format", "jsonl", "--config", str(cfg))
        port = s.port
    err = r.stderr.decode()
    assert r.returncode == 4, err
    assert f"HTTP {status}" in err and f"http://127.0.0.1:{port}" in err and "wrong" in err
    assert "0 delivered, 3 kept in the spool, 0 rejected" in err
    assert "s3cr3t" not in err and "secretpath" not in err and "Traceback" not in err
    assert len(r.stdout.splitlines()) == 3  # the records are printed whatever the delivery
    with Server() as s:
        cfg = hc_config(tmp_path, s.url, token_file=str(token_file))
        fixed = run_hc_inproc("report", "tickets", "--format", "jsonl", "--config", str(cfg))
    assert fixed.returncode == 0, fixed.stderr
    assert sorted(s.keys()) == sorted(json.loads(x)["key"] for x in r.stdout.splitlines())
    assert b"3 delivered (3 of them from the spool)" in fixed.stderr


def test_the_command_resends_rejected_records_when_asked(tmp_path):
    with History(tmp_path / "history.sqlite") as h:
        h.record(run(0, {"n1", "n2"}))
    with Server(["422"]) as s:
        cfg = hc_config(tmp_path, s.url)
        r = run_hc_inproc("report", "tickets", "--format", "jsonl", "--config", str(cfg))
        refused = s.keys("422")
    assert r.returncode == 3 and b"1 delivered, 0 kept in the spool, 1 rejected by the receiver" in r.stderr, r.stderr
    assert b"--resend-rejected" in r.stderr
    with Server() as s:
        cfg = hc_config(tmp_path, s.url)
        plain = run_hc_inproc("report", "tickets", "--config", str(cfg))
        assert s.requests == [] and plain.returncode == 0, plain.stderr
        assert b"1 record rejected by an earlier delivery, not sent again" in plain.stderr
        resent = run_hc_inproc("report", "tickets", "--resend-rejected", "--config", str(cfg))
    assert resent.returncode == 0 and s.keys() == refused, resent.stderr
    assert b"1 delivered (1 of them from the spool)" in resent.stderr
    assert list((tmp_path / "state" / "tickets" / "rejected").glob("*.json")) == []
    audit = [json.loads(x) for x in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [(a["outcome"], a["key"] in refused) for a in audit] == [
        ("rejected", True), ("delivered", False), ("delivered", True)]


@pytest.mark.parametrize("args, message", [
    (["--webhook", "ftp://127.0.0.1/x"], "is not http or https"),
    (["--webhook", "http://u:p@127.0.0.1/x"], "credentials"),
    (["--webhook", "http://127.0.0.1/x", "--token-file", "{tmp}/missing"], "cannot read token file"),
    (["--webhook", "http://127.0.0.1/x", "--token-header", "Content-Type"], "hc sets itself"),
    (["--token-file", "{tmp}/token"], "go with a webhook"),
    (["--resend-rejected"], "go with a webhook"),
])
def test_bad_delivery_input_exits_4_before_anything_is_sent(tmp_path, args, message):
    (tmp_path / "token").write_text(TOKEN)
    cfg = hc_config(tmp_path, None)
    r = run_hc_inproc("report", "tickets", "-", "--config", str(cfg), *[a.format(tmp=tmp_path) for a in args],
               input=encode(run(0, {"n1"})))
    err = r.stderr.decode()
    assert r.returncode == 4 and message in err and "Traceback" not in err and "s3cr3t" not in err, err


def test_a_config_webhook_url_is_validated():
    from healthcheck.core.config.schema import TicketSettings

    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"webhook_url": "ftp://x/y"}, TicketSettings)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"token_header": "Bad Header"}, TicketSettings)
    assert msgspec.convert({"webhook_url": "https://t.example/x"}, TicketSettings).webhook_url


def test_spool_entries_hold_no_token(tmp_path):
    tickets = records(run(0, {"n1"}))
    with Server(then="500") as s:
        deliver(tickets, target(s.url, attempts=1, token=read_token_text(TOKEN)), Spool(tmp_path / "spool"))
    for p in Path(tmp_path / "spool").iterdir():
        if p.is_file():
            assert b"s3cr3t" not in p.read_bytes()


# ------------------------------------------------------------ the command's steps, in process


def test_webhook_target_from_options_and_config(tmp_path):
    from healthcheck.actions.tickets import WebhookOptions, webhook_target
    from healthcheck.core.config.schema import TicketSettings
    from healthcheck.core.errors import HcError

    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    assert webhook_target(TicketSettings(), WebhookOptions()) is None
    configured = TicketSettings(webhook_url="http://127.0.0.1:9/x", attempts=7)
    assert webhook_target(configured, WebhookOptions(off=True)) is None
    got = webhook_target(configured, WebhookOptions(token_file=token_file, token_header="X-Token"))
    assert got is not None and (got.url, got.attempts, got.token_header) == ("http://127.0.0.1:9/x", 7, "X-Token")
    assert got.token is not None and got.token.reveal() == TOKEN
    assert webhook_target(configured, WebhookOptions(url="https://example.invalid/h")).url == "https://example.invalid/h"
    for options in (WebhookOptions(token_file=token_file), WebhookOptions(resend_rejected=True),
                    WebhookOptions(off=True, token_header="X-Token")):
        with pytest.raises(HcError, match="go with a webhook"):
            webhook_target(configured if options.off else TicketSettings(), options)


def test_ticket_run_warns_without_history_then_delivers(tmp_path):
    from healthcheck.actions.tickets import WebhookOptions, deliver_tickets, ticket_run

    report = tmp_path / "r.json"
    report.write_bytes(encode(run(0, {"n1"})))
    warnings: list[str] = []
    with Server() as s:
        cfg = hc_config(tmp_path, s.url)
        done = ticket_run(report, cfg, min_status=None, lookback=None, webhook=WebhookOptions(),
                          warn=warnings.append)
        assert warnings == [f"hc: warning: no run history yet at {tmp_path}/history.sqlite: every finding is new"]
        assert [(t.state, t.nodes) for t in done.tickets] == [("new", "n1")] and done.target is not None
        delivered = deliver_tickets(done)
    assert delivered.complete and not delivered.configuration and "1 delivered" in delivered.summary
    assert s.accepted() == [done.tickets[0].key]
    printed_only = ticket_run(report, cfg, min_status="fail", lookback=None, webhook=WebhookOptions(off=True),
                              warn=warnings.append)
    assert printed_only.target is None and len(printed_only.tickets) == 1
    with pytest.raises(ValueError, match="webhook target"):
        deliver_tickets(printed_only)
