"""Session affinity under data parallelism: one rank per session, sessions spread."""

from __future__ import annotations

from collections import Counter

import pytest

from augserve.integrations.affinity import RANK_HEADER, affinity_headers, session_rank


def test_a_sessions_turns_keep_one_rank_and_sessions_spread_over_ranks() -> None:
    ranks = [session_rank(f"conv-{i}", 4) for i in range(2000)]
    assert ranks == [session_rank(f"conv-{i}", 4) for i in range(2000)]  # stable
    counts = Counter(ranks)
    assert set(counts) == {0, 1, 2, 3}
    assert min(counts.values()) > 400 and max(counts.values()) < 600  # about 500 each
    assert session_rank("conv-1", 1) == 0
    assert affinity_headers("conv-7", 4) == {RANK_HEADER: str(session_rank("conv-7", 4))}


@pytest.mark.parametrize(("sid", "size", "field"), [("s", 0, "data_parallel_size"),
                                                    ("", 2, "session_id")])  # fmt: skip
def test_bad_arguments_name_the_field(sid: str, size: int, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        session_rank(sid, size)
