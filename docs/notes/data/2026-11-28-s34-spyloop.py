"""py-spy raw stacks restricted to those under a given frame (e.g. 'p230.py:21'): inclusive
share of each function and self share of each line, in % of those samples."""
import collections, re, sys
path, marker, top = sys.argv[1], sys.argv[2], int(sys.argv[3])
incl, selfl = collections.Counter(), collections.Counter()
total = 0
for line in open(path):
    stack, _, n = line.rstrip("\n").rpartition(" ")
    n = int(n)
    frames = stack.split(";")
    idx = next((i for i, f in enumerate(frames) if marker in f), None)
    if idx is None:
        continue
    total += n
    fr = frames[idx + 1:]
    for f in set(re.sub(r":\d+\)$", ")", f) for f in fr):
        incl[f[:100]] += n
    selfl[(fr[-1] if fr else "(loop)")[:110]] += n
print(f"{total} samples under {marker}")
print("== inclusive"); [print(f"  {100*v/total:5.1f}%  {k}") for k, v in incl.most_common(top)]
print("== self (leaf line)"); [print(f"  {100*v/total:5.1f}%  {k}") for k, v in selfl.most_common(top)]
