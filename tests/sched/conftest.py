import pytest
from driver import easy_profile

from augserve.core.cost import LatencyProfile


@pytest.fixture
def profile() -> LatencyProfile:
    return easy_profile()
