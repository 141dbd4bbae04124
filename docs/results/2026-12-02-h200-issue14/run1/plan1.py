ARGS = ["-b", "8", "-e", "128M", "-f", "4", "-n", "20", "-w", "5"]
B = "/tmp/b-base/lib/libnccl-net-gdr.so"
RX = "/tmp/b-rx/lib/libnccl-net-gdr.so"
PLUGIN = B
BUDGET = 440
S = ".device/tcp2/src-base"
RUNS = []
RUNS.append({"kind": "shell", "name": "tcp-chunk", "est": 45, "timeout": 60, "grep": "", "lines": 40,
             "cmd": "python3 %s/bench/tcp-chunk --build /tmp/b-base --sizes 128K,1M --channels 2 --directions bidir "
                    "--reps 2 --iters 3000 --modes raw,plugin 2>&1 | grep -v '^#' ; "
                    "python3 %s/bench/tcp-chunk --build /tmp/b-base --sizes 1M --channels 4 --directions bidir "
                    "--reps 1 --iters 3000 --modes raw,plugin 2>&1 | grep -v '^#'" % (S, S)})
RUNS.append({"kind": "shell", "name": "perf-bidir", "est": 30, "timeout": 60, "grep": "", "lines": 20,
             "cmd": "for n in 4 8 16; do echo NSOCKS=$n; GDRNET_TCP_NSOCKS=$n /tmp/b-base/bin/gdrnet-perf --local "
                    "--transport tcp --bidir --sizes 1M:4M:4 --iters 300 --inflight 8 2>&1 | grep -E '^ +[0-9]'; done"})
for r in (1, 2):
    for c in ("all_reduce", "all_gather", "reduce_scatter", "sendrecv"):
        RUNS.append({"name": "main-socket-%s-r%d" % (c, r), "tp": "socket", "coll": c})
        RUNS.append({"name": "main-gdr-%s-r%d" % (c, r), "tp": "gdr", "coll": c})
PROF = ["-b", "128M", "-e", "128M", "-n", "200", "-w", "5"]
RUNS.append({"name": "prof-socket", "tp": "socket", "coll": "all_reduce", "args": PROF, "sample": True, "est": 15})
RUNS.append({"name": "prof-gdr", "tp": "gdr", "coll": "all_reduce", "args": PROF, "sample": True, "est": 10})
RUNS.append({"name": "prof-gdr-speed400", "tp": "gdr", "coll": "all_reduce", "args": PROF, "sample": True,
             "env": ["GDRNET_TCP_SPEED=400000"], "est": 10})
LAT = ["-b", "8", "-e", "8", "-n", "1000", "-w", "100"]
for r in (1, 2):
    RUNS.append({"name": "lat-socket-r%d" % r, "tp": "socket", "coll": "all_reduce", "args": LAT})
    RUNS.append({"name": "lat-gdr-r%d" % r, "tp": "gdr", "coll": "all_reduce", "args": LAT})
    RUNS.append({"name": "lat-rx-r%d" % r, "tp": "gdr", "coll": "all_reduce", "args": LAT, "plugin": RX})
VAR = [("rx", [], RX, ("all_reduce", "sendrecv")),
       ("speed400", ["GDRNET_TCP_SPEED=400000"], B, ("all_reduce", "sendrecv", "all_gather")),
       ("speed150", ["GDRNET_TCP_SPEED=150000"], B, ("all_reduce", "sendrecv")),
       ("ns8", ["GDRNET_TCP_NSOCKS=8"], B, ("all_reduce", "sendrecv")),
       ("ns2", ["GDRNET_TCP_NSOCKS=2"], B, ("all_reduce", "sendrecv")),
       ("spin0", ["GDRNET_TCP_SPIN_US=0"], B, ("all_reduce", "sendrecv")),
       ("spin0lowat", ["GDRNET_TCP_SPIN_US=0", "GDRNET_TCP_RCVLOWAT=128K"], B, ("all_reduce", "sendrecv")),
       ("minchunk128", ["GDRNET_TCP_MIN_CHUNK=128K"], B, ("sendrecv",)),
       ("speed400ns2", ["GDRNET_TCP_SPEED=400000", "GDRNET_TCP_NSOCKS=2"], B, ("all_reduce",)),
       ("speed400spin0", ["GDRNET_TCP_SPEED=400000", "GDRNET_TCP_SPIN_US=0"], B, ("all_reduce",))]
NV = [("thr512", ["NCCL_NTHREADS=512"], ("all_reduce", "sendrecv")),
      ("p2p512k", ["NCCL_P2P_NET_CHUNKSIZE=524288"], ("sendrecv",))]
for r in (1, 2):
    for n, env, pl, colls in VAR:
        for c in colls:
            RUNS.append({"name": "var-%s-%s-r%d" % (n, c, r), "group": "var-%s-%s" % (n, c), "tp": "gdr", "coll": c,
                         "env": env, "plugin": pl})
    for n, env, colls in NV:
        for c in colls:
            for tp in ("socket", "gdr"):
                RUNS.append({"name": "nccl-%s-%s-%s-r%d" % (n, tp, c, r), "group": "nccl-%s-%s-%s" % (n, tp, c),
                             "tp": tp, "coll": c, "env": env})
for it in RUNS:
    it.setdefault("group", it["name"].rsplit("-r", 1)[0])
