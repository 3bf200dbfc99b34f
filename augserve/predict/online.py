"""The online predictor: learns from the requests and calls the scheduler sees (layer 2).

`--predictor online`, the server's default. It reads nothing a real request
does not carry (never `Request.segments`, the scripted plan), and learns from
what the scheduler reports back (`OnlineLearner` in `core/prediction.py`):

- *call duration*, per tool (`CallTimeModel`): a log-normal per tool and per
  argument-size bucket (powers of 4 characters), shrunk toward a prior: the
  tool's `expected_duration` where the tools file gives one, else the global
  estimate over all tools (itself starting at `OnlineConfig.call_prior`).
  Each returned call is one observation. A call still open after `e` seconds
  is expected to last `e + E[T - e | T > e]` (`lognormal.residual_mean`), so a
  call running past its prediction gets a longer estimate. Client-side tools
  learn the same way under `client_key(tool)`: their duration is the client's
  round trip.
- *output length of the current segment* (`OutputLenModel`), by the request's
  kind (the workload's augmentation type, where it has one), its position (the
  first segment, or after a call of which tool) and the prompt length (a
  power-of-2 bucket), backing off to coarser keys while a key has few
  observations; with `E[N - g | N > g]` for a segment that has generated `g`.
  It also learns how often such a segment ends in a call.
- *returned tokens* per tool, the same way.

Every update and prediction is a few dict lookups and a log: cheap enough to
run on the engine loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from augserve.core.prediction import Prediction
from augserve.core.request import Request
from augserve.predict.lognormal import LogStats

GLOBAL = "*"


@dataclass(frozen=True)
class OnlineConfig:
    """Priors and learning rates. Times in seconds, lengths in tokens."""

    call_prior: float = 1.0  # global prior of a call's duration
    call_sigma: float = 1.0  # its log-spread
    output_prior: float = 64.0  # prior of a segment's output length
    output_sigma: float = 1.0
    return_prior: float = 16.0  # prior of a call's returned tokens
    prior_weight: float = 1.0  # pseudo-observations of each prior
    decay: float = 0.98  # weight kept by old observations per new one
    min_sigma: float = 0.25  # floor of the log-spread (some uncertainty always stays)
    min_count: int = 3  # observations before a finer key is trusted over its parent
    call_threshold: float = 0.5  # predict a call when P(call) is at least this

    def __post_init__(self) -> None:
        for name in ("call_prior", "call_sigma", "output_prior", "output_sigma"):
            if not getattr(self, name) > 0:
                raise ValueError(f"OnlineConfig.{name} must be > 0, got {getattr(self, name)}")
        for name in ("return_prior", "prior_weight", "min_sigma"):
            if not getattr(self, name) > 0:
                raise ValueError(f"OnlineConfig.{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.decay <= 1:
            raise ValueError(f"OnlineConfig.decay must be in (0, 1], got {self.decay}")
        if self.min_count < 0:
            raise ValueError(f"OnlineConfig.min_count must be >= 0, got {self.min_count}")
        if not 0 <= self.call_threshold <= 1:
            raise ValueError(
                f"OnlineConfig.call_threshold must be in [0, 1], got {self.call_threshold}"
            )

    def stats(self, mean: float, sigma: float) -> LogStats:
        return LogStats.with_prior(
            mean, sigma, prior_weight=self.prior_weight, decay=self.decay, min_sigma=self.min_sigma
        )


def _bucket(n: int, bits: int) -> int:
    return max(0, n).bit_length() // bits


@dataclass(frozen=True)
class ToolEstimate:
    """What `/metrics` shows for one tool."""

    predicted: float  # seconds, the current prediction for a new call
    mean_abs_error: float  # seconds, mean |observed - predicted|, each before its update
    mean_abs_log_error: float  # mean |log(observed / predicted)|, each before its update
    count: int  # calls observed


class CallTimeModel:
    """Call duration per tool and argument size (see the module doc)."""

    def __init__(self, config: OnlineConfig) -> None:
        self.config = config
        self.global_stats = config.stats(config.call_prior, config.call_sigma)
        self._tools: dict[str, LogStats] = {}
        self._buckets: dict[tuple[str, int], LogStats] = {}
        self._priors: dict[str, float] = {}
        self._default_prior: float | None = None

    def set_prior(self, tool: str, seconds: float) -> None:
        """The tool's expected duration (the tools file's `expected_duration`)."""
        if not seconds > 0:
            raise ValueError(f"expected_duration of {tool!r} must be > 0, got {seconds}")
        self._priors[tool] = seconds
        self._tools.pop(tool, None)

    def set_global_prior(self, seconds: float) -> None:
        """The prior of a tool without its own (the tools file's defaults)."""
        if not seconds > 0:
            raise ValueError(f"the default expected_duration must be > 0, got {seconds}")
        cfg = self.config
        fresh = cfg.stats(seconds, cfg.call_sigma)
        if self.global_stats.count == 0:
            self.global_stats = fresh
        for tool, stats in list(self._tools.items()):
            if stats.count == 0 and tool not in self._priors:
                del self._tools[tool]
        self._default_prior = seconds

    def _tool(self, tool: str | None) -> LogStats:
        if tool is None:
            return self.global_stats
        stats = self._tools.get(tool)
        if stats is None:
            prior = self._priors.get(tool, self._default_prior or self.global_stats.mean)
            stats = self._tools[tool] = self.config.stats(prior, self.config.call_sigma)
        return stats

    def stats(self, tool: str | None, args_len: int = 0) -> LogStats:
        """The finest estimate with enough observations for this call."""
        parent = self._tool(tool)
        if tool is None:
            return parent
        fine = self._buckets.get((tool, _bucket(args_len, 2)))
        if fine is not None and fine.count >= self.config.min_count:
            return fine
        return parent

    def predict(self, tool: str | None, args_len: int = 0) -> float:
        return self.stats(tool, args_len).mean

    def expected_total(self, tool: str | None, args_len: int, elapsed: float) -> float:
        """Expected duration of a call open for `elapsed` seconds (elapsed + residual)."""
        return elapsed + self.stats(tool, args_len).residual(elapsed)

    def observe(self, tool: str | None, args_len: int, seconds: float) -> None:
        if tool is not None:
            key = (tool, _bucket(args_len, 2))
            fine = self._buckets.get(key)
            if fine is None:
                fine = self._buckets[key] = self.config.stats(
                    self._tool(tool).mean, self.config.call_sigma
                )
            fine.observe(seconds)
            self._tool(tool).observe(seconds)
        self.global_stats.observe(seconds)

    def tools(self) -> dict[str, ToolEstimate]:
        """Every tool seen or given a prior, with its current estimate."""
        for tool in list(self._priors):
            self._tool(tool)
        return {
            name: ToolEstimate(s.mean, s.mean_abs_error, s.mean_abs_log_error, s.count)
            for name, s in list(self._tools.items())
        }


class OutputLenModel:
    """Tokens of a segment and whether it ends in a call, by a key hierarchy."""

    def __init__(self, config: OnlineConfig) -> None:
        self.config = config
        self._lens: dict[tuple[str, ...], LogStats] = {}
        self._calls: dict[tuple[str, ...], tuple[float, float]] = {}  # decayed (calls, all)

    def _get(self, key: tuple[str, ...]) -> LogStats:
        stats = self._lens.get(key)
        if stats is None:
            cfg = self.config
            stats = self._lens[key] = cfg.stats(cfg.output_prior, cfg.output_sigma)
        return stats

    def stats(self, keys: Sequence[tuple[str, ...]]) -> LogStats:
        """The finest of `keys` (finest first) with enough observations."""
        for key in keys[:-1]:
            s = self._lens.get(key)
            if s is not None and s.count >= self.config.min_count:
                return s
        return self._get(keys[-1])

    def call_probability(self, keys: Sequence[tuple[str, ...]]) -> float:
        for key in keys:
            calls, n = self._calls.get(key, (0.0, 0.0))
            if n >= self.config.min_count or key is keys[-1]:
                w0 = self.config.prior_weight
                return (calls + 0.5 * w0) / (n + w0)
        return 0.5

    def observe(self, keys: Sequence[tuple[str, ...]], tokens: int, ended_in_call: bool) -> None:
        d = self.config.decay
        for key in keys:
            self._get(key).observe(max(1, tokens))
            calls, n = self._calls.get(key, (0.0, 0.0))
            self._calls[key] = (calls * d + ended_in_call, n * d + 1.0)


class OnlinePredictor:
    """`--predictor online` (the module doc). Implements `Predictor` and `OnlineLearner`."""

    name = "online"
    expensive = False

    def __init__(self, config: OnlineConfig | None = None) -> None:
        self.config = config or OnlineConfig()
        self.calls = CallTimeModel(self.config)
        self.outputs = OutputLenModel(self.config)
        self._returns: dict[str, LogStats] = {}

    # --- predictions ------------------------------------------------------------
    def predict(self, requests: Sequence[Request]) -> list[Prediction]:
        return [self.predict_one(r) for r in requests]

    def predict_one(self, req: Request) -> Prediction:
        keys = _segment_keys(req)
        out = self.outputs.stats(keys).residual(float(req.segment_generated))
        if req.in_call:  # the call is known: its tool and arguments
            call = req.calls[-1]
            tool: str | None = call.tool or req.kind
            call_time: float | None = self.calls.predict(tool, call.args_len)
        elif self.outputs.call_probability(keys) >= self.config.call_threshold:
            tool = req.kind
            call_time = self.calls.predict(tool)
        else:
            tool, call_time = None, None
        ret = self._return_stats(tool).mean if call_time is not None else 0.0
        return Prediction(max(1.0, out), call_time, ret)

    def expected_call_time(self, req: Request, now: float) -> float:
        """The open call's expected duration given how long it has lasted."""
        call = req.calls[-1]
        return self.calls.expected_total(call.tool or req.kind, call.args_len, now - call.start)

    # --- learning -----------------------------------------------------------------
    def observe_segment(self, req: Request, ended_in_call: bool) -> None:
        """The current segment ended (in a call, or the request finished)."""
        self.outputs.observe(_segment_keys(req), req.segment_generated, ended_in_call)

    def observe_call(self, req: Request) -> None:
        """The request's last call returned (its record has `end` and `returned_tokens`)."""
        call = req.calls[-1]
        if call.end is None:
            return
        tool = call.tool or req.kind
        self.calls.observe(tool, call.args_len, call.end - call.start)
        self._return_stats(tool).observe(max(1, call.returned_tokens))

    def _return_stats(self, tool: str | None) -> LogStats:
        key = tool or GLOBAL
        stats = self._returns.get(key)
        if stats is None:
            cfg = self.config
            stats = self._returns[key] = cfg.stats(cfg.return_prior, cfg.output_sigma)
        return stats


def _segment_keys(req: Request) -> list[tuple[str, ...]]:
    """Output-length keys of the request's current segment, finest first."""
    kind = req.kind or GLOBAL
    if req.segment_index == 0 or not req.calls:
        pos = "first"
    else:
        last = req.calls[-1] if not req.in_call else (req.calls[-2] if len(req.calls) > 1 else None)
        pos = f"after:{(last.tool if last else None) or kind}"
    plen = str(_bucket(req.prompt_len, 1))
    return [(kind, pos, plen), (kind, pos), (GLOBAL,)]
