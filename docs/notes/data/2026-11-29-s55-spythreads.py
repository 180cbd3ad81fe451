"""py-spy raw stacks (--threads --idle): per kind of thread (compute workers, imap's reader, the main thread, others),
samples, and the top innermost frames (file:line) and innermost fullpipe frames."""
import collections, re, sys
path, top = sys.argv[1], int(sys.argv[2])
only = sys.argv[3] if len(sys.argv) > 3 else None  # the main thread's samples only inside this function
kinds = collections.Counter()
leaf = collections.defaultdict(collections.Counter)
fpf = collections.defaultdict(collections.Counter)
for ln in open(path):
    stack, _, k = ln.rstrip("\n").rpartition(" ")
    k = int(k)
    frames = stack.split(";")
    names = [f.split(" (")[0] for f in frames]
    if "_serve" in names:
        kind = "compute worker"
    elif any("imap" in f and "fullpipe" in f for f in frames) and "<module>" not in names:
        kind = "imap reader"
    elif "<module>" in names:
        if only is not None and only not in names:
            continue
        kind = "main"
    else:
        kind = "other: " + (names[1] if len(names) > 1 else names[0])[:40]
    kinds[kind] += k
    short = lambda f: re.sub(r"\((/[^)]*/)?(site-packages/|src/)?", "(", f)[:110]
    leaf[kind][short(frames[-1])] += k
    own = [f for f in frames if "fullpipe/" in f]
    if own:
        fpf[kind][short(own[-1])] += k
total = sum(kinds.values())
for kind, n in kinds.most_common(12):
    print(f"== {kind}: {n} samples ({100 * n / total:.1f}%)")
    for key, v in leaf[kind].most_common(top):
        print(f"   leaf {100 * v / n:5.1f}%  {key}")
    for key, v in fpf[kind].most_common(top):
        print(f"   fp   {100 * v / n:5.1f}%  {key}")
