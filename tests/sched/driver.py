"""A tiny trace-driven executor for scheduler tests: virtual time, fixed iteration time."""

from __future__ import annotations

from augserve.core.latency import LatencyProfile
from augserve.core.request import Request
from augserve.sched.output import SchedulerOutput, SchedulerUpdate, StepEvent, StepResult
from augserve.sched.scheduler import Scheduler


def step_results(out: SchedulerOutput) -> dict[str, StepResult]:
    """What a trace-driven executor reports: a segment ends after its planned output."""
    results: dict[str, StepResult] = {}
    for chunk in out.chunks:
        if not chunk.sample:
            continue
        req = chunk.request
        seg = req.current_segment
        done = seg is None or req.segment_generated + 1 >= max(1, seg.output_len)
        if not done:
            event = StepEvent.NONE
        elif seg is not None and seg.has_call:
            event = StepEvent.CALL
        else:
            event = StepEvent.FINISH
        results[req.request_id] = StepResult(token_id=7, event=event)
    return results


class Driver:
    """Runs a scheduler against planned requests; calls return after their planned time."""

    def __init__(self, sched: Scheduler, iter_time: float = 0.01) -> None:
        self.sched = sched
        self.iter_time = iter_time
        self.now = 0.0
        self.returns: dict[str, tuple[float, Request]] = {}  # id -> (return time, request)
        self.outputs: list[SchedulerOutput] = []
        self.finished: list[Request] = []

    def _note(self, upd: SchedulerUpdate) -> None:
        self.finished += [f.request for f in upd.finished]
        for call in upd.calls_started:
            seg = call.request.segments[call.request.segment_index]
            self.returns[call.request.request_id] = (
                self.now + (seg.call_time or 0.0),
                call.request,
            )

    def add(self, req: Request) -> None:
        self._note(self.sched.add_request(req, self.now))

    def step(self) -> SchedulerOutput:
        for rid, (t, req) in sorted(self.returns.items(), key=lambda kv: kv[1][0]):
            if t <= self.now:
                seg = req.segments[req.segment_index]
                del self.returns[rid]
                self._note(self.sched.resume(rid, seg.return_len, self.now))
        out = self.sched.schedule(self.now)
        self.outputs.append(out)
        self.now += self.iter_time
        self._note(self.sched.update_from_output(out, step_results(out), self.now))
        return out

    def run_until_idle(self, max_steps: int = 100_000) -> None:
        for _ in range(max_steps):
            if not self.sched.num_live:
                return
            out = self.step()
            if out.is_empty and not self.sched.has_runnable() and self.returns:
                self.now = max(self.now, min(t for t, _ in self.returns.values()))
        raise AssertionError("scheduler did not drain")


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
