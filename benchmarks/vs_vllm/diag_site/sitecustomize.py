"""Loaded at start-up by the server `diag_sessions.py` starts (it puts this folder on
PYTHONPATH): with AUGSERVE_DIAG_LOG set, wraps the scheduler's `schedule`, the KV
manager's `preempt` and the packer's `run` and writes, every 200 iterations, one JSON
line: the share of iterations the thrash meter was engaged and growth-first held, the
meter's decayed lost / done tokens, admissions, and each preemption's victim as
[computed tokens, inherited tokens, preemptions so far, protection order], and the
iterations' wall time against what the server's profile predicts for their batches
(an iteration's wall time: from its `schedule` to the next one's; gaps over 10x the
prediction + 0.1 s are the engine idling and are left out), with the part of it spent in
the engine's `execute` (swaps, forward, sampling): `wall_s - exec_s` is scheduling,
bookkeeping and the round trip through the event loop. `AUGSERVE_DIAG_SWITCH=S` sets the
interpreter's thread switch interval to S seconds (`sys.setswitchinterval`; an experiment
on the engine thread's wait for the GIL)."""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

EVERY = 200


def _install(path: str) -> None:
    from augserve.engine import engine
    from augserve.sched import kv_manager, packing, scheduler

    log = open(path, "a")  # noqa: SIM115 (open for the server's lifetime)
    st: dict[str, Any] = {"n": 0, "pre": [], "adm": 0, "short": 0, "eng": 0, "pred": 0.0,
                          "wall": 0.0, "exec": 0.0, "exec_last": 0.0}  # fmt: skip
    schedule, preempt, run, execute = (
        scheduler.Scheduler.schedule,
        kv_manager.KVCacheManager.preempt,
        packing.Packer.run,
        engine.LLMEngine.execute,
    )

    def logged_schedule(self: Any, now: float) -> Any:
        wall = time.perf_counter()
        prev = st.get("prev")
        if prev is not None:  # the previous iteration: its predicted and its wall time
            gap, pred = wall - prev[0], prev[1]
            if gap < 10 * pred + 0.1:  # longer: the engine idled after it
                st["pred"] += pred
                st["wall"] += gap
                st["exec"] += st["exec_last"]
        st["exec_last"] = 0.0
        out = schedule(self, now)
        shape = out.batch_shape(self.config.block_size)
        st["prev"] = (wall, self.latency.iteration_time(shape)) if not shape.is_empty else None
        st["n"] += 1
        st["eng"] += int(self.thrash.engaged)
        if st["n"] % EVERY == 0:
            row = {"t": now, "iters": st["n"], "engaged_share": st["eng"] / EVERY,
                   "lost": round(self.thrash.lost), "done": round(self.thrash.done),
                   "admitted": st["adm"], "short_share": st["short"] / EVERY,
                   "preempted": st["pre"][:40], "n_pre": len(st["pre"]),
                   "predicted_s": round(st["pred"], 3), "wall_s": round(st["wall"], 3),
                   "exec_s": round(st["exec"], 3)}  # fmt: skip
            log.write(json.dumps(row) + "\n")
            log.flush()
            st.update(pre=[], eng=0, adm=0, short=0, pred=0.0, wall=0.0, exec=0.0)
        return out

    def logged_preempt(self: Any, req: Any) -> Any:
        victim = [req.num_computed_tokens, req.num_inherited_tokens]
        st["pre"].append([*victim, req.num_preemptions, req.protected])
        return preempt(self, req)

    def timed_execute(self: Any, out: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return execute(self, out)
        finally:
            st["exec_last"] = time.perf_counter() - t0

    def logged_run(self: Any, budget: int) -> Any:
        chunks = run(self, budget)
        st["adm"] += len(self.admitted)
        st["short"] += int(self.short)
        return chunks

    scheduler.Scheduler.schedule = logged_schedule  # type: ignore[method-assign]
    kv_manager.KVCacheManager.preempt = logged_preempt  # type: ignore[method-assign]
    packing.Packer.run = logged_run  # type: ignore[method-assign]
    engine.LLMEngine.execute = timed_execute  # type: ignore[method-assign]


if os.environ.get("AUGSERVE_DIAG_SWITCH"):
    sys.setswitchinterval(float(os.environ["AUGSERVE_DIAG_SWITCH"]))
if os.environ.get("AUGSERVE_DIAG_LOG"):
    _install(os.environ["AUGSERVE_DIAG_LOG"])
