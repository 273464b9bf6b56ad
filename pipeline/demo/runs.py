"""Sample GRPO training runs, written with the real ``wandb`` library in offline mode, with ground-truth labels.

Why this exists: grpolens must be demonstrated and tested without network access or anyone's private runs, and its
anomaly checks need runs whose problems are known in advance, so that hits and false alarms can be counted. Each run
imitates one of the three log producers in ``/work/shared/reference/grpo-signals.md`` (Diplomacy trainer, TRL,
verl) key for key, and healthy runs carry realistic noise (autocorrelated reward noise, mild grad-norm bumps, slow
entropy decay) so a check that fires on them is a real false positive.

Step convention for labels: ``Problem.onset_step`` / ``end_step`` are in the trainer's own step: ``step=`` for the
Diplomacy runs (0-based), ``train/global_step`` for TRL (1-based; TRL's eval rows are separate W&B rows, so W&B's
``_step`` drifts away from it), verl's ``global_steps`` passed as ``step=`` (1-based, step 0 is the pre-training
validation row). ``end_step=None`` means the problem lasts to the end of the run.

Everything is deterministic given ``seed``: each run draws from its own ``numpy.random.default_rng`` seeded from
(seed, run name). Only W&B's own ``_timestamp``/``_runtime`` and the run folder name (a wall-clock time) differ
between two invocations. W&B offline also leaves a ``wandb/latest-run`` symlink (a ``wandb/*/run-*.wandb`` glob sees
the last run twice) and writes no ``files/wandb-summary.json``: the summary lives only inside the ``.wandb`` file.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

ENTITY = "grpolens-demo"
CHECKPOINT_EVERY = 10  # Diplomacy league: a new checkpoint player joins every 10 steps
# Seed Elo of the fixed references (grpo-signals.md section 2); mu = 25 + (elo - 1000) / 40.
REFERENCE_SEEDS = {
    "base_model": 1000,
    "chaos_bot": 900,
    "defensive_bot": 950,
    "territorial_bot": 950,
    "coordinated_bot": 1000,
    "dumb_bot": 850,
}
# Hidden "true" strength the references drift to as a learning policy exploits them. Ratings are relative and lag
# the truth, so these are tuned (not observed) to make the logged ratings land where the reference doc's expectations
# are: scripted bots near 800, and base_model visibly down after 200 steps (~40-90 Elo below its seed, at least its
# ~40 Elo sigma: "if the policy learns, the fixed references' ratings fall"). In this league a new checkpoint joins at
# 1000 and the established base_model moves slowly, so its absolute decline is only a fraction of the policy's true
# gain; the gap best checkpoint - base_model therefore runs ahead (~50-100 at 50 steps, ~130-180 at 200, the upper
# end of the reference's expectations). A smaller base_model drop (it was 120) left base_model's rating flat or
# rising in a learning run, indistinguishable from a stalled one.
EXPLOITED_ELO = {p: elo - (250 if p == "base_model" else 330) for p, elo in REFERENCE_SEEDS.items()}
SIGMA0, BETA = 25 / 3, 25 / 6  # TrueSkill defaults
TAU = 25 / 150  # larger than the default 25/300 so ratings keep tracking players whose strength drifts
NEW_CHECKPOINT_SIGMA = SIGMA0 / 3  # narrower than a stranger's 8.33, so one lucky game cannot throw it 200 points
CHECKPOINT_GAIN = 0  # extra true Elo of a checkpoint taken at the end of training (the base_model drop carries it)
GAMES_PER_STEP = 8  # one step's 64 trajectories are several games among the same few players


@dataclass(frozen=True)
class Problem:
    """One deliberately injected problem: the ground truth an anomaly check is scored against."""

    check: str
    onset_step: int
    end_step: int | None
    metric: str


@dataclass
class DemoRun:
    """What was written: enough to find the run again and to know which problems it should show."""

    name: str
    project: str
    run_id: str
    style: str  # "diplomacy" | "trl" | "verl"
    problems: list[Problem] = field(default_factory=list)


@dataclass
class _Spec:
    """Everything needed to write one run: W&B metadata plus the rows, each ``(step or None, row dict)``."""

    run: DemoRun
    config: dict
    tags: list[str]
    group: str
    rows: Sequence[tuple[int | None, dict]]
    define_trl_metrics: bool = False


# --------------------------------------------------------------------------- small curve helpers


def _run_id(seed: int, name: str) -> str:
    """8 lowercase base-36 characters from (seed, name): stable across invocations, unlike hash()."""
    n = int.from_bytes(hashlib.sha256(f"{seed}/{name}".encode()).digest()[:8], "big")
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyz"
    return "".join(alphabet[(n // 36**i) % 36] for i in range(8))


def _rng(seed: int, name: str) -> np.random.Generator:
    return np.random.default_rng([seed, int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")])


def _steps(base: int, scale: float) -> int:
    return max(30, int(round(base * scale)))


def _sat(n: int, tau_frac: float) -> np.ndarray:
    """Saturating learning progress 0 -> ~1 with time constant tau_frac * n."""
    return 1 - np.exp(-np.arange(n) / (tau_frac * n))


def _learning(n: int) -> np.ndarray:
    """Progress of a healthy run: quick early gains plus a steady part, so it still rises at the end. A healthy run
    that looks converged would make a plateau check's hit on it ambiguous instead of a clear false positive."""
    return 0.55 * _sat(n, 0.3) + 0.45 * np.arange(n) / n


def _ramp(n: int, start: int, width: int) -> np.ndarray:
    """0 before ``start``, linear to 1 over ``width`` steps, 1 afterwards."""
    return np.clip((np.arange(n) - start) / max(width, 1), 0.0, 1.0)


def _ar1(rng: np.random.Generator, n: int, sd: float, phi: float = 0.6) -> np.ndarray:
    """Autocorrelated noise: real reward curves wander, they are not white noise around a trend."""
    e = rng.normal(0, sd * math.sqrt(1 - phi**2), n)
    out = np.empty(n)
    out[0] = rng.normal(0, sd)
    for i in range(1, n):
        out[i] = phi * out[i - 1] + e[i]
    return out


def _grad(rng: np.random.Generator, n: int, level: float, sd: float = 0.18, bump_p: float = 0.04) -> np.ndarray:
    """Lognormal grad norms with occasional mild bumps (x1.3-1.9): noise a spike check must not fire on."""
    bumps = np.where(rng.random(n) < bump_p, rng.uniform(1.3, 1.9, n), 1.0)
    return level * np.exp(rng.normal(0, sd, n)) * bumps


def _truncated_share(length: np.ndarray | float, max_len: int) -> np.ndarray:
    """Share of responses cut at max length: tiny until the mean nears the limit, then it climbs fast."""
    return np.where(
        np.asarray(length) > 40,
        0.004 * np.exp(np.maximum(np.asarray(length) - 0.6 * max_len, 0) / (0.08 * max_len)),
        0.0,
    )


def _first(mask: np.ndarray) -> int:
    """First index where a (noise-free) design curve meets a condition; used to place label onsets."""
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else len(mask) - 1


# --------------------------------------------------------------------------- Diplomacy league (TrueSkill)


class _League:
    """TrueSkill ratings of fixed references and the run's own checkpoints, updated from simulated games.

    Why simulate games rather than draw ratings: the sparsity (only players that played are logged), the shrinking
    sigmas and the slow drift of exploited references then come out the way the real trainer produces them.
    """

    def __init__(self, run_name: str, rng: np.random.Generator, progress: np.ndarray, learning: bool):
        self.run_name, self.rng, self.progress, self.learning = run_name, rng, progress, learning
        self.rating = {p: [25 + (elo - 1000) / 40, SIGMA0] for p, elo in REFERENCE_SEEDS.items()}
        self.ckpt_step: dict[str, int] = {}
        self.ckpt_jitter: dict[str, float] = {}

    def true_elo(self, player: str, step: int) -> float:
        p = self.progress[step] if self.learning else 0.0
        if player in REFERENCE_SEEDS:
            return REFERENCE_SEEDS[player] + (EXPLOITED_ELO[player] - REFERENCE_SEEDS[player]) * p
        born = self.ckpt_step[player]
        if not self.learning:
            return 1000 + self.ckpt_jitter[player]
        pb = self.progress[born]  # frozen skill at birth, slowly outdated as the league gets stronger
        return 1000 + CHECKPOINT_GAIN * pb - 30 * (p - pb) + self.ckpt_jitter[player]

    def add_checkpoint(self, step: int) -> None:
        name = f"{self.run_name}/adapter_v{step}"
        # Every checkpoint joins as a stranger at mu=25 (Elo 1000); as later checkpoints are truly stronger, they
        # climb and take rating mass from the fixed references, which is how exploited references drift down.
        self.rating[name], self.ckpt_step[name] = [25.0, NEW_CHECKPOINT_SIGMA], step
        self.ckpt_jitter[name] = float(self.rng.normal(0, 8))

    def _game(self, players: list[str], step: int) -> None:
        """Rank players by a noisy performance; update each adjacent pair as a two-player TrueSkill win."""
        perf = {p: 25 + (self.true_elo(p, step) - 1000) / 40 + self.rng.normal(0, BETA) for p in players}
        order = sorted(players, key=perf.__getitem__, reverse=True)
        for p in players:  # dynamics factor keeps sigmas from freezing
            self.rating[p][1] = math.sqrt(self.rating[p][1] ** 2 + TAU**2)
        before = {p: tuple(self.rating[p]) for p in players}
        for win, lose in zip(order, order[1:], strict=False):
            (mw, sw), (ml, sl) = before[win], before[lose]
            c = math.sqrt(2 * BETA**2 + sw**2 + sl**2)
            t = (mw - ml) / c
            v = math.exp(-t * t / 2) / math.sqrt(2 * math.pi) / max(0.5 * math.erfc(-t / math.sqrt(2)), 1e-12)
            wf = v * (v + t)
            self.rating[win][0] += sw**2 / c * v
            self.rating[lose][0] -= sl**2 / c * v
            self.rating[win][1] *= math.sqrt(max(1 - sw**2 / c**2 * wf, 1e-4))
            self.rating[lose][1] *= math.sqrt(max(1 - sl**2 / c**2 * wf, 1e-4))

    def play(self, step: int, exclude: tuple[str, ...] = ()) -> dict:
        """A few games among 3-5 players; returns the sparse trueskill/ and elo/ keys of those who played."""
        names = [p for p in self.rating if p not in exclude]
        # The policy in training plays every game under its newest checkpoint's name; opponents are sampled.
        current = [max(self.ckpt_step, key=self.ckpt_step.__getitem__)] if self.ckpt_step else []
        others = [p for p in names if p not in current]
        k = min(len(others), int(self.rng.integers(3, 6)) - len(current))
        players = current + [str(p) for p in self.rng.choice(others, size=k, replace=False)]
        for _ in range(GAMES_PER_STEP):
            self._game(players, step)
        out: dict[str, float] = {}
        for p in players:
            mu, sigma = self.rating[p]
            key = p.replace("/", "_")
            out |= {
                f"trueskill/{key}_mu": mu,
                f"trueskill/{key}_sigma": sigma,
                f"trueskill/{key}_rating": mu - 3 * sigma,
                f"elo/{key}": (mu - 25) * 40 + 1000,
            }
        return out


def _diplomacy_config(lr: float, kl_beta: float, n: int) -> dict:
    return {
        "learning_rate": lr,
        "lora_rank": 16,
        "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "kl_beta": kl_beta,
        "kl_target": 0.03,
        "use_ppo_clipping": True,
        "use_ema_reference": False,
        "entropy_coef": 0.0,
        "samples_per_group": 8,
        "num_groups_per_step": 8,
        "rollout_horizon_years": 2,
        "league_training": True,
        "base_model_id": "Qwen/Qwen2.5-7B-Instruct",
        "simulated_years_per_step": 128,
        "total_simulated_years": 128 * n,
    }


def _diplomacy_rows(
    rng: np.random.Generator,
    n: int,
    cfg: dict,
    c: dict[str, np.ndarray],
    league: _League | None,
    eval_steps: AbstractSet[int] = frozenset(),
) -> list[tuple[int, dict]]:
    """Per-step rows in the trainer's families; ``c`` holds the designed curves (reward, kl, clip, ...)."""
    spg, groups, years = cfg["samples_per_group"], cfg["num_groups_per_step"], cfg["rollout_horizon_years"]
    entropy = 1.15 - 0.30 * np.arange(n) / n + _ar1(rng, n, 0.02)
    rows, cum_years, eval_games = [], 0, 0
    for i in range(n):
        traj = spg * groups
        zero_var = int(rng.binomial(groups, 0.08))
        kl, r = float(max(c["kl"][i], 1e-5)), float(c["reward"][i])
        expected = int(rng.integers(560, 650))
        extracted = int(round(expected * min(c["extraction"][i], 1.0)))
        rollout_s, train_s = float(rng.normal(72, 6)), float(rng.normal(41, 3))
        cum_years += traj * years
        row = {
            "benchmark/loss": float(cfg["kl_beta"] * kl + rng.normal(0, 0.015)),
            "benchmark/kl": kl,
            "benchmark/reward_mean": r,
            "benchmark/reward_std": float(0.17 + 0.04 * rng.random()),
            "benchmark/rollout_time_s": rollout_s,
            "benchmark/training_time_s": train_s,
            "benchmark/trajectories": traj,
            "benchmark/grad_norm": float(c["grad"][i]),
            "kl/mean": kl,
            "kl/max": kl * float(rng.uniform(6, 15)),
            "kl/min": kl * float(rng.uniform(0, 0.05)),
            "kl/std": kl * float(rng.uniform(1.5, 3.0)),
            "kl/beta": cfg["kl_beta"],
            "extraction/rate": extracted / expected,
            "extraction/orders_expected": expected,
            "extraction/orders_extracted": extracted,
            "extraction/empty_responses": int(rng.binomial(traj, 0.01)),
            "extraction/partial_responses": int(rng.binomial(traj, 0.03)),
            "processing/skip_rate": zero_var / groups,
            "processing/skipped_zero_variance": zero_var,
            "processing/effective_batch_size": traj - zero_var * spg,
            "ppo/clip_fraction": float(np.clip(c["clip"][i] + rng.normal(0, 0.01), 0, 1)),
            "policy/entropy_mean": float(entropy[i]),
            "policy/entropy_std": float(entropy[i] * rng.uniform(0.3, 0.4)),
            "game/avg_sc_count": float(3.2 + 6 * r + rng.normal(0, 0.25)),
            "power_law/cumulative_simulated_years": cum_years,
            "power_law/simulated_years_per_step": traj * years,
            "power_law/reward_at_compute": r,
            "rollout/max_total_s": rollout_s * float(rng.uniform(1.02, 1.2)),
            "rollout/failed_count": 0,
        }
        if league is not None:
            if i and i % CHECKPOINT_EVERY == 0:
                league.add_checkpoint(i)
            row |= {"league/num_checkpoints": len(league.ckpt_step), "league/latest_step": i}
            # On eval steps base_model sits out of training games, so the evaluator's elo/base_model (a pairwise
            # scale near 1500, with no trueskill/ keys beside it) is the only elo/base_model in that row.
            row |= league.play(i, exclude=("base_model",) if i in eval_steps else ())
            if i in eval_steps:
                p = float(league.progress[i])
                challenger, base = 1500 + 90 * p + rng.normal(0, 12), 1500 - 25 * p + rng.normal(0, 12)
                eval_games += 40
                row |= {
                    "elo/challenger": challenger,
                    "elo/base_model": base,
                    "elo/games_played": eval_games,
                    "elo/win_rate": float(
                        np.clip(1 / (1 + 10 ** ((base - challenger) / 400)) + rng.normal(0, 0.03), 0, 1)
                    ),
                }
        rows.append((i, row))
    return rows


def _league_specs(seed: int, scale: float) -> list[_Spec]:
    specs = []
    for name, learning in (("league-main", True), ("league-stalled", False)):
        rng, n = _rng(seed, name), _steps(200, scale)
        cfg = _diplomacy_config(5e-6, 0.02, n)
        progress = _sat(n, 0.45)
        if learning:
            reward = 0.18 + 0.42 * _learning(n) + _ar1(rng, n, 0.035)
            problems = []
        else:  # never improves: the reward stays at its first level and the Elo gap stays flat
            reward = 0.20 + rng.normal(0, 0.02, n)
            # its league never learns: base_model's rating never falls below its seed
            problems = [
                Problem("reward_plateau", 0, None, "benchmark/reward_mean"),
                Problem("elo_base_model_not_declining", 0, None, "elo/base_model"),
            ]
        curves = {
            "reward": reward,
            "kl": 0.012 + 0.018 * progress + np.abs(_ar1(rng, n, 0.003)),
            "clip": 0.06 + 0.04 * progress,
            "grad": _grad(rng, n, 1.2),
            "extraction": np.clip(0.975 + rng.normal(0, 0.006, n), 0, 0.995),
        }
        league = _League(name, rng, progress if learning else np.zeros(n), learning)
        evals = {int(round(f * (n - 1))) for f in (0.25, 0.5, 0.75, 1.0)} if learning else set()
        run = DemoRun(name, "diplomacy-grpo", _run_id(seed, name), "diplomacy", problems)
        specs.append(
            _Spec(
                run, cfg, ["league", "exp-league-v2"], "league-v2", _diplomacy_rows(rng, n, cfg, curves, league, evals)
            )
        )
    return specs


def _sweep_specs(seed: int, scale: float) -> list[_Spec]:
    """lr x kl_beta sweep: too low an lr with a strong KL penalty does nothing; too high an lr drifts away."""
    grid = [(1e-6, 0.05), (3e-6, 0.01), (1e-5, 0.05), (3e-5, 0.01)]
    specs = []
    for i, (lr, beta) in enumerate(grid):
        name = f"sweep-lr-kl-{i}"
        rng, n = _rng(seed, name), _steps(100, scale)
        prog = _learning(n)
        ext = np.full(n, 0.975)
        problems: list[Problem] = []
        if i == 0:
            reward, kl, clip, grad = 0.20 + 0.01 * prog, 0.0008 + 0.0004 * prog, np.full(n, 0.01), 0.4
            problems += [
                Problem("too_conservative", 0, None, "kl/mean"),
                Problem("reward_plateau", 0, None, "benchmark/reward_mean"),
            ]
        elif i == 1:
            reward, kl, clip, grad = 0.20 + 0.20 * prog, 0.010 + 0.010 * prog, 0.04 + 0.01 * prog, 0.8
        elif i == 2:
            reward, kl, clip, grad = 0.20 + 0.35 * prog, 0.020 + 0.015 * prog, 0.08 + 0.02 * prog, 1.2
        else:  # fast early gains, then KL drifts up, clipping saturates and the order format starts to break
            reward = 0.20 + 0.25 * _sat(n, 0.12) - 0.07 * _ramp(n, int(0.5 * n), int(0.5 * n))
            kl = 0.03 + 0.15 * _ramp(n, int(0.3 * n), int(0.7 * n))
            clip = 0.12 + 0.30 * _ramp(n, int(0.35 * n), int(0.5 * n))
            ext = 0.975 - 0.12 * _ramp(n, int(0.55 * n), int(0.35 * n))
            grad = 3.0
            # the fast gains are over once the reward is within its noise (0.05) of where it levels off: from
            # then on it does not improve any more (flat, then slowly down)
            problems += [
                Problem("reward_plateau", _first(0.25 * (1 - _sat(n, 0.12)) < 0.05), None, "benchmark/reward_mean"),
                Problem("kl_drift", int(0.3 * n), None, "kl/mean"),
                Problem("clip_fraction_high", _first(clip > 0.3), None, "ppo/clip_fraction"),
                Problem("extraction_rate_low", _first(ext < 0.95), None, "extraction/rate"),
            ]
        noise = 0.02 if i == 0 else 0.03 + 0.02 * (i == 3)
        curves = {
            "reward": reward + _ar1(rng, n, noise),
            "kl": kl * np.exp(rng.normal(0, 0.1, n)),
            "clip": clip,
            "grad": _grad(rng, n, grad, sd=0.18 + 0.1 * (i == 3)),
            "extraction": np.clip(ext + rng.normal(0, 0.006, n), 0, 0.995),
        }
        cfg = _diplomacy_config(lr, beta, n) | {"sweep_index": i}
        run = DemoRun(name, "diplomacy-grpo", _run_id(seed, name), "diplomacy", problems)
        specs.append(_Spec(run, cfg, ["sweep-demo"], "sweep-lr-kl", _diplomacy_rows(rng, n, cfg, curves, None)))
    return specs


# --------------------------------------------------------------------------- TRL GRPOTrainer


def _trl_specs(seed: int, scale: float) -> list[_Spec]:
    specs = []
    for name in ("trl-gsm8k-healthy", "trl-entropy-collapse", "trl-reward-hacking", "trl-zero-variance"):
        rng, n = _rng(seed, name), _steps(150, scale)
        prog = _learning(n)
        acc = 0.32 + 0.33 * prog
        fmt = 0.25 + 0.70 * _sat(n, 0.12)
        eval_acc = 0.30 + 0.32 * prog
        entropy = 0.62 - 0.20 * np.arange(n) / n
        frac_zero = np.full(n, 0.18)
        length = 190 + 45 * prog
        problems: list[Problem] = []
        if name == "trl-entropy-collapse":
            c = int(0.4 * n)
            decay = np.exp(-np.maximum(np.arange(n) - c, 0) / 2.0)
            entropy = np.where(np.arange(n) < c, entropy, 0.005 + (entropy[c] - 0.005) * decay)
            acc = np.where(np.arange(n) < c, acc, acc[c])
            eval_acc = np.where(np.arange(n) < c, eval_acc, eval_acc[c])
            frac_zero = frac_zero + 0.25 * _ramp(n, c, 8)
            # The accuracy term freezes, but the format term still saturates: the total reward levels off smoothly,
            # which is what convergence looks like. reward_plateau says so at info; the entropy collapse is the call.
            problems += [Problem("entropy_collapse", c + 1, None, "train/entropy")]
        elif name == "trl-reward-hacking":  # the format term carries the reward; the task gets worse
            h = int(0.2 * n)
            fmt = 0.10 + 0.90 * _sat(n, 0.4)
            acc = 0.30 - 0.06 * _ramp(n, h, n - h)
            eval_acc = 0.31 - 0.05 * _ramp(n, h, n - h)
            problems += [
                Problem("reward_hacking", h + 1, None, "train/reward"),
                # the format term carries the reward from the first step while accuracy never improves
                Problem("reward_component_dominant", 1, None, "train/rewards/format_reward/mean"),
            ]
        elif name == "trl-zero-variance":  # the model saturates the easy set: most groups all-correct
            z = int(0.5 * n)
            acc = np.where(np.arange(n) < z, 0.45 + 0.45 * _sat(n, 0.2), 0.45 + 0.45 * _sat(n, 0.2)[z])
            frac_zero = frac_zero + 0.62 * _ramp(n, z, 4)
            # The reward saturates smoothly (converged, info); the zero-variance groups are the call.
            problems += [Problem("reward_zero_variance", z + 1, None, "train/frac_reward_zero_std")]
        acc_n = np.clip(acc + _ar1(rng, n, 0.03), 0, 1)
        fmt_n = np.clip(fmt + rng.normal(0, 0.02, n), 0, 1)
        ent_n = np.clip(entropy * np.exp(rng.normal(0, 0.04, n)), 1e-4, None)
        zero_n = np.clip(frac_zero + rng.normal(0, 0.035, n), 0, 1)
        grad = _grad(rng, n, 0.25) * (1 - 0.6 * np.clip(frac_zero - 0.2, 0, 1))
        cfg = {
            "model_name_or_path": "Qwen/Qwen2.5-1.5B-Instruct",
            "learning_rate": 1e-6,
            "beta": 0.04,
            "num_generations": 8,
            "max_completion_length": 512,
            "per_device_train_batch_size": 8,
            "gradient_accumulation_steps": 4,
            "temperature": 0.9,
            "epsilon": 0.2,
            "loss_type": "dapo",
            "lr_scheduler_type": "linear",
            "warmup_ratio": 0.05,
            "dataset_name": "openai/gsm8k",
            "reward_funcs": ["accuracy_reward", "format_reward"],
            "max_steps": n,
        }
        rows, tokens, warm = [], 0, max(1, int(0.05 * n))
        for i in range(n):
            gs, mean_len = i + 1, float(length[i] * np.exp(rng.normal(0, 0.04)))
            spread = 1.0 if ent_n[i] > 0.05 else 0.15  # after a collapse every completion looks the same
            tokens += int(256 * (mean_len + 130))
            kl = float(0.004 * prog[i] * np.exp(rng.normal(0, 0.2)) + 1e-5)
            std = math.sqrt(max(acc_n[i] * (1 - acc_n[i]), 0.0)) * (1 - zero_n[i]) + 0.1 * fmt_n[i] * (1 - fmt_n[i])
            rows.append(
                (
                    None,
                    {
                        "train/loss": 0.04 * kl + float(rng.normal(0, 0.004)),
                        "train/grad_norm": float(grad[i]),
                        "train/learning_rate": 1e-6 * min(gs / warm, (n - i) / (n - warm + 1)),
                        "train/reward": float(acc_n[i] + fmt_n[i]),
                        "train/reward_std": float(std + 0.02 * rng.random()),
                        "train/rewards/accuracy_reward/mean": float(acc_n[i]),
                        "train/rewards/accuracy_reward/std": float(math.sqrt(acc_n[i] * (1 - acc_n[i]))),
                        "train/rewards/format_reward/mean": float(fmt_n[i]),
                        "train/rewards/format_reward/std": float(math.sqrt(fmt_n[i] * (1 - fmt_n[i]))),
                        "train/kl": kl,
                        "train/entropy": float(ent_n[i]),
                        "train/completions/mean_length": mean_len,
                        "train/completions/min_length": float(max(8, mean_len - spread * rng.uniform(120, 170))),
                        "train/completions/max_length": float(min(512, mean_len + spread * rng.uniform(180, 330))),
                        "train/completions/clipped_ratio": float(np.clip(rng.normal(0.012, 0.006), 0, 1) * spread),
                        "train/completions/mean_terminated_length": mean_len * 0.97,
                        "train/frac_reward_zero_std": float(zero_n[i]),
                        "train/clip_ratio/low_mean": 0.0,
                        "train/clip_ratio/high_mean": float(abs(rng.normal(0, 4e-4))),
                        "train/clip_ratio/region_mean": float(abs(rng.normal(0, 5e-4))),
                        "train/num_tokens": float(tokens),
                        "train/epoch": round(gs / (n / 3), 4),
                        "train/global_step": gs,
                    },
                )
            )
            if gs % 10 == 0:  # TRL logs evaluation as its own wandb.log call: a separate row, same global_step
                rows.append(
                    (
                        None,
                        {
                            "eval/accuracy": float(np.clip(eval_acc[i] + rng.normal(0, 0.015), 0, 1)),
                            "eval/runtime": float(rng.normal(48, 2)),
                            "eval/samples_per_second": 27.4,
                            "train/epoch": round(gs / (n / 3), 4),
                            "train/global_step": gs,
                        },
                    )
                )
        run = DemoRun(name, "trl-grpo", _run_id(seed, name), "trl", problems)
        specs.append(_Spec(run, cfg, ["trl", "gsm8k"], "trl-gsm8k", rows, define_trl_metrics=True))
    return specs


# --------------------------------------------------------------------------- verl main_ppo (GRPO)


def _verl_specs(seed: int, scale: float) -> list[_Spec]:
    specs = []
    for name in ("verl-healthy", "verl-kl-blowup", "verl-length-collapse", "verl-plateau"):
        rng, n = _rng(seed, name), _steps(150, scale)
        idx, prog = np.arange(n), _learning(n)
        score = 0.45 + 0.41 * prog
        kl_loss = 0.001 + 0.011 * prog
        entropy = 0.55 - 0.17 * idx / n
        length, max_len = 260 - 45 * prog, 1024
        grad_mult = np.ones(n)
        problems: list[Problem] = []
        if name == "verl-kl-blowup":  # length grows into the limit, KL drifts, then blows up with grad spikes
            d, s = int(0.3 * n), int(0.7 * n)
            length = 300 + 680 * _ramp(n, int(0.25 * n), int(0.45 * n))
            kl_loss = 0.006 + 0.154 * _ramp(n, d, s - d)  # past the reference's 0.1 warning line: not small-beta growth
            kl_loss[s : s + 4] = [0.5, 0.9, 0.7, 0.4][: len(kl_loss[s : s + 4])]
            kl_loss[s + 4 :] = 0.15
            grad_mult[s : s + 4] = [22, 48, 30, 14][: len(grad_mult[s : s + 4])]
            score = score - 0.15 * (idx >= s)
            problems += [
                Problem("response_length_growth", int(0.25 * n) + 1, None, "response_length/mean"),
                Problem(
                    "response_truncation",
                    _first(_truncated_share(length, max_len) >= 0.05) + 1,
                    None,
                    "response_length/clip_ratio",
                ),
                Problem("kl_drift", d + 1, s, "actor/kl_loss"),
                Problem("kl_spike", s + 1, min(s + 4, n), "actor/kl_loss"),
                Problem("grad_norm_spike", s + 1, min(s + 4, n), "actor/grad_norm"),
            ]
        elif name == "verl-length-collapse":  # a long-CoT model degenerates to near-empty answers
            c, max_len = int(0.6 * n), 2048
            length = np.where(idx < c, 900.0, 900.0 * (15 / 900) ** np.clip((idx - c) / 10, 0, 1))
            grad_mult = np.where(idx >= c + 2, rng.uniform(15, 80, n), 1.0)
            score = np.where(idx < c + 3, score, 0.02)
            entropy = np.where(idx < c, entropy, 1.4)
            problems += [
                Problem("response_length_collapse", c + 1, None, "response_length/mean"),
                Problem("grad_norm_spike", c + 3, None, "actor/grad_norm"),
                Problem("reward_collapse", c + 4, None, "critic/score/mean"),
            ]
        elif name == "verl-plateau":  # the score never improves on its first level (a rise then flat is convergence)
            score = np.full(n, 0.30)
            problems.append(Problem("reward_plateau", 1, None, "critic/score/mean"))
        score_n = np.clip(score + _ar1(rng, n, 0.02 if name != "verl-plateau" else 0.012), 0, 1)
        grad = _grad(rng, n, 0.3) * grad_mult
        val_every, save_every = 10, 50
        rows: list[tuple[int, dict[str, float | str]]] = []
        rows.append((0, {"val-core/gsm8k/acc/mean@1": float(np.clip(score[0] + rng.normal(0, 0.01), 0, 1))}))
        for i in range(n):
            step, L = i + 1, float(max(length[i] * np.exp(rng.normal(0, 0.025)), 3.0))
            clip_ratio = float(np.clip(_truncated_share(L, max_len) + rng.normal(0, 0.002) * (L > 40), 0, 1))
            t = {
                "gen": 12 + 0.045 * L + rng.normal(0, 1.5),
                "old_log_prob": rng.normal(9, 0.6),
                "ref": rng.normal(8.5, 0.6),
                "reward": rng.normal(0.6, 0.05),
                "adv": 0.04,
                "update_actor": rng.normal(24, 1.5) + 0.01 * L,
            }
            if step % save_every == 0:
                t["save_checkpoint"] = rng.normal(18, 2)
            if step % val_every == 0:
                t["testing"] = rng.normal(20, 1.5)
            t["step"] = sum(t.values()) + 0.4
            tokens = int(1024 * (220 + L))
            sc = float(score_n[i])
            row: dict[str, float | str] = {
                "actor/entropy": float(entropy[i] * np.exp(rng.normal(0, 0.03))),
                "actor/grad_norm": float(grad[i]),
                "actor/pg_loss": float(rng.normal(0, 0.008)),
                "actor/ppo_kl": float(abs(rng.normal(3e-4, 2e-4))),
                "actor/pg_clipfrac": float(abs(rng.normal(0.004, 0.0015))),
                "actor/kl_loss": float(kl_loss[i] * np.exp(rng.normal(0, 0.08))),
                "actor/lr": 1e-6,
                "critic/score/mean": sc,
                "critic/score/max": 1.0 if sc > 0.01 else 0.0,
                "critic/score/min": 0.0,
                "critic/rewards/mean": sc,
                "critic/rewards/max": 1.0 if sc > 0.01 else 0.0,
                "critic/rewards/min": 0.0,
                "critic/advantages/mean": float(rng.normal(0, 1e-3)),
                "critic/advantages/max": float(rng.uniform(2.2, 2.6)),
                "critic/advantages/min": float(-rng.uniform(2.2, 2.6)),
                "response_length/mean": L,
                "response_length/max": float(min(max_len, L * rng.uniform(2.2, 3.5))),
                "response_length/min": float(max(1, L * rng.uniform(0.1, 0.3))),
                "response_length/clip_ratio": clip_ratio,
                **{f"timing_s/{k}": float(v) for k, v in t.items()},
                "perf/total_num_tokens": tokens,
                "perf/time_per_step": float(t["step"]),
                "perf/throughput": tokens / (float(t["step"]) * 8),
                "perf/max_memory_allocated_gb": float(rng.normal(38, 0.5)),
                "perf/mfu/actor": float(rng.normal(0.31, 0.02)),
            }
            if step % val_every == 0:  # verl merges validation metrics into the training step's dict
                row["val-core/gsm8k/acc/mean@1"] = float(np.clip(score[i] - 0.02 + rng.normal(0, 0.012), 0, 1))
            if name == "verl-healthy" and i == n // 3:  # realistic messiness: a NaN and a stray string
                row["perf/mfu/actor"] = float("nan")
                row["debug/note"] = "resumed dataloader state from global_step_50"
            rows.append((step, row))
        cfg = {
            "algorithm.adv_estimator": "grpo",
            "actor_rollout_ref.model.path": "Qwen/Qwen2.5-3B-Instruct",
            "actor_rollout_ref.actor.optim.lr": 1e-6,
            "actor_rollout_ref.actor.use_kl_loss": True,
            "actor_rollout_ref.actor.kl_loss_coef": 0.001,
            "actor_rollout_ref.actor.entropy_coeff": 0,
            "actor_rollout_ref.rollout.n": 8,
            "data.train_batch_size": 128,
            "data.max_response_length": max_len,
            "trainer.n_gpus_per_node": 8,
            "trainer.total_training_steps": n,
            "trainer.test_freq": val_every,
            "trainer.save_freq": save_every,
        }
        run = DemoRun(name, "verl-grpo", _run_id(seed, name), "verl", problems)
        specs.append(_Spec(run, cfg, ["verl", "gsm8k"], "verl-gsm8k", rows))
    return specs


# --------------------------------------------------------------------------- writing


def _write(spec: _Spec, out_dir: Path) -> None:
    """One wandb.init/finish per run; each row is ONE run.log call, so W&B writes one history row per call."""
    import wandb

    settings = wandb.Settings(silent=True, x_disable_stats=True, console="off")
    run = wandb.init(
        mode="offline",
        dir=str(out_dir),
        id=spec.run.run_id,
        name=spec.run.name,
        project=spec.run.project,
        entity=ENTITY,
        config=spec.config,
        tags=spec.tags,
        group=spec.group,
        job_type="train",
        settings=settings,
    )
    try:
        if spec.define_trl_metrics:  # what transformers' WandbCallback declares
            run.define_metric("train/global_step")
            run.define_metric("*", step_metric="train/global_step", step_sync=True)
        for step, row in spec.rows:
            if step is None:
                run.log(row)
            else:
                run.log(row, step=step)
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish(exit_code=0)


def write_demo_runs(
    out_dir: str | Path, seed: int = 7, scale: float = 1.0, progress: Callable[[str], None] | None = None
) -> list[DemoRun]:
    """Write all demo runs under ``out_dir/wandb/offline-run-*`` and their labels to ``out_dir/labels.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    specs = _league_specs(seed, scale) + _sweep_specs(seed, scale) + _trl_specs(seed, scale) + _verl_specs(seed, scale)
    # W&B would happily write a second folder with the same run id; an ingest would then see every run twice.
    clashes = [s.run.run_id for s in specs if any(out.glob(f"wandb/offline-run-*-{s.run.run_id}"))]
    if clashes:
        raise FileExistsError(f"{out} already holds demo runs {clashes}; use an empty folder or another seed")
    for spec in specs:
        _write(spec, out)
        if progress is not None:
            progress(
                f"wrote {spec.run.project}/{spec.run.name} ({spec.run.run_id}): {len(spec.rows)} rows, "
                f"{len(spec.run.problems)} labelled problems"
            )
    import wandb

    wandb.teardown()  # finish() can return before wandb-core has written the tail of the last run's file
    runs = [s.run for s in specs]
    (out / "labels.json").write_text(json.dumps([asdict(r) for r in runs], indent=2) + "\n")
    return runs


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m pipeline.demo.runs OUT_DIR [SEED] [SCALE]")
    t0 = time.perf_counter()
    result = write_demo_runs(
        sys.argv[1],
        seed=int(sys.argv[2]) if len(sys.argv) > 2 else 7,
        scale=float(sys.argv[3]) if len(sys.argv) > 3 else 1.0,
    )
    for r in result:
        labels = ", ".join(f"{p.check}@{p.onset_step}" for p in r.problems) or "healthy"
        print(f"{r.style:9s} {r.project}/{r.name:22s} id={r.run_id}  {labels}")
    print(f"{len(result)} runs in {time.perf_counter() - t0:.1f} s -> {Path(sys.argv[1]) / 'labels.json'}")
