"""Summaries of timing samples and the stopping rule that decides when there are enough.

A :class:`Timing` is the median and quartiles of a measurement's samples, with its *noise*: the
half-width of a distribution-free 95% confidence interval of the median (from order statistics,
:func:`median_interval`), relative to the median. Unlike the interquartile range, which describes
the samples and does not shrink with more of them, the noise says how well the median is known.

:class:`StoppingRule` is nvbench's rule with this noise in place of its relative standard
deviation: keep sampling until at least ``min_samples`` are in, at least ``min_time_s`` has
passed (nvbench's minimum time) and the noise is at most ``target``, or until the time
``budget_s`` is spent (then the timing is *not converged*: marked noisy, never ranked silently),
or until ``max_samples``. The minimum time is capped by the budget.

A rule given a *rival* (``settle_above_s``: the time a faster backend is already known to take,
its uncertainty included) also stops as soon as the median's confidence interval lies wholly
above it: the ranking between the two is settled, and more samples would only say by how much
this one is slower. Such a stop is allowed before the minimum time too, since on a GPU the
earliest samples are the fastest (the clock sinks under load): a timing slower than its rival
on them is slower still later. The timing is then *settled*, not converged.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

#: The default noise target: the median known to within this fraction (95% confidence).
NOISE_TARGET = 0.02
#: Samples always taken: the fewest whose extremes bound the median with at least 95% confidence.
MIN_SAMPLES = 6
CONFIDENCE = 0.95
_EXACT_UP_TO = 60  # above this many samples the normal approximation of the binomial is close


def _rank_for(n: int, confidence: float) -> int:
    """The largest ``j`` (1-based) for which ``[x(j), x(n+1-j)]`` of ``n`` sorted samples holds the
    median with at least ``confidence``; 0 when even the extremes do not."""
    alpha = 1.0 - confidence
    if n > _EXACT_UP_TO:
        z = statistics.NormalDist().inv_cdf(1.0 - alpha / 2)
        return max(0, math.floor((n - z * math.sqrt(n)) / 2))
    below, best = 0.0, 0
    for j in range(1, n // 2 + 1):
        below += math.comb(n, j - 1) / 2.0**n  # P(fewer than j samples under the median)
        if 2 * below > alpha:
            break
        best = j
    return best


def median_interval(samples: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """A confidence interval of the median from the order statistics of ``samples`` (no
    assumption about their distribution), or ``None`` when there are too few."""
    j = _rank_for(len(samples), confidence)
    if j < 1:
        return None
    ordered = sorted(samples)
    return ordered[j - 1], ordered[len(ordered) - j]


def relative_noise(samples: Sequence[float], median: float | None = None) -> float:
    """Half the width of the median's confidence interval over the median; ``inf`` with too few
    samples or a median of zero."""
    interval = median_interval(samples)
    centre = statistics.median(samples) if median is None and samples else median
    if interval is None or not centre:
        return math.inf
    return (interval[1] - interval[0]) / 2 / abs(centre)


@dataclass(frozen=True)
class Timing:
    """Seconds per GEMM: median and quartiles over ``samples`` timed calls (``data``: the samples
    themselves, kept so that rounds can be merged). ``noise``: the median's relative
    uncertainty (see the module docstring; NaN where unknown); ``converged``: whether the noise
    met ``target`` (``None`` where no target applied)."""

    median_s: float
    q1_s: float
    q3_s: float
    samples: int
    method: str
    data: tuple[float, ...] = field(default=(), repr=False, compare=False)
    noise: float = math.nan
    converged: bool | None = None
    target: float | None = None

    @property
    def spread_s(self) -> float:
        """The interquartile range."""
        return self.q3_s - self.q1_s

    @property
    def noisy(self) -> bool:
        """Whether a noise target applied and was not met."""
        return self.converged is False

    @property
    def half_width_s(self) -> float:
        """The median's uncertainty in seconds: ``noise · median``, or half the IQR where the
        noise is unknown."""
        if math.isfinite(self.noise):
            return self.noise * self.median_s
        return self.spread_s / 2

    @classmethod
    def of(cls, samples: Sequence[float], method: str, target: float | None = None) -> Timing:
        """Median, quartiles and noise of ``samples`` (at least one); with a ``target``, whether
        the noise met it."""
        if not samples:
            raise ValueError("no samples to summarise")
        if len(samples) > 1:
            q1, median, q3 = statistics.quantiles(samples, n=4, method="inclusive")
        else:
            q1 = median = q3 = samples[0]
        noise = relative_noise(samples, median)
        converged = None if target is None else noise <= target
        return cls(median, q1, q3, len(samples), method, tuple(samples), noise, converged, target)

    def merged(self, other: Timing) -> Timing:
        """Both timings' samples as one (the method and target of the first); a timing that kept
        no samples (do_bench's quartiles) gives way to the one with more."""
        if not self.data or not other.data:
            return self if self.samples >= other.samples else other
        return Timing.of([*self.data, *other.data], self.method, self.target)


@dataclass
class StoppingRule:
    """When to stop taking samples (see the module docstring); a ``target`` of 0 never stops
    early (the whole budget is sampled). ``clock`` is replaceable for tests. Call :meth:`start`
    when sampling begins and :meth:`done` with the samples so far."""

    budget_s: float
    target: float = NOISE_TARGET
    min_samples: int = MIN_SAMPLES
    max_samples: int = 1000
    min_time_s: float = 0.0
    clock: Callable[[], float] = time.perf_counter
    #: Stop once the median's confidence interval is wholly above this many seconds (see the
    #: module docstring); ``None``: no rival.
    settle_above_s: float | None = None
    _deadline: float = field(default=math.inf, init=False, repr=False)
    _earliest: float = field(default=0.0, init=False, repr=False)
    _next_check: int = field(default=0, init=False, repr=False)
    _next_settle: int = field(default=0, init=False, repr=False)
    converged: bool = field(default=False, init=False)
    #: Whether sampling stopped because the timing was settled slower than the rival.
    settled: bool = field(default=False, init=False)

    def start(self) -> None:
        """Start the budget's clock."""
        now = self.clock()
        self._deadline = now + self.budget_s
        self._earliest = now + min(self.min_time_s, self.budget_s)
        self._next_check = self.min_samples
        self._next_settle = self.min_samples
        self.converged = self.settled = False

    def done(self, samples: Sequence[float]) -> bool:
        """Whether to stop now; sets :attr:`converged` when the noise target is met. The noise
        is computed at geometrically spaced counts, so checking costs little per sample."""
        count = len(samples)
        if self.settle_above_s is not None and count >= self._next_settle:
            self._next_settle = max(count + 1, math.ceil(count * 1.1))
            interval = median_interval(samples)
            if interval is not None and interval[0] > self.settle_above_s:
                self.settled = True
                return True
        if self.target > 0 and count >= self._next_check and self.clock() >= self._earliest:
            self._next_check = max(count + 1, math.ceil(count * 1.1))
            if relative_noise(samples) <= self.target:
                self.converged = True
                return True
        if count < self.min_samples:
            return False
        return count >= self.max_samples or self.clock() >= self._deadline

    def timing(self, samples: Sequence[float], method: str) -> Timing:
        """The samples as a :class:`Timing` judged against this rule's target (not judged when the
        target is 0: the whole budget was asked for, not a noise, nor when the timing was settled
        slower than its rival, which the method then says)."""
        if self.settled:
            return Timing.of(samples, f"{method}; stopped once slower than a rival beyond doubt", None)
        return Timing.of(samples, method, self.target if self.target > 0 else None)
