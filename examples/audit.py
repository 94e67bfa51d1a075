#!/usr/bin/env python3
"""Sends one batch of audit entries to nachtwacht (POST /api/audit) and prints the
answer, with a receipt per entry, on stdout. Standard library only (urllib);
Python 3.8 or newer. docs/integration.md explains it.

    NACHTWACHT_URL=https://nachtwacht.intern.example APP_SECRET=... python3 examples/audit.py batch.json
    ... | python3 examples/audit.py          # the batch on stdin

In your application, import send_audit() and call it with your entries:

    send_audit(base_url, secret, [{"tenantId": 1, "actor": user.email, "action": "factuur.verzonden",
                                   "subject": f"factuur/{f.nummer}", "sleutel": f"evt-{event.id}"}])

Give every entry a `sleutel` (your own event id): a batch sent twice is then stored
once, and the second time answered with the same receipts. A batch with an entry
without one is sent again only when the failed attempt certainly stored nothing (the
name did not resolve or the connection was refused, or nachtwacht's own 503 says so in
its `nachtwacht-opgeslagen: nee` header); after any other failure it may have been
stored, and is not repeated.

Environment: NACHTWACHT_URL and APP_SECRET (required); NACHTWACHT_MAX_ATTEMPTS (5),
NACHTWACHT_BACKOFF_MS (500: the first wait, doubled each time, with jitter),
NACHTWACHT_MAX_DELAY_MS (60000: a Retry-After above it ends the retries).

Exit: 0 stored (or already stored); 1 refused (a 3xx, or a 4xx other than 408/429: fix
the batch or the URL; the server's message is on stderr); 2 usage; 3 perhaps stored
(entries without a sleutel, no certain answer): do not send it again as it is; 75 gave
up for now (no answer, 408, 429, 5xx, an answer that is not nachtwacht's): send the same
batch again later.

The secret is read from the environment and only ever put in a request header: it is
never on a command line.
"""

import email.utils
import json
import os
import random
import re
import socket
import sys
import time
import http.client
import urllib.error
import urllib.request

# nachtwacht's own 503 carries it when nothing of the request was stored (a proxy's 503 does not).
NOTHING_STORED = ("nachtwacht-opgeslagen", "nee")
# The largest batch POST /api/audit takes, in bytes: the service's MAX_BATCH_BYTES
# (src/ingest/audit.ts). A larger one is refused before sending: the service would close
# the connection on it unread, which looks like a lost answer, not like the 413 it is.
MAX_BATCH_BYTES = 1048576
# What the service takes as a secret (src/config.ts): a line break would otherwise end up in an error text.
_SECRET = re.compile(r"[\x21-\x7e]{32,1024}")
SECRET_RULE = "APP_SECRET must be 32 to 1024 printable ASCII characters, without spaces or line breaks (as the service requires)"


def _final(status):
    """A refusal that sending the same batch again will not change: a redirect, or a 4xx other than 408/429."""
    return 300 <= status < 500 and status not in (408, 429)


class Refused(Exception):
    """A final answer (a 3xx, or a 4xx other than 408/429): sending the same batch again will not help.
    sent is False when this client refused the batch itself, before sending (over MAX_BATCH_BYTES): no answer came."""

    def __init__(self, status, error, sent=True):
        super().__init__(f"HTTP {status}: {error}" if sent else f"by this client, before sending ({status}, no answer from the service): {error}")
        self.status = status
        self.error = error
        self.sent = sent


class GaveUp(Exception):
    """No success after the allowed attempts, or the server asks to wait longer than allowed."""


class MaybeStored(Exception):
    """No certain answer for a batch with entries without a sleutel: it may have been stored, so it is not sent again."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # The service never redirects; following one would take the Authorization header along.
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def _retry_after_ms(value):
    """Retry-After as milliseconds (delta-seconds or an HTTP date); None when absent or unreadable."""
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value) * 1000
    try:
        return max(0, int((email.utils.parsedate_to_datetime(value).timestamp() - time.time()) * 1000))
    except (TypeError, ValueError):
        return None


def _answer_of(body):
    """nachtwacht's answer (it has the receipts), or None."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and isinstance(answer.get("ontvangstbewijzen"), list) else None


def _error_of(body, status):
    try:
        error = json.loads(body).get("error")
        if isinstance(error, str):
            return error
    except (ValueError, AttributeError):
        pass
    return body[:300].decode("utf-8", "replace").strip() or f"HTTP {status} without a body"


def send_audit(base_url, secret, entries, max_attempts=5, backoff_ms=500, max_delay_ms=60_000, timeout_s=60, log=None):
    """POSTs the entries as one batch; returns the answer {opgeslagen, alBekend, ontvangstbewijzen}.

    Retries (the same bytes, so the same sleutels) after a connection error, a timeout,
    408, 429, 5xx and an answer that is not nachtwacht's, waiting 2^(attempt-1) x
    backoff_ms with jitter, or the server's Retry-After plus a random part of that; a
    batch with an entry without a sleutel only when nothing was stored. Raises
    ValueError for a secret the service would not take, Refused for a final answer (a
    batch over MAX_BATCH_BYTES: 413 without sending), MaybeStored when a batch without sleutels may have been stored, GaveUp
    otherwise.
    """
    if not isinstance(secret, str) or not _SECRET.fullmatch(secret):
        raise ValueError(SECRET_RULE)  # never the value itself
    keyed = all(isinstance(e, dict) and isinstance(e.get("sleutel"), str) for e in entries)
    payload = json.dumps({"entries": entries}).encode("utf-8")
    if len(payload) > MAX_BATCH_BYTES:
        raise Refused(413, f"the batch is {len(payload)} bytes, more than the {MAX_BATCH_BYTES} bytes the service takes; nothing sent, nothing stored: split it", sent=False)
    url = base_url.rstrip("/") + "/api/audit"
    headers = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json", "Accept": "application/json"}
    for attempt in range(1, max_attempts + 1):
        retry_after = None
        nothing_stored = False
        request = urllib.request.Request(url, data=payload, headers=headers, method="POST")
        try:
            with _opener.open(request, timeout=timeout_s) as response:
                body = response.read()
            answer = _answer_of(body)
            if answer is not None:
                return answer
            # A 2xx from something in between (a login page): nothing certain was stored.
            reason = f"HTTP {response.status}, but not nachtwacht's answer: {body[:300].decode('utf-8', 'replace').strip()}"
        except urllib.error.HTTPError as e:
            try:
                body = e.read()
            except (OSError, http.client.HTTPException):
                body = b""  # the answer broke off: its status still counts
            if _final(e.code):
                raise Refused(e.code, _error_of(body, e.code)) from None
            reason = f"HTTP {e.code}: {_error_of(body, e.code)}"
            retry_after = _retry_after_ms(e.headers.get("Retry-After"))
            nothing_stored = e.code == 503 and (e.headers.get(NOTHING_STORED[0]) or "").strip() == NOTHING_STORED[1]
        except (OSError, http.client.HTTPException) as e:
            # URLError, refused or dropped connections, timeouts, TLS errors, an answer that broke off
            reason = f"no answer: {getattr(e, 'reason', None) or e}"
            # The name did not resolve or the connection was refused: the request never left this machine.
            nothing_stored = any(isinstance(x, (ConnectionRefusedError, socket.gaierror)) for x in (e, getattr(e, "reason", None)))
        if not keyed and not nothing_stored:
            raise MaybeStored(f"{reason}; perhaps stored, and entries without a sleutel are not sent again (they could be stored twice)")
        if attempt >= max_attempts:
            raise GaveUp(f"gave up after {attempt} attempts: {reason}")
        if retry_after is not None and retry_after > max_delay_ms:
            raise GaveUp(f"{reason}; the server asks to wait {retry_after / 1000:g} s (Retry-After), more than max_delay_ms")
        backoff = min(max_delay_ms, backoff_ms * 2 ** (attempt - 1))
        if retry_after is None:
            delay = backoff / 2 + random.random() * backoff / 2
        else:
            # Retry-After plus a random part of the backoff: clients refused at once do not all return at once.
            delay = max(retry_after, min(max_delay_ms, retry_after + random.random() * backoff))
        if log:
            log(f"attempt {attempt}: {reason}; again in {delay:.0f} ms")
        time.sleep(delay / 1000)
    raise GaveUp("max_attempts must be at least 1")


def main(argv):
    me = os.path.basename(argv[0])

    def say(message):
        print(f"{me}: {message}", file=sys.stderr)

    base_url = os.environ.get("NACHTWACHT_URL")
    secret = os.environ.get("APP_SECRET")
    if not base_url or not secret:
        say("NACHTWACHT_URL and APP_SECRET must be set (in the environment, never as arguments)")
        return 2
    if not _SECRET.fullmatch(secret):
        say(SECRET_RULE)
        return 2
    if not re.match(r"https?://", base_url, re.IGNORECASE):
        say("NACHTWACHT_URL must start with http:// or https://")
        return 2
    if len(argv) > 2:
        say(f"usage: {me} [BATCH.json | -]")
        return 2
    try:
        if len(argv) == 1 or argv[1] == "-":
            batch = json.load(sys.stdin)
        else:
            with open(argv[1], encoding="utf-8") as f:
                batch = json.load(f)
        entries = batch["entries"]
        options = {}
        for key, name in (("max_attempts", "NACHTWACHT_MAX_ATTEMPTS"), ("backoff_ms", "NACHTWACHT_BACKOFF_MS"), ("max_delay_ms", "NACHTWACHT_MAX_DELAY_MS")):
            if os.environ.get(name):
                if not re.fullmatch(r"[0-9]{1,9}", os.environ[name]):
                    raise ValueError(f"{name} takes a whole number")
                options[key] = int(os.environ[name])
        if options.get("max_attempts", 1) < 1:
            raise ValueError("NACHTWACHT_MAX_ATTEMPTS must be at least 1")
    except (OSError, ValueError, KeyError, TypeError) as e:
        say(f"cannot read the batch or the settings: {e}")
        return 2
    try:
        answer = send_audit(base_url, secret, entries, log=say, **options)
    except Refused as e:
        say(f"refused, {e}")
        return 1
    except MaybeStored as e:
        say(f"{e}; check before sending it again, and give every entry a sleutel")
        return 3
    except GaveUp as e:
        say(f"{e}; send the same batch again later")
        return 75
    print(json.dumps(answer, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
