"""Rendering a simulated run as its trainer would log it: rounded values, the training rows under the run's key
style, timestamps and the ordered records (with evaluations, restarts and duplicates) the writers put on disk."""

from __future__ import annotations

import math

import numpy as np

from pipeline.evaluation.synthetic_signals import _comp_key, _expit, _Run
from pipeline.evaluation.synthetic_spec import BASE_TIME, VERL_DATASETS, _pick

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
