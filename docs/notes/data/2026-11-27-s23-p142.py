"""p142 (session 23): what changes in PyTorch's CUDA graph tree manager when a reduce-overhead function
runs, and what does not when an eager one runs with the manager present (a per-call sign)."""
import inspect, torch
from torch._inductor import cudagraph_trees as T
from torch._dynamo.mutation_guard import GenerationTracker
m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda().eval()
c = torch.compile(m, mode="reduce-overhead")
x = torch.randn(64, 256, device="cuda")
def mgr():
    c = T.get_obj(T.local, "tree_manager_containers").get(0)
    return c.tree_manager if c is not None else None
def snap():
    g = mgr(); n = g.current_node if g else None
    d = {"gen": GenerationTracker.generation, "mark": T.MarkStepBox.mark_step_counter,
         "cur_gen": getattr(g, "current_gen", None), "node": id(n), "state": str(getattr(g, "path_state", None)),
         "fail": getattr(g, "debug_fail_counter", None)}
    if n is not None:
        for a in ("outputs_weakrefs", "unaliased_in_all_paths", "cached_tensor_outputs", "static_output_tensors"):
            v = getattr(n, a, None)
            if isinstance(v, list) and v:
                d[a] = id(v[0])
    return d
with torch.inference_mode():
    for i in range(4):
        b = snap(); y = c(x); a = snap()
        print("compiled call", i, {k: (b.get(k), a[k]) for k in a if b.get(k) != a[k]}, flush=True)
    for i in range(3):
        b = snap(); y = m(x); a = snap()
        print("eager call", i, {k: (b.get(k), a[k]) for k in a if b.get(k) != a[k]}, flush=True)
    for i in range(3):
        b = snap(); y = c(x).float(); a = snap()
        print("compiled+float call", i, {k: (b.get(k), a[k]) for k in a if b.get(k) != a[k]}, flush=True)
    ys = []
    for i in range(3):
        b = snap(); ys.append(c(x)); a = snap()
        print("compiled call, outputs kept", i, {k: (b.get(k), a[k]) for k in a if b.get(k) != a[k]}, flush=True)
print(torch.__version__)
for name in ("CUDAGraphTreeManager._run", "CUDAGraphTreeManager.execute_node", "CUDAGraphNode.run", "CUDAGraphNode.run_graph"):
    cls, meth = name.split(".")
    try:
        src = inspect.getsource(getattr(getattr(T, cls), meth))
        print("=====", name); print(src[:3000])
    except Exception as e:
        print(name, e)
