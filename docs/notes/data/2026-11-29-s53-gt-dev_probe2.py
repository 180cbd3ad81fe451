"""pytest plugin (-p dev_probe2): when does chr(32) stop reading as a space? Checked around each test phase and
around the fullpipe calls a pipeline test makes."""
import functools
import pytest

seen = []


def probes():
    import io, marshal
    buf = io.StringIO()
    print("a", "b", file=buf, end="")
    fresh = compile('f"{x} {y}"', "<probe>", "eval")
    return {"chr32": ord(chr(32)) == 32, "print_sep": buf.getvalue() == "a b",
            "fstring_fresh": eval(fresh, {"x": "a", "y": "b"}) == "a b",
            "marshal": marshal.loads(marshal.dumps(" ")) == "\x20" and len(marshal.loads(marshal.dumps(" "))) == 1,
            "join": " ".join(["a", "b"]) == "a b", "space_id_is_chr32": " " is chr(32)}


def check(where):
    got = probes()
    if not all(v for k, v in got.items() if k != "space_id_is_chr32") and not seen:
        seen.append(where)
        import sys
        sys.__stderr__.write(f"PROBE2 first broken after: {where}: {got}\n")
        sys.__stderr__.flush()


def wrap(owner, name):
    orig = getattr(owner, name)

    @functools.wraps(orig)
    def w(*a, **k):
        check(f"before {owner.__name__}.{name}")
        try:
            return orig(*a, **k)
        finally:
            check(f"after {owner.__name__}.{name}")
    setattr(owner, name, w)


def pytest_configure(config):
    from fullpipe.pipeline import executor, workload
    from fullpipe.cuda import pool, memory, compiler, pinned_pool, pin_cache
    for owner, name in [(workload.MixKernel, "__init__"), (workload.MixKernel, "__call__"),
                        (executor.StreamPipeline, "__init__"), (executor.StreamPipeline, "run"),
                        (executor.StreamPipeline, "_start"), (executor.StreamPipeline, "_execute"),
                        (executor.StreamPipeline, "_tune"), (executor.StreamPipeline, "_open_run"),
                        (executor.StreamPipeline, "_finish_run"), (executor.StreamPipeline, "_eager_loop"),
                        (executor.StreamPipeline, "close"), (pool.DevicePool, "__init__"), (pool.DevicePool, "close"),
                        (compiler, "compile_package_kernel")]:
        wrap(owner, name)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    check(f"before setup {item.name}")
    yield
    check(f"after setup {item.name}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    check(f"before call {item.name}")
    yield
    check(f"after call {item.name}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    check(f"before teardown {item.name}")
    yield
    check(f"after teardown {item.name}")
