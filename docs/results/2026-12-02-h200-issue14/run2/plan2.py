PROF = ["-b", "128M", "-e", "128M", "-n", "200", "-w", "5"]
ARGS = PROF
PLUGIN = "/tmp/b/lib/libnccl-net-gdr.so"
BUDGET = 60
RUNS = [{"name": "prof-socket", "tp": "socket", "coll": "all_reduce", "sample": True, "est": 15},
        {"name": "prof-gdr", "tp": "gdr", "coll": "all_reduce", "sample": True, "est": 10},
        {"name": "prof-gdr-speed400", "tp": "gdr", "coll": "all_reduce", "sample": True, "est": 10,
         "env": ["GDRNET_TCP_SPEED=400000"]}]
for it in RUNS:
    it["group"] = it["name"]
