"""pytest plugin (-p dev_probe): before test_torch_compute_zero_copy, look at what `import torch` meets."""
import sys


def pytest_runtest_setup(item):
    if item.name != "test_torch_compute_zero_copy":
        return
    s, t = "str", "tag"
    print("\nPROBE fstring", repr(f"{s} {t}"), "torch loaded before?", "torch" in sys.modules, flush=True)
    try:
        import torch  # noqa: F401
        print("PROBE import torch OK", flush=True)
        return
    except Exception as e:
        print("PROBE import torch FAILED", str(e).splitlines()[:2], flush=True)
    import inspect
    m = sys.modules.get("torch._library.infer_schema")
    if m is not None:
        def annotate(tag: str) -> None: ...
        try:
            print("PROBE infer_schema:", repr(m.infer_schema(annotate, mutates_args=())), flush=True)
        except Exception as e:
            print("PROBE infer_schema raised", e, flush=True)
        src = inspect.getsource(m.infer_schema)
        i = src.find("params.append")
        print("PROBE source:", src[i - 300:i + 900], flush=True)
    C = sys.modules.get("torch._C")
    for sch in ["annotate(str tag) -> ()", "g(Tensor x) -> Tensor"]:
        try:
            C.parse_schema(sch)
            print("PROBE parse_schema ok", sch, flush=True)
        except Exception as e2:
            print("PROBE parse_schema FAILED", sch, str(e2).splitlines()[:1], flush=True)
