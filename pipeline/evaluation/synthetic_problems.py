"""The problem injections of the synthetic generator: per variant, the knob tweaks and the changes to the latent
processes that make a check's condition appear, each with its exact label."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pipeline.evaluation.synthetic_signals import _ar_t, _comp_key, _logit, _onset, _ramp, _Run
from pipeline.evaluation.synthetic_spec import DEAD_FUNC, SHAPING_FUNCS, TASK_FUNCS, _pick

# ------------------------------------------------------------------------------------------------- problems


def _k_collapse(run):
    run.knobs["rise"] = max(run.knobs["rise"], 1.3)


def _k_plateau(run):
    """Nothing improves: not the task, and not the shaping terms either (the total reward is what stalls)."""
    k = run.knobs
    k["rise"], k["drift"], k["curve"] = 0.0, 0.0, "linear"
    k["phi"], k["sigma_r"] = min(k["phi"], 0.6), min(k["sigma_r"], 0.15)  # flat within its noise, not wandering
    k["q0"] = k["q1"] = run.rng.uniform(0.3, 0.8)
    k["q2_rise"] = 0.0


def _k_zero_var(run):
    run.plan.components = [c for c in run.plan.components if c[1] != "xml"] or run.plan.components[:1]


def _k_length_growth(run):
    run.knobs["len_mode"] = "stable"
    run.knobs["rise"] = max(0.5, min(run.knobs["rise"], 1.0))


def _k_hack(run):
    run.knobs["acc0"] = run.rng.uniform(0.02, 0.08)
    run.knobs["rise"] = 0.0
    run.knobs["drift"] = -abs(run.knobs["drift"]) * 0.5
    run.knobs["sigma_r"] = min(run.knobs["sigma_r"], 0.1)


def _k_hack_late(run):
    run.knobs["rise"] = max(run.knobs["rise"], 1.2)
    run.knobs["curve"] = "linear"
    run.knobs["drift"] = 0.0


def _k_stable_length(run):
    run.knobs["len_mode"] = "stable"


_VARIANT_KNOBS: dict[str, Callable] = {
    "collapse_floor": _k_collapse,
    "collapse_below_start": _k_collapse,
    "plateau": _k_plateau,
    "plateau_conservative": _k_plateau,
    "zero_var_saturated": _k_zero_var,
    "length_growth": _k_length_growth,
    "hack_components": _k_hack,
    "dominant": _k_hack,
    "hack_late": _k_hack_late,
    "hack_verl": _k_hack_late,
    "trunc_small_limit": _k_stable_length,
    "trunc_loops": _k_stable_length,
}


def _collapse(run: _Run, below_start: bool) -> None:
    rng, L, n = run.rng, run.L, run.n
    k = _onset(rng, n, 0.4, 0.85, pre=25, post=15)
    r = _ramp(n, k, int(rng.integers(1, 4)))
    if below_start:
        floor = float(np.median(L["task"][:5])) - rng.uniform(1.5, 2.5)
        fmt_floor = _logit(max(0.02, run.knobs["q0"] * 0.5))
    else:
        floor, fmt_floor = -4.5, -3.5  # nearly every answer wrong and badly formatted: the reward's floor
    L["task"] = L["task"] * (1 - r) + floor * r
    L["eval"] = L["eval"] * (1 - r) + floor * r
    L["fmt"] = L["fmt"] * (1 - r) + fmt_floor * r
    L["fmt2"] = L["fmt2"] * (1 - r) + fmt_floor * r
    run.label("reward_collapse", k, None, run.key("reward"), "error")
    run.knobs["collapse_at"] = k


def _entropy_collapse(run: _Run) -> None:
    rng, L, n = run.rng, run.L, run.n
    k = _onset(rng, n, 0.3, 0.8, pre=15, post=10)
    floor, half = rng.uniform(0.004, 0.04), rng.uniform(0.4, 1.2)
    idx = np.arange(n)
    decay = 0.5 ** (np.maximum(idx - k + 1, 0) / half)
    L["entropy"] = floor + (L["entropy"] - floor) * decay
    run.label("entropy_collapse", k, None, run.key("entropy"), "error")


def _length_collapse(run: _Run) -> None:
    rng, L, n = run.rng, run.L, run.n
    k = _onset(rng, n, 0.3, 0.85, pre=15, post=8)
    target = rng.uniform(2.0, 12.0)
    r = _ramp(n, k, int(rng.integers(1, 4)))
    L["len"] = np.exp(np.log(L["len"]) * (1 - r) + math.log(target) * r)
    run.label("response_length_collapse", k, None, run.key("len"), "error")


def _length_growth(run: _Run) -> None:
    rng, L, n, t = run.rng, run.L, run.n, run.t
    k = _onset(rng, n, 0.15, 0.45, pre=12, post=40)
    factor, gamma = rng.uniform(2.2, 4.0), rng.uniform(0.8, 1.3)
    u = np.clip((t - t[k - 1]) / (1 - t[k - 1]), 0, 1) ** gamma
    L["len"] = L["len"] * (1 + (factor - 1) * u)
    run.label("response_length_growth", k, None, run.key("len"), "warn")


def _trunc_small_limit(run: _Run) -> None:
    """max_completion_length set too small for the task: a large share is cut from the first step on."""
    rng, L, k = run.rng, run.L, run.knobs
    share = rng.uniform(0.08, 0.55)
    limit = float(_pick(rng, (128, 192, 256, 384, 512)))
    z = float(_inv_ncdf(1 - share))
    s = k["sigma_s"]
    median = limit / math.exp(s * z)
    L["len"] = L["len"] / np.median(L["len"][:5]) * median * math.exp(s * s / 2)
    L["limit"] = limit
    run.label("response_truncation", 0, None, run.key("clip_share"), "error" if share >= 0.15 else "warn")


def _trunc_pinned(run: _Run) -> None:
    rng, L, n = run.rng, run.L, run.n
    k = 0 if rng.random() < 0.4 else _onset(rng, n, 0.3, 0.8, pre=12, post=10)
    rho = rng.uniform(0.95, 0.995)
    L["loops"] = rho * _ramp(n, k, int(rng.integers(1, 4)))
    run.label("response_truncation", k, None, run.key("len"), "error")


def _trunc_loops(run: _Run) -> None:
    rng, L, n = run.rng, run.L, run.n
    k = _onset(rng, n, 0.3, 0.8, pre=15, post=12)
    rho = rng.uniform(0.07, 0.45)
    L["loops"] = rho * _ramp(n, k, int(rng.integers(1, 3)))
    run.label("response_truncation", k, None, run.key("clip_share"), "error" if rho >= 0.15 else "warn")


def _inv_ncdf(p: float) -> float:
    lo, hi = -10.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _kl_spike(run: _Run, with_grad: bool = False) -> None:
    rng, n = run.rng, run.n
    k = _onset(rng, n, 0.25, 0.9, pre=12, post=3)
    width = int(rng.integers(1, 4))
    peak = math.exp(rng.uniform(math.log(0.3), math.log(3.0)))
    vals = [peak * 0.55**j for j in range(width)]
    vals = [v for v in vals if v > 0.22] or [peak]
    width = len(vals)

    def inject(r: _Run) -> None:
        r.obs["kl"][k : k + width] = vals
        if r.plan.framework == "trl" and "loss" in r.obs:
            r.obs["loss"][k : k + width] += r.knobs["beta"] * np.asarray(vals)

    run.post.append(inject)
    run.label("kl_spike", k, k + width - 1, run.key("kl"), "error" if peak >= 1.0 else "warn")
    if with_grad:
        factor = math.exp(rng.uniform(math.log(8.0), math.log(40.0)))

        def grad(r: _Run) -> None:
            r.obs["grad"][k] *= factor

        run.post.append(grad)
        run.label("grad_norm_spike", k, k, run.key("grad"), "error" if factor >= 10 else "warn")


def _kl_drift(run: _Run) -> None:
    """KL climbs steadily (geometrically) from its healthy level to well above 0.1 over the rest of the run."""
    rng, L, n, t = run.rng, run.L, run.n, run.t
    k = _onset(rng, n, 0.2, 0.45, pre=10, post=50)
    final = math.exp(rng.uniform(math.log(0.15), math.log(1.5)))
    base = float(np.median(L["kl"][max(0, k - 10) : k]))
    final = max(final, 3.5 * base)
    u = np.clip((t - t[k - 1]) / (1 - t[k - 1]), 0, 1) ** rng.uniform(0.8, 1.2)
    L["kl"] = L["kl"] * (final / base) ** u
    run.label("kl_drift", k, None, run.key("kl"), "error" if final >= 1.0 else "warn")


def _grad_spike(run: _Run) -> None:
    rng, n = run.rng, run.n
    k = _onset(rng, n, 0.25, 0.9, pre=12, post=2)
    width = int(rng.integers(1, 3))
    factor = math.exp(rng.uniform(math.log(6.0), math.log(60.0)))

    def inject(r: _Run) -> None:
        r.obs["grad"][k : k + width] *= factor

    run.post.append(inject)
    run.label("grad_norm_spike", k, k + width - 1, run.key("grad"), "error" if factor >= 10 else "warn")


def _nan_episode(run: _Run) -> None:
    rng, n = run.rng, run.n
    k = _onset(rng, n, 0.2, 0.9, pre=8, post=3)
    width = int(rng.integers(1, 5))
    grad_value = _pick(rng, (math.nan, math.inf))

    def inject(r: _Run) -> None:
        r.obs["loss"][k : k + width] = math.nan
        r.obs["grad"][k : k + width] = grad_value

    run.post.append(inject)
    run.label("loss_nonfinite", k, k + width - 1, run.key("loss"), "error")


def _nan_terminal(run: _Run) -> None:
    rng, n = run.rng, run.n
    k = _onset(rng, n, 0.5, 0.9, pre=25, post=2)
    dies = min(n, k + int(rng.integers(1, 7)))

    def inject(r: _Run) -> None:
        for name in ("loss", "grad", "kl", "entropy"):
            if name in r.obs:
                r.obs[name][k:] = math.nan
        r.end = dies

    run.post.append(inject)
    run.label("loss_nonfinite", k, None, run.key("loss"), "error")


def _zero_var(run: _Run) -> None:
    rng, L, n = run.rng, run.L, run.n
    k = _onset(rng, n, 0.5, 0.8, pre=25, post=12)
    r = _ramp(n, k, 1)
    for name, top in (("task", 9.0), ("fmt", 10.0), ("fmt2", 10.0)):
        L[name] = L[name] * (1 - r) + top * r
    run.knobs["zero_var_at"] = k  # labelled once the shares are observed


def _plateau(run: _Run, conservative: bool) -> None:
    rng, L, n, t = run.rng, run.L, run.n, run.t
    k = 0  # the reward never improved: flat from the first step
    if conservative:  # the policy barely moves: a tiny learning rate, KL near 0 and flat, entropy unchanged
        L["kl"] = math.exp(rng.uniform(math.log(2e-5), math.log(8e-4))) * np.exp(
            0.1 * _ar_t(rng, n, 0.3, run.knobs["dof"], 2.5)
        )
        factor = rng.uniform(0.002, 0.02)
        L["lr"] = L["lr"] * factor
        run.knobs["lr0"] *= factor
        L["entropy"] = run.knobs["e0"] * np.exp(0.02 * _ar_t(rng, n, 0.3, run.knobs["dof"], 3.0))
        run.label("too_conservative", k, None, run.key("kl"), "warn")
    else:
        L["kl"] = np.maximum(L["kl"], 0.01 * np.minimum(1.0, t / 0.1))
    run.label("reward_plateau", k, None, run.key("reward"), "warn")


def _hack_components(run: _Run) -> None:
    """The task component stays near 0 while one shaping term climbs and carries the reward: reward hacking (the
    reward rises, the task does not) and a dominant shaping component, from the step the term starts to climb."""
    rng, L, n, t = run.rng, run.L, run.n, run.t
    _ensure_components(run, n_shaping=2)
    t0, w = rng.uniform(0.25, 0.5), rng.uniform(0.05, 0.12)
    rise = 1 / (1 + np.exp(-(t - t0) / w))
    L["fmt"] = _logit(rng.uniform(0.03, 0.1)) + rng.uniform(4.0, 5.5) * rise + 0.1 * _ar_t(rng, n, 0.5, 3.0)
    L["fmt2"] = _logit(rng.uniform(0.85, 0.95)) + 0.15 * _ar_t(rng, n, 0.5, 3.0)  # already saturated
    k = int(np.searchsorted(t, t0 - 1.5 * w))
    k = max(3, min(k, n - 20))
    run.knobs["n_evals"] = max(24, int(12 * n / max(1, n - k)))
    dominant_func = run.plan.components[1][0]
    run.label("reward_hacking", k, None, run.key("reward"), "warn")
    run.label("reward_component_dominant", k, None, _comp_key(run.plan, dominant_func), "warn")


def _hack_late(run: _Run) -> None:
    """Task and format learn together; then the task stalls and slips while a shaping term takes over."""
    rng, L, n, t = run.rng, run.L, run.n, run.t
    _ensure_components(run, n_shaping=2)
    k = _onset(rng, n, 0.4, 0.6, pre=30, post=40)
    level = L["task"][max(0, k - 5) : k].mean()
    after = np.arange(n) >= k
    slip = rng.uniform(0.2, 0.6) * np.clip((t - t[k]) / (1 - t[k]), 0, 1)
    L["task"] = np.where(after, level - slip + run.knobs["sigma_r"] * _ar_t(rng, n, 0.5, 3.0), L["task"])
    L["eval"] = np.where(
        after,
        level + run.knobs["eval_offset"] - slip * rng.uniform(0.8, 1.5) + 0.05 * _ar_t(rng, n, 0.5, 3.0),
        L["eval"],
    )
    u = np.clip((t - t[k - 1]) / (1 - t[k - 1]), 0, 1)
    L["fmt2"] = np.where(after, _logit(0.08) + 5.0 * u**0.8, _logit(0.08)) + 0.1 * _ar_t(rng, n, 0.5, 3.0)
    run.label("reward_hacking", k, None, run.key("reward"), "warn")
    if run.plan.framework == "trl":  # the second shaping term (fmt2) climbs 0.08 -> ~1 and carries the reward
        run.label("reward_component_dominant", k, None, _comp_key(run.plan, run.plan.components[2][0]), "warn")
    run.knobs["n_evals"] = max(24, int(12 * n / max(1, n - k)))


def _hack_verl(run: _Run) -> None:
    """The training score keeps rising (the model memorises the training prompts) while validation accuracy stalls."""
    rng, L, n, t = run.rng, run.L, run.n, run.t
    k = _onset(rng, n, 0.35, 0.6, pre=30, post=40)
    level = L["eval"][max(0, k - 5) : k].mean()
    after = np.arange(n) >= k
    u = np.clip((t - t[k - 1]) / (1 - t[k - 1]), 0, 1)
    L["eval"] = np.where(after, level - rng.uniform(0.1, 0.4) * u + 0.05 * _ar_t(rng, n, 0.5, 3.0), L["eval"])
    L["score_extra"] = np.where(after, rng.uniform(1.0, 2.0) * u, 0.0)
    run.label("reward_hacking", k, None, run.key("reward"), "warn")
    run.knobs["val_every"] = int(max(1, min(int(rng.integers(3, 8)), (n - k) // 10)))


def _ensure_components(run: _Run, n_shaping: int) -> None:
    p = run.plan
    if p.framework != "trl":
        return
    task = next((c for c in p.components if c[1] == "task"), (_pick(run.rng, TASK_FUNCS), "task"))
    shaping = [c for c in p.components if c[1] not in ("task", "dead_zero", "dead_max")]
    names = [c[0] for c in shaping]
    for name in SHAPING_FUNCS:
        if len(shaping) >= n_shaping:
            break
        if name not in names:
            shaping.append((name, "binary"))
    shaping = [(name, "binary") for name, _ in shaping[:n_shaping]]  # the story needs 0/1 terms
    p.components = [task] + shaping + [c for c in p.components if c[1] in ("dead_zero", "dead_max")]


def _dead(run: _Run, kind: str) -> None:
    p = run.plan
    if not any(c[1] == "task" for c in p.components):
        _ensure_components(run, 1)
    p.components = [c for c in p.components if c[0] != DEAD_FUNC] + [(DEAD_FUNC, kind)]
    run.label("reward_component_dead", 0, None, _comp_key(p, DEAD_FUNC), "warn")


def _dup_restart(run: _Run) -> None:
    rng, n = run.rng, run.n
    save_every = int(rng.integers(4, 12))  # logged points between checkpoints
    crash = _onset(rng, n, 0.3, 0.8, pre=save_every + 4, post=6)
    ckpt = (crash // save_every) * save_every - 1  # last logged point covered by the checkpoint
    if crash - ckpt < 2:
        ckpt -= save_every
    ckpt = max(ckpt, 1)
    run.dup = {"kind": "restart", "first": ckpt + 1, "last": crash}
    run.label("duplicate_steps", ckpt + 1, crash, "history.versions", "warn")


def _dup_double(run: _Run) -> None:
    rng, n = run.rng, run.n
    k = 0 if rng.random() < 0.5 else _onset(rng, n, 0.2, 0.7, pre=5, post=5)
    run.dup = {"kind": "double", "first": k}
    run.label("duplicate_steps", k, None, "train/global_step", "warn")


def _slow_steps(run: _Run) -> None:
    rng, n = run.rng, run.n
    k = _onset(rng, n, 0.3, 0.8, pre=25, post=10)
    factor = rng.uniform(2.0, 3.0)
    end = None
    if rng.random() < 0.4 and n - k > 20:
        end = k + int(rng.integers(8, min(25, n - k - 5)))
    r = _ramp(n, k, int(rng.integers(1, 3)))
    if end is not None:
        r[end + 1 :] = 0.0
    run.L["time"] = run.L["time"] * (1 + (factor - 1) * r)
    run.label("throughput_drop", k, end, run.key("step_time"), "warn")


def _clip_high(run: _Run) -> None:
    rng, L, n = run.rng, run.L, run.n
    k = _onset(rng, n, 0.3, 0.75, pre=15, post=12)
    level = rng.uniform(0.33, 0.65)
    r = _ramp(n, k, int(rng.integers(1, 4)))
    L["clipfrac"] = L["clipfrac"] * (1 - r) + level * np.exp(0.08 * _ar_t(rng, n, 0.5, 3.0, 3.0)) * r
    L["lr"] = L["lr"] * (1 + 9 * (np.arange(n) >= k))  # someone raised the learning rate on resume
    L["grad"] = L["grad"] * (1 + 0.5 * r)
    run.label("clip_fraction_high", k, None, run.key("clipfrac"), "error" if level > 0.5 else "warn")


_VARIANT_FN: dict[str, Callable] = {
    "collapse_floor": lambda r: _collapse(r, False),
    "collapse_below_start": lambda r: _collapse(r, True),
    "entropy_collapse": _entropy_collapse,
    "length_collapse": _length_collapse,
    "length_growth": _length_growth,
    "trunc_small_limit": _trunc_small_limit,
    "trunc_pinned": _trunc_pinned,
    "trunc_loops": _trunc_loops,
    "kl_spike": _kl_spike,
    "kl_grad_spike": lambda r: _kl_spike(r, True),
    "kl_drift": _kl_drift,
    "grad_spike": _grad_spike,
    "nan_episode": _nan_episode,
    "nan_terminal": _nan_terminal,
    "zero_var_saturated": _zero_var,
    "plateau": lambda r: _plateau(r, False),
    "plateau_conservative": lambda r: _plateau(r, True),
    "hack_components": _hack_components,
    "dominant": _hack_components,
    "hack_late": _hack_late,
    "hack_verl": _hack_verl,
    "dead_zero": lambda r: _dead(r, "dead_zero"),
    "dead_max": lambda r: _dead(r, "dead_max"),
    "dup_restart": _dup_restart,
    "dup_double": _dup_double,
    "slow_steps": _slow_steps,
    "clip_high": _clip_high,
}
