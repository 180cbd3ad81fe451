import csv, sys, collections
rows = list(csv.DictReader(l for l in open(sys.argv[1]) if not l.startswith("==")))
by = collections.OrderedDict()
for r in rows:
    name = r["Kernel Name"]
    if "elementwise" in name or "fill" in name or "normal" in name or "distribution" in name:
        continue
    key = (r["ID"], name.split("(")[0][:48])
    by.setdefault(key, {})[r["Metric Name"]] = r["Metric Value"]
for (i, n), m in by.items():
    print(f"{i:>4} {n:48s} " + " ".join(f"{k.split('__')[1][:28]}={v}" for k, v in m.items()))
