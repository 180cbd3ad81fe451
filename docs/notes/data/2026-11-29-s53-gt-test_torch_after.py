"""After fullpipe work (STEP: kernel = MixKernel built; run = a pipeline run with it; load = its module loaded only),
is `import torch` sound? f-strings checked first; on failure, torch's schema inference asked directly."""
import os
import numpy as np

STEP = os.environ.get("STEP", "run")


def test_a_fullpipe_work():
    from fullpipe.cuda.device import Device
    dev = Device(0)
    if STEP == "load":
        from fullpipe.cuda.compiler import compile_package_kernel
        compile_package_kernel("pipeline/workload.cu", device=dev)
        return
    from fullpipe.pipeline.workload import MixKernel, reference
    mix = MixKernel(dev, rounds=3)
    if STEP == "run":
        from fullpipe.cuda.memory import pinned_empty
        from fullpipe.pipeline import StreamPipeline
        x = pinned_empty(1 << 20, np.uint32)
        x[:] = np.arange(1 << 20, dtype=np.uint32)
        with StreamPipeline(mix, streams=2, chunk=65536, device=dev) as p:
            y = p.run(x)
        assert (y == reference(x, 3)).all()


def test_b_import_torch():
    s, t = "str", "tag"
    print("\nfstring", repr(f"{s} {t}"), "space", repr(" "), len(" "), flush=True)
    try:
        import torch  # noqa: F401
        print("import torch OK", flush=True)
    except Exception as e:
        print("import torch FAILED", str(e).splitlines()[:2], flush=True)
        from torch._library.infer_schema import infer_schema

        def annotate(tag: str) -> None: ...
        print("infer_schema:", repr(infer_schema(annotate, mutates_args=())), flush=True)
        import torch._C as C
        for sch in ["annotate(str tag) -> ()", "g(Tensor x) -> Tensor"]:
            try:
                C.parse_schema(sch)
                print("parse_schema ok", sch, flush=True)
            except Exception as e2:
                print("parse_schema FAILED", sch, str(e2).splitlines()[:1], flush=True)
        raise
