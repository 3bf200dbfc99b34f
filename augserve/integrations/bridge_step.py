"""`PolicyBridge`'s part that runs at each engine step: the engine's counts copied into
the mirrors, the queues ordered by our policy, the step's admissions and token budget
(`bridge.py` has the arrivals, pauses and ends)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from augserve.core.request import ContextPolicy, Request, RequestStatus
from augserve.integrations.engine_facts import EngineFacts
from augserve.integrations.options import PluginOptions
from augserve.integrations.overload import EngineGateMemory, admitted_count
from augserve.sched.budget import dynamic_token_budget
from augserve.sched.policies import RankingPolicy


class BridgeStep:
    """Mixed into `PolicyBridge`, whose state it reads."""

    options: PluginOptions
    facts: EngineFacts
    dynamic: bool
    _live: dict[str, Request]
    _base_generated: dict[str, int]
    _policies: dict[ContextPolicy | None, RankingPolicy]
    _running_tokens: int
    _call_policy: dict[str, ContextPolicy | None]

    def _policy(self, request_id: str) -> RankingPolicy:
        """The policy instance costing this request (by the context policy of its calls)."""
        return self._policies[self._call_policy.get(request_id, ContextPolicy.DISCARD)]

    def sync(
        self,
        request_id: str,
        num_tokens: int,
        num_computed: int,
        num_output: int,
        running: bool,
        now: float | None = None,
    ) -> None:
        """Copy the engine's token counts into the mirror before ranking (a first output
        token seen at `now` dates the first token, which the SLO policy reads)."""
        mirror = self._live.get(request_id)
        if mirror is None:
            return
        if num_output > 0 and mirror.first_token_time is None and now is not None:
            mirror.first_token_time = now
        mirror.num_tokens = num_tokens
        mirror.num_computed_tokens = min(num_computed, num_tokens)
        mirror.segment_generated = num_output
        mirror.num_generated_tokens = self._base_generated.get(request_id, 0) + num_output
        mirror.status = RequestStatus.RUNNING if running else RequestStatus.WAITING

    def set_running_tokens(self, tokens: int) -> None:
        self._running_tokens = tokens

    def order(self, request_ids: Iterable[str], now: float) -> list[str]:
        """Ids by the policy's sort key (best first); unknown ids keep their order, last."""
        return self._known_first(request_ids, lambda i: self._policy(i).key(self._live[i], now))

    def preempt_order(self, request_ids: Iterable[str]) -> list[str]:
        """Ids by the policy's non-aging preempt key: the last is the one to preempt."""
        return self._known_first(request_ids, lambda i: self._policy(i).preempt_key(self._live[i]))

    def _known_first(self, request_ids: Iterable[str], key: Callable[[str], Any]) -> list[str]:
        """The known ids sorted by `key`, then the unknown ones in their order."""
        ids = list(request_ids)
        known = sorted((i for i in ids if i in self._live), key=key)
        return known + [i for i in ids if i not in self._live]

    def scheduled(self, request_ids: Iterable[str], candidates: Sequence[str], now: float) -> None:
        """These ran in the step decided at `now`."""
        ran = set(request_ids)
        for rid in ran:
            mirror = self._live.get(rid)
            if mirror is not None:
                mirror.last_scheduled_time = now
                if mirror.first_scheduled_time is None:
                    mirror.first_scheduled_time = now
        live = [self._live[c] for c in candidates if c in self._live]
        for policy in self._policies.values():
            policy.after_schedule(live, ran, now)

    def admission_share(self) -> float | None:
        """The policy's admission gate share (`admit_growth`), None without a gate."""
        return self._policies[None].admission_growth()

    def admissions(
        self, running: Iterable[str], waiting: Sequence[str], memory: EngineGateMemory
    ) -> int:
        """How many of `waiting` (in our order) our policy's admission gate lets through
        this step (`overload.py`); all of them for a policy without a gate."""
        frac = self.admission_share()
        if frac is None:
            return len(waiting)
        known = [self._live[i] for i in waiting if i in self._live]  # unknown ones: last
        n = admitted_count(frac, [self._live[i] for i in running if i in self._live], known, memory)
        return n if n < len(known) else len(waiting)

    def token_budget(self, free_blocks: int, reclaimable_blocks: int) -> int | None:
        """The dynamic budget for the next step, or None where the policy's is static."""
        if not self.dynamic:
            return None
        return dynamic_token_budget(
            free_blocks,
            reclaimable_blocks,
            self.facts.block_size,
            self.facts.max_batch_tokens,
            self.options.beta_low,
            self.options.beta_high,
        )
