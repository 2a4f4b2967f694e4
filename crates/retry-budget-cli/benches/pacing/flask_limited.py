"""flask-limiter, 10 requests per 2 s, as a limiter for benches/pacing.sh.

Usage: venv/bin/python flask_limited.py PORT LOG

flask-limiter's default header set (`headers_enabled=True`):
X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset (a Unix time,
which flask-limiter rounds up to the next whole second) and Retry-After on
every response. Fixed window, in memory.

Every response of the limited route appends one line to LOG:
`<milliseconds since start> <status>` (written by a WSGI wrapper around the
whole app, so the limiter's own 429s are counted). GET /health is exempt
(the script's readiness probe).

Each window appends one line to LOG.windows when its first response is
sent: `<true end> <announced reset>`, both Unix seconds, the true end being
the limiter's own expiry (a float) and the announced one what
X-RateLimit-Reset says (whole seconds, rounded up): their difference is the
lateness a client that trusts the field waits for.
"""

import sys
import threading
import time

from flask import Flask
from flask_limiter import Limiter
from flask_limiter.util import get_remote_address

port, log = int(sys.argv[1]), sys.argv[2]
start = time.monotonic()
lock = threading.Lock()
open(log, "w").close()
open(log + ".windows", "w").close()

app = Flask(__name__)
limiter = Limiter(
    get_remote_address,
    app=app,
    default_limits=["10 per 2 seconds"],
    storage_uri="memory://",
    headers_enabled=True,
)


windows = set()


@app.after_request
def log_window(response):
    """Logs each window's true end beside the reset it announces."""
    current = limiter.current_limit
    if current is not None:
        true_end, announced = current.window[0], current.reset_at
        with lock:
            if true_end not in windows:
                windows.add(true_end)
                with open(log + ".windows", "a") as f:
                    f.write(f"{true_end:.6f} {announced}\n")
    return response


@app.get("/health")
@limiter.exempt
def health():
    return "ok\n"


@app.get("/", defaults={"path": ""})
@app.get("/<path:path>")
def limited(path):
    return "ok\n"


def logged(wsgi):
    def app_(environ, start_response):
        if environ.get("PATH_INFO") == "/health":
            return wsgi(environ, start_response)

        def start_logged(status, headers, exc_info=None):
            ms = int((time.monotonic() - start) * 1000)
            with lock, open(log, "a") as f:
                f.write(f"{ms} {status.split()[0]}\n")
            return start_response(status, headers, exc_info)

        return wsgi(environ, start_logged)

    return app_


app.wsgi_app = logged(app.wsgi_app)

if __name__ == "__main__":
    print(f"flask-limiter on 127.0.0.1:{port}", file=sys.stderr)
    app.run(host="127.0.0.1", port=port, threaded=True)
