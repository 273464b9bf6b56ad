"""The writers of the synthetic generator: JSONL metric logs, Hugging Face ``trainer_state.json`` (with checkpoint
snapshots) and real W&B offline runs written with the ``wandb`` library."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.evaluation.synthetic_render import _records, _timestamps
from pipeline.evaluation.synthetic_signals import _Run
from pipeline.evaluation.synthetic_spec import _pick

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
