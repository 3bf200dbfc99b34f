import pytest

from augserve.core.cost import LatencyProfile


def easy_profile(**kw: float) -> LatencyProfile:
    """Round numbers for hand computation: tau_fwd(L) = 0.01 + 0.001 L, tau_swap(L) = L / 1000."""
    base = dict(
        name="easy",
        c0=0.01,
        c_prefill=0.001,
        c_attn=0.0,
        c_decode=0.0,
        c_ctx=0.0,
        kv_bytes=1000,
        device_kv_bytes=1000 * 16 * 64,
        host_kv_bytes=1000 * 16 * 64,
        swap_bandwidth=1e6,
        max_batch_tokens=256,
    )
    base.update(kw)
    return LatencyProfile(**base)  # type: ignore[arg-type]


@pytest.fixture
def profile() -> LatencyProfile:
    return easy_profile()
