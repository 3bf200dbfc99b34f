"""AsyncLLMEngine: the engine loop on asyncio, with calls as concurrent tasks.

The loop repeats: apply the calls that came back (`resume`), run one engine
step, hand outputs to each request's stream, and start every new call as an
asyncio task. A step runs on the engine's own thread (a one-thread executor that
nothing else uses: tools have their own, `server/tool_workers.py`), so the
event loop keeps accepting and parsing requests while the model computes
(torch releases the GIL); the engine is not thread-safe, so arrivals and aborts
that come in during a step are queued and applied on the loop between steps,
and no two steps overlap. While nothing new has come, the thread runs steps back to
back and hands each one's outputs to the loop as it ends (`call_soon_threadsafe`), so
the next step never waits for the loop to stream the last one's tokens; it returns to
the loop when something came to apply, when a step was idle, or when a piece of the
latency fit is due. Calls are awaited in their own tasks, so a call never
blocks the loop and the loop never waits on a call. When nothing can run
(every live request is in a call, or none is live) the loop sleeps until an
arrival, a call return or an abort wakes it.

Predictions stay off the loop too: with an expensive predictor (the learned
one), a new request is predicted in a worker thread before it joins the
scheduler, and a returned call's next segment is predicted before its result
is handed back, so the loop never waits on a predictor.

A latency fit still to do (`LLMEngine.latency_fit`, `background_fit.py`: the
server's start-up fit when nothing was cached) runs one batch shape per loop turn
on the engine's thread, between two steps (back to back while the engine idles,
else after every `fit_turns.FIT_EVERY` steps that computed); the loop starts with the server
(`start`), so the fit begins before the first request.

A forward that raises aborts only its batch: those requests finish with reason
"error" (their KV freed) and their `generate()` raises `RequestFailed`; the
engine goes on with the next step. `healthy` turns False after
`FAILURES_UNHEALTHY` failed steps in a row (a step that computes resets it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from augserve.core.prediction import Prediction
from augserve.core.request import Request, Segment
from augserve.engine.engine import LLMEngine
from augserve.engine.engine_step import BatchFailed, EngineStep
from augserve.engine.engine_thread import EngineThread
from augserve.engine.fit_turns import FitTurns
from augserve.engine.outputs import RequestOutput
from augserve.engine.sampling_params import SamplingParams
from augserve.engine.step_failures import RequestFailed, StepFailures
from augserve.engine.step_inbox import Add, Return, StepInbox
from augserve.engine.tools import PendingCall, ToolExecutor, ToolSession, run_call
from augserve.sched.output import SchedulerStats

_Item = RequestOutput | BaseException


class AsyncLLMEngine:
    """`executor` runs parsed calls of requests whose `ToolSession` has none;
    scripted calls last their trace duration times `call_time_scale`.
    `step_in_thread=False` runs each step on the loop thread instead (the loop then
    serves clients only between steps: `benchmarks/bench_server_ttft.py`); `pool`: the
    one-thread executor the engine was built on (`engine_thread.new_engine_pool`), so
    that one thread runs all of its torch work."""

    def __init__(
        self,
        engine: LLMEngine,
        executor: ToolExecutor | None = None,
        call_time_scale: float = 1.0,
        step_in_thread: bool = True,
        pool: ThreadPoolExecutor | None = None,
    ) -> None:
        self.engine = engine
        self.thread = EngineThread(step_in_thread, pool)  # the engine's own thread
        self.executor = executor
        self.call_time_scale = call_time_scale
        self._streams: dict[str, asyncio.Queue[_Item]] = {}
        self._calls: dict[str, asyncio.Task[None]] = {}
        self._inbox = StepInbox()  # what came while a step ran, applied after it
        self._wake: asyncio.Event | None = None
        self._loop_task: asyncio.Task[None] | None = None
        self._ids = itertools.count()
        self.failures = StepFailures()
        self._failed = self.failures.why  # request id -> why its batch failed
        self._fit = FitTurns()  # when a piece of a background latency fit runs
        self._stopping = False  # shutdown: the thread stops stepping after this step

    # --- public API --------------------------------------------------------------------
    async def generate(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams | None = None,
        request_id: str | None = None,
        segments: Sequence[Segment] | None = None,
        tools: ToolSession | None = None,
        session_id: str | None = None,
        cache_salt: str | None = None,
    ) -> AsyncIterator[RequestOutput]:
        """Add a request and yield its outputs until it finishes. Leaving the
        iterator early (client gone, cancellation) aborts the request. `session_id`:
        the client's session id (`sched/sessions.py`); `cache_salt`: its tenant's salt
        (`sched/prefix_cache.py`)."""
        self._ensure_started()
        rid = request_id if request_id is not None else f"req-{next(self._ids)}"
        if rid in self._streams:
            raise ValueError(f"request {rid!r} already exists")
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._streams[rid] = queue
        finished = False
        try:
            params = params or SamplingParams()
            req = self.engine.make_request(
                rid, prompt, params, segments, session_id=session_id, cache_salt=cache_salt
            )
            prediction = await self._predict_off_loop(req)
            self._add(Add(req, params, prediction, tools))
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                if finished and rid in self._failed:
                    raise RequestFailed(self._failed[rid], item)
                yield item
                if finished:
                    return
        finally:
            self._streams.pop(rid, None)
            self._failed.pop(rid, None)
            if not finished:
                self.abort(rid)

    def abort(self, request_id: str) -> bool:
        task = self._calls.pop(request_id, None)
        if task is not None:
            task.cancel()
        if self._inbox.drop_add(request_id):  # never reached the engine
            return True
        if self.thread.busy:  # the engine is busy in its thread: after the step
            found = self.engine.get_request(request_id) is not None
            self._inbox.aborts.append(request_id)
        else:
            found = self.engine.abort(request_id)
        self._kick()
        return found

    def stats(self) -> SchedulerStats:
        return self.engine.stats()

    @property
    def healthy(self) -> bool:
        """False after `FAILURES_UNHEALTHY` failed steps in a row."""
        return self.failures.healthy

    @property
    def failed_steps(self) -> int:
        return self.failures.failed_steps

    @property
    def failures_in_a_row(self) -> int:
        return self.failures.in_a_row

    @property
    def last_failure(self) -> str | None:
        return self.failures.last

    async def shutdown(self) -> None:
        self._stopping = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
            self._loop_task = None
        for task in self._calls.values():
            task.cancel()
        self._calls.clear()
        await self.thread.close()  # a step cut short by the cancel: let it end

    # --- the loop ----------------------------------------------------------------------
    def _add(self, a: Add) -> None:
        if self.thread.busy:
            self._inbox.adds.append(a)
        else:
            a.into(self.engine)
        self._kick()

    async def _steps(self) -> EngineStep:
        """Engine steps on the engine's thread (`_run_steps`); the loop stays free."""
        loop = asyncio.get_running_loop()
        return await self.thread.run(lambda: self._run_steps(loop))

    def _run_steps(self, loop: asyncio.AbstractEventLoop) -> EngineStep:
        """Steps back to back while the loop has nothing to apply (arrivals, aborts,
        call returns), each one busy, and no piece of the latency fit is due; every step
        but the last is dispatched on the loop as it ends, the last is returned. On the
        loop's own thread (`step_in_thread=False`), one step."""
        while True:
            step = self._guarded_step()
            self._fit.stepped(step.idle)
            if (
                not self.thread.in_thread
                or self._stopping
                or step.idle
                or self._inbox.has_news()
                or self._fit.due(self.engine.latency_fit is not None)
                or not self.engine.has_unfinished()
            ):
                return step
            loop.call_soon_threadsafe(self._dispatch, step)

    def _guarded_step(self) -> EngineStep:
        """`engine.step()`, where a forward that raises fails only its batch."""
        try:
            step = self.engine.step()
        except BatchFailed as failed:
            self.failures.batch_failed(failed)
            return failed.step
        if step.num_tokens and step.outputs:
            self.failures.in_a_row = 0
        return step

    def _fail_everything(self, exc: Exception) -> None:
        """The step failed outside the forward (scheduling, bookkeeping): the batch is
        unknown, so every live request ends with reason "error"."""
        why = f"{type(exc).__name__}: {exc}"
        live = [rid for rid in self._streams if self.engine.get_request(rid) is not None]
        self.failures.count(why, len(live), exc)
        for rid in live:
            self._failed[rid] = f"the engine step failed ({why}); the request was aborted"
            try:
                self.engine.abort(rid, error=True)
            except Exception:  # the scheduler itself is broken: tell the stream directly
                self._streams[rid].put_nowait(RequestFailed(self._failed[rid]))

    def start(self) -> None:
        """Start the engine loop now (the server's start-up: a background latency fit
        runs from here), not at the first request; call it on the running loop."""
        self._ensure_started()

    def _ensure_started(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._stopping = False
            self._wake = asyncio.Event()
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            try:
                step = await self._iteration()
            except Exception as exc:  # not the forward (that fails its batch): a bug
                self._fail_everything(exc)
                await asyncio.sleep(0.05)  # never spin on a broken engine
                continue
            if step is not None:
                self._dispatch(step)
            idle = step is None or step.idle
            if self._fit.turn(self.engine.latency_fit is not None, idle):  # one shape
                await self.thread.run(self.engine.fit_step)
                await asyncio.sleep(0)
                continue
            if idle:
                if not self._inbox.has_news():  # sleep until news
                    self._wake.clear()
                    await self._wake.wait()
            else:
                await asyncio.sleep(0)  # let call tasks and clients run

    async def _iteration(self) -> EngineStep | None:
        self._inbox.apply(self.engine)
        engine = self.engine
        if engine.has_unfinished():
            return await self._steps()
        if engine.has_pending_outputs():
            return engine.flush()  # e.g. the last live request was just aborted
        return None

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
        self._inbox.returns.append(Return(call.request_id, result, prediction, error))
        self._kick()
