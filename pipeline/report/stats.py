"""Small statistics on one metric's series, honest about noise: training curves are autocorrelated, so a trend's
interval uses the effective number of independent points, not the number of logged ones."""

from __future__ import annotations

import math

import numpy as np

TENTH_MIN_POINTS = 3  # the first and last tenth of a curve hold at least this many points (as reward_plateau's)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)  # df 1..10


def t_critical(df: float) -> float:
    """Two-sided 95 % critical value of Student's t: a table to 10 degrees of freedom, then the Cornish-Fisher
    expansion (error below 0.001), so no statistics package is needed for one number."""
    if df < 1:
        return _T975[0]
    if df <= 10:
        return _T975[int(round(df)) - 1]
    z = 1.959964
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def effective_n(residuals: np.ndarray) -> float:
    """n · (1 − r1) / (1 + r1), r1 the lag-1 autocorrelation of the residuals (never above n, never below 2)."""
    n = len(residuals)
    if n < 3:
        return float(n)
    centred = residuals - residuals.mean()
    denom = float(centred @ centred)
    r1 = float(centred[1:] @ centred[:-1]) / denom if denom > 0 else 0.0
    r1 = min(max(r1, 0.0), 0.95)
    return max(2.0, min(float(n), n * (1 - r1) / (1 + r1)))


def trend(steps: np.ndarray, values: np.ndarray, per: float = 100.0) -> dict | None:
    """Least-squares slope per ``per`` steps with a 95 % interval corrected for autocorrelation; None under 4
    finite points or when every point sits at one step."""
    keep = np.isfinite(values) & np.isfinite(steps)
    x, y = steps[keep].astype(float), values[keep].astype(float)
    if len(x) < 4 or np.ptp(x) == 0:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    residuals = y - (slope * x + intercept)
    n = len(x)
    sxx = float(((x - x.mean()) ** 2).sum())
    se = math.sqrt(float(residuals @ residuals) / (n - 2) / sxx) if n > 2 else float("nan")
    n_eff = effective_n(residuals)
    se *= math.sqrt((n - 2) / max(n_eff - 2, 1.0))  # fewer independent points: a wider interval
    t_crit = t_critical(n_eff - 2)
    low, high = (slope - t_crit * se) * per, (slope + t_crit * se) * per
    return {
        "slope": slope * per,
        "ci": [low, high],
        "significant": bool(low > 0 or high < 0),
        "per_steps": per,
        "n": n,
        "n_effective": round(n_eff, 1),
    }


def summary(steps: np.ndarray, values: np.ndarray, higher_is_better: bool | None) -> dict:
    """first, last, best (when the direction is known), min, max, non-finite count, the means of the first and last
    tenth (at least three points each; none for a curve too short to have two), and the trend."""
    finite = np.isfinite(values)
    out: dict = {"points": int(len(values)), "non_finite": int((~finite).sum())}
    if not finite.any():
        return out
    s, v = steps[finite], values[finite]
    out.update(
        first=float(v[0]),
        first_step=int(s[0]),
        last=float(v[-1]),
        last_step=int(s[-1]),
        min=float(v.min()),
        max=float(v.max()),
    )
    if higher_is_better is not None:
        at = int(v.argmax() if higher_is_better else v.argmin())
        out.update(best=float(v[at]), best_step=int(s[at]))
    k = max(TENTH_MIN_POINTS, math.ceil(len(v) / 10))
    if len(v) >= 2 * k:  # a noisy curve's first and last points say little: where it started and ended
        out.update(first_tenth_mean=float(v[:k].mean()), last_tenth_mean=float(v[-k:].mean()), tenth_points=k)
        out["tenths_shift"] = shift(v[:k], v[-k:])
    out["trend"] = trend(s, v)
    return out


def shift(first: np.ndarray, last: np.ndarray) -> dict:
    """Did the level move between the first and the last tenth? Welch's t on their means. A curve that jumps (entropy
    0.18 for ten steps, then 5 for thirty) has no steady linear trend — its residuals from a line are one long run,
    and the autocorrelation-corrected interval of the slope spans zero — yet it plainly changed."""
    var_first, var_last = float(first.var(ddof=1)), float(last.var(ddof=1))
    se2 = var_first / len(first) + var_last / len(last)
    diff = float(last.mean() - first.mean())
    if se2 <= 0:
        return {"t": None, "significant": diff != 0}
    df = se2**2 / ((var_first / len(first)) ** 2 / (len(first) - 1) + (var_last / len(last)) ** 2 / (len(last) - 1))
    t = diff / math.sqrt(se2)
    return {"t": t, "significant": abs(t) >= t_critical(df)}


def percentile_rank(value: float, others: list[float]) -> float:
    """Share of the values (this one included) at or below ``value``, in percent."""
    pool = [o for o in others if o is not None and math.isfinite(o)]
    if not pool:
        return float("nan")
    return 100.0 * sum(o <= value for o in pool) / len(pool)
