"""The latent signal model of the synthetic generator: noise and shape helpers, the simulated run (``_Run``) with its
metric keys, the random knobs drawn per run and the latent processes (task skill, KL, entropy, lengths...)."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from pipeline.evaluation.synthetic_spec import VARIANTS, Label, _pick, _Plan

# ----------------------------------------------------------------------------------------------------- helpers


def _expit(x):
    return 1.0 / (1.0 + np.exp(-np.clip(x, -40, 40)))


def _logit(p):
    return math.log(p / (1 - p))


_ERF = np.frompyfunc(math.erf, 1, 1)


def _ncdf(z):
    return 0.5 * (1.0 + _ERF(np.asarray(z, dtype=float) / math.sqrt(2.0)).astype(float))


def _ar_t(rng, n: int, phi: float, dof: float, clip: float = 6.0) -> np.ndarray:
    """AR(1) with Student-t innovations (clipped at ``clip`` scale units), of roughly unit stationary scale."""
    e = np.clip(rng.standard_t(dof, n), -clip, clip)
    s = math.sqrt(1.0 - phi * phi)
    vals = (e * s).tolist()
    x = e[0]
    out = [x]
    for v in vals[1:]:
        x = phi * x + v
        out.append(x)
    return np.asarray(out)


def _shape(rng, kind: str, t: np.ndarray) -> np.ndarray:
    """A learning curve on progress t in (0, 1], 0 at the start and 1 at the end."""
    if kind == "saturating":
        tau = rng.uniform(0.05, 0.25)
        return (1 - np.exp(-t / tau)) / (1 - math.exp(-1 / tau))
    if kind == "linear":
        return t ** rng.uniform(0.85, 1.2)
    if kind == "sigmoid":
        t0, w = rng.uniform(0.3, 0.6), rng.uniform(0.05, 0.12)
        lo, hi = 1 / (1 + math.exp(t0 / w)), 1 / (1 + math.exp(-(1 - t0) / w))
        return (1 / (1 + np.exp(-(t - t0) / w)) - lo) / (hi - lo)
    if kind == "converge":
        tc = rng.uniform(0.2, 0.45)
        u = np.minimum(t / tc, 1.0)
        return 1 - (1 - u) ** 2
    return np.sqrt(t)


def _onset(rng, n: int, lo: float, hi: float, pre: int = 20, post: int = 10) -> int:
    a = max(pre, int(lo * n))
    b = max(a + 1, min(n - post, int(hi * n)))
    return int(rng.integers(a, b))


def _ramp(n: int, k: int, width: int) -> np.ndarray:
    """0 before k, rising to 1 over ``width`` logged points from k (already 1/width at k)."""
    idx = np.arange(n)
    return np.clip((idx - k + 1) / max(1, width), 0.0, 1.0)


def _window(x: np.ndarray, w: int, fn, trailing: bool = False) -> np.ndarray:
    """fn over the last ``w`` points ending at each point (or ending just before it, ``trailing``); NaN-aware."""
    n = len(x)
    pad = np.concatenate([np.full(w, np.nan), x])
    view = np.lib.stride_tricks.sliding_window_view(pad, w)
    view = view[:n] if trailing else view[1 : n + 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(view, axis=1)


def _lr_schedule(rng, steps: np.ndarray, n_steps: int, lr0: float) -> np.ndarray:
    warm = _pick(rng, (0.0, 0.03, 0.1)) * n_steps
    kind = _pick(rng, ("constant", "cosine", "linear"))
    s = steps.astype(float)
    decay = np.clip((s - warm) / max(1.0, n_steps - warm), 0, 1)
    base = {"constant": np.ones_like(s), "cosine": 0.5 * (1 + np.cos(math.pi * decay)), "linear": 1 - decay}[kind]
    return lr0 * base * (np.minimum(1.0, s / warm) if warm > 0 else 1.0)


# ------------------------------------------------------------------------------------------------- simulation


@dataclass
class _Run:
    plan: _Plan
    rng: np.random.Generator
    steps: np.ndarray
    knobs: dict
    L: dict = field(default_factory=dict)  # latent processes at the logged points
    obs: dict = field(default_factory=dict)  # observed series, what is written
    comps: dict = field(default_factory=dict)  # function -> (mean, std) arrays
    timing: dict = field(default_factory=dict)  # verl phases
    labels: list = field(default_factory=list)
    exempt: dict = field(default_factory=dict)  # check -> first index at which its condition is expected
    post: list = field(default_factory=list)  # observation-stage injections
    evals: dict = field(default_factory=dict)  # logged index -> eval values
    config: dict = field(default_factory=dict)
    dup: dict | None = None
    end: int | None = None  # the run died after this many logged points

    @property
    def n(self) -> int:
        return len(self.steps)

    @property
    def t(self) -> np.ndarray:
        return self.steps / self.plan.n_steps

    def key(self, what: str) -> str:
        return _keys(self.plan)[what]

    def label(self, check: str, k: int, end: int | None, metric: str, severity: str, exempt_from: int | None = None):
        self.labels.append(
            Label(check, int(self.steps[k]), None if end is None else int(self.steps[end]), metric, severity)
        )
        self.exempt[check] = k if exempt_from is None else exempt_from


def _keys(p: _Plan) -> dict[str, str]:
    if p.framework == "verl":
        return {
            "reward": "critic/score/mean",
            "kl": "actor/kl_loss",
            "entropy": "actor/entropy",
            "grad": "actor/grad_norm",
            "loss": "actor/pg_loss",
            "len": "response_length/mean",
            "clip_share": "response_length/clip_ratio",
            "clipfrac": "actor/pg_clipfrac",
            "lr": "actor/lr",
            "step_time": "timing_s/step",
            "frac": "",
            "reward_std": "",
        }
    x = p.prefix
    return {
        "reward": x + "reward",
        "reward_std": x + "reward_std",
        "frac": x + "frac_reward_zero_std",
        "kl": x + "kl",
        "entropy": x + "entropy",
        "grad": x + "grad_norm",
        "loss": x + "loss",
        "lr": x + "learning_rate",
        "len": x + ("completions/mean_length" if p.trl_new else "completion_length"),
        "clip_share": x + "completions/clipped_ratio",
        "clipfrac": x + "clip_ratio/region_mean",
        "step_time": "",
    }


def _comp_key(p: _Plan, func: str) -> str:
    return f"{p.prefix}rewards/{func}" + ("/mean" if p.comp_mean_suffix else "")


def _draw_length(rng, p: _Plan) -> tuple[int, int]:
    """(n_steps, log_every) with at least 25 logged points."""
    need = max([25] + [VARIANTS[v].min_points for v in p.variants])
    if p.framework == "verl":
        r = 0.0 if p.flavour == "noisy_short" else rng.random()
        n = (
            int(rng.integers(30, 90))
            if r < 0.2
            else int(rng.integers(100, 420))
            if r < 0.8
            else int(rng.integers(420, 900))
        )
        every = 1
    else:
        kind = _pick(rng, ("short", "sparse", "sparse", "medium", "medium", "long"))
        if p.flavour == "noisy_short":
            kind = "short"
        if p.flavour == "long_sparse":
            kind = "sparse"
        if kind == "short":
            n, every = int(rng.integers(30, 90)), 1
        elif kind == "sparse":
            every = _pick(rng, (5, 10))
            n = every * int(rng.integers(25, 51))
        elif kind == "medium":
            every = _pick(rng, (1, 1, 5))
            n = int(rng.integers(150, 800))
        else:
            every = _pick(rng, (1, 5, 10))
            n = int(rng.integers(800, 2001))
    if n // every < need:
        n = every * (need + int(rng.integers(0, 20)))
    return n, every


def _draw_knobs(rng, p: _Plan) -> dict:
    k: dict = {}
    k["dof"] = float(_pick(rng, (2.0, 2.5, 3.0, 4.0)))
    k["phi"] = rng.uniform(0.0, 0.9)
    k["sigma_r"] = rng.uniform(0.05, 0.3)
    k["curve"] = _pick(rng, ("saturating", "linear", "sigmoid", "converge", "sqrt"))
    k["acc0"] = rng.uniform(0.1, 0.35)
    k["rise"] = min(rng.uniform(1.2, 2.6), _logit(0.8) - _logit(k["acc0"]))
    k["drift"] = rng.normal(0.0, 0.12)
    k["sd_prompt"] = rng.uniform(0.8, 1.8)
    k["G"] = int(_pick(rng, (4, 6, 8, 12, 16)))
    k["B"] = int(_pick(rng, (32, 64, 128) if p.framework == "verl" else (8, 16, 32)))
    k["q0"], k["q1"], k["q_tau"] = rng.uniform(0.05, 0.6), rng.uniform(0.8, 0.95), rng.uniform(0.03, 0.2)
    k["q2_0"], k["q2_rise"], k["q2_tau"] = rng.uniform(0.1, 0.5), rng.uniform(1.0, 2.5), rng.uniform(0.05, 0.5)
    k["e0"], k["e_ratio"], k["e_tau"] = rng.uniform(0.3, 1.3), rng.uniform(0.45, 0.9), rng.uniform(0.2, 1.0)
    k["sigma_e"] = rng.uniform(0.02, 0.07)
    k["k_end"], k["k_tau"] = math.exp(rng.uniform(math.log(0.01), math.log(0.045))), rng.uniform(0.05, 0.4)
    k["sigma_k"] = rng.uniform(0.08, 0.25)
    k["beta"] = float(_pick(rng, (0.001, 0.005, 0.01, 0.02, 0.04, 0.1))) if p.has_kl else 0.0
    k["g0"] = math.exp(rng.uniform(math.log(0.05), math.log(5.0)))
    k["g_trend"] = rng.uniform(-0.6, 0.4)
    k["sigma_g"] = rng.uniform(0.06, 0.22)
    k["sigma_l"] = math.exp(rng.uniform(math.log(1e-3), math.log(0.03)))
    k["L0"] = rng.uniform(80, 900)
    k["len_mode"] = _pick(rng, ("stable", "stable", "grow", "shrink"))
    k["len_gamma"] = rng.uniform(0.1, 0.5)
    k["sigma_L"] = rng.uniform(0.02, 0.06)
    k["sigma_s"] = rng.uniform(0.25, 0.5)
    k["prompt_len"] = rng.uniform(60, 400)
    k["clip0"] = math.exp(rng.uniform(math.log(5e-4), math.log(0.03)))
    k["lr0"] = float(_pick(rng, (5e-7, 1e-6, 2e-6, 3e-6, 5e-6, 1e-5, 5e-5)))
    k["T0"] = math.exp(rng.uniform(math.log(20.0), math.log(240.0)))
    k["eval_offset"] = rng.normal(0.0, 0.3)
    k["n_eval"] = int(rng.integers(300, 1300))
    k["noise_switch"] = rng.uniform(0.3, 0.8) if rng.random() < 0.3 else None
    k["outliers"] = int(rng.integers(0, 3))
    return k


class _Redraw(Exception):
    pass


def _latents(run: _Run) -> None:
    rng, k, n, t, p = run.rng, run.knobs, run.n, run.t, run.plan
    L = run.L
    noise_scale = np.ones(n)
    if k["noise_switch"] is not None:  # a regime switch in the noise level (a new data mix, another node)
        noise_scale[t >= k["noise_switch"]] = rng.uniform(0.5, 2.0)
    shape = _shape(rng, k["curve"], t)
    L["shape"] = shape
    a0 = _logit(k["acc0"])
    L["task"] = (
        a0
        + k["rise"] * shape
        + k["drift"] * (t - t[0])
        + k["sigma_r"] * noise_scale * _ar_t(rng, n, k["phi"], k["dof"])
    )
    fast = 1 - np.exp(-t / k["q_tau"])
    L["fmt"] = _logit(k["q0"]) + (_logit(k["q1"]) - _logit(k["q0"])) * fast + 0.15 * _ar_t(rng, n, 0.5, k["dof"])
    L["fmt2"] = _logit(k["q2_0"]) + k["q2_rise"] * (1 - np.exp(-t / k["q2_tau"])) + 0.15 * _ar_t(rng, n, 0.5, k["dof"])
    L["score_extra"] = np.zeros(n)
    L["eval"] = L["task"] - k["sigma_r"] * 0.5 * _ar_t(rng, n, k["phi"], k["dof"]) + k["eval_offset"]
    e_inf = k["e0"] * k["e_ratio"]
    L["entropy"] = (e_inf + (k["e0"] - e_inf) * np.exp(-t / k["e_tau"])) * np.exp(
        k["sigma_e"] * _ar_t(rng, n, rng.uniform(0.2, 0.8), k["dof"], 3.0)
    )
    L["kl"] = (k["k_end"] * (1 - np.exp(-t / k["k_tau"])) / (1 - math.exp(-1 / k["k_tau"])) + 2e-5) * np.exp(
        k["sigma_k"] * _ar_t(rng, n, rng.uniform(0.0, 0.7), k["dof"], 2.5)
    )
    L["grad"] = k["g0"] * np.exp(k["g_trend"] * t + k["sigma_g"] * _ar_t(rng, n, rng.uniform(0.0, 0.6), k["dof"], 2.5))
    mode = k["len_mode"]
    growth = {"stable": np.ones(n), "grow": 1 + k["len_gamma"] * shape, "shrink": 1 - 0.6 * k["len_gamma"] * shape}[
        mode
    ]
    L["len"] = k["L0"] * growth * np.exp(k["sigma_L"] * _ar_t(rng, n, rng.uniform(0.3, 0.9), k["dof"], 3.0))
    L["loops"] = np.zeros(n)  # share of samples that run into the length limit (repetition loops)
    L["clipfrac"] = k["clip0"] * np.exp(0.25 * _ar_t(rng, n, 0.5, k["dof"], 3.0))
    L["lr"] = _lr_schedule(rng, run.steps, p.n_steps, k["lr0"])
    L["time"] = np.ones(n)
    L["limit"] = None  # set when a problem fixes the length limit


def _flavour_knobs(run: _Run) -> None:
    f, k, rng = run.plan.flavour, run.knobs, run.rng
    if f == "converged":
        k["curve"], k["acc0"] = "converge", run.rng.uniform(0.12, 0.25)
        k["rise"] = _logit(0.78) - _logit(k["acc0"]) - rng.uniform(0.0, 0.4)
        k["k_end"] = max(k["k_end"], 0.015)
    elif f == "slow_linear":
        k["curve"] = "linear"
        k["rise"] = max(k["rise"], 1.0)
    elif f == "sigmoid":
        k["curve"] = "sigmoid"
        k["rise"] = max(k["rise"], 1.2)
    elif f == "noisy_short":
        k["sigma_r"], k["dof"] = rng.uniform(0.3, 0.5), 2.0
        k["sigma_g"] = 0.25
    elif f == "length_with_reward":
        k["len_mode"], k["len_gamma"] = "grow", rng.uniform(0.4, 0.9)
        k["rise"] = max(k["rise"], 1.2)
    elif f == "outliers":
        k["outliers"] = int(rng.integers(2, 5))


def _flavour_latents(run: _Run) -> None:
    f, L, rng, n, t = run.plan.flavour, run.L, run.rng, run.n, run.t
    if f == "small_beta_kl":  # KL grows from 5e-4 to ~0.08 under a small beta: normal
        run.knobs["beta"] = float(_pick(rng, (0.001, 0.002, 0.005)))
        target = rng.uniform(0.06, 0.08)
        L["kl"] = (5e-4 + (target - 5e-4) * t ** rng.uniform(0.5, 1.0)) * np.exp(
            0.06 * _ar_t(rng, n, 0.5, run.knobs["dof"], 2.5)
        )
    elif f == "level_shift_up":  # a sudden, lasting improvement (the format clicks): not a problem
        k = _onset(rng, n, 0.3, 0.7, pre=8, post=8)
        jump = rng.uniform(0.6, 1.2) * _ramp(n, k, int(rng.integers(1, 4)))
        L["task"] = L["task"] + jump
        L["eval"] = L["eval"] + jump
    elif f == "data_shift_down":  # harder prompts mixed in: the reward steps down a little and goes on learning
        k = _onset(rng, n, 0.3, 0.7, pre=8, post=8)
        L["task"] = L["task"] - rng.uniform(0.2, 0.4) * _ramp(n, k, 2)
    if run.knobs["outliers"] and f != "small_beta_kl":  # single-point outliers: one odd batch, not a problem
        for _ in range(run.knobs["outliers"]):
            i = int(rng.integers(3, n - 1))
            what = _pick(rng, ("task", "grad", "kl", "len", "entropy"))
            if what == "task":
                L["task"][i] -= rng.uniform(1.5, 3.0)
            elif what == "grad":
                L["grad"][i] *= rng.uniform(1.6, 2.4)
            elif what == "kl":
                L["kl"][i] = min(L["kl"][i] * rng.uniform(1.5, 2.0), 0.09)
            elif what == "len":
                L["len"][i] *= rng.uniform(0.75, 1.3)
            else:
                L["entropy"][i] *= rng.uniform(0.6, 0.8)
