import pytest
from driver import easy_profile

from augserve.core.latency import LatencyProfile


@pytest.fixture
def profile() -> LatencyProfile:
    return easy_profile()
