import re,glob,os,sys,statistics,json
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)")
def parse(p):
    t=open(p,errors='replace').read()
    protos={}
    for m in re.finditer(r"NCCL INFO (\w+): (\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo..Hi\}=\{(\d+)..(\d+)\}",t):
        protos[int(m.group(2))]="%s/%s/%d"%(m.group(3),m.group(4),int(m.group(6))-int(m.group(5))+1)
    t=re.sub(r"[A-Za-z][\w.-]*:\d+:\d+ \[\d+\] NCCL INFO [^\n]*\n","",t)
    rows={}
    for line in t.split("\n"):
        m=ROW.match(line)
        if m and not line.lstrip().startswith('#'):
            rows[int(m.group(1))]={"time":float(m.group(3)),"busbw":float(m.group(5)),"wrong":m.group(6),"time_ip":float(m.group(7)),"busbw_ip":float(m.group(9)),"wrong_ip":m.group(10)}
    ok=bool(rows) and all(r["wrong"] in ("0","N/A") and r["wrong_ip"] in ("0","N/A") for r in rows.values())
    net=re.search(r"Using network (\S+)",t)
    cpu=re.search(r"# cpu (.*)",t)
    return {"rows":rows,"protos":protos,"ok":ok,"net":net.group(1) if net else None,"cpu":cpu.group(1) if cpu else None}
if __name__=="__main__":
    d=sys.argv[1]
    res={}
    for p in sorted(glob.glob(d+"/logs/*.log")):
        n=os.path.basename(p)[:-4]
        res[n]=parse(p)
    groups={}
    for n,r in res.items():
        g=re.sub(r"-r\d+$","",n); groups.setdefault(g,[]).append(r)
    for g,rs in groups.items():
        parts=[]
        for sz,k,lab in ((8,"time","8B"),(131072,"time","128K"),(524288,"time","512K"),(2097152,"busbw","2M"),(8388608,"busbw","8M"),(33554432,"busbw","32M"),(134217728,"busbw","128M")):
            xs=[r["rows"][sz][k] for r in rs if sz in r["rows"]]
            if xs: parts.append("%s %.2f[%.2f..%.2f]"%(lab,statistics.median(xs),min(xs),max(xs)))
        bad=sum(1 for r in rs if not r["ok"])
        pr=rs[0]["protos"]
        pp=" ".join("%s:%s"%(k,pr[k]) for k in (8,131072,524288,2097152,33554432) if k in pr)
        print("%-30s n=%d %s%s  | %s"%(g,len(rs),"  ".join(parts)," BAD%d"%bad if bad else "",pp))
