"""py-spy raw stacks, caller's thread inside timed_loop: the host time of a run outside its loop (set-up before the
first batch, and after), by fullpipe call chain below run_batches; us per run (1000 Hz)."""
import collections, re, sys
path, runs, top = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
PHASES = (("plain trial", "run_small_list"), ("loop", "StreamPipeline._eager_loop"),
          ("GPU tail", "StreamPipeline._drain_while_finishing"), ("GPU tail", "StreamPipeline._finish_run"))
phase, chain, line = collections.Counter(), collections.Counter(), collections.Counter()
total = 0
for ln in open(path):
    stack, _, k = ln.rstrip("\n").rpartition(" ")
    frames = stack.split(";")
    if not any(fr.startswith("timed_loop ") for fr in frames):
        continue
    k = int(k); total += k
    names = [fr.split(" (")[0] for fr in frames]
    hit = next((p for p, f in PHASES if f in names), None)
    if hit:
        phase[hit] += k
        continue
    phase["set-up and after"] += k
    fpf = [fr for fr in frames if "fullpipe/" in fr]
    short = [re.sub(r"\(fullpipe/(\w+/)*", "(", f).replace("StreamPipeline.", "") for f in fpf]
    # the chain below _run_list_pipelined/_run_small_list, with _execute's line (before or after the loop)
    chain[" > ".join(re.sub(r" \(.*", "", s) if "_execute" not in s else s for s in short[3:6])] += k
    if fpf:
        line[short[-1]] += k
us = lambda v: 1e3 * v / runs
print(total, "samples;", f"{us(total):.0f} us per run")
for title, c, n in (("phase", phase, 10), ("set-up/after by chain", chain, top), ("by line", line, top)):
    print("==", title)
    for key, v in c.most_common(n):
        print(f"{us(v):8.1f} us  {100 * v / total:5.2f}%  {key[:160]}")
