"""pytest plugin (-p dev_probe3): each NVRTC compile's log size, and whether b" " is still a space after it."""
import sys


def pytest_configure(config):
    from fullpipe.cuda import compiler
    orig = compiler._nvrtc_compile

    def spy(text, name, arch, flags):
        cubin, log = orig(text, name, arch, flags)
        sys.__stderr__.write(f"PROBE3 compiled {name} flags {flags}: log {len(log)} chars; "
                             f"' '.encode()[0] = {' '.encode()[0]}\n")
        return cubin, log
    compiler._nvrtc_compile = spy
