"""The background fit's cadence (`engine/fit_turns.py`): a piece at once while the engine
idles, else after every `every` busy steps, and never without a fit pending."""

from __future__ import annotations

import pytest

from augserve.engine.fit_turns import FitTurns


def test_a_piece_after_every_n_busy_steps_and_at_once_when_idle() -> None:
    turns = FitTurns(every=3)
    idles = [False] * 7 + [True] + [False] * 3
    dues, runs = [], []
    for idle in idles:
        turns.stepped(idle)
        dues.append(turns.due(pending=True))
        runs.append(turns.turn(pending=True, idle=idle))
    # busy 1, 2, 3 (a turn: the count restarts), 1, 2, 3 (turn), 1, idle (turn), 1, 2, 3
    f, t = False, True
    assert runs == [f, f, t, f, f, t, f, t, f, f, t]
    assert dues == [f, f, t, f, f, t, f, f, f, f, t]  # due: only the busy turns


def test_no_turn_without_a_pending_fit() -> None:
    turns = FitTurns(every=1)
    for _ in range(5):
        turns.stepped(False)
        assert not turns.due(pending=False)
        assert not turns.turn(pending=False, idle=True)


def test_every_must_be_positive() -> None:
    with pytest.raises(ValueError, match="every"):
        FitTurns(every=0)
