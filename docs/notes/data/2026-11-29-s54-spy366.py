"""Aggregate py-spy raw stacks (--threads --idle) of p366: main-thread samples inside timed_loop, as a tree of
fullpipe frames below run_batches (depth-limited), and the innermost fullpipe function of samples outside the loop."""
import collections, re, sys

path, depth = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 5
tree, own = collections.Counter(), collections.Counter()
total = 0
LOOP = ("_threaded_loop", "_eager_loop", "_grouped_loop")
for line in open(path):
    stack, _, k = line.rstrip("\n").rpartition(" ")
    frames = stack.split(";")
    if not any(f.startswith("timed_loop ") for f in frames):
        continue
    k = int(k); total += k
    names = [re.sub(r" \(.*", "", f) for f in frames]
    short = [n.rsplit(".", 1)[-1] for n in names]
    try:
        i = short.index("run_batches")
    except ValueError:
        tree["(outside run_batches)"] += k
        continue
    fp = [names[j] for j in range(i, len(frames)) if "fullpipe/" in frames[j]]
    for d in range(1, min(depth, len(fp)) + 1):
        tree[" > ".join(fp[:d])] += k
    if not any(n.rsplit(".", 1)[-1] in LOOP for n in fp):
        own[fp[-1] + "  <-  " + (fp[-2] if len(fp) > 1 else "")] += k
print(f"{total} samples in timed_loop (main thread)")
for key in sorted(tree, key=lambda s: (s.split(" > ")[:-1], -tree[s])):
    pass
# print the tree in order of share, nested
def children(prefix):
    d = prefix.count(" > ") + 1 if prefix else 0
    return sorted([s for s in tree if s.startswith(prefix + (" > " if prefix else "")) and s.count(" > ") == d],
                  key=lambda s: -tree[s])
def show(prefix, indent):
    for s in children(prefix):
        if tree[s] / total < 0.002:
            continue
        print(f"{100 * tree[s] / total:6.2f}%  {'  ' * indent}{s.rsplit(' > ', 1)[-1]}")
        show(s, indent + 1)
show("", 0)
print("== outside the loop: innermost fullpipe function <- its caller")
for key, v in own.most_common(40):
    print(f"{100 * v / total:6.2f}%  {key}")
