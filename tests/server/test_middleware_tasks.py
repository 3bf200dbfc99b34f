"""The body middleware's disconnect wait leaves no task pending when it is cancelled.

Starlette cancels its disconnect listener when a streamed response ends, so every
streamed request cancels `_unless` mid-wait. It used to leave its two inner tasks
pending (asyncio logged "Task was destroyed but it is pending!" about 1,300 times
in a 25-minute agent-session benchmark).
"""

from __future__ import annotations

import asyncio
from typing import Any

from augserve.server.generation import unless_disconnected
from augserve.server.middleware import _unless


async def _forever() -> dict[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def _others() -> set[asyncio.Task[Any]]:
    return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]


def test_a_cancelled_disconnect_wait_leaves_no_task_pending() -> None:
    async def main() -> set[asyncio.Task[Any]]:
        task = asyncio.ensure_future(_unless(asyncio.Event(), _forever))
        await asyncio.sleep(0.01)
        assert len(_others()) == 3  # the wait and its two inner tasks
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await asyncio.sleep(0)
        return _others()

    assert asyncio.run(main()) == set()


def test_work_that_ends_first_cancels_the_whole_disconnect_watch() -> None:
    async def work() -> int:
        await asyncio.sleep(0.01)
        return 7

    async def main() -> tuple[int, set[asyncio.Task[Any]]]:
        gone = asyncio.Event()
        result = await unless_disconnected(work(), lambda: _unless(gone, _forever))
        await asyncio.sleep(0)
        return result, _others()

    assert asyncio.run(main()) == (7, set())


def test_gone_still_reads_as_a_disconnect() -> None:
    async def main() -> dict[str, Any]:
        gone = asyncio.Event()
        task = asyncio.ensure_future(_unless(gone, _forever))
        await asyncio.sleep(0.01)
        gone.set()
        return await task

    assert asyncio.run(main()) == {"type": "http.disconnect"}
