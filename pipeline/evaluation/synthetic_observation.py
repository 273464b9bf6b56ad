"""From latents to logged values in the synthetic generator (sampled GRPO groups, evaluations, implied metrics), and
the consistency check that redraws a run showing a condition no label claims."""

from __future__ import annotations

import math

import numpy as np

from pipeline.evaluation.synthetic_signals import _ar_t, _expit, _ncdf, _Redraw, _Run, _window
from pipeline.evaluation.synthetic_spec import LIMITS

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
