"""py-spy raw: the main thread's samples inside the model's f, when called by fullpipe's plain run (under plain's
_call) and when called by compute alone (under alone_loop): per line of f and of torch below it, µs a call."""
import collections, re, sys
path, runs, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ctx = {"plain": collections.Counter(), "alone": collections.Counter()}
tot = collections.Counter()
for ln in open(path):
    stack, _, k = ln.rstrip("\n").rpartition(" ")
    k = int(k)
    frames = stack.split(";")
    names = [f.split(" (")[0] for f in frames]
    if "timed_loop" not in names:
        continue
    which = "plain" if "_call" in names else "alone" if "alone_loop" in names else None
    if which is None:
        tot["other"] += k
        continue
    tot[which] += k
    # the innermost frame at or below f
    i = max((j for j, n in enumerate(names) if n == "f"), default=None)
    leaf = re.sub(r"\((/[^)]*/)?(site-packages/|src/)?", "(", frames[-1])[:100]
    ctx[which][leaf if i is not None else "(outside f) " + leaf] += k
us = lambda v: 1e3 * v / (runs * calls)  # 1000 Hz: a sample is 1 ms
print({k: f"{us(v):.0f} us a call" for k, v in tot.items()})
for which, c in ctx.items():
    print("==", which)
    for key, v in c.most_common(18):
        print(f"   {us(v):7.1f} us  {key}")
