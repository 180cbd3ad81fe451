"""Aggregate py-spy raw (collapsed) stacks: per sample, the innermost frame inside
fullpipe (the time fullpipe's own code spends, C calls included, as py-spy attributes
them to the calling line) and the innermost frame overall. argv: raw file, top n."""
import collections, re, sys

path, top = sys.argv[1], int(sys.argv[2])
total = 0
own_line, own_func, leaf, incl = (collections.Counter() for _ in range(4))
for line in open(path):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    n = int(n); total += n
    frames = stack.split(";")
    leaf[frames[-1][:110]] += n
    fp = [f for f in frames if "fullpipe/" in f and "/data/" not in f]
    for f in set(re.sub(r":\d+\)$", ")", f) for f in fp):
        incl[f[:110]] += n
    # fullpipe's innermost frame whose callees are not the user's compute
    user = next((i for i, f in enumerate(frames) if "s32-p222" in f and "<module>" not in f and i > 0
                 and any("fullpipe/" in g for g in frames[:i])), None)
    inner = [f for f in (frames if user is None else frames[:user]) if "fullpipe/" in f and "/data/" not in f]
    if inner and user is None:
        own_line[inner[-1][:120]] += n
        own_func[re.sub(r":\d+\)$", ")", inner[-1])[:110]] += n
print(f"{total} samples")
for title, c in (("fullpipe's innermost line, outside the user's compute", own_line),
                 ("... by function", own_func), ("inclusive, fullpipe functions", incl), ("leaf frames", leaf)):
    print(f"== {title}")
    for k, v in c.most_common(top):
        print(f"  {100 * v / total:5.1f}%  {k}")
