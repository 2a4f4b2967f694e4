#!/usr/bin/env bash
# Pacing before the 429, measured against real limiters: a burst of GET
# actions through `retry-budget proxy` (one proxy, then two sharing one
# Redis), counting the 429s each limiter sent (from its own log), the
# actions that succeeded and the total time, with pacing and with
# `--no-pace`. BENCHMARKS.md ("Pacing") records its runs.
#
#   bash crates/retry-budget-cli/benches/pacing.sh
#
# The limiters (helpers in benches/pacing/, each logging every response):
#   express-rate-limit, draft-8 and draft-7 headers, 10 requests per 2 s;
#   flask-limiter, X-RateLimit-* with a Unix reset (its default header set),
#     10 per 2 s;
#   a fake OpenAI (fake_openai.py): per-minute request and token windows
#     scaled down (10 requests per 2 s; 24,000 tokens per 6 s at 1,000 a
#     request), x-ratelimit-remaining|reset-requests|tokens, 429 with
#     Retry-After when spent.
# A build whose `retry-budget proxy --help` lists `--no-pace` is measured
# paced (the default) and with `--no-pace`; an older build only as it is,
# which is the `--no-pace` behaviour.
#
# Environment (all optional):
#   ACTIONS=60       GET actions per run
#   CLIENTS=6        concurrent clients (split across the proxies)
#   LIMITERS="express-draft8 express-draft7 flask openai"
#   PROXIES="1 2"    one proxy; two proxies sharing one Redis
#   CLIENT_TIMEOUT=120  seconds a client waits for one answer
#   PROXY_ARGS=...   more flags for every retry-budget proxy
#   PACE_ARGS=...    more flags for the paced runs only (e.g. --pace-header)
#   NO_BUILD=1       use the existing target/release/retry-budget
#   NO_INSTALL=1     install nothing (everything must already be there)
#   PACING_CACHE=dir where the npm packages and the Python venv are kept
#                    (default ~/.cache/retry-budget-pacing)
#   KEEP=1           keep the temporary directory (logs) and say where
#
# It installs redis-server with apt-get (through sudo when not root),
# express and express-rate-limit with npm and flask-limiter with pip (in a
# venv) into the cache directory, builds the release binary, starts
# everything on free loopback ports under a temporary directory, and stops
# all it started on exit.
set -euo pipefail

ACTIONS=${ACTIONS:-60}
CLIENTS=${CLIENTS:-6}
LIMITERS=${LIMITERS:-express-draft8 express-draft7 flask openai}
PROXIES=${PROXIES:-1 2}
CLIENT_TIMEOUT=${CLIENT_TIMEOUT:-120}
PROXY_ARGS=${PROXY_ARGS:-}
PACE_ARGS=${PACE_ARGS:-}
cache=${PACING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/retry-budget-pacing}

here=$(cd "$(dirname "$0")" && pwd)
helpers=$here/pacing
root=$(cd "$here/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}

die() {
    echo "pacing.sh: $*" >&2
    exit 1
}

for tool in curl python3 node npm; do
    command -v "$tool" >/dev/null || die "$tool is needed and not installed"
done
PATH=$PATH:/usr/sbin
if [ -z "${NO_INSTALL:-}" ]; then
    if ! command -v redis-server >/dev/null || ! command -v redis-cli >/dev/null; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo=sudo
        { $sudo apt-get update -qq && $sudo apt-get install -y -qq redis-server; } ||
            die "could not install redis-server with apt-get"
    fi
    mkdir -p "$cache"
    if [ ! -d "$cache/node/node_modules/express-rate-limit" ] ||
        [ ! -d "$cache/node/node_modules/express" ]; then
        mkdir -p "$cache/node"
        [ -f "$cache/node/package.json" ] || echo '{"private": true}' >"$cache/node/package.json"
        (cd "$cache/node" && npm install --no-audit --no-fund --loglevel=error \
            express express-rate-limit) ||
            die "could not install express and express-rate-limit with npm into $cache/node"
    fi
    if ! "$cache/venv/bin/python" -c 'import flask_limiter' 2>/dev/null; then
        rm -rf "$cache/venv"
        python3 -m venv "$cache/venv" || die "could not make a Python venv in $cache/venv"
        "$cache/venv/bin/pip" install -q flask flask-limiter ||
            die "could not install flask and flask-limiter with pip into $cache/venv"
    fi
fi
command -v redis-server >/dev/null || die "redis-server is needed (unset NO_INSTALL to install it)"
[ -d "$cache/node/node_modules/express-rate-limit" ] ||
    die "express-rate-limit is not in $cache/node (unset NO_INSTALL to install it)"
"$cache/venv/bin/python" -c 'import flask_limiter' 2>/dev/null ||
    die "flask-limiter is not in $cache/venv (unset NO_INSTALL to install it)"

if [ -z "${NO_BUILD:-}" ]; then
    (cd "$root" && cargo build --release -q -p retry-budget-cli)
fi
bin=$target/release/retry-budget
[ -x "$bin" ] || die "$bin is not built"

dir=$(mktemp -d /tmp/pacing.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then echo "logs kept in $dir" >&2; else rm -rf "$dir"; fi
}
trap cleanup EXIT

# A port nothing listens on now (the kernel's pick, released at once).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Waits until URL answers 200, or fails naming WHAT and showing LOG.
wait_for() {
    local url=$1 what=$2 log=$3
    for _ in $(seq 300); do
        curl -fsS -o /dev/null --max-time 2 "$url" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "$what does not answer at $url; its log:" >&2
    cat "$log" >&2 || true
    exit 1
}

# Stops one process: TERM, then KILL after 15 s.
stop() {
    local pid=$1
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 150); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no >"$dir/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    sleep 0.1
done
redis-cli -p "$redis_port" ping >/dev/null 2>&1 || {
    cat "$dir/redis.log" >&2
    die "redis-server did not start on port $redis_port"
}

if "$bin" proxy --help | grep -q -- '--no-pace'; then
    modes=(paced no-pace)
    pacing=available
else
    modes=(no-pace)
    pacing="not available in this build"
fi

# The limiter's reading flags, the same paced and not: what a user of each
# passes so that a retry reads its reset (every 429 also has Retry-After).
signal_args() {
    case $1 in
    express-*) echo "--ratelimit-fields" ;;
    flask) echo "--reset-header x-ratelimit-reset=unix" ;;
    openai) echo "--preset openai" ;;
    esac
}

# The quota's own minimum for ACTIONS requests, in seconds: the start of
# the window that takes the last one (60 at 10 per 2 s: 10 s; the fake
# OpenAI's token window, 24 per 6 s, with 10 per 2 s inside it: 14 s).
quota_minimum() {
    case $1 in
    openai) python3 - "$ACTIONS" <<'EOF' ;;
import sys
n, t = int(sys.argv[1]), 0.0
# Step through 2 s request windows; a 6 s token window takes 24.
tokens_left, token_end = 24, 6.0
while True:
    if t >= token_end:
        tokens_left, token_end = 24, t + 6.0
    take = min(10, tokens_left, n)
    n -= take
    tokens_left -= take
    if n <= 0:
        print(f"{t:g}")
        break
    t = t + 2.0 if tokens_left > 0 else max(t + 2.0, token_end)
EOF
    *) awk -v n="$ACTIONS" 'BEGIN { w = int((n - 1) / 10); print w * 2 }' ;;
    esac
}

# The time target: within 1.3x the quota's minimum, plus the lateness of
# the resets the limiter announced (flask-limiter rounds its reset up to
# the next whole second; its helper logs each window's true end beside
# the reset announced, and the run's windows but the last are summed).

# Starts limiter NAME on PORT logging to LOG, in the background ($! is it).
start_limiter() {
    local name=$1 port=$2 log=$3 err=$4
    case $name in
    express-draft8 | express-draft7)
        NODE_PATH=$cache/node/node_modules node "$helpers/express.cjs" "$port" \
            "draft-${name#express-draft}" "$log" >"$err" 2>&1 &
        ;;
    flask) "$cache/venv/bin/python" "$helpers/flask_limited.py" "$port" "$log" >"$err" 2>&1 & ;;
    openai) python3 "$helpers/fake_openai.py" "$port" "$log" >"$err" 2>&1 & ;;
    *) die "unknown limiter $name (express-draft8, express-draft7, flask, openai)" ;;
    esac
}

# One run: LIMITER through N proxies in MODE. Prints one table row.
run() {
    local limiter=$1 n=$2 mode=$3
    local run_dir="$dir/$limiter-$n-$mode" port proxy_pids=() urls=() flags
    mkdir -p "$run_dir"
    redis-cli -p "$redis_port" flushall >/dev/null
    port=$(free_port)
    local lpid
    start_limiter "$limiter" "$port" "$run_dir/limiter.log" "$run_dir/limiter.stderr"
    lpid=$!
    pids+=("$lpid")
    wait_for "http://127.0.0.1:$port/health" "$limiter" "$run_dir/limiter.stderr"

    flags="$(signal_args "$limiter") $PROXY_ARGS"
    if [ "$mode" = paced ]; then flags="$flags $PACE_ARGS"; fi
    if [ "$mode" = no-pace ] && [ "$pacing" = available ]; then flags="$flags --no-pace"; fi
    if [ "$n" -gt 1 ]; then flags="$flags --hold-off-redis redis://127.0.0.1:$redis_port"; fi
    for i in $(seq "$n"); do
        local listen admin
        listen=$(free_port)
        admin=$(free_port)
        # shellcheck disable=SC2086 # flags is a list of flags
        "$bin" proxy --upstream "http://127.0.0.1:$port" \
            --listen "127.0.0.1:$listen" --admin "127.0.0.1:$admin" \
            $flags 2>"$run_dir/proxy$i.log" &
        proxy_pids+=($!)
        pids+=($!)
        wait_for "http://127.0.0.1:$admin/live" "proxy $i" "$run_dir/proxy$i.log"
        urls+=("http://127.0.0.1:$listen/v1/models")
    done

    local out
    out=$(python3 "$helpers/load.py" "$ACTIONS" "$CLIENTS" "$CLIENT_TIMEOUT" "${urls[@]}")
    for pid in "${proxy_pids[@]}"; do stop "$pid"; done
    stop "$lpid"

    local sent limited ok seconds others
    sent=$(wc -l <"$run_dir/limiter.log")
    limited=$(awk '$2 == 429' "$run_dir/limiter.log" | wc -l)
    ok=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["ok"])' <<<"$out")
    seconds=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["seconds"])' <<<"$out")
    others=$(python3 -c 'import json, sys
s = json.load(sys.stdin)["statuses"]
print(", ".join(f"{n} {k}" for k, n in sorted(s.items()) if not k.startswith("2")))' <<<"$out")
    local label=$mode minimum late target
    if [ "$pacing" != available ]; then label="no-pace (today's proxy)"; fi
    minimum=$(quota_minimum "$limiter")
    late=$(lateness "$run_dir/limiter.log.windows")
    target=$(awk -v m="$minimum" -v l="${late:-0}" 'BEGIN { printf "%.2f", 1.3 * m + l }')
    echo "| $limiter | $n | $label | $ok${others:+ ($others)} | $limited | $sent | $seconds | $minimum | ${late:--} | $target |"
}

# The lateness a limiter announced, in seconds, from the windows log its
# helper writes (flask: `<true end> <announced reset>` per window, Unix
# seconds): the sum over every window but the last (a window's lateness
# delays the next one; nothing follows the last). Empty when there is no
# such log.
lateness() {
    [ -f "$1" ] || return 0
    awk '{ late[NR] = $2 - $1 } END { s = 0; for (i = 1; i < NR; i++) s += late[i]; printf "%.2f", s }' "$1"
}

echo "load before: $(uptime)"
echo "commit: $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "pacing: $pacing"
if [ "$pacing" != available ]; then echo "pacing not available in this build"; fi
echo "flags per limiter: express-*: $(signal_args express-draft8); flask: $(signal_args flask); openai: $(signal_args openai); two proxies: --hold-off-redis; extra: ${PROXY_ARGS:-none}"
echo
echo "$ACTIONS GET actions from $CLIENTS concurrent clients (split across the proxies)."
echo
echo "| limiter | proxies | pacing | actions ok (of $ACTIONS) | 429s the limiter sent | requests it saw | total time (s) | quota's minimum (s) | reset lateness announced (s) | time target (s) |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"
for limiter in $LIMITERS; do
    for n in $PROXIES; do
        for mode in "${modes[@]}"; do
            run "$limiter" "$n" "$mode"
        done
    done
done
echo
echo "load after: $(uptime)"
