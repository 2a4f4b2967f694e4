#!/usr/bin/env bash
# Throughput and added latency of `retry-budget proxy` beside nginx
# `proxy_pass`, HAProxy and the bare hyper proxy of its shape (`bare-proxy`,
# crates/bare-proxy: the floor of its stack), all in front of the same nginx
# upstream (`return 200`), on loopback; `retry-budget proxy` serving ten
# routes from a config file (five by host, five by path prefix; the one
# loaded is the last one looked at), to compare with its one route; and the
# bare proxy with `--floor` (the least work the proxy's defaults require,
# crates/bare-proxy/src/floor.rs), to compare ours' own work with.
# BENCHMARKS.md ("Sidecar proxy") records its runs and says how to read them.
#
#   bash crates/retry-budget-cli/benches/proxy-throughput.sh
#
# Environment (all optional):
#   WORKERS=2        workers of each proxy (nginx worker_processes, HAProxy
#                    nbthread, retry-budget and bare-proxy --workers)
#   DURATION=10s     each wrk run (wrk -t2 -c64)
#   ROUNDS=2         interleaved rounds over the targets
#   RATE_RUNS=2      fixed-rate (500 requests/s, hey) rounds; 0: none
#   PROXY_ARGS=...   more flags for retry-budget proxy (the one-route
#                    target; the ten-route one takes its config file only)
#   NO_BUILD=1       use the existing target/release/retry-budget and
#                    target/release/bare-proxy
#   NO_INSTALL=1     do not install the packages
#
# It installs wrk, nginx, HAProxy and hey with apt-get (through sudo when not
# root), builds the release binaries, starts everything on 127.0.0.1:18480-18489
# under a temporary directory, and stops all it started on exit.
set -euo pipefail

WORKERS=${WORKERS:-2}
DURATION=${DURATION:-10s}
ROUNDS=${ROUNDS:-2}
RATE_RUNS=${RATE_RUNS:-2}
PROXY_ARGS=${PROXY_ARGS:-}

root=$(cd "$(dirname "$0")/../../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}

if [ -z "${NO_INSTALL:-}" ]; then
    missing=()
    command -v wrk >/dev/null || missing+=(wrk)
    command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
    command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
    command -v hey >/dev/null || missing+=(hey)
    if [ ${#missing[@]} -gt 0 ]; then
        sudo=""
        [ "$(id -u)" -eq 0 ] || sudo=sudo
        $sudo apt-get update -qq
        $sudo apt-get install -y -qq "${missing[@]}"
    fi
fi
PATH=$PATH:/usr/sbin

if [ -z "${NO_BUILD:-}" ]; then
    (cd "$root" && cargo build --release -q -p retry-budget-cli -p bare-proxy)
fi
bin=$target/release/retry-budget
bare=$target/release/bare-proxy

dir=$(mktemp -d /tmp/proxy-throughput.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

UPSTREAM=18480
NGINX=18481
HAPROXY=18482
OURS=18483
ADMIN=18484
NGINX_LOGGED=18485
BARE=18486
ROUTES=18487
ROUTES_ADMIN=18488
FLOOR=18489

mkdir -p "$dir/up/logs" "$dir/px/logs" "$dir/pxl/logs"
# The upstream: one worker, as in the issue's and BENCHMARKS.md's runs.
cat >"$dir/up/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $dir/up/nginx.pid;
error_log $dir/up/logs/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    server {
        listen 127.0.0.1:$UPSTREAM reuseport backlog=4096;
        keepalive_requests 1000000;
        location / { return 200 "ok\n"; }
    }
}
EOF
# nginx proxy_pass with a kept-alive upstream pool.
cat >"$dir/px/nginx.conf" <<EOF
daemon off;
worker_processes $WORKERS;
pid $dir/px/nginx.pid;
error_log $dir/px/logs/error.log;
events { worker_connections 4096; }
http {
    access_log off;
    upstream up {
        server 127.0.0.1:$UPSTREAM;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$NGINX reuseport backlog=4096;
        keepalive_requests 1000000;
        location / {
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
EOF
# The same, writing one access-log line per request as the retry-budget
# proxy does (its lines go to a file through a 16 KiB buffer per worker):
# nginx's default `combined` format, buffered the same way.
sed -e "s|access_log off;|access_log $dir/pxl/logs/access.log combined buffer=16k;|" \
    -e "s|$dir/px/|$dir/pxl/|g" -e "s|:$NGINX |:$NGINX_LOGGED |" \
    "$dir/px/nginx.conf" >"$dir/pxl/nginx.conf"
cat >"$dir/haproxy.cfg" <<EOF
global
    nbthread $WORKERS
    maxconn 4096
defaults
    mode http
    timeout connect 5s
    timeout client 30s
    timeout server 30s
    http-reuse always
frontend f
    bind 127.0.0.1:$HAPROXY
    default_backend b
backend b
    server up 127.0.0.1:$UPSTREAM
EOF

nginx -c "$dir/up/nginx.conf" -p "$dir/up" 2>"$dir/up/stderr" &
pids+=($!)
nginx -c "$dir/px/nginx.conf" -p "$dir/px" 2>"$dir/px/stderr" &
pids+=($!)
nginx -c "$dir/pxl/nginx.conf" -p "$dir/pxl" 2>"$dir/pxl/stderr" &
pids+=($!)
haproxy -f "$dir/haproxy.cfg" -db 2>"$dir/haproxy.stderr" &
pids+=($!)
workers=()
# (A build from before `--workers` runs on tokio's multi-thread runtime.)
if "$bin" proxy --help | grep -q -- --workers; then workers=(--workers "$WORKERS"); fi
# shellcheck disable=SC2086 # PROXY_ARGS is a list of flags
"$bin" proxy --upstream "http://127.0.0.1:$UPSTREAM" \
    --listen "127.0.0.1:$OURS" --admin "127.0.0.1:$ADMIN" \
    "${workers[@]}" $PROXY_ARGS 2>"$dir/proxy.log" &
pids+=($!)
"$bare" --upstream "http://127.0.0.1:$UPSTREAM" --listen "127.0.0.1:$BARE" \
    --workers "$WORKERS" 2>"$dir/bare.stderr" &
pids+=($!)
# Its log lines to a file, as the proxy's.
"$bare" --upstream "http://127.0.0.1:$UPSTREAM" --listen "127.0.0.1:$FLOOR" \
    --workers "$WORKERS" --floor 2>"$dir/floor.log" &
pids+=($!)
# Ten routes to the same upstream, defaults otherwise: five by host
# (h0.test ... h4.test), five by prefix (/r0 ... /r4). wrk's requests
# (`Host: 127.0.0.1:18487`, path /r4/) are looked up against every host
# route, then against the prefixes, /r4 last.
{
    echo "listen = \"127.0.0.1:$ROUTES\""
    echo "admin = \"127.0.0.1:$ROUTES_ADMIN\""
    echo "workers = $WORKERS"
    for n in 0 1 2 3 4; do
        printf '[[route]]\nname = "h%s"\nmatch.host = "h%s.test"\nupstream = "http://127.0.0.1:%s"\n' "$n" "$n" "$UPSTREAM"
    done
    for n in 0 1 2 3 4; do
        printf '[[route]]\nname = "r%s"\nmatch.prefix = "/r%s"\nupstream = "http://127.0.0.1:%s"\n' "$n" "$n" "$UPSTREAM"
    done
} >"$dir/routes.toml"
"$bin" proxy --config "$dir/routes.toml" 2>"$dir/routes.log" &
pids+=($!)

for port in $UPSTREAM $NGINX $HAPROXY $OURS $NGINX_LOGGED $BARE $FLOOR $ROUTES/r4; do
    for _ in $(seq 100); do
        curl -fsS -o /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break
        sleep 0.1
    done
    curl -fsS -o /dev/null "http://127.0.0.1:$port/" || {
        echo "port $port does not answer" >&2
        cat "$dir"/*.stderr "$dir"/*/stderr "$dir/proxy.log" >&2 || true
        exit 1
    }
done

# The processes of each target, in the order of `names` below, and their
# CPU time (user and system, clock ticks, threads and worker processes
# included) read from /proc: what a request costs the target itself,
# whatever else the machine runs.
procs=("${pids[0]}" "${pids[1]}" "${pids[3]}" "${pids[5]}" "${pids[4]}" "${pids[2]}" "${pids[7]}" "${pids[6]}")
hz=$(getconf CLK_TCK)
cpu_ticks() {
    local all=("$1") kids
    mapfile -t kids < <(pgrep -P "$1" || true)
    all+=("${kids[@]}")
    for p in "${all[@]}"; do awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null || true; done |
        awk '{u += $1; s += $2} END {print u + 0, s + 0}'
}

names=("nginx directly" "nginx proxy_pass" "HAProxy" "bare hyper proxy" "retry-budget proxy" "nginx proxy_pass, access log" "retry-budget proxy, 10 routes" "bare hyper proxy --floor")
ports=($UPSTREAM $NGINX $HAPROXY $BARE $OURS $NGINX_LOGGED $ROUTES/r4 $FLOOR)
# Indices into names, ports and procs.
I_NGINX=1 I_BARE=3 I_OURS=4 I_LOGGED=5 I_ROUTES=6 I_FLOOR=7
# best: each target's best requests/s; rps_of: its requests/s this round;
# cpu_sum: its CPU per request (us, user + system) summed over the rounds;
# ratio_sum: ours / bare summed over the rounds.
declare -A best rps_of cpu_sum added_sum
ratio_sum=0
routes_sum=0

echo "load before: $(uptime)"
echo "commit: $(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo
echo "| round | target | requests/s | p50 | p99 | CPU per request, user + system (us) | load (1 min) |"
echo "|---|---|---:|---:|---:|---:|---:|"
for round in $(seq "$ROUNDS"); do
    for i in "${!names[@]}"; do
        load=$(cut -d' ' -f1 /proc/loadavg)
        before=$(cpu_ticks "${procs[$i]}")
        out=$(wrk -t2 -c64 -d"$DURATION" --latency "http://127.0.0.1:${ports[$i]}/")
        after=$(cpu_ticks "${procs[$i]}")
        requests=$(awk '/requests in/ {print $1}' <<<"$out")
        cpu=$(awk -v b="$before" -v a="$after" -v n="$requests" -v hz="$hz" 'BEGIN {
            split(b, x, " "); split(a, y, " "); k = 1e6 / hz / n
            printf "%.1f + %.1f", (y[1] - x[1]) * k, (y[2] - x[2]) * k }')
        cpu_sum[$i]=$(awk -v s="${cpu_sum[$i]:-0}" -v c="$cpu" 'BEGIN { split(c, x, " [+] "); print s + x[1] + x[2] }')
        rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
        rps_of[$i]=$rps
        p50=$(awk '$1 == "50%" {print $2}' <<<"$out")
        p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
        non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
        echo "| $round | ${names[$i]} | $rps${non2xx:+ ($non2xx non-2xx)} | $p50 | $p99 | $cpu | $load |"
        prev=${best[$i]:-0}
        if awk -v a="$rps" -v b="$prev" 'BEGIN { exit !(a > b) }'; then best[$i]=$rps; fi
    done
    ratio_sum=$(awk -v s="$ratio_sum" -v a="${rps_of[$I_OURS]}" -v b="${rps_of[$I_BARE]}" 'BEGIN { print s + a / b }')
    routes_sum=$(awk -v s="$routes_sum" -v a="${rps_of[$I_ROUTES]}" -v b="${rps_of[$I_OURS]}" 'BEGIN { print s + a / b }')
done
echo
nginx_best=${best[$I_NGINX]}
ours_best=${best[$I_OURS]}
bare_best=${best[$I_BARE]}
echo "best of $ROUNDS: nginx proxy_pass $nginx_best, nginx proxy_pass with an access log ${best[$I_LOGGED]}, HAProxy ${best[2]}, bare hyper proxy $bare_best, retry-budget proxy $ours_best, nginx directly ${best[0]}"
awk -v a="$ours_best" -v b="$nginx_best" \
    'BEGIN { printf "retry-budget proxy / nginx proxy_pass: %.2fx (target >= 0.80x)\n", a / b }'
awk -v a="$ours_best" -v b="${best[$I_LOGGED]}" \
    'BEGIN { printf "retry-budget proxy / nginx proxy_pass writing an access log as the proxy does: %.2fx\n", a / b }'
awk -v a="$bare_best" -v b="$nginx_best" \
    'BEGIN { printf "bare hyper proxy / nginx proxy_pass: %.2fx\n", a / b }'
awk -v a="$ours_best" -v b="$bare_best" -v r="$ratio_sum" -v n="$ROUNDS" \
    'BEGIN { printf "retry-budget proxy / bare hyper proxy: %.2fx best of %d, %.2fx mean of the rounds (target >= 0.90x)\n", a / b, n, r / n }'
awk -v a="${best[$I_ROUTES]}" -v b="$ours_best" -v r="$routes_sum" -v n="$ROUNDS" \
    'BEGIN { printf "retry-budget proxy, 10 routes / one route: %.3fx best of %d, %.3fx mean of the rounds (target >= 0.95x)\n", a / b, n, r / n }'
awk -v a="${cpu_sum[$I_ROUTES]}" -v b="${cpu_sum[$I_OURS]}" -v n="$ROUNDS" \
    'BEGIN { a /= n; b /= n; printf "CPU per request, mean of %d rounds: 10 routes %.1f us, one route %.1f us\n", n, a, b }'
awk -v a="${cpu_sum[$I_OURS]}" -v b="${cpu_sum[$I_BARE]}" -v n="$ROUNDS" \
    'BEGIN { a /= n; b /= n; printf "CPU per request, mean of %d rounds: retry-budget proxy %.1f us, bare hyper proxy %.1f us: ours minus bare %+.1f us (target <= +3.0 us)\n", n, a, b, a - b }'
awk -v a="${cpu_sum[$I_FLOOR]}" -v b="${cpu_sum[$I_BARE]}" -v c="${cpu_sum[$I_OURS]}" -v n="$ROUNDS" \
    'BEGIN { a /= n; b /= n; c /= n; printf "CPU per request, mean of %d rounds: the defaults floor (bare --floor) %.1f us: floor minus bare %+.1f us, ours minus floor %+.1f us\n", n, a, a - b, c - a }'
awk -v a="${best[$I_FLOOR]}" -v b="$bare_best" -v c="$ours_best" \
    'BEGIN { printf "the defaults floor / bare hyper proxy: %.2fx best; retry-budget proxy / the floor: %.2fx best\n", a / b, c / a }'

if [ "$RATE_RUNS" -gt 0 ]; then
    echo
    echo "Fixed rate: hey -z 10s -c 10 -q 50 (500 requests/s); latency in ms"
    echo
    echo "| round | target | requests/s | p50 | p99 | added p99 over direct | load (1 min) |"
    echo "|---|---|---:|---:|---:|---:|---:|"
    for round in $(seq "$RATE_RUNS"); do
        direct99=""
        for i in "${!names[@]}"; do
            load=$(cut -d' ' -f1 /proc/loadavg)
            out=$(hey -z 10s -c 10 -q 50 "http://127.0.0.1:${ports[$i]}/")
            rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
            p50=$(awk '$1 == "50%" {printf "%.2f", $3 * 1000}' <<<"$out")
            p99=$(awk '$1 == "99%" {printf "%.2f", $3 * 1000}' <<<"$out")
            [ -n "$direct99" ] || direct99=$p99
            added=$(awk -v a="$p99" -v b="$direct99" 'BEGIN { printf "%+.2f", a - b }')
            added_sum[$i]=$(awk -v a="${added_sum[$i]:-0}" -v b="$added" 'BEGIN { print a + b }')
            echo "| $round | ${names[$i]} | $rps | $p50 | $p99 | $added | $load |"
        done
    done
    awk -v a="${added_sum[$I_OURS]}" -v b="${added_sum[$I_NGINX]}" -v c="${added_sum[$I_BARE]}" -v n="$RATE_RUNS" \
        'BEGIN { a /= n; b /= n; c /= n; printf "\nadded p99, mean of %d rounds: retry-budget proxy %+.2f ms, nginx proxy_pass %+.2f ms, bare hyper proxy %+.2f ms (targets: at most nginx + 0.30 ms: %s; at most bare + 0.30 ms: %s)\n", n, a, b, c, (a <= b + 0.3 ? "met" : "not met"), (a <= c + 0.3 ? "met" : "not met") }'
fi
echo
echo "load after: $(uptime)"
echo "proxy log lines: $(wc -l <"$dir/proxy.log")"
