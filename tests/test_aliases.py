"""grpolens.yaml's metric aliases: a trainer's own keys on the canonical vocabulary, end to end through the CLI."""

from __future__ import annotations

import json
import math

import duckdb

from pipeline import aliases, build_plan
from pipeline.settings import Settings
from tests.conftest import grpolens


def _metric_log(folder) -> None:
    """A hand-written trainer's JSONL: `score` is its reward, `pg` its loss (NaN at step 7), and its `reward` is
    a held-out evaluation."""
    folder.mkdir(parents=True)
    lines = [
        {"step": s, "score": 0.4 + 0.01 * s, "pg": math.nan if s == 7 else 0.1, "reward": 0.3 + 0.001 * s}
        for s in range(1, 31)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def _metrics(settings: Settings) -> dict[str, int]:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        return dict(con.execute("select metric || ' <- ' || source_key, count(*) from metrics group by all").fetchall())


def _flags(settings: Settings) -> list[tuple]:
    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:
        return con.execute("select check_name, step from anomalies where check_name = 'loss_nonfinite'").fetchall()


def test_aliases_map_a_trainers_own_keys_and_a_change_rebuilds_and_rechecks(tmp_path):
    _metric_log(tmp_path / "logs" / "custom-run")
    settings = Settings(home=tmp_path / "home")
    config = tmp_path / "grpolens.yaml"
    env = {"GRPOLENS_HOME": str(settings.home), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}
    env["GRPOLENS_CONFIG"] = str(config)

    config.write_text("checks: {}\n")
    grpolens("refresh", env=env, check=True)
    assert _metrics(settings) == {"reward_mean <- reward": 30}  # the seed's: `reward` is the TRL reward
    assert _flags(settings) == []  # no loss: nothing to judge

    config.write_text("aliases:\n  score: reward_mean\n  pg: loss\n  reward: eval_reward\n")
    done = grpolens("refresh", env=env, check=True)
    assert "full build (grpolens.yaml's metric aliases changed)" in done.stdout + done.stderr
    # the alias of `reward` replaces the seed's, and `score` is the reward now
    assert _metrics(settings) == {"reward_mean <- score": 30, "loss <- pg": 30, "eval_reward <- reward": 30}
    assert _flags(settings) == [("loss_nonfinite", 7)]  # the rules ran again on a run whose lake did not change

    with duckdb.connect(str(settings.duckdb_path), read_only=True) as con:  # as `grpolens sweep --metric` reads them
        known = dict(con.execute(f"select source_key, metric from ({aliases.known_sql(con)})").fetchall())
    assert (known["score"], known["reward"], known["train/reward"]) == ("reward_mean", "eval_reward", "reward_mean")

    again = grpolens("refresh", env=env, check=True)
    assert "up to date" in again.stdout + again.stderr
    unchanged = {"score": "reward_mean", "pg": "loss", "reward": "eval_reward"}
    assert not build_plan.plan(settings, user_aliases=unchanged).full
    assert build_plan.plan(settings, user_aliases={"score": "reward_mean"}).full


def test_a_hand_written_trainers_grad_and_reward_spread_are_its_grad_norm_and_reward_std(tmp_path):
    """A custom GRPO trainer prints `grad=0.16` and `reward=0.300 (std=0.459)`: the gradient norm and the reward's
    spread, which grad_norm_spike, grad_norm_vanishing and reward_zero_variance judge. They went unjudged ("no
    grad_norm logged") with the seed's own console names and nothing in grpolens.yaml."""
    folder = tmp_path / "logs" / "gsm8k-grpo"
    folder.mkdir(parents=True)
    (folder / "train.log").write_text(
        "".join(
            f"[Step {s}/20] loss=0.0000 grad={0.1 + s / 100} clip=0.000 | reward={s / 40} (std=0.4{s:02d}) | "
            "accuracy=0.297\n"
            for s in range(1, 21)
        )
    )
    settings = Settings(home=tmp_path / "home")
    env = {"GRPOLENS_HOME": str(settings.home), "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs")}
    grpolens("refresh", env=env, check=True)
    assert _metrics(settings) == {
        "reward_mean <- reward": 20,
        "reward_std <- reward_std": 20,
        "grad_norm <- grad": 20,
        "loss <- loss": 20,
    }


def test_an_alias_onto_an_unknown_metric_fails_before_the_ingest(tmp_path):
    _metric_log(tmp_path / "logs" / "custom-run")
    config = tmp_path / "grpolens.yaml"
    config.write_text("aliases:\n  score: rewrd_mean\n")
    env = {
        "GRPOLENS_HOME": str(tmp_path / "home"),
        "GRPOLENS_TRAINER_LOGS": str(tmp_path / "logs"),
        "GRPOLENS_CONFIG": str(config),
    }
    failed = grpolens("refresh", env=env)
    assert failed.returncode == 1 and "maps onto unknown metrics: rewrd_mean" in failed.stderr
    assert "reward_mean" in failed.stderr.split("known:")[1]
    assert not (tmp_path / "home" / "lake").exists()  # nothing ingested
    config.write_text("aliases: [score]\n")
    failed = grpolens("refresh", env=env)
    assert failed.returncode == 1 and "`aliases` must map logged keys to canonical metrics" in failed.stderr
