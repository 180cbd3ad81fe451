"""Peer access and peer copies between two GPUs of one host (needs 2 GPUs)."""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def two_gpus():
    from fullpipe.cuda.peer import device_count

    try:
        n = device_count()
    except Exception as exc:  # no driver
        pytest.skip(f"no GPU: {exc}")
    if n < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {n}")
    return 0, 1


def test_peer_copy_both_ways_matches_the_source(two_gpus):
    import torch

    from fullpipe.cuda import events
    from fullpipe.cuda.device import Device
    from fullpipe.cuda.peer import can_access_peer, copy_peer, enable_peer_access
    from fullpipe.cuda.pool import DevicePool
    from fullpipe.cuda.streams import create_stream

    assert can_access_peer(0, 1) and can_access_peer(1, 0)
    enable_peer_access(0, 1)
    enable_peer_access(0, 1)  # idempotent
    rng = np.random.default_rng(0)
    for src, dst in ((0, 1), (1, 0)):
        data = rng.standard_normal((1 << 20) + 7).astype(np.float32)  # not a multiple of anything
        pools = {i: DevicePool(Device(i)) for i in (src, dst)}
        streams = {i: create_stream(Device(i)) for i in (src, dst)}
        a = pools[src].empty(data.shape, data.dtype, streams[src])
        b = pools[dst].empty(data.shape, data.dtype, streams[dst])
        streams[src].sync()
        streams[dst].sync()
        from fullpipe.cuda.interop import as_torch

        with torch.cuda.device(src):
            as_torch(a).copy_(torch.from_numpy(data))
        with torch.cuda.device(dst):
            as_torch(b).fill_(float("nan"))
        torch.cuda.synchronize(src)
        torch.cuda.synchronize(dst)
        ready = events.record(streams[dst])
        events.wait(streams[src], ready)  # dst's buffer is allocated in dst's stream order
        copy_peer(a.ptr, src, a.ptr, src, 0, streams[src])  # zero bytes: nothing
        copy_peer(b.ptr, dst, a.ptr, src, data.nbytes, streams[src])
        streams[src].sync()
        with torch.cuda.device(dst):
            np.testing.assert_array_equal(as_torch(b).cpu().numpy(), data)
        pools[src].free_array(a, streams[src])
        pools[dst].free_array(b, streams[dst])
        streams[src].sync()
        streams[dst].sync()


def test_pool_access_is_granted_and_taken_back(two_gpus):
    from fullpipe.cuda.device import Device
    from fullpipe.cuda.peer import grant_pool_access, pool_access
    from fullpipe.cuda.pool import DevicePool
    from fullpipe.cuda.streams import create_stream

    pool0 = DevicePool(Device(0))
    s0 = create_stream(Device(0))
    assert pool_access(pool0, 1) == "none"
    with pytest.raises(ValueError, match="access must be one of none, readwrite"):
        grant_pool_access(pool0, 1, "read")
    grant_pool_access(pool0, 1)
    assert pool_access(pool0, 1) == "readwrite"
    # Reads of pool memory by kernels on GPU 1 are tested with fullpipe's SM copy kernel
    # (tests/gpu/test_peer_copy.py); here: the grant holds for allocations made after it.
    arr = pool0.empty((1 << 16,), np.float32, s0)
    assert pool_access(pool0, 1) == "readwrite"
    grant_pool_access(pool0, 1, "none")
    assert pool_access(pool0, 1) == "none"
    pool0.free_array(arr, s0)
    s0.sync()


def test_a_device_is_not_its_own_peer_and_indices_are_checked(two_gpus):
    from fullpipe.cuda.peer import can_access_peer

    with pytest.raises(ValueError, match="own peer"):
        can_access_peer(0, 0)
    with pytest.raises(ValueError, match="out of range"):
        can_access_peer(0, 99)
