"""py-spy raw stacks inside timed_loop: share of samples by innermost fullpipe frame (with line), and by the
innermost frame overall, for samples not inside the user's f."""
import collections, re, sys
path, top = sys.argv[1], int(sys.argv[2])
own, leaf, func = collections.Counter(), collections.Counter(), collections.Counter()
total = 0
for line in open(path):
    stack, _, k = line.rstrip("\n").rpartition(" ")
    frames = stack.split(";")
    if not any(fr.startswith("timed_loop ") for fr in frames):
        continue
    k = int(k); total += k
    if any(re.match(r"f \(.*p36[78]", fr) for fr in frames):
        func["(the user's f)"] += k
        continue
    fpf = [fr for fr in frames if "fullpipe/" in fr]
    if fpf:
        own[fpf[-1][:110]] += k
        func[re.sub(r":\d+\)$", ")", fpf[-1])[:100]] += k
    leaf[frames[-1][:100]] += k
print(total, "samples")
for title, c in (("by fullpipe function", func), ("by fullpipe line", own), ("leaf", leaf)):
    print("==", title)
    for key, v in c.most_common(top):
        print(f"{100 * v / total:6.2f}%  {key}")
