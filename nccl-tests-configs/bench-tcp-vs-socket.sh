#!/usr/bin/env bash
# bench-tcp-vs-socket.sh: the plugin's TCP transport against NCCL's Socket transport, two MPI ranks on one GPU acting
# as two hosts (a different NCCL_HOSTID each, MPS on), in one session, alternated, each case at least twice; then a
# summary table (median, spread, ratio). The user brings nccl-tests (built with MPI=1): this project never contains
# nor builds it.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROG="$(basename "$0")"

usage() {
  cat <<EOF
Usage: $PROG [options] NCCL_TESTS_BUILD OUT_DIR

NCCL_TESTS_BUILD  directory with nccl-tests' MPI binaries (all_reduce_perf_mpi or all_reduce_perf, ...)
OUT_DIR           where every log goes (created); the summary is OUT_DIR/summary.txt

What runs, in this order (every run: two ranks on GPU 0, NCCL_HOSTID=hostA / hostB, NCCL_NVLS_ENABLE=0,
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET; transports alternated Socket, GDR, Socket, GDR ...):
  1. main      --collectives x {Socket, GDR} x --reps:  -b 8 -e 128M -f 4 -n 20 -w 5 -c 1 (defaults of both)
  2. latency   all_reduce 8 B, -n 1000 -w 100, {Socket, GDR} x --reps
  3. kv        pytorch/kv_transfer.py through Socket and GDR (two torchrun --nnodes=2 node ranks on GPU 0)
  4. ddp       (with --ddp) pytorch/ddp_step.py through Socket and GDR, the same way
  5. variants  each --variant (plugin knobs, GDR only) x its collectives x --reps
  6. nccl      each --nccl-variant (NCCL settings, on Socket AND GDR) x its collectives x --reps
Parts 3-6 are skipped (and say so) once the elapsed time leaves less than their estimate within --budget.
A variant's collectives: NAME@coll+coll:K=V (e.g. p2p@sendrecv:NCCL_P2P_NET_CHUNKSIZE=524288), else
--variant-collectives.

Options:
  --plugin SO              the plugin (default: \$NET_GDR_BUILD_DIR/lib/libnccl-net-gdr.so, else
                           $HERE/../build/lib/libnccl-net-gdr.so)
  --nccl-lib DIR           put DIR first in LD_LIBRARY_PATH (e.g. the nvidia-nccl-cu13 wheel's lib directory)
  --reps N                 repetitions of every case (default 2)
  --collectives LIST       default all_reduce,all_gather,reduce_scatter,sendrecv
  --variant NAME[@C+C]:K=V[,K=V]  a plugin variant (repeatable, at most 4), e.g. spin0:GDRNET_TCP_SPIN_US=0
  --nccl-variant NAME[@C+C]:K=V[,K=V]  NCCL settings measured on both transports (repeatable, at most 3)
  --variant-collectives L  collectives of parts 5-6 for variants that name none (default all_reduce,sendrecv)
  --iters N --warmup N     nccl-tests -n / -w of parts 1, 3, 4 (default 20 / 5)
  --kv-args "ARGS"         extra kv_transfer.py arguments (default: none; its defaults are 200 blocks of 4 MiB)
  --no-kv                  skip part 3
  --ddp                    run part 4 (ddp_step.py --steps 20 on both transports)
  --budget SEC             wall-time budget in seconds (default 470)
  --run-timeout SEC        kill one run after SEC seconds (default 150)
  --mpirun CMD             default: "mpirun --allow-run-as-root"
  --torchrun CMD           default: torchrun (else python3 -m torch.distributed.run)
  --no-mps                 do not start MPS (it must already run: two processes share GPU 0)
  --dry-run                print the commands, run nothing
  -h, --help               this text

Exit status: 0 every run completed with #wrong 0 and the network asked for; 1 otherwise; 2 usage.
EOF
}

die() { echo "$PROG: error: $*" >&2; exit 2; }
need() { [ $# -ge 2 ] || die "option $1 needs a value"; }

PLUGIN=""
NCCL_LIB=""
REPS=2
COLLECTIVES="all_reduce,all_gather,reduce_scatter,sendrecv"
VCOLLS="all_reduce,sendrecv"
VARIANTS=()
NVARIANTS=()
ITERS=20
WARMUP=5
KV=1
DDP=0
KV_ARGS=""
BUDGET=470
RUN_TIMEOUT=150
MPIRUN="mpirun --allow-run-as-root"
TORCHRUN=""
MPS=1
DRY=0
POS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --plugin) need "$@"; PLUGIN="$2"; shift 2 ;;
    --nccl-lib) need "$@"; NCCL_LIB="$2"; shift 2 ;;
    --reps) need "$@"; REPS="$2"; shift 2 ;;
    --collectives) need "$@"; COLLECTIVES="$2"; shift 2 ;;
    --variant) need "$@"; VARIANTS+=("$2"); shift 2 ;;
    --nccl-variant) need "$@"; NVARIANTS+=("$2"); shift 2 ;;
    --variant-collectives) need "$@"; VCOLLS="$2"; shift 2 ;;
    --iters) need "$@"; ITERS="$2"; shift 2 ;;
    --warmup) need "$@"; WARMUP="$2"; shift 2 ;;
    --kv-args) need "$@"; KV_ARGS="$2"; shift 2 ;;
    --no-kv) KV=0; shift ;;
    --ddp) DDP=1; shift ;;
    --budget) need "$@"; BUDGET="$2"; shift 2 ;;
    --run-timeout) need "$@"; RUN_TIMEOUT="$2"; shift 2 ;;
    --mpirun) need "$@"; MPIRUN="$2"; shift 2 ;;
    --torchrun) need "$@"; TORCHRUN="$2"; shift 2 ;;
    --no-mps) MPS=0; shift ;;
    --dry-run) DRY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) POS+=("$1"); shift ;;
  esac
done
[ ${#POS[@]} -eq 2 ] || { usage >&2; exit 2; }
NT_DIR="${POS[0]}"
OUT="${POS[1]}"
[[ "$REPS" =~ ^[1-9][0-9]*$ ]] || die "--reps must be a positive integer"
[[ "$ITERS" =~ ^[1-9][0-9]*$ && "$WARMUP" =~ ^[0-9]+$ ]] || die "--iters/--warmup must be integers"
[[ "$BUDGET" =~ ^[0-9]+$ && "$RUN_TIMEOUT" =~ ^[0-9]+$ ]] || die "--budget/--run-timeout must be integers"
[ ${#VARIANTS[@]} -le 4 ] || die "at most 4 --variant (the device time is short)"
[ ${#NVARIANTS[@]} -le 3 ] || die "at most 3 --nccl-variant"
for v in "${VARIANTS[@]}" "${NVARIANTS[@]}"; do
  [[ "$v" =~ ^[A-Za-z0-9_-]+(@[a-z_]+(\+[a-z_]+)*)?:[A-Z][A-Z0-9_]*=[^,]*(,[A-Z][A-Z0-9_]*=[^,]*)*$ ]] ||
    die "bad variant '$v' (NAME[@C+C]:K=V[,K=V])"
done
vname() { local n="${1%%:*}"; echo "${n%%@*}"; }  # a variant's name
vcolls() {  # a variant's collectives, one per line
  local n="${1%%:*}"
  if [[ "$n" == *@* ]]; then tr '+' '\n' <<<"${n#*@}"; else printf '%s\n' "${VCOLL_LIST[@]}"; fi
}
if [ -z "$PLUGIN" ]; then
  if [ -n "${NET_GDR_BUILD_DIR:-}" ]; then PLUGIN="$NET_GDR_BUILD_DIR/lib/libnccl-net-gdr.so"
  else PLUGIN="$HERE/../build/lib/libnccl-net-gdr.so"; fi
fi
if [ "$DRY" -eq 0 ]; then
  [ -f "$PLUGIN" ] || die "no plugin at $PLUGIN (--plugin)"
  PLUGIN="$(cd "$(dirname "$PLUGIN")" && pwd)/$(basename "$PLUGIN")"
  [ -d "$NT_DIR" ] || die "no directory $NT_DIR"
  [ -d "$NT_DIR/build" ] && [ ! -e "$NT_DIR/all_reduce_perf_mpi" ] && [ ! -e "$NT_DIR/all_reduce_perf" ] && NT_DIR="$NT_DIR/build"
  mkdir -p "$OUT"
  OUT="$(cd "$OUT" && pwd)"
fi
IFS=',' read -r -a COLLS <<<"$COLLECTIVES"
IFS=',' read -r -a VCOLL_LIST <<<"$VCOLLS"
for c in "${COLLS[@]}" "${VCOLL_LIST[@]}"; do [[ "$c" =~ ^[a-z_]+$ ]] || die "bad collective '$c'"; done
ALL_VCOLLS=("${VCOLL_LIST[@]}")
for v in "${VARIANTS[@]}" "${NVARIANTS[@]}"; do while read -r c; do ALL_VCOLLS+=("$c"); done < <(vcolls "$v"); done

bin_for() {  # nccl-tests binary of a collective: NAME_perf_mpi, else NAME_perf
  if [ -x "$NT_DIR/$1_perf_mpi" ] || [ "$DRY" -eq 1 ]; then echo "$NT_DIR/$1_perf_mpi"
  elif [ -x "$NT_DIR/$1_perf" ]; then echo "$NT_DIR/$1_perf"
  else return 1; fi
}
if [ "$DRY" -eq 0 ]; then
  for c in "${COLLS[@]}" "${ALL_VCOLLS[@]}"; do bin_for "$c" >/dev/null || die "no $c binary in $NT_DIR"; done
fi

LDP="${NCCL_LIB:+$NCCL_LIB${LD_LIBRARY_PATH:+:}}${LD_LIBRARY_PATH:-}"
COMMON=(NCCL_NVLS_ENABLE=0 NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,NET" NCCL_TESTS_DEVICE=0)
[ -n "$LDP" ] && COMMON+=("LD_LIBRARY_PATH=$LDP")
SOCKET_ENV=(NCCL_NET=Socket NCCL_NET_PLUGIN=none)
GDR_ENV=(NCCL_NET=GDR "NCCL_NET_PLUGIN=$PLUGIN" GDRNET_TRANSPORT=tcp)
read -r -a MPIRUN_ARR <<<"$MPIRUN"
T0=$(date +%s)
FAILED=0
NRUNS=0

elapsed() { echo $(( $(date +%s) - T0 )); }
fits() {  # fits EST_SECONDS: is there room left in the budget?
  [ "$DRY" -eq 1 ] && return 0
  [ $(( $(elapsed) + $1 )) -le "$BUDGET" ]
}

# run_nt LOG TRANSPORT(socket|gdr) COLL "EXTRA_ENV..." NT_ARGS...
run_nt() {
  local log="$1" tp="$2" coll="$3" extra="$4"; shift 4
  local bin envs=() e rc=0
  bin="$(bin_for "$coll")"
  envs=("${COMMON[@]}")
  if [ "$tp" = socket ]; then envs+=("${SOCKET_ENV[@]}"); else envs+=("${GDR_ENV[@]}"); fi
  if [ -n "$extra" ]; then IFS=',' read -r -a e <<<"$extra"; envs+=("${e[@]}"); fi
  local cmd=("${MPIRUN_ARR[@]}" --bind-to none
             -np 1 env NCCL_HOSTID=hostA "${envs[@]}" "$bin" "$@" -g 1 -c 1 :
             -np 1 env NCCL_HOSTID=hostB "${envs[@]}" "$bin" "$@" -g 1 -c 1)
  NRUNS=$((NRUNS + 1))
  if [ "$DRY" -eq 1 ]; then printf '%q ' "${cmd[@]}"; echo " > $log"; return 0; fi
  mkdir -p "$(dirname "$log")"
  {
    local net=GDR; [ "$tp" = socket ] && net=Socket
    echo "# run-matrix: case=$coll collective=$coll transport=$tp host=$(hostname) date=$(date -u +%FT%TZ) env: NCCL_NET=$net ${extra//,/ }"
    printf '# command: '; printf '%q ' "${cmd[@]}"; echo
  } >"$log"
  timeout "$RUN_TIMEOUT" "${cmd[@]}" >>"$log" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then echo "# exit status $rc" >>"$log"; FAILED=$((FAILED + 1)); fi
  printf '%5ss  %-58s exit %d\n' "$(elapsed)" "${log#"$OUT"/}" "$rc"
}

SIZES=(-b 8 -e 128M -f 4 -n "$ITERS" -w "$WARMUP")
MPS_STARTED=0
if [ "$MPS" -eq 1 ] && [ "$DRY" -eq 0 ]; then
  if ! pgrep -x nvidia-cuda-mps >/dev/null 2>&1 && ! pgrep -f nvidia-cuda-mps-control >/dev/null 2>&1; then
    nvidia-cuda-mps-control -d && MPS_STARTED=1
  fi
fi
cleanup() { if [ "$MPS_STARTED" -eq 1 ]; then echo quit | nvidia-cuda-mps-control || true; fi; }
trap cleanup EXIT

{
  echo "# $PROG $(date -u +%FT%TZ) host $(hostname) cores $(nproc)"
  echo "# plugin $PLUGIN"
  echo "# variants: ${VARIANTS[*]:-(none)}; nccl variants: ${NVARIANTS[*]:-(none)}; reps $REPS"
} | if [ "$DRY" -eq 0 ]; then tee "$OUT/session.txt"; else cat; fi

# 1. main matrix
for r in $(seq 1 "$REPS"); do
  for c in "${COLLS[@]}"; do
    for tp in socket gdr; do run_nt "$OUT/main/$tp/r$r/$c.log" "$tp" "$c" "" "${SIZES[@]}"; done
  done
done
# 2. 8-byte latency
for r in $(seq 1 "$REPS"); do
  for tp in socket gdr; do run_nt "$OUT/latency/$tp/r$r/all_reduce.log" "$tp" all_reduce "" -b 8 -e 8 -n 1000 -w 100; done
done
# 3. KV-cache transfer (before the variants: it is part of the comparison, they are extras)
run_kv() {  # run_kv TRANSPORT LOG [SCRIPT ARGS...]: kv_transfer.py (or SCRIPT) on two torchrun node ranks
  local tp="$1" log="$2" envs=() tr pids=() rc=0 port script="kv_transfer.py"
  shift 2
  [ $# -gt 0 ] && { script="$1"; shift; }
  envs=("${COMMON[@]}")
  if [ "$tp" = socket ]; then envs+=("${SOCKET_ENV[@]}"); else envs+=("${GDR_ENV[@]}"); fi
  if [ -n "$TORCHRUN" ]; then read -r -a tr <<<"$TORCHRUN"
  elif command -v torchrun >/dev/null 2>&1; then tr=(torchrun)
  else tr=(python3 -m torch.distributed.run); fi
  port=$(( 29500 + RANDOM % 1000 ))
  local kvargs=(); [ -n "$KV_ARGS" ] && read -r -a kvargs <<<"$KV_ARGS"
  [ "$script" = kv_transfer.py ] || kvargs=("$@")
  local dev=() json=()
  [ "$script" = kv_transfer.py ] && dev=(--device 0)  # ddp_step.py takes LOCAL_RANK's device: 0 on each node
  NRUNS=$((NRUNS + 1))
  if [ "$DRY" -eq 1 ]; then
    for n in 0 1; do
      printf 'env NCCL_HOSTID=host%s ' "$([ $n -eq 0 ] && echo A || echo B)"; printf '%q ' "${envs[@]}" "${tr[@]}" \
        --nnodes=2 --node_rank=$n --nproc_per_node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port \
        "$HERE/pytorch/$script" "${dev[@]}" "${kvargs[@]}"; echo " &"
    done
    return 0
  fi
  mkdir -p "$(dirname "$log")"
  echo "# ${script%.py} transport=$tp date=$(date -u +%FT%TZ)" >"$log"
  for n in 0 1; do
    local h=A; [ $n -eq 1 ] && h=B
    [ "$script" = kv_transfer.py ] && json=(--json "$log.rank$n.json")
    timeout "$RUN_TIMEOUT" env NCCL_HOSTID=host$h "${envs[@]}" "${tr[@]}" --nnodes=2 --node_rank=$n --nproc_per_node=1 \
      --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:$port "$HERE/pytorch/$script" "${dev[@]}" "${json[@]}" \
      "${kvargs[@]}" >"$log.node$n" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  cat "$log.node0" "$log.node1" >>"$log"
  if [ "$rc" -ne 0 ]; then echo "# exit status $rc" >>"$log"; FAILED=$((FAILED + 1)); fi
  printf '%5ss  %-58s exit %d\n' "$(elapsed)" "${log#"$OUT"/}" "$rc"
}
if [ "$KV" -eq 1 ]; then
  for tp in socket gdr; do
    if ! fits 40; then echo "# skipped kv_transfer $tp: time budget"; continue; fi
    run_kv "$tp" "$OUT/kv/$tp.log"
  done
fi
# 4. DDP training steps (with --ddp)
if [ "$DDP" -eq 1 ]; then
  for tp in socket gdr; do
    if ! fits 40; then echo "# skipped ddp_step $tp: time budget"; continue; fi
    run_kv "$tp" "$OUT/ddp/$tp.log" ddp_step.py --steps 20
  done
fi
# 5. plugin variants
for r in $(seq 1 "$REPS"); do
  for v in "${VARIANTS[@]}"; do
    mapfile -t vc < <(vcolls "$v")
    if ! fits $(( ${#vc[@]} * 10 )); then echo "# skipped variant $v rep $r: time budget"; continue; fi
    for c in "${vc[@]}"; do run_nt "$OUT/variant/$(vname "$v")/r$r/$c.log" gdr "$c" "${v#*:}" "${SIZES[@]}"; done
  done
done
# 6. NCCL settings on both transports
for r in $(seq 1 "$REPS"); do
  for v in "${NVARIANTS[@]}"; do
    mapfile -t vc < <(vcolls "$v")
    if ! fits $(( ${#vc[@]} * 20 )); then echo "# skipped NCCL variant $v rep $r: time budget"; continue; fi
    for c in "${vc[@]}"; do
      for tp in socket gdr; do run_nt "$OUT/nccl/$(vname "$v")/$tp/r$r/$c.log" "$tp" "$c" "${v#*:}" "${SIZES[@]}"; done
    done
  done
done
[ "$DRY" -eq 1 ] && { echo "# $NRUNS runs"; exit 0; }

# ---- summary ----------------------------------------------------------------
SUM_RC=0
python3 - "$OUT" "$FAILED" <<'PYEOF' | tee "$OUT/summary.txt" || SUM_RC=$?
import glob, json, os, re, statistics, sys
out, failed = sys.argv[1], int(sys.argv[2])
row_re = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")
bad = []

def parse(path):
    rows, net = {}, None
    want = None
    with open(path, errors="replace") as f:
        for line in f:
            m = re.search(r"env: NCCL_NET=(\S+)", line)
            if m and line.startswith("# run-matrix:"):
                want = m.group(1)
            m = re.search(r"Using network (\S+)", line)
            if m:
                net = m.group(1)
            m = row_re.match(line)
            if m and not line.lstrip().startswith("#"):
                size = int(m.group(1))
                rows[size] = {"time": float(m.group(3)), "busbw": float(m.group(5)), "wrong": m.group(6),
                              "time_ip": float(m.group(7)), "busbw_ip": float(m.group(9)), "wrong_ip": m.group(10)}
    ok = bool(rows) and all(r["wrong"] in ("0", "N/A") and r["wrong_ip"] in ("0", "N/A") for r in rows.values())
    if not ok:
        bad.append("%s: %s" % (os.path.relpath(path, out), "no rows" if not rows else "#wrong > 0"))
    if want and net and want != net:
        bad.append("%s: asked for %s, NCCL used %s" % (os.path.relpath(path, out), want, net))
    return rows

def collect(pattern):
    return [parse(p) for p in sorted(glob.glob(os.path.join(out, pattern)))]

def stat(runs, size, key):
    xs = [r[size][key] for r in runs if size in r]
    return (statistics.median(xs), min(xs), max(xs)) if xs else None

def fmt(s, unit=""):
    return "%8.2f%s [%.2f..%.2f]" % (s[0], unit, s[1], s[2]) if s else "%8s" % "-"

def ratio(a, b):
    return "%5.2fx" % (a[0] / b[0]) if a and b and b[0] else "    -"

M = 1 << 20
print("# busbw GB/s, out-of-place, median [min..max] over the reps; ratio = GDR / Socket")
print("%-15s %6s  %-24s %-24s %s" % ("collective", "size", "Socket", "GDR (plugin TCP)", "ratio"))
colls = sorted({os.path.basename(p)[:-4] for p in glob.glob(os.path.join(out, "main/*/r*/*.log"))})
for c in colls:
    s, g = collect("main/socket/r*/%s.log" % c), collect("main/gdr/r*/%s.log" % c)
    for size in (512 * 1024, 32 * M, 128 * M):
        key = "time" if size == 512 * 1024 else "busbw"
        a, b = stat(g, size, key), stat(s, size, key)
        r = ratio(b, a) if key == "time" else ratio(a, b)  # time: Socket/GDR = busbw ratio
        label = "%dK time us" % (size >> 10) if key == "time" else "%dM" % (size >> 20)
        print("%-15s %6s  %-24s %-24s %s" % (c, label, fmt(b), fmt(a), r))
print()
s, g = collect("latency/socket/r*/all_reduce.log"), collect("latency/gdr/r*/all_reduce.log")
print("# 8-B all_reduce time (us), out-of-place / in-place, median [min..max]")
for name, runs in (("Socket", s), ("GDR", g)):
    print("%-8s %s / %s" % (name, fmt(stat(runs, 8, "time")), fmt(stat(runs, 8, "time_ip"))))
for kind in ("variant", "nccl"):
    dirs = sorted(glob.glob(os.path.join(out, kind, "*")))
    if not dirs:
        continue
    print()
    print("# %s: busbw GB/s at 32M / 128M (median) against the same session's defaults" % (
        "plugin variants (GDR only)" if kind == "variant" else "NCCL settings on both transports"))
    for d in dirs:
        name = os.path.basename(d)
        for c in sorted({os.path.basename(p)[:-4] for p in glob.glob(os.path.join(d, "**/*.log"), recursive=True)}):
            base_g, base_s = collect("main/gdr/r*/%s.log" % c), collect("main/socket/r*/%s.log" % c)
            if kind == "variant":
                v = collect("variant/%s/r*/%s.log" % (name, c))
                for sz in (32 * M, 128 * M):
                    print("%-12s %-15s %4dM  %s (default %s)  %s" % (
                        name, c, sz >> 20, fmt(stat(v, sz, "busbw")), fmt(stat(base_g, sz, "busbw")),
                        ratio(stat(v, sz, "busbw"), stat(base_g, sz, "busbw"))))
                print("%-12s %-15s  512K time %s us (default %s)" % (
                    name, c, fmt(stat(v, 512 * 1024, "time")), fmt(stat(base_g, 512 * 1024, "time"))))
            else:
                vs, vg = collect("nccl/%s/socket/r*/%s.log" % (name, c)), collect("nccl/%s/gdr/r*/%s.log" % (name, c))
                for sz in (32 * M, 128 * M):
                    print("%-12s %-15s %4dM  Socket %s (default %s)  GDR %s (default %s)  GDR/Socket %s" % (
                        name, c, sz >> 20, fmt(stat(vs, sz, "busbw")), fmt(stat(base_s, sz, "busbw")),
                        fmt(stat(vg, sz, "busbw")), fmt(stat(base_g, sz, "busbw")),
                        ratio(stat(vg, sz, "busbw"), stat(vs, sz, "busbw"))))
                k = 512 * 1024
                print("%-12s %-15s  512K time  Socket %s us (default %s)  GDR %s us (default %s)" % (
                    name, c, fmt(stat(vs, k, "time")), fmt(stat(base_s, k, "time")), fmt(stat(vg, k, "time")),
                    fmt(stat(base_g, k, "time"))))
kv = {}
for tp in ("socket", "gdr"):
    # the JSON comes from global rank 0, which the c10d rendezvous may give to either node (node n's file is .rankN)
    js = sorted(glob.glob(os.path.join(out, "kv", tp + ".log.rank[01].json")))
    p = js[0] if js else ""
    if p:
        with open(p) as f:
            kv[tp] = json.load(f)
    elif os.path.exists(os.path.join(out, "kv", tp + ".log")):
        bad.append("kv/%s.log: no result" % tp)
if kv:
    print()
    print("# kv_transfer.py (prefill -> decode), Socket vs GDR")
    for tp, d in kv.items():
        if d.get("wrong"):
            bad.append("kv/%s: %d blocks WRONG" % (tp, d["wrong"]))
        for r in d["results"]:
            print("%-7s %-8s %5d x %9d B  p50 %9.1f us  p99 %9.1f us  %7.2f GB/s  %s" % (
                "Socket" if tp == "socket" else "GDR", r["phase"], r["count"], r["bytes"], r["p50_us"], r["p99_us"],
                r["gbps"], "ok" if not d.get("wrong") else "WRONG"))
ddp = {}
for tp in ("socket", "gdr"):
    p = os.path.join(out, "ddp", tp + ".log")
    if not os.path.exists(p):
        continue
    with open(p, errors="replace") as f:
        t = f.read()
    m = re.search(r"mean step time ([\d.]+) ms over (\d+) steps.*?([\d.]+) GB/s", t)
    same = re.search(r"parameters identical on all ranks: (\S+)", t)
    if not m or not same or same.group(1) != "yes":
        bad.append("ddp/%s.log: %s" % (tp, "parameters differ" if same else "no result"))
    if m:
        ddp[tp] = (float(m.group(1)), int(m.group(2)), float(m.group(3)))
if ddp:
    print()
    print("# ddp_step.py (DDP training step, 2 ranks), Socket vs GDR")
    for tp, (ms, n, gbps) in ddp.items():
        print("%-7s mean step %8.2f ms over %d steps, %6.2f GB/s of gradients" % (
            "Socket" if tp == "socket" else "GDR", ms, n, gbps))
    if len(ddp) == 2:
        print("%-7s %.2fx faster per step" % ("ratio", ddp["socket"][0] / ddp["gdr"][0]))
print()
if failed:
    bad.append("%d run(s) exited non-zero (see '# exit status' in their logs)" % failed)
print("# problems: %s" % ("; ".join(bad) if bad else "none (every run complete, #wrong 0, the network asked for)"))
sys.exit(1 if bad else 0)
PYEOF
for r in $(seq 1 "$REPS"); do
  "$HERE/summarize" "$OUT/main/gdr/r$r" --baseline "$OUT/main/socket/r$r" -q >"$OUT/summary-main-r$r.md" 2>&1 || true
done
echo "# total $(elapsed) s, $NRUNS runs; summary: $OUT/summary.txt (per-size tables: $OUT/summary-main-r*.md)"
exit "$SUM_RC"
