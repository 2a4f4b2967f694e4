"""A fake OpenAI rate limiter for benches/pacing.sh (Python standard
library only).

Usage: python3 fake_openai.py PORT LOG

Two fixed windows, as OpenAI's per-minute request and token limits but
scaled down so that a run of 60 requests takes about 15 s: requests, 10 per
2 s window; tokens, 24,000 per 6 s window, each request costing 1,000
tokens (so the token window runs out after 24 requests, before its reset).
Each window starts at the first request after the previous one ended.

Every response (200 or 429) carries x-ratelimit-limit-, -remaining- and
-reset-requests|tokens, the resets as Go durations (`1.234s`, `250ms`,
`1m0s`) as OpenAI sends them. A request that either window cannot take is
answered 429 with `Retry-After` (whole seconds, rounded up, until the spent
windows reset) and OpenAI's JSON error body (`rate_limit_exceeded`); a
refused request takes nothing from either window.

Every response to a path other than /health appends one line to LOG:
`<milliseconds since start> <status>`.
"""

import json
import math
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

REQUESTS, REQUESTS_WINDOW = 10, 2.0
TOKENS, TOKENS_WINDOW, COST = 24_000, 6.0, 1_000


def go_duration(seconds):
    """Formats a delay as Go's time.Duration.String() does, to the ms."""
    ms = max(0, math.ceil(seconds * 1000))
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest = divmod(ms, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


class Window:
    def __init__(self, limit, length):
        self.limit, self.length = limit, length
        self.used, self.end = 0, 0.0

    def roll(self, now):
        if now >= self.end:
            self.used, self.end = 0, now + self.length

    def left(self):
        return self.limit - self.used

    def headers(self, kind, now):
        return [
            (f"x-ratelimit-limit-{kind}", str(self.limit)),
            (f"x-ratelimit-remaining-{kind}", str(self.left())),
            (f"x-ratelimit-reset-{kind}", go_duration(self.end - now)),
        ]


class Limiter:
    def __init__(self, log):
        self.lock = threading.Lock()
        self.requests = Window(REQUESTS, REQUESTS_WINDOW)
        self.tokens = Window(TOKENS, TOKENS_WINDOW)
        self.start = time.monotonic()
        self.log = log
        open(log, "w").close()

    def take(self):
        """(status, headers, body) for one request, logged."""
        with self.lock:
            now = time.monotonic()
            self.requests.roll(now)
            self.tokens.roll(now)
            spent = [
                w
                for w, cost in ((self.requests, 1), (self.tokens, COST))
                if w.left() < cost
            ]
            if not spent:
                self.requests.used += 1
                self.tokens.used += COST
            headers = self.requests.headers("requests", now)
            headers += self.tokens.headers("tokens", now)
            if spent:
                wait = max(w.end for w in spent) - now
                headers.append(("retry-after", str(max(1, math.ceil(wait)))))
                body = {
                    "error": {
                        "message": "Rate limit reached (fake OpenAI).",
                        "type": "requests" if self.requests in spent else "tokens",
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                }
                status = 429
            else:
                body = {"object": "list", "data": []}
                status = 200
            ms = int((now - self.start) * 1000)
            with open(self.log, "a") as f:
                f.write(f"{ms} {status}\n")
        return status, headers, json.dumps(body).encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    limiter = None

    def do_GET(self):
        if self.path == "/health":
            status, headers, body = 200, [], b"ok\n"
        else:
            status, headers, body = self.limiter.take()
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET

    def log_message(self, format, *args):
        pass


if __name__ == "__main__":
    port, log = int(sys.argv[1]), sys.argv[2]
    Handler.limiter = Limiter(log)
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    print(f"fake OpenAI on 127.0.0.1:{port}", file=sys.stderr)
    server.serve_forever()
