"""The sweep writer (tests/sweep_runs.py): what it writes with the real wandb library reads back through the real
ingest and dbt build as the spec says, and its answers can be recovered from the warehouse."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest

from pipeline import warehouse
from pipeline.settings import Settings
from tests import sweep_runs
from tests.conftest import grpolens


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Every sweep written once, ingested and built: (specs, read-only connection)."""
    wandb_tmp = tmp_path_factory.mktemp("wandb-env")
    with pytest.MonkeyPatch.context() as mp:  # module scope runs before conftest's per-test isolation
        for name in ("DIR", "CACHE_DIR", "DATA_DIR", "CONFIG_DIR"):
            mp.setenv(f"WANDB_{name}", str(wandb_tmp / name.lower()))
        runs_dir = tmp_path_factory.mktemp("sweeps")
        written = sweep_runs.write_all(runs_dir)
    specs = sweep_runs.sweep_specs()
    assert {k: len(v) for k, v in written.items()} == {k: len(s.runs) for k, s in specs.items()}
    home = tmp_path_factory.mktemp("home")
    grpolens("refresh", env={"GRPOLENS_HOME": str(home), "GRPOLENS_WANDB_DIRS": str(runs_dir)}, check=True)
    con = warehouse.connect_readonly(Settings(home=home))
    yield specs, con
    con.close()


def test_written_config_group_and_length_are_the_spec(built):
    specs, con = built
    rows = {
        name: (group, tags, project, state, last_step, json.loads(config))
        for name, group, tags, project, state, last_step, config in con.sql(
            "select name, group_name, tags, project, state, last_step, config from runs"
        ).fetchall()
    }
    assert len(rows) == sum(len(s.runs) for s in specs.values())
    for sweep in specs.values():
        for run in sweep.runs:
            group, tags, project, state, last_step, config = rows[run.name]
            assert (group, tags, project) == (sweep.group, [sweep.group], sweep_runs.PROJECT)
            assert config == json.loads(json.dumps(run.config)), run.name  # tuples come back as lists
            assert last_step == run.steps and state == ("failed" if run.crashed else "finished"), run.name
    lr = [rows[r.name][5] for r in specs["lr-sweep"].runs]
    assert [c["learning_rate"] for c in lr] == [1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4]
    assert all(c["kl_target"] == pytest.approx(10 * c["kl_beta"]) for c in lr)
    assert len({c["seed"] for c in lr}) == len({c["output_dir"] for c in lr}) == 6
    # flat: only the per-run keys that are not hyper-parameters differ
    flat = [
        {k: v for k, v in rows[r.name][5].items() if k not in sweep_runs.NOT_HYPERPARAMETERS}
        for r in specs["flat"].runs
    ]
    assert flat[0] == flat[1] == flat[2]


def test_tail_means_in_the_warehouse_recover_the_truth(built):
    specs, con = built
    tails = dict(
        con.sql("""
        with m as (
            select r.name, r.last_step, m.step, m.value
            from metrics as m join runs as r using (run_key)
            where m.metric = 'reward_mean')
        select name, avg(value) from m where step > last_step - ceil(0.1 * last_step) group by name""").fetchall()
    )
    for sweep in specs.values():
        for run in sweep.runs:
            if run.keys == ("custom/score",):  # no alias: not a canonical metric
                assert run.name not in tails
                continue
            assert abs(tails[run.name] - run.final_reward) < 3.5 * sweep_runs.tail_sd(run.steps), run.name
        if sweep.truth["order"] and sweep.truth["best"]:
            finished = [r.name for r in sweep.runs if not r.crashed]
            assert max(finished, key=tails.get) == sweep.truth["best"], sweep.group
    assert sorted(specs["lr-sweep"].truth["order"], key=lambda n: -tails[n]) == specs["lr-sweep"].truth["order"]
    # the other TRL keys arrive under their canonical names too
    counts = dict(
        con.sql("""select metric, count(*) from metrics join runs using (run_key)
                             where name = 'lr-sweep-0' group by metric""").fetchall()
    )
    assert counts["reward_mean"] == counts["kl"] == counts["tokens_cumulative"] == 120
    assert counts["task_score"] == 12
    tokens = [
        v
        for (v,) in con.sql("""select value from metrics join runs using (run_key)
                                       where name = 'lr-sweep-0' and metric = 'tokens_cumulative'
                                       order by step""").fetchall()
    ]
    assert all(b > a for a, b in pairwise(tokens))


def test_crashed_run_is_failed_at_its_last_logged_step(built):
    specs, con = built
    truth = specs["ragged"].truth
    (name,) = truth["crashed"]
    state, exit_code, last_step = con.sql(
        "select state, exit_code, last_step from runs where name = ?", params=[name]
    ).fetchone()
    assert (state, exit_code, last_step) == (truth["crashed_state"], 1, 25)
    others = con.sql(
        "select distinct state from runs where group_name = 'ragged' and name <> ?", params=[name]
    ).fetchall()
    assert others == [("finished",)]
