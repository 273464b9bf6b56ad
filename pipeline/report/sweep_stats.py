"""The statistics of a sweep comparison, on a handful of runs: rank correlation with a bootstrap interval, level
means with t intervals, collinear parameters, the Pareto front. Sweeps are small (3–50 runs), so every interval
here is wide on purpose: a sweep of six runs cannot prove much, and the report must not pretend it does."""

from __future__ import annotations

import math
import re
from itertools import combinations

import numpy as np

from pipeline.report.stats import t_critical

MAX_LEVELS = 6  # a numeric parameter with more distinct values is binned into terciles
BOOTSTRAP_DRAWS = 2000
TAIL = 0.025  # each tail of a 95% interval
MIN_INTERVAL_RUNS = 5  # below this a rank correlation cannot be significant at 5% (4 runs: p >= 1/12)
COLLINEAR = 0.95  # |rank correlation| at or above which two parameters are one experiment, not two
# Config keys that identify a run rather than configure its training: never hyper-parameters (step_source is
# grpolens' own note of how a console log's steps were counted).
NOT_HYPERPARAMETERS = re.compile(
    r"(^|[._/])(seed|.*_seed|run_?id|run_?name|name|id|index|.*_index|idx|.*_idx|trial.*|wandb.*|project|entity|group|tags?|notes?|job_type|"
    r"output_?dir|.*_dir|dir|logging_dir|(log|logging|output|out|save|checkpoint|ckpt|cache|results?|run)_?(path|file)|"
    r".*_ur[il]|ur[il]|.*_endpoint|endpoint|hub_model_id|report_to|resume.*|timestamp|date|time|host.*|"
    r"port|device.*|local_rank|world_size|node.*|num_workers|dataloader.*|save_.*|logging_.*|eval_steps|"
    r"push_to_hub.*|overwrite.*|step_source)$",
    re.IGNORECASE,
)


# A config key holding the policy's learning rate (`learning_rate`, `lr`, verl's `actor_rollout_ref.actor.optim.lr`).
LEARNING_RATE = re.compile(r"(^|[._/])(learning_rate|lr)$", re.IGNORECASE)
# A config key holding the KL penalty's coefficient (TRL's `beta`, verl's `kl_loss_coef`, `kl_ctrl.kl_coef`).
KL_PENALTY = re.compile(r"(^|[._/])(beta|kl_beta|kl_coef|kl_loss_coef|init_kl_coef)$", re.IGNORECASE)


def learning_rate(config: dict) -> float | None:
    """The learning rate in a flattened config: the shortest key that names one (a critic's left out), when it holds
    a number."""
    return _setting(config, LEARNING_RATE)


def kl_penalty(config: dict) -> float | None:
    """The KL penalty's coefficient in a flattened config (TRL's beta, verl's kl_loss_coef, kl_coef), when it holds
    a number: advice to lower it means nothing to a run trained without one."""
    return _setting(config, KL_PENALTY)


def _setting(config: dict, name: re.Pattern) -> float | None:
    keys = [k for k in config if name.search(k) and "critic" not in k.lower()]
    value = config[min(keys, key=lambda k: (len(k), k))] if keys else None
    return float(value) if value is not None and is_number(value) else None


def ranks(values: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean of their positions), 1-based."""
    order = np.argsort(values, kind="mergesort")
    ranked = np.empty(len(values), dtype=float)
    ranked[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        if tied.sum() > 1:
            ranked[tied] = ranked[tied].mean()
    return ranked


def spearman(x: np.ndarray, y: np.ndarray) -> float | None:
    if len(x) < 3:
        return None
    rx, ry = ranks(np.asarray(x, float)), ranks(np.asarray(y, float))
    if rx.std() == 0 or ry.std() == 0:
        return None
    return float(np.corrcoef(rx, ry)[0, 1])


def spearman_interval(x: np.ndarray, y: np.ndarray, seed: int = 0) -> list[float] | None:
    """95% percentile interval of Spearman's rho over bootstrap resamples of the runs, or None when the runs are too
    few for one. With four runs even a perfect rank order arises by chance once in twelve, so no interval there. A
    resample in which the parameter took a single value has no rho; dropping those would keep only the resamples
    that contain a level's lone run and make its one score look certain, so when more of them lack a rho than one
    tail of the interval holds, there is no interval. An interval that misses its own estimate (a lumpy bootstrap
    distribution) is no interval either."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    estimate = spearman(x, y)
    if len(x) < MIN_INTERVAL_RUNS or estimate is None:
        return None
    rng = np.random.default_rng(seed)
    draws = []
    for idx in rng.integers(0, len(x), size=(BOOTSTRAP_DRAWS, len(x))):
        rho = spearman(x[idx], y[idx])
        if rho is not None:
            draws.append(rho)
    if len(draws) < BOOTSTRAP_DRAWS * (1 - TAIL):
        return None
    low, high = float(np.percentile(draws, 100 * TAIL)), float(np.percentile(draws, 100 * (1 - TAIL)))
    return [low, high] if low <= estimate <= high else None


def mean_interval(scores: np.ndarray) -> tuple[float, list[float] | None]:
    """Mean with a t-based 95% interval over runs (None with one run)."""
    scores = np.asarray(scores, float)
    mean = float(scores.mean())
    if len(scores) < 2:
        return mean, None
    half = t_critical(len(scores) - 1) * float(scores.std(ddof=1)) / math.sqrt(len(scores))
    return mean, [mean - half, mean + half]


def levels(values: list, scores: np.ndarray, numeric: bool) -> list[dict]:
    """Per distinct value (≤ MAX_LEVELS of them) or per tercile: n, mean and interval of the runs' scores."""
    scores = np.asarray(scores, float)
    if numeric and len(set(values)) > MAX_LEVELS:
        x = np.asarray(values, float)
        edges = np.quantile(x, [1 / 3, 2 / 3])
        groups = [x <= edges[0], (x > edges[0]) & (x <= edges[1]), x > edges[1]]
        labels = [f"≤ {edges[0]:.3g}", f"{edges[0]:.3g}–{edges[1]:.3g}", f"> {edges[1]:.3g}"]
        keys = [float(np.median(x[g])) if g.any() else None for g in groups]
    else:
        distinct = sorted(set(values), key=lambda v: (str(type(v)), v)) if numeric else sorted(set(values), key=str)
        groups = [np.array([v == d for v in values]) for d in distinct]
        labels, keys = [str(d) for d in distinct], distinct
    out = []
    for label, key, group in zip(labels, keys, groups, strict=True):
        if group.any():
            mean, ci = mean_interval(scores[group])
            out.append({"value": key, "label": label, "n": int(group.sum()), "mean": mean, "ci": ci})
    return out


def peak(levels_: list[dict], higher_is_better: bool) -> dict | None:
    """The best level when it lies strictly inside the explored range (an inverted U), else None."""
    if len(levels_) < 3:
        return None
    means = [lv["mean"] for lv in levels_]
    best = int(np.argmax(means) if higher_is_better else np.argmin(means))
    return levels_[best] if 0 < best < len(levels_) - 1 else None


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def varying(configs: dict[str, dict]) -> dict[str, dict]:
    """The config keys whose value differs across runs (flattened keys; identifiers, seeds, paths and service
    addresses left out): param -> {run_key: value}. A key missing from some runs varies too (its value there is
    None). One setting written twice under a longer name with the same value in every run (chz's raw ``X_lr`` beside
    ``lr``, ``args.lr`` beside ``lr``) is one parameter under its shorter name, not two that always moved together."""
    keys = {k for config in configs.values() for k in config}
    out = {}
    for key in sorted(keys):
        if NOT_HYPERPARAMETERS.search(key):
            continue
        values = {run: config.get(key) for run, config in configs.items()}
        hashable = {json_key(v) for v in values.values()}
        if len(hashable) > 1:
            out[key] = values
    for key in sorted(out, key=len, reverse=True):
        if any(_copy_of(key, other, out) for other in out if other != key):
            del out[key]
    return out


def configured(configs: list[dict]) -> bool:
    """Whether any of these (flattened) configs holds a setting beyond seeds and identifiers."""
    return any(not NOT_HYPERPARAMETERS.search(key) for config in configs for key in config)


def _copy_of(key: str, other: str, params: dict[str, dict]) -> bool:
    """``key`` is ``other`` under a prefix (``X_lr``, ``args.lr`` of ``lr``) with its value in every run."""
    return (
        len(key) > len(other) + 1
        and key.endswith(other)
        and key[-len(other) - 1] in "._/"
        and all(json_key(params[key][run]) == json_key(value) for run, value in params[other].items())
    )


def json_key(value) -> str:
    return (
        repr(value)
        if not isinstance(value, (list, dict))
        else str(sorted(value.items()) if isinstance(value, dict) else value)
    )


def confounded(params: dict[str, dict], runs: list[str]) -> dict[str, list[str]]:
    """Parameters that move together over these runs (|rank correlation| ≥ COLLINEAR, or one value of one always
    with one value of the other): each is listed with the others, and none gets credit of its own."""
    out: dict[str, list[str]] = {p: [] for p in params}
    encoded = {p: _codes([params[p][r] for r in runs]) for p in params}
    for a, b in combinations(params, 2):
        xa, xb = encoded[a], encoded[b]
        rho = spearman(xa, xb)
        same_partition = _one_to_one(xa, xb)
        if same_partition or (rho is not None and abs(rho) >= COLLINEAR):
            out[a].append(b)
            out[b].append(a)
    return out


def _codes(values: list) -> np.ndarray:
    if all(is_number(v) for v in values):
        return np.asarray(values, float)
    order = {v: i for i, v in enumerate(sorted({json_key(v) for v in values}))}
    return np.asarray([order[json_key(v)] for v in values], float)


def _one_to_one(a: np.ndarray, b: np.ndarray) -> bool:
    pairs = set(zip(a.tolist(), b.tolist(), strict=True))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist())) and len(pairs) > 1


def pareto_front(scores: list[float], costs: list[float], higher_is_better: bool) -> list[int]:
    """Indices of the runs no other run beats on score at equal or lower cost."""
    front = []
    for i, (s, c) in enumerate(zip(scores, costs, strict=True)):
        better = (lambda a, b: a > b) if higher_is_better else (lambda a, b: a < b)
        dominated = any(
            (better(s2, s) and c2 <= c) or (s2 == s and c2 < c)
            for j, (s2, c2) in enumerate(zip(scores, costs, strict=True))
            if j != i
        )
        if not dominated:
            front.append(i)
    return front
