import json, sys, glob, re, collections
d = sys.argv[1]
res = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(d + "/*.json")):
    tag = re.sub(r"-r\d+\.json$", "", f.split("/")[-1])
    r = re.search(r"-r(\d+)\.json$", f).group(1)
    err = open(f[:-5] + ".err").read()
    m = re.search(r"bandwidth, 1 thread: ([0-9.]+)", err)
    probe = float(m.group(1)) if m else float("nan")
    for b in json.load(open(f))["benchmarks"]:
        if b.get("aggregate_name") == "max":
            res[b["run_name"]][tag].append((r, b["GBps"], b["bw_frac"], probe))
for row, tags in res.items():
    print(row)
    for tag, v in tags.items():
        print(f"  {tag:<28} GBps best/round: " + " ".join(f"{g:5.2f}" for _, g, _, _ in v) +
              "   bw_frac: " + " ".join(f"{x:4.2f}" for _, _, x, _ in v) +
              f"   max GBps {max(g for _, g, _, _ in v):5.2f}  mean bw_frac {sum(x for *_, x, _ in [(0,0,z,0) for _,_,z,_ in v])/len(v):4.2f}")
