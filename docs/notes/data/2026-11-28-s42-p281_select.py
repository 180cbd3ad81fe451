import random
from fullpipe.kernels import hopper_gemm as hg
sms = 132
def shapes():
    rng = random.Random(268); out = []
    while len(out) < 44:
        m, n, k = rng.randint(33, 1100), rng.randrange(256, 8193, 8), rng.randrange(256, 12289, 8)
        if hg.default_build(m, n, k, sms).tile_n == 256: continue
        out.append((m, n, k, rng.random() < 0.25, rng.random() < 0.25))
    rng = random.Random(274); out2 = []
    while len(out2) < 40:
        m = rng.choice([rng.randint(33, 1100), rng.randint(1100, 6000)])
        n, k = rng.randrange(256, 8193, 8), rng.randrange(256, 12289 if False else 8193, 8)
        out2.append((m, n, k, rng.random() < 0.25, rng.random() < 0.25))
    return out + out2
def busy(m, n, k, b):
    clusters = sms // b.cluster
    t = hg.cluster_tiles(m, n, b); sl = -(-k // 64)
    skt, launched = hg.stream_k(t, clusters, sl)
    if skt == 0:
        waves = -(-t // clusters)
        return t / (waves * clusters), t, skt, launched
    return 1.0, t, skt, launched
if __name__ == "__main__":
    for m, n, k, f, w in shapes():
        b = hg.default_build(m, n, k, sms)
        u, t, skt, l = busy(m, n, k, b)
        if u < 0.8:
            print(f"{m:5d} {n:5d} {k:6d} {b.label:22s} tiles {t:4d} sk {skt:4d} launched {l:4d} busy {u:.2f}")
