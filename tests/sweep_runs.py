"""Hyper-parameter sweeps with known answers, written by the real ``wandb`` library in offline mode.

What this is for: ``grpolens sweep`` / ``grpolens compare`` rank the runs of a sweep with confidence intervals and
estimate each varying config key's effect. Their tests need sweeps whose right answers are known in advance: which
run is best, which key has an inverted-U (and where its peak is), which key has no effect, which keys vary together
(confounded), which run crashed, and the degenerate cases (nothing varies, one run, no metric shared by all runs).

Every run logs, one ``run.log(row, step=s)`` call per step (steps 1..n, TRL's 1-based ``global_step``), the TRL
keys ``train/reward``, ``train/reward_std``, ``train/kl``, ``train/grad_norm``, ``train/learning_rate``,
``train/completions/mean_length``, ``train/num_tokens`` (cumulative) and, every 10 steps, ``eval/accuracy``; the
warehouse maps them to ``reward_mean``, ``reward_std``, ``kl``, ``grad_norm``, ``learning_rate``,
``response_length_mean``, ``tokens_cumulative`` and ``task_score`` (``dbt_project/seeds/metric_aliases.csv``).

The reward curve rises from 0.1 towards a level with a time constant of 0.2 x the run's planned length, plus AR(1)
noise (stationary sd 0.03, phi 0.6), so tail means wander the way real ones do. ``SweepRun.final_reward`` is the
exact mean of the noise-free curve over the run's last 10% of logged steps (``tail_steps``): what a ranking by each
run's own tail has to recover. The realised tail mean's sd around it is ``tail_sd(steps)``: 0.016 for
120 steps (12 tail steps), 0.021 for 60 (6 tail steps); over 200 seeds the true order of every lr-sweep run and
the best run of each sweep were recovered every time.

Config keys: the hyper-parameters, constant TRL settings, and per-run keys that are NOT hyper-parameters: ``seed``
(0..n-1), ``run_name`` (the run's name) and ``output_dir`` (``/ckpt/<name>``), listed in ``NOT_HYPERPARAMETERS``.

A crashed run (``crashed=True``) is finished with ``run.finish(exit_code=1)``, which writes an exit record with
exit code 1: the ingest (``pipeline/sources/wandb_records.py``, ``apply_exit``) gives it ``state = 'failed'`` and
``exit_code = 1``. (A process that dies without any exit record would stay 'running' until its file goes quiet,
which a test cannot wait for.) Its curve's time constant follows ``planned_steps``, so it is still rising when it
stops.

Deterministic given ``seed``: each run draws from ``numpy.random.default_rng`` seeded from (seed, run name), and its
W&B run id comes from (seed, run name); only W&B's own timestamps and the folder names (wall-clock) differ.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from pipeline.demo import runs as demo_runs
from tests.wandb_writer import write_run

PROJECT = "sweep-tests"
R0 = 0.1  # reward at step 0
TAU_FRAC = 0.2  # the rise's time constant, as a share of the planned length
NOISE_SD, NOISE_PHI = 0.03, 0.6
PROMPTS_PER_STEP, PROMPT_TOKENS = 16, 130
NOT_HYPERPARAMETERS = ("seed", "run_name", "output_dir")
BASE_CONFIG = {  # TRL GRPOConfig-style settings every run shares
    "model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
    "dataset_name": "openai/gsm8k",
    "learning_rate": 1e-5,
    "num_generations": 8,
    "max_completion_length": 512,
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 2,
    "temperature": 0.9,
    "loss_type": "dapo",
    "lr_scheduler_type": "linear",
    "warmup_ratio": 0.05,
    "reward_funcs": ["accuracy_reward", "format_reward"],
}


@dataclass(frozen=True)
class SweepRun:
    name: str
    config: dict  # W&B config: hyper-parameters plus seed, run_name, output_dir
    steps: int  # logged steps (1..steps)
    final_reward: float  # mean of the noise-free reward over the last 10% of logged steps
    crashed: bool = False  # finished with exit code 1 -> runs.state 'failed'
    planned_steps: int | None = None  # a crashed run's intended length (its curve's time scale); None = steps
    keys: tuple[str, ...] | None = None  # log only these keys (None = all TRL keys above)


@dataclass(frozen=True)
class Sweep:
    group: str  # W&B group of all its runs, and its runs' name prefix
    runs: tuple[SweepRun, ...]
    truth: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- curves


def tail_steps(steps: int) -> int:
    """How many of the last logged steps make 'the tail' (10%, at least one)."""
    return max(1, math.ceil(0.1 * steps))


def tail_sd(steps: int, sd: float = NOISE_SD, phi: float = NOISE_PHI) -> float:
    """The sd of the realised tail mean around ``final_reward`` (the AR(1) noise averaged over ``tail_steps``):
    0.016 for 120 steps, 0.019 for 80, 0.021 for 60. Tolerances should be a multiple of this."""
    k = tail_steps(steps)
    return sd / k * math.sqrt(k + 2 * sum((k - d) * phi**d for d in range(1, k)))


def _rise(steps: int, planned: int) -> np.ndarray:
    """Saturating progress 0 -> 1 at steps 1..steps."""
    return 1 - np.exp(-np.arange(1, steps + 1) / (TAU_FRAC * planned))


def _level(final: float, steps: int, planned: int) -> float:
    """The asymptote that makes the noise-free tail mean equal ``final``."""
    return R0 + (final - R0) / float(_rise(steps, planned)[-tail_steps(steps) :].mean())


def clean_reward(run: SweepRun) -> np.ndarray:
    """The noise-free reward at steps 1..run.steps."""
    planned = run.planned_steps or run.steps
    level = _level(run.final_reward, run.steps, planned)
    return R0 + (level - R0) * _rise(run.steps, planned)


def _tail_of(level: float, steps: int, planned: int) -> float:
    """The noise-free tail mean of a run heading to ``level`` that stops after ``steps`` of ``planned``."""
    return round(float(R0 + (level - R0) * _rise(steps, planned)[-tail_steps(steps) :].mean()), 4)


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")])


def run_id(seed: int, name: str) -> str:
    """8 base-36 characters from (seed, name): stable across invocations."""
    n = int.from_bytes(hashlib.sha256(f"sweep/{seed}/{name}".encode()).digest()[:8], "big")
    return "".join("0123456789abcdefghijklmnopqrstuvwxyz"[(n // 36**i) % 36] for i in range(8))


def _ar1(rng: np.random.Generator, n: int, sd: float = NOISE_SD, phi: float = NOISE_PHI) -> np.ndarray:
    return demo_runs._ar1(rng, n, sd, phi)  # the demo's autocorrelated noise, with this module's defaults


def rows(run: SweepRun, seed: int = 0) -> list[tuple[dict, dict]]:
    """The run's ``(row, {"step": s})`` pairs, one per logged step."""
    rng, n = _rng(seed, run.name), run.steps
    planned = run.planned_steps or n
    cfg = run.config
    lr, ng = float(cfg.get("learning_rate", 1e-5)), int(cfg.get("num_generations", 8))
    beta = float(cfg.get("kl_beta", 0.04))
    clean = clean_reward(run)
    reward = clean + _ar1(rng, n)
    prog = _rise(n, planned)
    warm = max(1, round(0.05 * planned))
    kl_scale = 0.004 * (lr / 1e-5) ** 0.4 * (0.04 / beta) ** 0.3
    out, tokens = [], 0
    for i in range(n):
        s = i + 1
        mean_len = float((190 + 60 * prog[i]) * math.exp(rng.normal(0, 0.04)))
        tokens += PROMPTS_PER_STEP * ng * int(round(mean_len + PROMPT_TOKENS))
        p = min(max(float(clean[i]), 0.02), 0.98)
        row = {
            "train/reward": float(reward[i]),
            "train/reward_std": float(math.sqrt(p * (1 - p)) * math.exp(rng.normal(0, 0.05))),
            "train/kl": float(kl_scale * (0.05 + prog[i]) * math.exp(rng.normal(0, 0.2))),
            "train/grad_norm": float(0.3 * math.exp(rng.normal(0, 0.18))),
            "train/learning_rate": lr * min(s / warm, (planned - s + 1) / (planned - warm + 1)),
            "train/completions/mean_length": mean_len,
            "train/num_tokens": float(tokens),
        }
        if s % 10 == 0:
            row["eval/accuracy"] = float(np.clip(0.9 * clean[i] + rng.normal(0, 0.015), 0, 1))
        if run.keys is not None:  # a run of another trainer: its own keys only
            row = {k: row.get(k, float(reward[i])) for k in run.keys}
        out.append((row, {"step": s}))
    return out


# --------------------------------------------------------------------------- the sweeps


def _run(group: str, i: int, steps: int, final: float, **config) -> SweepRun:
    name = f"{group}-{i}"
    cfg = {**BASE_CONFIG, **config, "seed": i, "run_name": name, "output_dir": f"/ckpt/{name}"}
    return SweepRun(name, cfg, steps, final)


def _order(runs) -> list[str]:
    """Finished runs, best first (a crashed run is left out: its tail is not comparable)."""
    return [r.name for r in sorted((r for r in runs if not r.crashed), key=lambda r: -r.final_reward)]


def _truth(runs, **extra) -> dict:
    return {
        "runs": len(runs),
        "order": _order(runs),
        "final_reward": {r.name: r.final_reward for r in runs},
        "not_hyperparameters": list(NOT_HYPERPARAMETERS),
        **extra,
    }


def sweep_specs(seed: int = 0) -> dict[str, Sweep]:
    """The sweeps and their answers. ``seed`` only changes the noise (see ``write_sweep``), never the truth."""
    del seed  # the truth does not depend on the noise
    sweeps: dict[str, Sweep] = {}

    # 1. lr-sweep: inverted-U in log10(lr), peak 3e-5 (a quadratic fitted to the true levels in log10(lr) peaks at
    # 3.4e-5); the closest tail levels are 0.08 apart, about 3 sd of a difference of two 12-step tail means.
    # lora_rank has no effect: Spearman 0 with the reward, 0.24 with lr, per-level true means 0.48/0.50/0.49.
    # kl_target = 10 x kl_beta in every run (confounded); their pattern has Spearman 0 with lr and lora_rank, and
    # they have no effect on the reward either (per-level true means 0.45/0.54/0.48).
    g = "lr-sweep"
    lrs = (1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4)
    finals = (0.20, 0.36, 0.54, 0.76, 0.64, 0.44)
    ranks = (16, 8, 32, 16, 8, 32)
    betas = (0.04, 0.01, 0.01, 0.04, 0.02, 0.02)
    runs = tuple(
        _run(g, i, 120, f, learning_rate=lr, lora_rank=r, kl_beta=b, kl_target=round(10 * b, 4))
        for i, (lr, f, r, b) in enumerate(zip(lrs, finals, ranks, betas, strict=True))
    )
    sweeps[g] = Sweep(
        g,
        runs,
        _truth(
            runs,
            best=f"{g}-3",
            best_lr=3e-5,
            varying=["kl_beta", "kl_target", "learning_rate", "lora_rank"],
            inverted_u="learning_rate",
            peak=3e-5,
            peak_fit=3.4e-5,
            peak_range=(1e-5, 1e-4),
            no_effect=["lora_rank"],
            confounded=[("kl_beta", "kl_target")],
        ),
    )

    # 2. tiny: the reward still rises at the highest lr tried: the advice is to try beyond it.
    g = "tiny"
    runs = tuple(
        _run(g, i, 80, f, learning_rate=lr)
        for i, (lr, f) in enumerate(zip((1e-6, 1e-5, 1e-4), (0.3, 0.5, 0.7), strict=True))
    )
    sweeps[g] = Sweep(
        g,
        runs,
        _truth(
            runs,
            best=f"{g}-2",
            best_lr=1e-4,
            varying=["learning_rate"],
            monotone={"learning_rate": "increasing"},
            explore_beyond={"learning_rate": "higher"},
        ),
    )

    # 3. ragged: lengths differ, so each run must be ranked on its own tail; the reward grows with num_generations
    # (and a little with length within a level). ragged-5 (num_generations 32) heads for 0.80 but crashes at step 25
    # of a planned 200 (exit code 1), still rising: its logged tail level is 0.4158.
    g = "ragged"
    spec = ((60, 4, 0.40), (90, 8, 0.48), (120, 8, 0.54), (150, 16, 0.62), (200, 16, 0.72))
    runs = [_run(g, i, n, f, num_generations=ng) for i, (n, ng, f) in enumerate(spec)]
    crashed = _run(g, 5, 25, 0.0, num_generations=32)
    runs.append(replace(crashed, crashed=True, planned_steps=200, final_reward=_tail_of(0.80, 25, 200)))
    runs = tuple(runs)
    sweeps[g] = Sweep(
        g,
        runs,
        _truth(
            runs,
            best=f"{g}-4",
            best_num_generations=16,
            varying=["num_generations"],
            monotone={"num_generations": "increasing"},
            crashed=[f"{g}-5"],
            crashed_state="failed",
            crashed_exit_code=1,
            steps={r.name: r.steps for r in runs},
        ),
    )

    # 4. flat: only the seed (and the per-run names) differ.
    g = "flat"
    runs = tuple(_run(g, i, 60, 0.5) for i in range(3))
    sweeps[g] = Sweep(g, runs, _truth(runs, best=None, varying=[], nothing_varies=True, order=[]))

    # 5. solo: one run.
    g = "solo"
    runs = (_run(g, 0, 60, 0.55),)
    sweeps[g] = Sweep(g, runs, _truth(runs, best=None, varying=[], one_run=True))

    # 6. no-shared-metric: one run logs only train/reward, the other only custom/score (no alias).
    g = "no-shared-metric"
    runs = (
        replace(_run(g, 0, 60, 0.5, learning_rate=1e-5), keys=("train/reward",)),
        replace(_run(g, 1, 60, 0.6, learning_rate=3e-5), keys=("custom/score",)),
    )
    sweeps[g] = Sweep(
        g,
        runs,
        _truth(
            runs,
            best=None,
            varying=["learning_rate"],
            no_shared_metric=True,
            order=[],
            metrics={f"{g}-0": "reward_mean", f"{g}-1": "custom/score"},
        ),
    )

    # 7. two-tasks: both log a reward and a task score, but one's task score is GSM8K accuracy (eval/accuracy) and
    # the other's a Diplomacy supply-centre count (game/avg_sc_count): two measures under one canonical name.
    g = "two-tasks"
    runs = (
        replace(_run(g, 0, 60, 0.5, learning_rate=1e-5), keys=("train/reward", "eval/accuracy")),
        replace(_run(g, 1, 60, 0.6, learning_rate=3e-5), keys=("train/reward", "game/avg_sc_count")),
    )
    sweeps[g] = Sweep(
        g,
        runs,
        _truth(
            runs,
            best=f"{g}-1",
            varying=["learning_rate"],
            task_keys={f"{g}-0": "eval/accuracy", f"{g}-1": "game/avg_sc_count"},
        ),
    )
    return sweeps


# --------------------------------------------------------------------------- writing


def write_sweep(sweep: Sweep, out_dir: Path, seed: int = 0) -> list[Path]:
    """Write the sweep's runs under ``out_dir/wandb/offline-run-*``; returns their folders (in run order)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    clashes = [r.name for r in sweep.runs if any(out.glob(f"wandb/offline-run-*-{run_id(seed, r.name)}"))]
    if clashes:  # W&B would write a second folder with the same id: an ingest would see those runs twice
        raise FileExistsError(f"{out} already holds sweep runs {clashes}; use an empty folder or another seed")
    return [
        write_run(
            out,
            rows(r, seed),
            run_id=run_id(seed, r.name),
            name=r.name,
            project=PROJECT,
            entity=None,
            config=r.config,
            tags=[sweep.group],
            group=sweep.group,
            exit_code=1 if r.crashed else 0,
        )
        for r in sweep.runs
    ]


def write_all(out_dir: Path, seed: int = 0) -> dict[str, list[Path]]:
    """Write every sweep of ``sweep_specs`` into ``out_dir``; returns {sweep name: run folders}."""
    return {name: write_sweep(sweep, out_dir, seed) for name, sweep in sweep_specs(seed).items()}


if __name__ == "__main__":
    import sys
    import time

    t0 = time.perf_counter()
    written = write_all(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(f"{sum(map(len, written.values()))} runs in {time.perf_counter() - t0:.1f} s")
