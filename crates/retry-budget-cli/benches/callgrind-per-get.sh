#!/usr/bin/env bash
# Instructions per proxied GET, `retry-budget proxy` (defaults: log lines,
# metrics, client budget, hold-off and pacing on) beside the bare hyper proxy
# of its shape (crates/bare-proxy), under callgrind: one worker each, in front
# of nginx (`return 200`), `hey -n 500 -c 8` as a warm-up (not counted), then
# `hey -n 2000 -c 8` with instrumentation on; the user-space instructions of
# the dump divided by the GETs answered 200. A count, not a time: it does not
# depend on what else the machine runs (run to run it moves by about 0.5 %).
# BENCHMARKS.md ("Per-request cuts of issue 37") records its runs.
#
#   bash crates/retry-budget-cli/benches/callgrind-per-get.sh
#
# Environment (all optional):
#   NO_BUILD=1   use the existing target/release binaries (built with
#                CARGO_PROFILE_RELEASE_DEBUG=line-tables-only, so that the
#                dumps name inlined source files)
#   KEEP=DIR     keep the two dumps (ours.cg.1, bare.cg.1) in DIR, for
#                `callgrind_annotate --inclusive=yes DIR/ours.cg.1`
#   PORT=18580   the upstream's port; the proxies take the next six
#
# Needs valgrind (callgrind_control), hey, nginx and curl; installs none.
set -euo pipefail

root=$(cd "$(dirname "$0")/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
base=${PORT:-18580}
for tool in valgrind callgrind_control callgrind_annotate hey curl; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 2; }
done
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx_bin" ] || { echo "needs nginx" >&2; exit 2; }

if [ -z "${NO_BUILD:-}" ]; then
    (cd "$root" && CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
        cargo build --release -p retry-budget-cli -p bare-proxy)
fi

dir=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    if [ -n "${KEEP:-}" ]; then
        mkdir -p "$KEEP"
        cp "$dir"/*.cg.1 "$KEEP"/ 2>/dev/null || true
    fi
    rm -rf "$dir"
}
trap cleanup EXIT

mkdir -p "$dir/up/logs"
cat >"$dir/up/nginx.conf" <<EOC
daemon off;
worker_processes 1;
pid $dir/up/nginx.pid;
error_log $dir/up/logs/error.log;
events { worker_connections 4096; }
http { access_log off; server { listen 127.0.0.1:$base reuseport backlog=4096;
  keepalive_requests 1000000; location / { return 200 "ok\n"; } } }
EOC
"$nginx_bin" -c "$dir/up/nginx.conf" -p "$dir/up" 2>"$dir/up/stderr" &
pids+=($!)

# measure NAME PORT COMMAND...: prints the Ir per GET of one target.
measure() {
    local name=$1 port=$2
    shift 2
    valgrind --tool=callgrind --instr-atstart=no \
        --callgrind-out-file="$dir/$name.cg" "$@" 2>"$dir/$name.stderr" &
    local vg=$!
    pids+=("$vg")
    for _ in $(seq 300); do
        curl -fsS -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break
        sleep 0.2
    done
    hey -n 500 -c 8 "http://127.0.0.1:$port/" >/dev/null
    callgrind_control -i on "$vg" >/dev/null
    local out
    out=$(hey -n 2000 -c 8 "http://127.0.0.1:$port/")
    callgrind_control -i off "$vg" >/dev/null
    callgrind_control -d "$vg" >/dev/null
    sleep 1
    kill "$vg"
    wait "$vg" 2>/dev/null || true
    local gets total
    gets=$(awk '/\[200\]/ {print $2}' <<<"$out")
    total=$(callgrind_annotate "$dir/$name.cg.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
    if [ -z "$gets" ] || [ "$gets" -eq 0 ]; then
        echo "$name: no GET answered 200" >&2
        cat "$dir/$name.stderr" >&2
        exit 1
    fi
    echo $((total / gets))
}

ours=$(measure ours $((base + 3)) "$target/release/retry-budget" proxy \
    --upstream "http://127.0.0.1:$base" --listen "127.0.0.1:$((base + 3))" \
    --admin "127.0.0.1:$((base + 4))" --workers 1)
bare=$(measure bare $((base + 6)) "$target/release/bare-proxy" \
    --upstream "http://127.0.0.1:$base" --listen "127.0.0.1:$((base + 6))" --workers 1)
echo "commit: $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "instructions per proxied GET: retry-budget proxy $ours, bare hyper proxy $bare, ours minus bare $((ours - bare))"
