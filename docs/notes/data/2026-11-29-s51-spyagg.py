"""Aggregate py-spy raw (collapsed) stacks from `--gil` runs: each sample is the GIL holder's stack. Classified:
inside the user's compute (workloads.py f); fullpipe's own (innermost fullpipe frame, outside the compute);
other. argv: raw file, top n."""
import collections, re, sys

path, top = sys.argv[1], int(sys.argv[2])
total = 0
cls, own_func, own_line, other = (collections.Counter() for _ in range(4))
for line in open(path):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    n = int(n); total += n
    frames = stack.split(";")
    if any("workloads.py:" in f and re.match(r"\s*f \(", f) for f in frames) or any(
            re.search(r"^f \(.*workloads\.py", f) for f in frames):
        cls["compute (user's f)"] += n
        continue
    inner = [f for f in frames if "fullpipe/" in f and "experiments" not in f]
    if inner:
        cls["fullpipe own"] += n
        own_func[re.sub(r":\d+\)$", ")", inner[-1])[:110]] += n
        own_line[inner[-1][:120]] += n
    else:
        cls["other"] += n
        other[frames[-1][:110]] += n
print(f"{total} samples")
for k, v in cls.most_common():
    print(f"  {100 * v / total:5.1f}%  {k}")
for title, c in (("fullpipe own, by function", own_func), ("fullpipe own, by line", own_line), ("other leaves", other)):
    print(f"== {title}")
    for k, v in c.most_common(top):
        print(f"  {100 * v / total:5.1f}%  {k}")
