"""CPU tests of driver.bound (cuda/driver.py), the hot path's form of driver.call: the
same outputs, the same CudaError naming the call and the driver's words, the same refusal
inside a host function, and the function looked up once. A fake driver module stands in."""

from __future__ import annotations

import pytest

import fullpipe.cuda.driver as fdriver
from fullpipe.errors import CudaError


class FakeDriver:
    """cuda.bindings' shape of results: (err, outputs...)."""

    def __init__(self):
        self.lookups = 0

    def __getattribute__(self, name):
        if name.startswith("cu") and name not in ("cuGetErrorName", "cuGetErrorString"):
            object.__getattribute__(self, "__dict__")["lookups"] += 1
        return object.__getattribute__(self, name)

    def cuNothing(self):
        return (0,)

    def cuOne(self, x):
        return 0, x * 2

    def cuTwo(self, x):
        return 0, x, x + 1

    def cuFails(self):
        return (700,)  # CUDA_ERROR_ILLEGAL_ADDRESS

    def cuGetErrorName(self, err):
        return 0, b"CUDA_ERROR_ILLEGAL_ADDRESS"

    def cuGetErrorString(self, err):
        return 0, b"an illegal memory access was encountered"


@pytest.fixture
def fake(monkeypatch):
    drv = FakeDriver()
    monkeypatch.setattr(fdriver, "driver", lambda: drv)
    return drv


def test_bound_returns_what_call_returns(fake):
    for name, args in (("cuNothing", ()), ("cuOne", (3,)), ("cuTwo", (3,))):
        assert fdriver.bound(name)(*args) == fdriver.call(name, *args)
    assert fdriver.bound("cuNothing")() is None
    assert fdriver.bound("cuOne")(3) == 6
    assert fdriver.bound("cuTwo")(3) == (3, 4)


def test_bound_looks_the_function_up_once(fake):
    one = fdriver.bound("cuOne")
    before = fake.lookups
    for i in range(100):
        assert one(i) == 2 * i
    assert fake.lookups == before


def test_bound_raises_the_drivers_error_naming_the_call(fake):
    with pytest.raises(CudaError, match="cuFails.*CUDA_ERROR_ILLEGAL_ADDRESS.*illegal memory access"):
        fdriver.bound("cuFails")()


def test_bound_refuses_inside_a_host_function(fake):
    one = fdriver.bound("cuOne")
    with fdriver.host_function_scope():
        with pytest.raises(RuntimeError, match="cuOne called from inside a host function"):
            one(1)
    assert one(1) == 2
