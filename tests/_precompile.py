"""Fill the test run's cubin cache (FULLPIPE_CACHE_DIR) with every kernel build the CPU
tests compile for sm_90a, in the order the tests reach them. Run
by tests/conftest.py as a child process while the tests run: CI's two cores then
compile at once (the suite is dominated by kernel compiles). A test that needs a
kernel first compiles it itself; the cache's writes are atomic, so the two never see
half a cubin. Failures are left for the tests.

    python -m tests._precompile
"""

from __future__ import annotations


def jobs() -> list:
    from fullpipe.cuda import compiler
    from fullpipe.kernels import builds
    from fullpipe.kernels import flash_attention as fa
    from fullpipe.kernels import flash_attention_hopper as fah
    from fullpipe.kernels import hopper_gemm as hg
    from fullpipe.kernels import skinny_gemm as sk

    arch = "sm_90a"
    # In the order the test files reach them, after test_compiler (which compiles every
    # source with its defaults itself, first thing): this process stays ahead of them.
    out = [lambda t=t: compiler.compile_package_kernel(fa.SOURCE, arch=arch, defines=dict(fa.defines(t)))
           for t in fa.candidate_builds()]
    out += [lambda b=b: fah.module(arch, b) for b in fah.SWEEP_BUILDS]
    out += [lambda b=b: hg.module("persistent", arch, build=b) for b in (*hg.SWEEP_BUILDS, hg.PERSISTENT_ONE_ROW)]
    out += [lambda r=r: sk.module(r, arch) for r in sk.ROW_BUILDS]
    out += [lambda v=v: hg.module(v, arch) for v in hg.VARIANTS]
    # the shipped builds (test_kernels_level2_extra, test_kernels_sass, the last compile
    # tests) back to front: the tests may reach them first and go front to back, so the
    # two meet in the middle instead of compiling the same build at the same time
    out += [lambda b=b: compiler.compile_package_kernel(b.source, arch=arch, defines=dict(b.defines))
            for b in builds.shipped_builds()][::-1]
    # each source with its defaults, for `fullpipe compile`'s test (last): hits by then, as a rule
    out += [lambda p=p: compiler.compile_file(p, arch=arch) for p in compiler.package_sources()]
    return out


def main() -> None:
    for job in jobs():
        try:
            job()
        except Exception:  # noqa: BLE001 - the tests report it
            pass


if __name__ == "__main__":
    main()
