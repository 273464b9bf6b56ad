"""The team-scale data set for the warehouse benchmark: JSONL trainer logs, verl-style, read through the real
trainer-log source.

R runs × S steps × K metrics, one ``<root>/scale/run-NNN.jsonl`` per run. Twelve keys are ones the metric aliases
map (KL, entropy, reward, response length, step time, throughput...), so the marts and checks have work to do;
the rest are other dense per-step keys, as verl logs ~150 of them. Values are AR(1) walks, written with 6
significant digits. ``grow`` appends ~1 % more values the way a live team's logs grow: three runs go on, one new
run starts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

MAPPED = (
    "actor/kl_loss",
    "actor/entropy",
    "actor/grad_norm",
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/lr",
    "critic/score/mean",
    "critic/score/std",
    "response_length/mean",
    "timing_s/step",
    "timing_s/gen",
    "perf/throughput",
)
MANIFEST = "scale-manifest.json"


def key_names(metrics: int) -> list[str]:
    others = [
        f"{family}/x{j:03d}"
        for j, family in zip(
            range(max(0, metrics - len(MAPPED))),
            ("actor", "critic", "timing_s", "perf", "val-core") * 1000,
            strict=False,  # the families repeat far more often than needed
        )
    ]
    return [*MAPPED[:metrics], *others]


def _lines(run: int, first_step: int, steps: int, keys: list[str], seed: int) -> str:
    rng = np.random.default_rng([seed, run, first_step])
    noise = rng.standard_normal((steps, len(keys)))
    walk = np.empty_like(noise)
    level = rng.uniform(0.1, 2.0, len(keys))
    state = np.zeros(len(keys))
    for i in range(steps):  # AR(1): what trainer metrics look like step to step
        state = 0.9 * state + 0.1 * noise[i]
        walk[i] = state
    values = level * (1.0 + 0.3 * walk)
    template = "{" + '"step": %d, ' + ", ".join(f'"{k}": %.6g' for k in keys) + "}\n"
    steps_col = np.arange(first_step, first_step + steps)
    return "".join(template % (step, *row) for step, row in zip(steps_col.tolist(), values.tolist(), strict=True))


def run_path(root: Path, run: int) -> Path:
    return root / "scale" / f"run-{run:03d}.jsonl"


def write_set(root: Path, runs: int, steps: int, metrics: int, seed: int = 0) -> dict:
    """Write the set unless ``root`` already holds exactly this one (its manifest matches and no file changed)."""
    spec = {"runs": runs, "steps": steps, "metrics": metrics, "seed": seed}
    manifest = root / MANIFEST
    try:
        saved = json.loads(manifest.read_text())
        if saved["spec"] == spec and all(Path(p).stat().st_size == size for p, size in saved["files"].items()):
            return saved
    except (OSError, ValueError, KeyError):
        pass
    keys = key_names(metrics)
    files = {}
    for run in range(runs):
        path = run_path(root, run)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_lines(run, 0, steps, keys, seed))
        files[str(path)] = path.stat().st_size
    for extra in root.glob("scale/run-*.jsonl"):  # runs a previous `grow` added
        if str(extra) not in files:
            extra.unlink()
    saved = {"spec": spec, "files": files, "values": runs * steps * metrics}
    manifest.write_text(json.dumps(saved))
    return saved


def grow(root: Path, share: float = 0.01, seed: int = 1) -> int:
    """Append ``share`` more values: three runs log more steps, one new run starts. Returns the values added.
    The set's manifest no longer matches afterwards, so the next ``write_set`` starts from scratch."""
    spec = json.loads((root / MANIFEST).read_text())["spec"]
    keys = key_names(spec["metrics"])
    rows = max(4, round(spec["runs"] * spec["steps"] * share))
    per_part = rows // 4
    for run in range(3):
        path = run_path(root, run)
        with open(path, "rb") as lines:
            last = sum(1 for _ in lines)  # steps 0..last-1 are there
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(_lines(run, last, per_part, keys, seed))
    new = sum(1 for _ in root.glob("scale/run-*.jsonl"))
    run_path(root, new).write_text(_lines(new, 0, rows - 3 * per_part, keys, seed))
    return rows * len(keys)
