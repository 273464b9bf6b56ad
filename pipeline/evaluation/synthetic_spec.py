"""The specification side of the synthetic generator: reward function names, the problem variants each check can be
injected as, the healthy flavours, and the per-run plan (framework, format, keys logged) drawn from the seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

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
