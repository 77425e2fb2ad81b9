#!/bin/sh
# PERF-1: `wrk -t2 -c64 -d10s` on GET /resources, vgpud against nginx serving the same bytes.
#
#   tests/sim/run-sim-test.sh BUILD/sim/vgpu-sim bench/host-sim20.yaml \
#           sh bench/perf1-resources.sh BUILD_DIR
#
# Runs inside run-sim-test.sh's private PID namespace (SIM-21), which exports VGPU_SIM_MOUNT and
# VGPU_SIM_CONTROL. Starts vgpud (log_level info, TCP only, the fake NVML library) against the
# simulated host and waits for /readyz; copies its /resources answer byte for byte into a
# static file; starts nginx (worker_processes 1, access log off) in a temporary prefix on
# another loopback port serving that file at /resources; checks that both answer the same body;
# then runs wrk with the same bearer token against each: one warm-up each, then 5 repetitions,
# alternating between the two so that drift on the machine hits both alike.
#
# Then the same repetitions again pinned: both servers (every thread) to CPU 0 with taskset,
# wrk to CPU 1, so that the client never steals the server's core.
#
# Prints three table rows (bench/run's format) on stdout: requests/s, p99 latency against
# nginx's p99 in the same run (PERF-1's target is relative: on two cores nginx itself shows a
# p99 of several ms), and the pinned p99s; each figure the median of its repetitions. Progress
# and per-repetition figures go to stderr.
# PERF1_DURATION (default 10s) and PERF1_REPS (default 5) shorten a trial run.
set -eu

build=${1:?usage: perf1-resources.sh BUILD_DIR}
mnt=${VGPU_SIM_MOUNT:?run this under tests/sim/run-sim-test.sh}
duration=${PERF1_DURATION:-10s}
reps=${PERF1_REPS:-5}

vgpud=$build/src/daemon/vgpud
vgpuctl=$build/src/ctl/vgpuctl
nvml=$build/sim/libnvidia-ml.so.1
for tool in wrk nginx curl python3; do
        if ! command -v "$tool" >/dev/null 2>&1; then
                echo "perf1: $tool not found (scripts/deps.sh bench installs wrk and nginx)" >&2
                exit 1
        fi
done
nginx=$(command -v nginx)

work=$(mktemp -d "${TMPDIR:-/tmp}/vgpud-perf1.XXXXXX")
vgpud_pid=
nginx_pid=

# SIGTERM, up to 10 s for a clean exit, then SIGKILL.
stop() { # PID
        kill -TERM "$1" 2>/dev/null || return 0
        n=0
        # A zombie has exited although kill -0 still reaches it.
        while kill -0 "$1" 2>/dev/null && [ "$n" -lt 200 ] &&
                ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null; do
                sleep 0.05
                n=$((n + 1))
        done
        kill -KILL "$1" 2>/dev/null || true
        wait "$1" 2>/dev/null || true
}

finish() {
        status=$?
        trap - EXIT INT TERM
        [ -n "$nginx_pid" ] && stop "$nginx_pid"
        [ -n "$vgpud_pid" ] && stop "$vgpud_pid"
        if [ "$status" -ne 0 ]; then
                for f in "$work/vgpud.log" "$work/nginx/error.log"; do
                        [ -s "$f" ] && { echo "perf1: last lines of $f:" >&2; tail -n 20 "$f" >&2; }
                done
        fi
        rm -rf "$work"
        exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
        python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# Polls URL until it answers 200, for up to 30 s, giving up early if PID exits.
wait_ready() { # URL PID
        n=0
        while [ "$(curl -s -o /dev/null -w '%{http_code}' "$1" || true)" != 200 ]; do
                if ! kill -0 "$2" 2>/dev/null || [ "$n" -ge 600 ]; then
                        echo "perf1: $1 did not answer 200" >&2
                        return 1
                fi
                sleep 0.05
                n=$((n + 1))
        done
}

# --- vgpud ---------------------------------------------------------------------------------

head -c 48 /dev/urandom > "$work/jwt.secret"
chmod 0600 "$work/jwt.secret"
token=$("$vgpuctl" token mint --secret-file "$work/jwt.secret" --ttl 1h)
vport=$(free_port)
mkdir -p "$work/run"
cat > "$work/vgpud.yaml" <<EOF
listen: "127.0.0.1:$vport"
unix_socket: ""
jwt_secret_file: "$work/jwt.secret"
data_dir: "$mnt/data"
runtime_dir: "$work/run"
sysfs_root: "$mnt/sys"
dev_root: "$mnt/dev"
nvml_library: "$nvml"
log_level: info
EOF
"$vgpud" --config "$work/vgpud.yaml" </dev/null >/dev/null 2>"$work/vgpud.log" &
vgpud_pid=$!
wait_ready "http://127.0.0.1:$vport/readyz" "$vgpud_pid"

# --- nginx, serving vgpud's exact answer ---------------------------------------------------

# nginx's worker runs as nobody when started by root: the served file must be world-readable.
# (The token's secret stays 0600.)
chmod 0755 "$work"
mkdir -p "$work/nginx/www" "$work/nginx/tmp"
curl -sf -H "Authorization: Bearer $token" -o "$work/nginx/www/resources" \
        "http://127.0.0.1:$vport/resources"
chmod 0644 "$work/nginx/www/resources"
if ! grep -q '"total_slots": *64' "$work/nginx/www/resources"; then
        echo "perf1: unexpected /resources body: $(cat "$work/nginx/www/resources")" >&2
        exit 1
fi
nport=$(free_port)
cat > "$work/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 1024; }
http {
        access_log off;
        sendfile on;
        client_body_temp_path $work/nginx/tmp/body;
        proxy_temp_path $work/nginx/tmp/proxy;
        fastcgi_temp_path $work/nginx/tmp/fastcgi;
        uwsgi_temp_path $work/nginx/tmp/uwsgi;
        scgi_temp_path $work/nginx/tmp/scgi;
        server {
                listen 127.0.0.1:$nport;
                root $work/nginx/www;
                location = /resources { default_type application/json; }
        }
}
EOF
"$nginx" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" \
        </dev/null >/dev/null 2>>"$work/nginx/error.log" &
nginx_pid=$!
wait_ready "http://127.0.0.1:$nport/resources" "$nginx_pid"

curl -sf -H "Authorization: Bearer $token" -o "$work/nginx.body" "http://127.0.0.1:$nport/resources"
if ! cmp -s "$work/nginx/www/resources" "$work/nginx.body"; then
        echo "perf1: nginx does not serve vgpud's bytes" >&2
        exit 1
fi
echo "perf1: /resources is $(wc -c < "$work/nginx.body") bytes;" \
        "vgpud on :$vport, nginx on :$nport; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2

# --- wrk -----------------------------------------------------------------------------------

# wrk's done() hook prints exact figures: requests/s over the measured duration, p99 in ms
# (from wrk's microsecond histogram), and the error counters. Status errors (>= 400, such as
# a rejected token) make the run invalid.
cat > "$work/report.lua" <<'EOF'
done = function(summary, latency, requests)
        local e = summary.errors
        io.write(string.format("perf1-wrk %.1f %.3f %d %d %d %d %d %d\n",
                summary.requests / (summary.duration / 1e6), latency:percentile(99) / 1000,
                summary.requests, e.connect, e.read, e.write, e.status, e.timeout))
end
EOF

results=$work/results
: > "$results"
run_wrk() { # NAME PORT REP [pinned]
        pin=
        [ "${4:-}" = pinned ] && pin="taskset -c 1"
        out=$($pin wrk -t2 -c64 -d"$duration" --latency -s "$work/report.lua" \
                -H "Authorization: Bearer $token" "http://127.0.0.1:$2/resources" 2>&1) || {
                echo "perf1: wrk failed against $1: $out" >&2
                return 1
        }
        line=$(echo "$out" | grep '^perf1-wrk ') || {
                echo "perf1: wrk printed no summary for $1: $out" >&2
                return 1
        }
        pinned=${4:-}
        set -- "$1" "$2" "$3" $line
        echo "perf1: $1 rep $3${pinned:+ ($pinned)}: $5 req/s, p99 $6 ms, $7 requests," \
                "errors connect $8 read $9 write ${10} status ${11} timeout ${12}" >&2
        if [ "${11}" -ne 0 ] || [ "$7" -eq 0 ]; then
                echo "perf1: $1 answered ${11} requests with an error status" >&2
                return 1
        fi
        [ "$3" = warm-up ] || echo "$1 $5 $6 ${pinned:-free}" >> "$results"
}

run_wrk vgpud "$vport" warm-up
run_wrk nginx "$nport" warm-up
i=1
while [ "$i" -le "$reps" ]; do
        run_wrk vgpud "$vport" "$i"
        run_wrk nginx "$nport" "$i"
        i=$((i + 1))
done

# The pinned run: the servers share CPU 0, wrk has CPU 1.
taskset -a -p -c 0 "$vgpud_pid" >/dev/null
taskset -a -p -c 0 "$nginx_pid" >/dev/null
i=1
while [ "$i" -le "$reps" ]; do
        run_wrk vgpud "$vport" "$i" pinned
        run_wrk nginx "$nport" "$i" pinned
        i=$((i + 1))
done

if ! kill -0 "$vgpud_pid" 2>/dev/null; then
        echo "perf1: vgpud exited during the run" >&2
        exit 1
fi

# Medians of each column; rows as bench/run prints them.
python3 - "$results" "$duration" <<'EOF'
import statistics
import sys

path, duration = sys.argv[1:3]
runs = {}
with open(path) as f:
    for line in f:
        name, rps, p99, how = line.split()
        rows = runs.setdefault((name, how), ([], []))
        rows[0].append(float(rps))
        rows[1].append(float(p99))


def medians(name, how):
    return tuple(statistics.median(x) for x in runs[(name, how)])


v_rps, v_p99 = medians("vgpud", "free")
n_rps, n_p99 = medians("nginx", "free")
_, vp_p99 = medians("vgpud", "pinned")
_, np_p99 = medians("nginx", "pinned")
what = "GET /resources, wrk -t2 -c64 -d%s" % duration


def row(label, ours, peer, target, limit, better_high):
    ratio = ours / peer if peer else 0
    good = ratio >= limit if better_high else ratio <= limit
    print("row\tPERF-1\t%s: %s\t%.2f\t%.2f\t%.2f\t%s\t%s"
          % (what, label, ours, peer, ratio, target, "pass" if good else "FAIL"))


row("requests/s vs nginx", v_rps, n_rps, ">= 0.70", 0.70, True)
row("p99 latency (ms) vs nginx's p99", v_p99, n_p99, "<= 1.50", 1.50, False)
row("p99 latency (ms) vs nginx's, servers on CPU 0, wrk on CPU 1", vp_p99, np_p99, "<= 1.50",
    1.50, False)
EOF
