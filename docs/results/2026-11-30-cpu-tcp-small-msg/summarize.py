import json,statistics,sys
d0=sys.argv[1]
for v in ['before','after','after-eager']:
    rows={}
    for rep in range(1,int(sys.argv[2]) if len(sys.argv)>2 else 4):
        d=json.load(open(f'{d0}/perf-{v}-{rep}.json'))
        for r in d['rows']:
            rows.setdefault(r['bytes'],[]).append(r)
    print(v)
    for b in sorted(rows):
        rs=rows[b]
        p=[r['p50_us'] for r in rs]
        print(f"  {b:6d} p50 {statistics.median(p):6.2f} [{min(p):.2f}..{max(p):.2f}]  avg {statistics.median([r['avg_us'] for r in rs]):6.2f}  p99 {statistics.median([r['p99_us'] for r in rs]):6.2f} msgs/s {statistics.median([r['msgs_per_s'] for r in rs]):8.0f}")
