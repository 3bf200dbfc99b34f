"""A log-normal estimate that learns online, and its mean residual life (layer 2, pure math).

`LogStats` keeps decayed sums of log observations (call seconds, segment tokens)
shrunk toward a prior with `prior_weight` pseudo-observations, so the first
guess is the prior and each observation moves it; old observations fade by
`decay` per new one (an effective window of about 1 / (1 - decay)).

`residual_mean(mu, sigma, elapsed)` is E[T - e | T > e] for T ~ LogNormal(mu,
sigma): what is left of a call that has already run `e` seconds. It grows with
`e` once `e` passes the median, so a call running past its prediction is
expected to run on, not to end at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def log_norm_cdf(x: float) -> float:
    """log Phi(x), stable far into the lower tail (Mills-ratio expansion below -8)."""
    if x > -8.0:
        return math.log(0.5 * math.erfc(-x / _SQRT2))
    x2 = x * x
    return -0.5 * x2 - math.log(-x) - _LOG_SQRT_2PI + math.log1p(-1.0 / x2 + 3.0 / (x2 * x2))


def residual_mean(mu: float, sigma: float, elapsed: float) -> float:
    """E[T - e | T > e] for T ~ LogNormal(mu, sigma) (sigma > 0), e = `elapsed` >= 0."""
    mean = math.exp(mu + 0.5 * sigma * sigma)
    if elapsed <= 0.0:
        return mean
    z = (mu - math.log(elapsed)) / sigma
    ratio = math.exp(log_norm_cdf(z + sigma) - log_norm_cdf(z))
    return max(0.0, mean * ratio - elapsed)


@dataclass
class LogStats:
    """Decayed, prior-shrunk statistics of log(x) for x > 0 (see the module doc)."""

    prior_mu: float
    prior_sigma: float
    prior_weight: float = 2.0
    decay: float = 0.98
    min_sigma: float = 0.25
    weight: float = 0.0  # decayed count of observations
    sum_log: float = 0.0
    sum_sq: float = 0.0
    count: int = 0  # observations ever
    abs_log_error: float = 0.0  # decayed sum of |log(x / predicted mean)|, before each update
    abs_error: float = 0.0  # decayed sum of |x - predicted mean|, before each update

    @classmethod
    def with_prior(
        cls,
        mean: float,
        sigma: float,
        prior_weight: float = 2.0,
        decay: float = 0.98,
        min_sigma: float = 0.25,
    ) -> LogStats:
        """Stats whose prior has mean `mean` and log-spread `sigma`."""
        if not mean > 0:
            raise ValueError(f"LogStats: prior mean must be > 0, got {mean}")
        mu = math.log(mean) - 0.5 * sigma * sigma
        return cls(mu, sigma, prior_weight=prior_weight, decay=decay, min_sigma=min_sigma)

    @property
    def mu(self) -> float:
        w0 = self.prior_weight
        return (w0 * self.prior_mu + self.sum_log) / (w0 + self.weight)

    @property
    def sigma(self) -> float:
        w0, w = self.prior_weight, self.weight
        mu = self.mu
        # spread of the observations around mu, plus the prior's spread as pseudo-data
        own = self.sum_sq - 2.0 * mu * self.sum_log + w * mu * mu
        var = (w0 * self.prior_sigma**2 + w0 * (self.prior_mu - mu) ** 2 + max(0.0, own)) / (w0 + w)
        return max(self.min_sigma, math.sqrt(var))

    @property
    def mean(self) -> float:
        s = self.sigma
        return math.exp(self.mu + 0.5 * s * s)

    @property
    def mean_abs_log_error(self) -> float:
        """Mean |log(observed / predicted)| over the decayed window (0 before any)."""
        return self.abs_log_error / self.weight if self.weight > 0 else 0.0

    @property
    def mean_abs_error(self) -> float:
        """Mean |observed - predicted| in the observations' unit (0 before any)."""
        return self.abs_error / self.weight if self.weight > 0 else 0.0

    def residual(self, elapsed: float) -> float:
        return residual_mean(self.mu, self.sigma, elapsed)

    def observe(self, x: float) -> None:
        lx = math.log(max(x, 1e-6))
        d = self.decay
        mean = self.mean
        self.abs_log_error = self.abs_log_error * d + abs(lx - math.log(mean))
        self.abs_error = self.abs_error * d + abs(x - mean)
        self.weight = self.weight * d + 1.0
        self.sum_log = self.sum_log * d + lx
        self.sum_sq = self.sum_sq * d + lx * lx
        self.count += 1
