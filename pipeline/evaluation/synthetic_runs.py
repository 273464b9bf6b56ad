"""A second, independent generator of labelled GRPO-like training runs, for scoring the anomaly checks on shapes
nobody tuned them to.

``pipeline.demo.runs`` writes the demo; the checks were developed against it, so its precision/recall says little
about unseen runs. This module shares no code and no modelling choices with it:

- **Outputs** are mostly what trainers write themselves: JSONL metric logs (one folder per run holding
  ``metrics.jsonl``; the step field varies among ``step``, ``global_step``, ``_step`` (a W&B history export, with
  ``train/global_step`` as the trainer counter), ``train/global_step`` and verl's ``{"step": N, "data": {...}}``),
  Hugging Face ``trainer_state.json`` (``logging_steps`` 1, 5 or 10, sometimes with ``checkpoint-N`` snapshots), and
  a few real W&B offline runs written with the ``wandb`` library. Trainer logs go to ``OUT/trainer_logs``
  (``GRPOLENS_TRAINER_LOGS``), W&B runs to ``OUT/wandb`` (``GRPOLENS_WANDB_DIRS``).
- **Key styles**: TRL (older: ``completion_length``, ``rewards/<f>``; newer: ``completions/*``, ``rewards/<f>/mean``,
  ``frac_reward_zero_std``, ``entropy``, ``clip_ratio/*``), TRL under W&B (``train/`` prefix) and verl
  (``critic/score/*``, ``actor/*``, ``response_length/*``, ``timing_s/*``, ``val-core/*``). Canonical metrics are only
  written under keys that ``dbt_project/seeds/metric_aliases.csv`` maps; a few unmapped keys are noise.
- **Model**: the reward is not a curve plus noise. A latent policy quality (logit of solving a prompt) follows a
  learning curve (saturating, linear, sigmoid, rise-then-converged, square root) plus AR(1) noise with Student-t
  innovations (2-4 degrees of freedom), slow drifts and optional regime switches; every logged step then samples
  real GRPO groups (prompts x generations, per-prompt difficulty) and per-function rewards, from which the logged
  reward mean, ``reward_std`` (mean within-group std) and ``frac_reward_zero_std`` (share of tied groups) are
  computed as the trainers compute them. KL, entropy, grad norm, lengths and verl's step-time phases have their own
  latent processes; lengths come from a log-normal per-sample distribution cut at the configured maximum.
- **Labels** (``labels.json``): ``[{name, project, run_id, format, problems: [{check, onset_step, end_step, metric,
  severity}]}]`` plus descriptive fields (framework, step_field, scenario, path). About half the runs are healthy,
  including hard negatives (converged runs, KL growing to 0.08 under a small beta, reward level shifts, noisy short
  runs, single-point outliers, validation/checkpoint step-time spikes, evaluation rows sharing the step counter).
  The other half carry one or two injected problems with exact onsets. Steps are the trainer's own step (the
  ``global_step`` a trainer logs, 1-based); for ``_step`` exports and TRL-style W&B runs the warehouse step differs
  and ``pipeline.evaluation.check_eval`` maps labels through ``train/global_step``. ``end_step`` is null when the
  problem lasts to the end. ``run_id`` of trainer-log runs is the ingest's id for the written path (it depends on
  where OUT_DIR is); names are unique per seed, so matching by name also works.
- **Consistency**: every run is checked against the reference's rules of thumb (grpo-signals.md) before it is
  kept: a condition that no label claims (a KL spike, a truncated share >= 5%, zero-variance groups, a phase above
  60% of the step...) makes the run be drawn again, so an unlabelled flag is a real false positive.

Everything is deterministic given the seed (``numpy.random.default_rng`` per run), except W&B's own folder names
and timestamps. ``python -m pipeline.evaluation.synthetic_runs OUT_DIR --seed N --runs K`` writes a set.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHECKS_DIR = PROJECT_ROOT / "sql" / "checks"

# Per-function reward names. Task components match the task pattern of reward_component_dominant (acc, correct,
# math, answer...); shaping components must not.
TASK_FUNCS = ("accuracy_reward", "correctness_reward_func", "math_verify_reward", "answer_match_reward")
SHAPING_FUNCS = (
    "format_reward",
    "xmlcount_reward_func",
    "soft_format_reward_func",
    "tag_count_reward",
    "reasoning_steps_reward",
)
DEAD_FUNC = "strict_format_reward_func"
VERL_DATASETS = ("openai/gsm8k", "math_dapo", "lighteval/MATH")
TRL_STEP_FIELDS = ("step", "global_step", "_step", "train/global_step")
LIMITS = (128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 8192)
BASE_TIME = 1_714_000_000.0


@dataclass
class Label:
    check: str
    onset_step: int
    end_step: int | None
    metric: str
    severity: str


# --------------------------------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Variant:
    """One way to inject a problem. ``needs``: run features it requires; ``families``: what it disturbs (a second
    problem must disturb something else); ``min_points``: logged points it needs."""

    name: str
    check: str
    needs: frozenset = frozenset()
    families: frozenset = frozenset()
    min_points: int = 40
    labels: int = 1  # labels it can produce (a second problem is only added to one-label variants)


def _v(name, check, needs=(), families=(), min_points=40):
    two = name in (
        "collapse_floor",
        "collapse_below_start",
        "kl_grad_spike",
        "plateau_conservative",
        "hack_components",
        "dominant",
    )  # collapses may also leave every group tied (reward_zero_variance)
    return Variant(name, check, frozenset(needs), frozenset(families), min_points, 2 if two else 1)


PROBLEM_CLASSES: dict[str, tuple[Variant, ...]] = {
    "reward_collapse": (
        _v("collapse_floor", "reward_collapse", (), ("reward",), 45),
        _v("collapse_below_start", "reward_collapse", (), ("reward",), 45),
    ),
    "entropy_collapse": (_v("entropy_collapse", "entropy_collapse", ("entropy",), ("entropy",), 40),),
    "response_length_collapse": (_v("length_collapse", "response_length_collapse", (), ("length", "timing"), 40),),
    "response_length_growth": (_v("length_growth", "response_length_growth", ("trl",), ("length",), 80),),
    "response_truncation": (
        _v("trunc_small_limit", "response_truncation", ("clip_key",), ("length",), 30),
        _v("trunc_pinned", "response_truncation", ("trl", "no_clip_key", "known_limit"), ("length",), 30),
        _v("trunc_loops", "response_truncation", ("clip_key",), ("length",), 40),
    ),
    "kl_spike": (
        _v("kl_spike", "kl_spike", ("kl",), ("kl",), 30),
        _v("kl_grad_spike", "kl_spike", ("kl",), ("kl", "grad"), 30),
    ),
    "kl_drift": (_v("kl_drift", "kl_drift", ("kl",), ("kl",), 90),),
    "grad_norm_spike": (_v("grad_spike", "grad_norm_spike", (), ("grad",), 30),),
    "loss_nonfinite": (
        _v("nan_episode", "loss_nonfinite", (), ("loss", "grad"), 25),
        _v("nan_terminal", "loss_nonfinite", ("appendable",), ("loss", "grad", "kl", "entropy", "end"), 30),
    ),
    "reward_zero_variance": (_v("zero_var_saturated", "reward_zero_variance", ("frac",), ("reward",), 50),),
    "reward_plateau": (
        _v("plateau", "reward_plateau", (), ("reward",), 80),
        _v("plateau_conservative", "reward_plateau", ("kl",), ("reward", "kl"), 80),
    ),
    "reward_hacking": (
        _v("hack_components", "reward_hacking", ("components", "eval"), ("reward", "components"), 80),
        _v("hack_late", "reward_hacking", ("components", "eval"), ("reward", "components"), 80),
        _v("hack_verl", "reward_hacking", ("verl", "eval"), ("reward",), 80),
    ),
    "reward_component_dead": (
        _v("dead_zero", "reward_component_dead", ("components",), ("components",), 30),
        _v("dead_max", "reward_component_dead", ("components",), ("components",), 30),
    ),
    # The same story without any task metric: only the per-function rewards show it.
    "reward_component_dominant": (
        _v("dominant", "reward_component_dominant", ("components", "no_eval"), ("reward", "components"), 60),
    ),
    "duplicate_steps": (
        _v("dup_restart", "duplicate_steps", ("jsonl", "not_wandb_export"), ("rows",), 40),
        _v("dup_double", "duplicate_steps", ("wandb_export",), ("rows",), 30),
    ),
    "throughput_drop": (_v("slow_steps", "throughput_drop", ("verl",), ("timing",), 45),),
    "clip_fraction_high": (_v("clip_high", "clip_fraction_high", ("clipfrac",), ("clipfrac", "lr"), 40),),
}
VARIANTS = {v.name: v for vs in PROBLEM_CLASSES.values() for v in vs}
# Problems that can ride along as a second, independent one.
SECONDARY = ("grad_spike", "nan_episode", "dead_zero", "slow_steps", "kl_spike", "dup_restart")
HEALTHY_FLAVOURS = (
    "converged",
    "small_beta_kl",
    "level_shift_up",
    "data_shift_down",
    "noisy_short",
    "outliers",
    "slow_linear",
    "sigmoid",
    "length_with_reward",
    "eval_rows_counter",
    "val_spikes",
    "long_sparse",
)
HEALTHY_NEEDS = {
    "small_beta_kl": {"kl"},
    "eval_rows_counter": {"wandb_export", "eval"},
    "val_spikes": {"verl", "eval"},
    "length_with_reward": {"trl"},
    "long_sparse": {"trl"},
}


# ------------------------------------------------------------------------------------------------------- plan


@dataclass
class _Plan:
    index: int
    seed: int
    name: str = ""
    project: str = ""
    framework: str = "trl"  # trl | verl
    fmt: str = "jsonl"  # jsonl | trainer_state | wandb
    step_field: str = "step"  # step | global_step | _step | train/global_step | verl | log_history | wandb
    variants: list[str] = field(default_factory=list)
    flavour: str = ""  # healthy runs
    trl_new: bool = True
    has_kl: bool = True
    has_entropy: bool = True
    has_frac: bool = True
    has_clip_key: bool = True
    has_len_max: bool = True
    has_clipratio: bool = True
    components: list[tuple[str, str]] = field(default_factory=list)  # (function name, kind)
    comp_mean_suffix: bool = True
    has_eval: bool = False  # task metric under a mapped key (eval/accuracy, val-core/*/acc/mean@*)
    hf_eval: bool = False  # trainer_state eval entries (eval_loss, eval_accuracy: not mapped)
    score_kind: str = "binary"  # verl
    counter: bool = False  # verl training/global_step
    custom_noise: bool = False
    n_steps: int = 100
    log_every: int = 1
    run_id: str = ""
    path: str = ""

    @property
    def prefix(self) -> str:
        return (
            "train/" if self.framework == "trl" and self.step_field in ("_step", "train/global_step", "wandb") else ""
        )

    @property
    def scenario(self) -> str:
        return "+".join(self.variants) if self.variants else f"healthy-{self.flavour}"

    def features(self) -> set[str]:
        f = {self.framework, self.fmt}
        if self.has_kl:
            f.add("kl")
        if self.has_entropy:
            f.add("entropy")
        if self.framework == "trl" and self.trl_new and self.has_frac:
            f.add("frac")
        f.add("clip_key" if self.has_clip_key else "no_clip_key")
        if self.fmt in ("trainer_state", "wandb") or self.has_len_max:
            f.add("known_limit")
        if self.fmt in ("jsonl", "wandb"):
            f.add("appendable")
        if self.components:
            f.add("components")
        f.add("eval" if self.has_eval else "no_eval")
        if self.step_field == "_step":
            f.add("wandb_export")
        else:
            f.add("not_wandb_export")
        if self.framework == "verl" or (self.trl_new and self.has_clipratio):
            f.add("clipfrac")
        return f


def _pick(rng, seq):
    return seq[int(rng.integers(len(seq)))]


def _compose(seed: int, n_runs: int, n_wandb: int) -> list[_Plan]:
    """Which scenario each run gets, and its framework, format and key style."""
    rng = np.random.default_rng([seed, 0x5E7])
    n_problem = n_runs // 2
    classes = list(PROBLEM_CLASSES)
    order = [classes[i] for i in rng.permutation(len(classes))]
    flavours = [HEALTHY_FLAVOURS[i] for i in rng.permutation(len(HEALTHY_FLAVOURS))]
    kinds: list[tuple[list[str], str]] = []
    for i in range(n_problem):
        class_variants = PROBLEM_CLASSES[order[i % len(order)]]
        primary = _pick(rng, class_variants).name
        chosen = [primary]
        if primary != "nan_terminal" and VARIANTS[primary].labels == 1 and rng.random() < 0.3:
            options = [
                s
                for s in SECONDARY
                if s != primary
                and not (VARIANTS[s].families & VARIANTS[primary].families)
                and VARIANTS[s].check != VARIANTS[primary].check
            ]
            if options:
                chosen.append(_pick(rng, options))
        kinds.append((chosen, ""))
    for i in range(n_runs - n_problem):
        kinds.append(([], flavours[i % len(flavours)]))
    kinds = [kinds[i] for i in rng.permutation(len(kinds))]

    plans = []
    for index, (variants, flavour) in enumerate(kinds):
        prng = np.random.default_rng([seed, index, 0xF0])
        for _attempt in range(200):
            plan = _draw_style(prng, index, seed, variants, flavour)
            needs = (
                set().union(*(VARIANTS[v].needs for v in variants)) if variants else set(HEALTHY_NEEDS.get(flavour, ()))
            )
            if needs <= plan.features():
                break
        else:  # a second problem that fits no style: keep the first alone
            variants = variants[:1]
            for _attempt in range(200):
                plan = _draw_style(prng, index, seed, variants, flavour)
                if VARIANTS[variants[0]].needs <= plan.features():
                    break
            else:
                raise RuntimeError(f"no run style fits {variants}")
        plans.append(plan)

    # A few real W&B runs: picked among runs whose style W&B could have produced, re-styled for W&B.
    eligible = [
        p
        for p in plans
        if not ({"dup_restart", "dup_double"} & set(p.variants)) and p.flavour not in ("eval_rows_counter",)
    ]
    for p in [eligible[i] for i in rng.permutation(len(eligible))][:n_wandb]:
        p.fmt, p.step_field = "wandb", "wandb"
    for p in plans:
        tag = p.scenario.replace("_", "-").replace("+", "-")
        p.name = f"s{p.seed}-{p.index:02d}-{p.framework}-{tag}"
        p.project = f"synth-s{p.seed}-{p.framework}"
    return plans


def _draw_style(rng, index, seed, variants, flavour) -> _Plan:
    p = _Plan(index=index, seed=seed, variants=list(variants), flavour=flavour)
    p.framework = "verl" if rng.random() < 0.38 else "trl"
    if p.framework == "verl":
        p.fmt, p.step_field = "jsonl", "verl"
        p.has_kl = rng.random() < 0.85
        p.has_entropy = True
        p.has_frac = False
        p.has_clip_key = True
        p.has_len_max = True
        p.has_eval = rng.random() < 0.7
        p.score_kind = _pick(rng, ("binary", "format_bonus", "pm1"))
        p.counter = rng.random() < 0.5
        p.custom_noise = rng.random() < 0.3
        return p
    r = rng.random()
    p.fmt = "jsonl" if r < 0.62 else "trainer_state"
    p.step_field = _pick(rng, TRL_STEP_FIELDS) if p.fmt == "jsonl" else "log_history"
    p.trl_new = rng.random() < 0.65
    p.has_kl = rng.random() < 0.7
    p.has_entropy = p.trl_new and rng.random() < 0.75
    p.has_frac = p.trl_new and rng.random() < 0.85
    p.has_clip_key = p.trl_new and rng.random() < 0.75
    p.has_len_max = p.trl_new
    p.has_clipratio = p.trl_new and rng.random() < 0.7
    p.comp_mean_suffix = p.trl_new
    n_comp = int(rng.integers(0, 4))  # 0: a single reward function, logged as the total only
    if n_comp or rng.random() < 0.5:
        comps = [(_pick(rng, TASK_FUNCS), "task")]
        for name in rng.permutation(SHAPING_FUNCS)[: max(1, n_comp)]:
            comps.append((str(name), "xml" if name in ("xmlcount_reward_func", "tag_count_reward") else "binary"))
        p.components = comps
    # Evaluation metrics under a key the aliases map (eval/accuracy) only exist where W&B-style keys are written.
    p.has_eval = p.fmt == "jsonl" and rng.random() < 0.45
    p.hf_eval = p.fmt == "trainer_state" and rng.random() < 0.35
    p.custom_noise = rng.random() < 0.4
    return p


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


def _build(plan: _Plan, rng) -> _Run:
    """Draw one run: knobs, latents, problems, observations. Raises _Redraw when an unlabelled condition shows."""
    n_steps, every = _draw_length(rng, plan)
    plan.n_steps, plan.log_every = n_steps, every
    steps = np.arange(every, n_steps + 1, every)
    run = _Run(plan, rng, steps, _draw_knobs(rng, plan))
    _flavour_knobs(run)
    for v in plan.variants:
        _VARIANT_KNOBS.get(v, lambda r: None)(run)
    _latents(run)
    _flavour_latents(run)
    for v in plan.variants:
        _VARIANT_FN[v](run)
    _observe(run)
    for fn in run.post:
        fn(run)
    _implied(run)
    problems = _hidden_problems(run)
    if problems:
        raise _Redraw(problems)
    return run


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


# ------------------------------------------------------------------------------------------------ observation


def _observe(run: _Run) -> None:
    """Sample what the trainer logs from the latents: rewards from real groups, the rest with observation noise."""
    rng, k, p, L, n = run.rng, run.knobs, run.plan, run.L, run.n
    G = k["G"]
    groups = max(4, min(k["B"] * p.log_every, 1024 // G))
    shape3 = (n, groups, G)
    offsets = rng.normal(0.0, k["sd_prompt"], (n, groups))
    p_task = _expit((L["task"] + L["score_extra"])[:, None] + offsets)
    correct = (rng.random(shape3) < p_task[:, :, None]).astype(float)
    obs = run.obs
    if p.framework == "verl":
        fmt_ok = rng.random(shape3) < _expit(L["fmt"])[:, None, None]
        score = {
            "binary": correct,
            "format_bonus": np.where(correct > 0, 1.0, np.where(fmt_ok, 0.1, 0.0)),
            "pm1": 2 * correct - 1,
        }[p.score_kind]
        total = score
        obs["score_max"], obs["score_min"] = total.max(axis=(1, 2)), total.min(axis=(1, 2))
    else:
        total = np.zeros(shape3)
        comps = p.components or [("__single__", "task")]
        for func, kind in comps:
            if kind == "task":
                v = correct
            elif kind == "binary":
                lat = L["fmt"] if func == comps[1][0] else L["fmt2"]
                v = (rng.random(shape3) < _expit(lat[:, None, None] + rng.normal(0, 0.4, (n, groups, 1)))) * 1.0
            elif kind == "xml":
                lat = L["fmt"] if func == comps[1][0] else L["fmt2"]
                v = 0.125 * rng.binomial(4, np.broadcast_to(_expit(lat)[:, None, None], shape3))
            elif kind == "dead_zero":
                v = np.zeros(shape3)
            else:  # dead_max: a term every completion satisfies
                v = np.full(shape3, 0.5)
            total = total + v
            if func != "__single__":
                run.comps[func] = (v.mean(axis=(1, 2)), v.std(axis=(1, 2)))
    obs["reward"] = total.mean(axis=(1, 2))
    gstd = total.std(axis=2, ddof=1)
    obs["reward_std"] = gstd.mean(axis=1)
    obs["frac"] = (np.ptp(total, axis=2) == 0).mean(axis=1)
    obs["reward_max"], obs["reward_min"] = total.max(axis=(1, 2)), total.min(axis=(1, 2))
    obs["adv_mean"] = rng.normal(0.0, 2e-3, n)
    obs["adv_max"] = np.where(gstd.max(axis=1) > 0, rng.uniform(1.0, 2.6, n), 0.0)
    obs["adv_min"] = -obs["adv_max"] * rng.uniform(0.6, 1.0, n)

    obs["kl"] = L["kl"].copy()
    obs["entropy"] = L["entropy"].copy()
    obs["grad"] = L["grad"].copy()
    obs["lr"] = L["lr"].copy()
    obs["clipfrac"] = np.clip(L["clipfrac"], 0, 1)
    noise = k["sigma_l"] * _ar_t(rng, n, 0.2, k["dof"], 5.0)
    obs["loss"] = (k["beta"] * obs["kl"] + noise) if p.framework == "trl" else noise * 3
    obs["ppo_kl"] = np.abs(rng.normal(0, 2e-4, n)) * (1 + 50 * obs["clipfrac"])

    # Lengths: log-normal per-sample lengths around the latent mean, cut at the configured limit.
    s = k["sigma_s"]
    mean_len = L["len"]
    limit = L["limit"]
    if limit is None:
        need = float(np.max(mean_len)) * math.exp(3.2 * s)
        limit = float(next((m for m in LIMITS if m >= need), LIMITS[-1]))
        if need > limit:  # stays untruncated whatever the limit
            limit = float(math.ceil(need / 1024) * 1024)
    run.config["max_length"] = int(limit)
    mu = np.log(mean_len) - s * s / 2
    zc = (math.log(limit) - mu) / s
    p_clip = 1 - _ncdf(zc)
    trunc_mean = np.exp(mu + s * s / 2) * _ncdf(zc - s) + limit * p_clip
    samples = groups * G
    loops = L["loops"]
    clipped = rng.binomial(samples, np.clip(p_clip * (1 - loops) + loops, 0, 1)) / samples
    obs["clip_share"] = clipped
    obs["len"] = np.minimum(
        limit, ((1 - loops) * trunc_mean + loops * limit) * (1 + rng.normal(0, s / math.sqrt(samples), n))
    )
    zmax = math.sqrt(2 * math.log(samples)) + rng.normal(0, 0.25, n)
    obs["len_max"] = np.where(clipped > 0, limit, np.minimum(limit, np.exp(mu + s * zmax)))
    obs["len_min"] = np.maximum(1.0, np.minimum(obs["len"], np.exp(mu - s * (zmax + rng.normal(0, 0.2, n)))))
    obs["len_max"] = np.maximum(obs["len_max"], obs["len"])
    term = np.where(clipped < 1, (obs["len"] - clipped * limit) / np.maximum(1e-9, 1 - clipped), obs["len"])
    obs["len_term"] = np.clip(term, 1.0, limit)
    obs["prompt_len"] = k["prompt_len"] * np.exp(rng.normal(0, 0.05, n))

    # verl step-time phases, proportional to the tokens each handles.
    if p.framework == "verl":
        shares = _phase_shares(rng, p.has_kl)
        tokens = mean_len / float(np.mean(mean_len[: max(3, n // 10)]))
        base = k["T0"] * L["time"]
        for phase, share in shares.items():
            scale = 0.3 + 0.7 * tokens if phase in ("gen", "old_log_prob", "ref", "update_actor") else 1.0
            run.timing[phase] = base * share * scale * np.exp(0.06 * _ar_t(rng, n, 0.3, k["dof"], 4.0))
        step = sum(run.timing.values()) * (1 + rng.uniform(0.01, 0.04))
        run.knobs["val_every"] = (run.knobs.get("val_every") or int(rng.integers(5, 21))) if p.has_eval else None
        saves = rng.random() < 0.6 or p.flavour == "val_spikes"
        run.knobs["save_every"] = int(rng.integers(20, 101)) if saves else None
        run.timing["testing"] = np.full(n, np.nan)
        run.timing["save_checkpoint"] = np.full(n, np.nan)
        for i, st in enumerate(run.steps.tolist()):
            if run.knobs["val_every"] and st % run.knobs["val_every"] == 0:
                run.timing["testing"][i] = k["T0"] * rng.uniform(0.3, 1.2)
            if run.knobs["save_every"] and st % run.knobs["save_every"] == 0:
                run.timing["save_checkpoint"][i] = k["T0"] * rng.uniform(0.05, 0.3)
        obs["step_time"] = step + np.nan_to_num(run.timing["testing"]) + np.nan_to_num(run.timing["save_checkpoint"])
        obs["tokens"] = samples * (mean_len + k["prompt_len"])
        obs["throughput"] = obs["tokens"] / obs["step_time"] / 8.0
    _evals(run)


def _phase_shares(rng, with_ref: bool) -> dict[str, float]:
    names = ["gen", "old_log_prob", "ref", "reward", "adv", "update_actor"]
    alpha = np.array([9.0, 4.0, 4.0, 0.6, 0.3, 7.0])
    if not with_ref:
        names, alpha = names[:2] + names[3:], np.delete(alpha, 2)
    for _ in range(50):
        w = rng.dirichlet(alpha * 3)
        if w.max() < 0.5:
            break
    return dict(zip(names, w.tolist(), strict=True))


def _evals(run: _Run) -> None:
    p, rng, k = run.plan, run.rng, run.knobs
    if not (p.has_eval or p.hf_eval):
        return
    if p.framework == "verl":
        every = k.get("val_every") or int(rng.integers(5, 21))
        k["val_every"] = every
        points = [i for i, st in enumerate(run.steps.tolist()) if st % every == 0]
    else:
        n_evals = k.get("n_evals") or int(rng.integers(14, 30))
        stride = max(1, run.n // n_evals)
        points = list(range(stride - 1, run.n, stride))
    offsets = rng.normal(0.0, k["sd_prompt"], 400)
    for i in points:
        acc = float(np.mean(_expit(run.L["eval"][i] + offsets)))
        run.evals[i] = {
            "accuracy": rng.binomial(k["n_eval"], acc) / k["n_eval"],
            "loss": float(run.obs["loss"][i] + abs(rng.normal(0, 0.01))),
            "reward": float(run.obs["reward"][i] * rng.uniform(0.9, 1.05)),
        }


def _implied(run: _Run) -> None:
    """Labels that follow from what was observed: a saturated or collapsed reward leaves groups tied."""
    frac = run.obs["frac"]
    logs_frac = "frac" in run.plan.features()
    start = run.knobs.get("zero_var_at", run.knobs.get("collapse_at"))
    if start is None or not logs_frac:
        return
    hits = np.nonzero(frac[start:] >= 0.5)[0]
    smooth = _window(frac, 10, np.nanmean)
    k = start + int(hits[0]) if len(hits) else None
    if k is None or run.n - k < 10 or not (smooth[start:] > 0.5).any() or float(np.median(frac[k:])) < 0.5:
        if "zero_var_saturated" in run.plan.variants:
            raise _Redraw(["reward_zero_variance not reached"])
        return  # not clearly tied: if the share is near the line anyway, the consistency check redraws the run
    tail = float(np.median(frac[k:]))
    run.label("reward_zero_variance", k, None, run.key("frac"), "error" if tail >= 0.9 else "warn")


# ------------------------------------------------------------------------------------------------ consistency


def _hidden_problems(run: _Run) -> list[str]:
    """Conditions the reference (grpo-signals.md) calls problems that no label claims. A labelled check is only
    held to them before its onset."""
    p, obs, out = run.plan, run.obs, []
    n = run.end or run.n
    f = p.features()

    def upto(check: str) -> int:
        return run.exempt.get(check, n)

    def series(name):
        return obs[name][:n]

    kl, grad, ent, length = series("kl"), series("grad"), series("entropy"), series("len")
    # A run not labelled as stalled must visibly learn before any reward problem starts: the reward's rise (median
    # of the last quarter minus the first sixth) at least 2.5 noise SDs (robust SD of point-to-point changes / sqrt 2).
    if not {"reward_plateau", "too_conservative"} & set(run.exempt):
        end = min([n] + [run.exempt[c] for c in ("reward_collapse", "reward_zero_variance") if c in run.exempt])
        reward = series("reward")[:end]
        if len(reward) >= 20:
            sd = 1.4826 * float(np.median(np.abs(np.diff(reward) - np.median(np.diff(reward))))) / math.sqrt(2)
            rise = float(np.median(reward[-max(3, len(reward) // 4) :]) - np.median(reward[: max(3, len(reward) // 6)]))
            if rise < 2.5 * max(sd, 1e-6):
                out.append("reward not improving")
    if "kl" in f:
        m = upto("kl_spike")
        base = _window(kl, 20, np.nanmedian, trailing=True)
        if ((kl[:m] > 0.2) & (kl[:m] > 3 * base[:m])).any():
            out.append("kl_spike")
        if (_window(kl, 10, np.nanmedian)[: upto("kl_drift")] > 0.1).any():
            out.append("kl_drift")
        if (
            "reward_plateau" not in run.exempt
            and "too_conservative" not in run.exempt
            and float(np.nanmedian(kl[n // 2 :])) < 0.005
        ):
            out.append("too_conservative")
    if "entropy" in f:
        early = float(np.nanmedian(ent[: max(3, n // 10)]))
        low = _window(ent, 5, np.nanmedian)
        if ((low < 0.1) & (low < 0.25 * early))[: upto("entropy_collapse")].any():
            out.append("entropy_collapse")
    finite_grad = np.where(np.isfinite(grad), grad, np.nan)
    base = _window(finite_grad, 20, np.nanmedian, trailing=True)
    ratio = np.nan_to_num(finite_grad / base, nan=0.0)
    ratio[:10] = 0
    if (ratio[: upto("grad_norm_spike")] >= 3.5).any():
        out.append("grad_norm_spike")
    if (grad[: upto("loss_nonfinite")] < 1e-4).any():
        out.append("grad_norm_vanishing")
    if not np.isfinite(series("loss")[: upto("loss_nonfinite")]).all():
        out.append("loss_nonfinite")
    m = upto("response_truncation")
    if "clip_key" in f and (_window(series("clip_share"), 5, np.nanmedian)[:m] >= 0.04).any():
        out.append("response_truncation")
    if (_window(length, 5, np.nanmedian)[:m] >= 0.9 * run.config["max_length"]).any():
        out.append("response_truncation (pinned)")
    lbase = _window(length, 20, np.nanmedian, trailing=True)
    lbase[:5] = np.nan
    if (
        _window(length, 3, np.nanmedian)[: upto("response_length_collapse")]
        < 0.4 * lbase[: upto("response_length_collapse")]
    ).any():
        out.append("response_length_collapse")
    if "frac" in f:
        if (_window(series("frac"), 10, np.nanmean)[: upto("reward_zero_variance")] > 0.45).any():
            out.append("reward_zero_variance")
    elif p.framework == "trl":
        zero = (series("reward_std") == 0)[: upto("reward_zero_variance")]
        if zero.sum() >= 3:
            out.append("reward_zero_variance (reward_std)")
    if "clipfrac" in f and (_window(series("clipfrac"), 5, np.nanmedian)[: upto("clip_fraction_high")] > 0.25).any():
        out.append("clip_fraction_high")
    if p.framework == "verl":
        st = series("step_time")
        cur = _window(st, 5, np.nanmedian)
        ref = np.concatenate([np.full(5, np.nan), _window(st, 20, np.nanmedian)[:-5]])
        ref[:15] = np.nan
        if (cur[: upto("throughput_drop")] > 1.35 * ref[: upto("throughput_drop")]).any():
            out.append("throughput_drop")
        for phase, values in run.timing.items():
            if phase in ("testing", "save_checkpoint"):
                continue
            if (_window(values[:n] / st, 5, np.nanmedian) > 0.55).any():
                out.append(f"phase_bottleneck ({phase})")
        saves = np.nan_to_num(run.timing["save_checkpoint"][:n])
        if saves.sum() > 0.05 * st.sum():
            out.append("checkpoint_save_slow")
    if p.components and p.framework == "trl":
        for func, (mean, _std) in run.comps.items():
            kind = dict(p.components)[func]
            if kind not in ("dead_zero", "dead_max") and np.ptp(mean[:n]) <= 1e-9:
                out.append(f"reward_component_dead ({func})")
    return out


# ---------------------------------------------------------------------------------------------------- rendering


def _r(x, digits: int | None = None) -> list:
    a = np.asarray(x, dtype=float)
    if digits is not None:
        with np.errstate(invalid="ignore"):
            a = np.round(a, digits)
    return a.tolist()


def _sig(x, digits: int = 6) -> list:
    """Round to significant digits, keeping NaN and inf."""
    a = np.asarray(x, dtype=float)
    out = []
    for v in a.tolist():
        out.append(float(f"{v:.{digits}g}") if math.isfinite(v) and v != 0 else v)
    return out


def _train_rows(run: _Run) -> list[dict]:
    """One dict per logged point, keys as the run's framework writes them (no step field yet)."""
    p, obs, n = run.plan, run.obs, run.end or run.n
    rows: list[dict] = [dict() for _ in range(n)]

    def put(key, values, periodic: bool = False):
        for row, v in zip(rows, values, strict=False):
            if not (periodic and math.isnan(v)):  # periodic phases are only logged on the steps that ran them
                row[key] = v

    if p.framework == "verl":
        tm = run.timing
        put("actor/entropy", _sig(obs["entropy"][:n]))
        put("actor/grad_norm", _sig(obs["grad"][:n]))
        put("actor/pg_loss", _sig(obs["loss"][:n]))
        put("actor/pg_clipfrac", _sig(obs["clipfrac"][:n]))
        put("actor/ppo_kl", _sig(obs["ppo_kl"][:n]))
        if p.has_kl:
            put("actor/kl_loss", _sig(obs["kl"][:n]))
            put("actor/kl_coef", [run.knobs["beta"]] * n)
        put("actor/lr", _sig(obs["lr"][:n]))
        put("critic/score/mean", _r(obs["reward"][:n], 6))
        put("critic/score/max", _r(obs["score_max"][:n]))
        put("critic/score/min", _r(obs["score_min"][:n]))
        put("critic/rewards/mean", _r(obs["reward"][:n], 6))
        put("critic/rewards/max", _r(obs["score_max"][:n]))
        put("critic/rewards/min", _r(obs["score_min"][:n]))
        put("critic/advantages/mean", _sig(obs["adv_mean"][:n]))
        put("critic/advantages/max", _sig(obs["adv_max"][:n]))
        put("critic/advantages/min", _sig(obs["adv_min"][:n]))
        put("response_length/mean", _r(obs["len"][:n], 3))
        put("response_length/max", _r(np.round(obs["len_max"][:n])))
        put("response_length/min", _r(np.round(obs["len_min"][:n])))
        put("response_length/clip_ratio", _r(obs["clip_share"][:n], 6))
        put("prompt_length/mean", _r(obs["prompt_len"][:n], 3))
        for phase in ("gen", "old_log_prob", "ref", "reward", "adv", "update_actor", "testing", "save_checkpoint"):
            if phase in tm:
                put(f"timing_s/{phase}", _r(tm[phase][:n], 4), periodic=phase in ("testing", "save_checkpoint"))
        put("timing_s/step", _r(obs["step_time"][:n], 4))
        put("perf/total_num_tokens", _r(np.round(obs["tokens"][:n])))
        put("perf/throughput", _r(obs["throughput"][:n], 3))
        if p.custom_noise:
            put("perf/max_memory_allocated_gb", _r(40 + 20 * np.random.default_rng(p.index).random(n), 3))
        if p.counter:
            put("training/global_step", run.steps[:n].tolist())
            put("training/epoch", (run.steps[:n] // max(1, p.n_steps // 3)).tolist())
        for i, ev in run.evals.items():
            if i < n:
                ds = VERL_DATASETS[p.index % len(VERL_DATASETS)]
                rows[i][f"val-core/{ds}/acc/mean@1"] = ev["accuracy"]
                rows[i][f"val-core/{ds}/reward/mean@1"] = round(ev["reward"], 6)
        return rows

    x = p.prefix
    put(x + "loss", _sig(obs["loss"][:n]))
    put(x + "grad_norm", _sig(obs["grad"][:n]))
    put(x + "learning_rate", _sig(obs["lr"][:n], 8))
    put(
        x + "num_tokens",
        np.cumsum(
            np.round(obs["len"][:n] + obs["prompt_len"][:n]) * run.knobs["B"] * run.knobs["G"] * p.log_every
        ).tolist(),
    )
    if p.trl_new:
        put(x + "completions/mean_length", _r(obs["len"][:n], 4))
        put(x + "completions/min_length", _r(np.round(obs["len_min"][:n])))
        put(x + "completions/max_length", _r(np.round(obs["len_max"][:n])))
        if p.has_clip_key:
            put(x + "completions/clipped_ratio", _r(obs["clip_share"][:n], 6))
        put(x + "completions/mean_terminated_length", _r(obs["len_term"][:n], 4))
    else:
        put(x + "completion_length", _r(obs["len"][:n], 4))
    for func, (mean, std) in run.comps.items():
        put(_comp_key(p, func), _r(mean[:n], 6))
        if p.trl_new:
            put(f"{x}rewards/{func}/std", _r(std[:n], 6))
    put(x + "reward", _r(obs["reward"][:n], 6))
    put(x + "reward_std", _r(obs["reward_std"][:n], 6))
    if "frac" in p.features():
        put(x + "frac_reward_zero_std", _r(obs["frac"][:n], 6))
    if p.has_kl:
        put(x + "kl", _sig(obs["kl"][:n]))
    if p.has_entropy:
        put(x + "entropy", _sig(obs["entropy"][:n]))
    if p.trl_new and p.has_clipratio:
        cf = obs["clipfrac"][:n]
        put(x + "clip_ratio/low_mean", _sig(cf * 0.4))
        put(x + "clip_ratio/high_mean", _sig(cf * 0.6))
        put(x + "clip_ratio/region_mean", _sig(cf))
    if p.custom_noise:
        put("custom/gpu_mem_gb", _r(30 + 10 * np.random.default_rng(p.index).random(n), 3))
    put(x + "epoch", _r(run.steps[:n] / p.n_steps * float(_pick(np.random.default_rng(p.index), (1, 2, 3))), 4))
    return rows


def _timestamps(run: _Run) -> list[float]:
    rng = np.random.default_rng([run.plan.seed, run.plan.index, 7])
    per = rng.uniform(5, 60) * run.plan.log_every * np.exp(rng.normal(0, 0.1, run.n))
    return (BASE_TIME + run.plan.seed * 86400.0 + run.plan.index * 3600.0 + np.cumsum(per)).round(3).tolist()


def _records(run: _Run) -> list[tuple[int, dict, str]]:
    """(trainer step, values, kind) in the order the trainer wrote them; kind: train | eval | extra."""
    p, n = run.plan, run.end or run.n
    rows = _train_rows(run)
    steps = run.steps.tolist()
    out: list[tuple[int, dict, str]] = []
    if p.framework == "verl" and p.has_eval and run.rng.random() < 0.6:
        ds = VERL_DATASETS[p.index % len(VERL_DATASETS)]
        acc = float(np.mean(_expit(run.L["eval"][0] - 0.2 + run.rng.normal(0, run.knobs["sd_prompt"], 400))))
        out.append(
            (
                0,
                {f"val-core/{ds}/acc/mean@1": round(acc, 4), "timing_s/testing": round(run.knobs["T0"] * 0.8, 4)},
                "eval",
            )
        )
    for i in range(n):
        out.append((steps[i], rows[i], "train"))
        if p.framework == "trl" and i in run.evals:
            ev = run.evals[i]
            values = {
                "eval/accuracy": ev["accuracy"],
                "eval/loss": round(ev["loss"], 6),
                "eval/reward": round(ev["reward"], 6),
                "eval/runtime": round(float(run.rng.uniform(20, 90)), 3),
            }
            if p.step_field in ("_step", "wandb", "log_history"):  # own rows: the Trainer repeats the epoch
                values[p.prefix + "epoch"] = rows[i][p.prefix + "epoch"]
            out.append((steps[i], values, "eval"))
    if run.dup and run.dup["kind"] == "double":
        first = run.dup["first"]
        loss_key, reward_key = p.prefix + "loss", p.prefix + "reward"
        doubled = []
        for st, row, kind in out:
            doubled.append((st, row, kind))
            if kind == "train" and st >= steps[first]:  # a callback logs the last values again
                doubled.append((st, {loss_key: row.get(loss_key), reward_key: row.get(reward_key)}, "extra"))
        out = doubled
    if run.dup and run.dup["kind"] == "restart":
        first, last = run.dup["first"], run.dup["last"]
        prng = np.random.default_rng([p.seed, p.index, 99])
        crashed = []
        for st, row, kind in out:
            if st > steps[last]:
                break
            if st >= steps[first] and kind == "train":
                row = {
                    key: (
                        v * float(np.exp(prng.normal(0, 0.03)))
                        if isinstance(v, float)
                        and math.isfinite(v)
                        and not key.endswith(("learning_rate", "lr", "epoch"))
                        else v
                    )
                    for key, v in row.items()
                }
            crashed.append((st, row, kind))
        resumed = [(st, row, kind) for st, row, kind in out if st >= steps[first]]
        out = crashed + resumed
    return out


# ------------------------------------------------------------------------------------------------------ writers


def _dumps(obj) -> str:
    return json.dumps(obj, separators=(", ", ": "))


def _write_jsonl(run: _Run, root: Path) -> Path:
    p = run.plan
    folder = root / p.project / p.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "metrics.jsonl"
    lines = []
    records = _records(run)
    if p.step_field == "_step":
        stamps = _timestamps(run)
        index_of = {st: i for i, st in enumerate(run.steps.tolist())}
        t0 = stamps[0] - 30.0
        for wandb_step, (st, row, _kind) in enumerate(records):
            ts = stamps[index_of.get(st, 0)] + 0.001 * wandb_step
            lines.append(
                _dumps(
                    {
                        "_step": wandb_step,
                        "_timestamp": round(ts, 3),
                        "_runtime": round(ts - t0, 3),
                        "train/global_step": st,
                        **row,
                    }
                )
            )
    elif p.step_field == "verl":
        lines = [_dumps({"step": st, "data": row}) for st, row, _kind in records]
    else:
        lines = [_dumps({p.step_field: st, **row}) for st, row, _kind in records]
    path.write_text("\n".join(lines) + "\n")
    return path


def _trl_config(run: _Run) -> dict:
    p, k = run.plan, run.knobs
    return {
        "learning_rate": k["lr0"],
        "beta": k["beta"],
        "max_completion_length": run.config["max_length"],
        "num_generations": k["G"],
        "seed": 1000 * p.seed + p.index,
        "per_device_train_batch_size": k["B"],
        "logging_steps": p.log_every,
        "num_iterations": 2 if p.has_clipratio else 1,
        "model_name_or_path": _pick(
            np.random.default_rng(p.index),
            ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-1.5B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"),
        ),
    }


def _write_trainer_state(run: _Run, root: Path) -> Path:
    p = run.plan
    folder = root / p.project / p.name
    folder.mkdir(parents=True, exist_ok=True)
    history = []
    for st, row, kind in _records(run):
        entry = dict(row)
        if kind == "eval":  # the Trainer's own eval names (eval_*): not W&B's eval/*
            entry = {k.replace("eval/", "eval_"): v for k, v in entry.items()}
        entry = {k[len("train/") :] if k.startswith("train/") else k: v for k, v in entry.items()}
        epoch = entry.pop("epoch", None)
        history.append({**({"epoch": epoch} if epoch is not None else {}), **entry, "step": st})
    n = p.n_steps
    last_epoch = next((h["epoch"] for h in reversed(history) if "epoch" in h), 1.0)
    history.append(
        {
            "epoch": last_epoch,
            "step": n,
            "total_flos": 0.0,
            "train_loss": float(np.nanmean([h.get("loss", np.nan) for h in history[-20:]] or [0.0])),
            "train_runtime": round(n * 20.0, 2),
            "train_samples_per_second": 1.5,
            "train_steps_per_second": round(1 / 20.0, 4),
        }
    )
    save_steps = max(p.log_every, (n // 3) // max(1, p.log_every) * max(1, p.log_every))

    def state(upto: int, entries: list[dict]) -> dict:
        return {
            "best_global_step": None,
            "best_metric": None,
            "best_model_checkpoint": None,
            "epoch": last_epoch,
            "eval_steps": None,
            "global_step": upto,
            "is_hyper_param_search": False,
            "is_local_process_zero": True,
            "is_world_process_zero": True,
            "log_history": entries,
            "logging_steps": p.log_every,
            "max_steps": n,
            "num_input_tokens_seen": 0,
            "num_train_epochs": 1,
            "save_steps": save_steps,
            "stateful_callbacks": {
                "TrainerControl": {
                    "args": {
                        "should_epoch_stop": False,
                        "should_evaluate": False,
                        "should_log": False,
                        "should_save": True,
                        "should_training_stop": upto >= n,
                    },
                    "attributes": {},
                }
            },
            "total_flos": 0.0,
            "train_batch_size": run.knobs["B"],
            "trial_name": None,
            "trial_params": None,
            **_trl_config(run),
        }

    if p.index % 2:  # checkpoint snapshots: an ingest must pick the newest
        for c in range(save_steps, n, save_steps)[-2:]:
            snap = folder / f"checkpoint-{c}"
            snap.mkdir(exist_ok=True)
            entries = [h for h in history if h["step"] <= c and "train_runtime" not in h]
            (snap / "trainer_state.json").write_text(json.dumps(state(c, entries), indent=2, sort_keys=True) + "\n")
    path = folder / "trainer_state.json"
    path.write_text(json.dumps(state(n, history), indent=2, sort_keys=True) + "\n")
    return path


def _verl_config(run: _Run) -> dict:
    p, k = run.plan, run.knobs
    return {
        "data": {
            "max_response_length": run.config["max_length"],
            "train_batch_size": k["B"],
            "max_prompt_length": int(k["prompt_len"] * 3),
        },
        "actor_rollout_ref": {
            "rollout": {"n": k["G"], "name": "vllm"},
            "actor": {
                "optim": {"lr": k["lr0"]},
                "use_kl_loss": p.has_kl,
                "kl_loss_coef": k["beta"],
                "entropy_coeff": 0,
            },
        },
        "algorithm": {"adv_estimator": "grpo"},
        "trainer": {"total_training_steps": p.n_steps, "test_freq": k.get("val_every") or -1},
        "seed": 1000 * p.seed + p.index,
    }


def _write_wandb(runs: list[_Run], out: Path) -> None:
    if not runs:
        return
    import wandb

    quiet = wandb.Settings(silent=True, x_disable_stats=True, console="off", disable_git=True, save_code=False)
    folders = []
    for run in runs:
        p = run.plan
        config = _verl_config(run) if p.framework == "verl" else _trl_config(run)
        w = wandb.init(
            mode="offline",
            dir=str(out),
            id=p.run_id,
            name=p.name,
            project=p.project,
            entity="synthetic",
            config=config,
            settings=quiet,
            tags=["synthetic", p.framework],
        )
        if p.framework == "verl":
            for st, row, _kind in _records(run):
                w.log(row, step=st)
        else:
            for i, (st, row, _kind) in enumerate(_records(run)):
                w.log({"train/global_step": st, **row}, step=i)
        folders.append(Path(w.dir).parent)
        w.finish(exit_code=1 if run.end is not None else 0)
    wandb.teardown()
    _wait_for_exit_records(folders)


def _wait_for_exit_records(folders: list[Path], timeout: float = 30.0) -> None:
    """finish() can return before wandb's writer has flushed the file's end: wait for each exit record."""
    from wandb.proto import wandb_internal_pb2 as _pb

    from pipeline.sources import wandb_log

    pb: Any = _pb  # its message classes are built at import time by protobuf (per protobuf version): mypy sees none
    deadline = time.monotonic() + timeout
    for folder in folders:
        while True:
            path = next(folder.glob("run-*.wandb"), None)
            done = False
            if path is not None:
                with open(path, "rb") as fh:
                    try:
                        wandb_log.check_header(fh)
                        records = wandb_log.read_records(fh, 0, wandb_log.ReadResult())
                        done = any(
                            pb.Record.FromString(data).WhichOneof("record_type") == "exit" for _, data in records
                        )
                    except wandb_log.NotAWandbFile:
                        pass
            if done:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"wandb did not finish writing {folder} within {timeout}s")
            time.sleep(0.05)


# ----------------------------------------------------------------------------------------------------------- API


def _generate(plan: _Plan) -> _Run:
    problems: list[str] = []
    template = (list(plan.components), plan.variants)
    for attempt in range(60):
        plan.components = list(template[0])
        rng = np.random.default_rng([plan.seed, plan.index, attempt])
        try:
            return _build(plan, rng)
        except _Redraw as exc:
            problems = exc.args[0]
    raise RuntimeError(f"run {plan.index} ({plan.scenario}) keeps showing unlabelled problems: {problems}")


def write_runs(out_dir: Path, seed: int, n_runs: int = 32, wandb_runs: int | None = None) -> list[dict]:
    """Write ``n_runs`` labelled runs under ``out_dir`` (trainer logs in ``trainer_logs/``, W&B offline runs in
    ``wandb/``) and their labels to ``out_dir/labels.json``; returns the labels. ``wandb_runs``: how many of them
    are real W&B offline runs (default: one per ten runs, at most 4; 0 to skip wandb entirely)."""
    out = Path(out_dir)
    if (out / "labels.json").exists():
        raise FileExistsError(f"{out} already holds synthetic runs (labels.json); use an empty folder")
    if n_runs < 1:
        raise ValueError("n_runs must be at least 1")
    n_wandb = min(4, n_runs // 10) if wandb_runs is None else max(0, min(4, wandb_runs))
    out.mkdir(parents=True, exist_ok=True)
    plans = _compose(seed, n_runs, n_wandb)
    runs = [_generate(p) for p in plans]
    logs = out / "trainer_logs"
    from pipeline.sources.trainer_logs import run_id_for

    for run in runs:
        p = run.plan
        if p.fmt == "jsonl":
            path = _write_jsonl(run, logs)
            p.run_id = run_id_for(os.path.realpath(path))
            p.path = str(path.relative_to(out))
        elif p.fmt == "trainer_state":
            path = _write_trainer_state(run, logs)
            p.run_id = run_id_for(os.path.realpath(path.parent))
            p.path = str(path.parent.relative_to(out))
        else:
            p.run_id = "syn" + hashlib.sha1(f"{seed}/{p.name}".encode()).hexdigest()[:9]
            p.path = "wandb"
    _write_wandb([r for r in runs if r.plan.fmt == "wandb"], out / "wandb")
    labels = [_label_entry(r) for r in runs]
    (out / "labels.json").write_text(json.dumps(labels, indent=2) + "\n")
    return labels


def _label_entry(run: _Run) -> dict:
    p = run.plan
    return {
        "name": p.name,
        "project": p.project,
        "run_id": p.run_id,
        "format": p.fmt,
        "framework": p.framework,
        "step_field": p.step_field,
        "scenario": p.scenario,
        "path": p.path,
        "n_steps": p.n_steps,
        "logging_steps": p.log_every,
        "logged_points": run.end or run.n,
        "problems": [asdict(lb) for lb in sorted(run.labels, key=lambda lb: (lb.onset_step, lb.check))],
    }


def summary(labels: list[dict]) -> str:
    formats: dict[str, int] = {}
    checks: dict[str, int] = {}
    for run in labels:
        formats[run["format"]] = formats.get(run["format"], 0) + 1
        for pb in run["problems"]:
            checks[pb["check"]] = checks.get(pb["check"], 0) + 1
    healthy = sum(1 for r in labels if not r["problems"])
    return (
        f"{len(labels)} runs ({healthy} healthy, {len(labels) - healthy} with {sum(checks.values())} labelled "
        f"problems over {len(checks)} checks); formats: " + ", ".join(f"{k} {v}" for k, v in sorted(formats.items()))
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.evaluation.synthetic_runs",
        description="Write labelled synthetic GRPO runs (independent of the demo) for scoring the anomaly checks.",
    )
    parser.add_argument("out_dir", type=Path, help="folder to write into (must not hold labels.json yet)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", type=int, default=32)
    parser.add_argument("--wandb", type=int, default=None, help="real W&B offline runs among them (0-4)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    try:
        labels = write_runs(args.out_dir, args.seed, args.runs, args.wandb)
    except (FileExistsError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = args.out_dir
    print(
        f"{summary(labels)}; {time.perf_counter() - started:.1f}s -> {out / 'labels.json'} "
        f"(GRPOLENS_TRAINER_LOGS={out / 'trainer_logs'} GRPOLENS_WANDB_DIRS={out / 'wandb'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
