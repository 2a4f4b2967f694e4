"""The load of benches/pacing.sh: N GET actions from C concurrent clients.

Usage: python3 load.py ACTIONS CLIENTS TIMEOUT URL [URL...]

Client i sends to URL[i mod the number of URLs] (two proxies: the clients
split across them); each takes the next action until all are sent. Prints
one JSON object: actions that got a 2xx (`ok`), the statuses of the others,
and the seconds from the first send to the last answer.
"""

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

actions, clients, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
urls = sys.argv[4:]
lock = threading.Lock()
next_action = iter(range(actions))
statuses = Counter()


def client(url):
    while True:
        with lock:
            n = next(next_action, None)
        if n is None:
            return
        try:
            with urllib.request.urlopen(f"{url}?action={n}", timeout=timeout) as r:
                r.read()
                status = str(r.status)
        except urllib.error.HTTPError as e:
            status = str(e.code)
        except Exception as e:  # a timeout or a refused connection
            status = type(e).__name__
        with lock:
            statuses[status] += 1


start = time.monotonic()
threads = [
    threading.Thread(target=client, args=(urls[i % len(urls)],)) for i in range(clients)
]
for t in threads:
    t.start()
for t in threads:
    t.join()
seconds = time.monotonic() - start
ok = sum(n for s, n in statuses.items() if s.startswith("2"))
print(json.dumps({"ok": ok, "statuses": dict(statuses), "seconds": round(seconds, 2)}))
