"""AsyncLLMEngine: the engine loop on asyncio, with calls as concurrent tasks.

The loop repeats: apply the calls that came back (`resume`), run one engine
step, hand outputs to each request's stream, and start every new call as an
asyncio task. A forward runs on the loop thread (the engine is not
thread-safe); calls are awaited in their own tasks, so a call never blocks the
loop and the loop never waits on a call. When nothing can run (every live
request is in a call, or none is live) the loop sleeps until an arrival, a
call return or an abort wakes it.

Predictions stay off the loop too: with an expensive predictor (the learned
one), a new request is predicted in a worker thread before it joins the
scheduler, and a returned call's next segment is predicted before its result
is handed back, so the loop never waits on a predictor.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from augserve.core.prediction import Prediction
from augserve.core.request import Request, Segment
from augserve.engine.engine import EngineStep, LLMEngine
from augserve.engine.outputs import RequestOutput
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.tools import PendingCall, ToolExecutor, ToolSession, run_call
from augserve.sched.output import SchedulerStats

_Item = RequestOutput | BaseException


@dataclass(frozen=True)
class _Return:
    request_id: str
    result: list[int] | str
    prediction: Prediction | None
    error: bool


class AsyncLLMEngine:
    """`executor` runs parsed calls of requests whose `ToolSession` has none;
    scripted calls last their trace duration times `call_time_scale`."""

    def __init__(
        self,
        engine: LLMEngine,
        executor: ToolExecutor | None = None,
        call_time_scale: float = 1.0,
    ) -> None:
        self.engine = engine
        self.executor = executor
        self.call_time_scale = call_time_scale
        self._streams: dict[str, asyncio.Queue[_Item]] = {}
        self._calls: dict[str, asyncio.Task[None]] = {}
        self._returns: list[_Return] = []
        self._wake: asyncio.Event | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._ids = itertools.count()
        self._error: BaseException | None = None

    # --- public API --------------------------------------------------------------------
    async def generate(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        segments: Sequence[Segment] | None = None,
        tools: ToolSession | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Add a request and yield its outputs until it finishes. Leaving the
        iterator early (client gone, cancellation) aborts the request."""
        self._ensure_started()
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        if rid in self._streams:
            raise ValueError(f"request {rid!r} already exists")
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._streams[rid] = queue
        finished = False
        try:
            params = params or SamplingParams()
            req = self.engine.make_request(rid, prompt, params, segments)
            prediction = await self._predict_off_loop(req)
            self.engine.add(req, params, prediction=prediction, tools=tools, stream=True)
            self._kick()
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            self._streams.pop(rid, None)
            if not finished:
                self.abort(rid)

    def abort(self, request_id: str) -> bool:
        task = self._calls.pop(request_id, None)
        if task is not None:
            task.cancel()
        found = self.engine.abort(request_id)
        self._kick()
        return found

    def stats(self) -> SchedulerStats:
        return self.engine.stats()

    async def shutdown(self) -> None:
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        for task in self._calls.values():
            task.cancel()
        self._calls.clear()

    # --- the loop ----------------------------------------------------------------------
    def _ensure_started(self) -> None:
        if self._error is not None:
            raise RuntimeError("engine loop failed") from self._error
        if self._loop_task is None or self._loop_task.done():
            self._wake = asyncio.Event()
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        try:
            while True:
                self._apply_returns()
                engine = self.engine
                if engine.has_unfinished():
                    step: EngineStep | None = engine.step()
                elif engine.has_pending_outputs():
                    step = engine.flush()  # e.g. the last live request was just aborted
                else:
                    step = None
                if step is not None:
                    self._dispatch(step)
                if step is None or step.idle:
                    if not self._returns:  # sleep until an arrival, a return or an abort
                        self._wake.clear()
                        await self._wake.wait()
                else:
                    await asyncio.sleep(0)  # let call tasks and clients run
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # a forward failed: every stream learns it
            self._error = exc
            for queue in self._streams.values():
                queue.put_nowait(exc)

    def _apply_returns(self) -> None:
        returns, self._returns = self._returns, []
        for r in returns:
            self.engine.resume(r.request_id, r.result, prediction=r.prediction, error=r.error)

    async def _predict_off_loop(self, req: Request) -> Prediction | None:
        """Run an expensive predictor in a worker thread; cheap ones run inline later."""
        predictor = self.engine.predictor
        if predictor is None or not predictor.expensive:
            return None
        loop = asyncio.get_running_loop()
        return (await loop.run_in_executor(None, predictor.predict, [req]))[0]

    async def _predict_return(self, request_id: str, result: list[int] | str) -> Prediction | None:
        req = self.engine.get_request(request_id)
        if req is None:
            return None
        num_returned = len(self.engine.result_ids(result))
        return await self._predict_off_loop(req.preview_return(num_returned, self.engine.clock()))

    def _dispatch(self, step: EngineStep) -> None:
        for out in step.outputs:
            queue = self._streams.get(out.request_id)
            if queue is not None:
                queue.put_nowait(out)
        for call in step.calls:
            self._calls[call.request_id] = asyncio.get_running_loop().create_task(
                self._run_call(call)
            )

    async def _run_call(self, call: PendingCall) -> None:
        error = False
        try:
            result = await run_call(call, self.executor, self.call_time_scale)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a failing tool answers with its error, as agent loops do
            result, error = f"Error: {exc}", True
            if self.engine.tokenizer is None:
                result = []
        prediction = await self._predict_return(call.request_id, result)
        self._calls.pop(call.request_id, None)
        self._returns.append(_Return(call.request_id, result, prediction, error))
        self._kick()
