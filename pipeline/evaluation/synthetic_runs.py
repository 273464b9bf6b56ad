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
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np

from pipeline.evaluation.synthetic_observation import _hidden_problems, _implied, _observe
from pipeline.evaluation.synthetic_problems import _VARIANT_FN, _VARIANT_KNOBS
from pipeline.evaluation.synthetic_signals import (
    _draw_knobs,
    _draw_length,
    _flavour_knobs,
    _flavour_latents,
    _latents,
    _Redraw,
    _Run,
)
from pipeline.evaluation.synthetic_spec import (
    BASE_TIME,
    CHECKS_DIR,
    DEAD_FUNC,
    HEALTHY_FLAVOURS,
    HEALTHY_NEEDS,
    LIMITS,
    PROBLEM_CLASSES,
    PROJECT_ROOT,
    SECONDARY,
    SHAPING_FUNCS,
    TASK_FUNCS,
    TRL_STEP_FIELDS,
    VARIANTS,
    VERL_DATASETS,
    Label,
    Variant,
    _compose,
    _Plan,
)
from pipeline.evaluation.synthetic_writers import _write_jsonl, _write_trainer_state, _write_wandb

__all__ = [
    "BASE_TIME",
    "CHECKS_DIR",
    "DEAD_FUNC",
    "HEALTHY_FLAVOURS",
    "HEALTHY_NEEDS",
    "LIMITS",
    "Label",
    "PROBLEM_CLASSES",
    "PROJECT_ROOT",
    "SECONDARY",
    "SHAPING_FUNCS",
    "TASK_FUNCS",
    "TRL_STEP_FIELDS",
    "VARIANTS",
    "VERL_DATASETS",
    "Variant",
    "main",
    "summary",
    "write_runs",
]


# ----------------------------------------------------------------------------------------------------------- API


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
