"""The real wandb client (wandb.Api through wandb-core) against tests/wandb_emulator.py: what the cloud ingest
relies on, and the client's behaviour the emulator pins down (history paths, retries, errors)."""

from __future__ import annotations

import json
import math
import time

import pytest
from wandb.sdk.lib.service.service_connection import WandbApiFailedError

from tests.conftest import LENGTH_COLLAPSE
from tests.wandb_emulator import WandbEmulator, read_offline_run
from tests.wandb_writer import write_run

wandb = pytest.importorskip("wandb")


@pytest.fixture(autouse=True)
def _fast_client(_isolated_env):
    """Give up after 3 attempts, 1 s apart, 2 s per attempt (process-wide wandb settings; Api copies them)."""
    WandbEmulator.client_settings(retry_max=2, wait_seconds=1, timeout_seconds=2)


@pytest.fixture
def emu():
    with WandbEmulator() as emulator:
        yield emulator


def same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b  # 3.0 may come back as 3: wandb-core writes integral floats as JSON integers


def by_step(rows: list[dict]) -> dict[int, dict]:
    """scan_history's rows keyed by step, the nulls of Parquet rows dropped (a null cell means "not logged")."""
    out: dict[int, dict] = {}
    for row in rows:
        clean = {k: v for k, v in row.items() if v is not None}
        if row["_step"] in out:
            assert same(out[row["_step"]], clean), f"step {row['_step']} came back twice, differently"
        out[row["_step"]] = clean
    return out


def test_listing_filters_on_updated_at_and_pages(emu):
    times = [
        "2026-11-22T05:00:00Z",
        "2026-11-22T05:59:59Z",
        "2026-11-22T06:00:00Z",
        "2026-11-22T06:00:01Z",
        "2026-11-22T07:30:00Z",
        "2026-11-22T08:00:00Z",
        "2026-11-22T09:15:00Z",
    ]
    for i, t in enumerate(times):
        emu.add_run(
            "team",
            "grpo",
            f"run{i}",
            name=f"grpo-{i}",
            config={"lr": 1e-6 * (i + 1), "model": {"n": i}},
            summary={"reward": i / 2},
            tags=["grpo", f"t{i}"],
            group="sweep-a" if i % 2 else None,
            job_type="train",
            state="running" if i == 6 else "finished",
            updated_at=t,
            created_at="2026-11-21T00:00:00Z",
            history=[{"_step": 0, "loss": 1.0}],
        )
    emu.add_run("team", "other", "elsewhere", updated_at="2026-11-22T10:00:00Z")
    api = emu.api(entity="team")

    runs = api.runs(
        "team/grpo", filters={"updatedAt": {"$gt": "2026-11-22T06:00:00Z"}}, order="+updated_at", per_page=2
    )
    got = list(runs)
    assert [r.id for r in got] == ["run3", "run4", "run5", "run6"]
    assert len(runs) == 4
    listing = [r for r in emu.requests if r.operation == "Runs"]
    assert len(listing) == 2 and listing[0].variables["cursor"] is None and listing[1].variables["cursor"]
    assert json.loads(listing[0].variables["filters"]) == {"updatedAt": {"$gt": "2026-11-22T06:00:00Z"}}

    run = got[1]
    assert (run.name, run.display_name, run.state, run.group, run.job_type) == (
        "grpo-4",
        "grpo-4",
        "finished",
        None,
        "train",
    )
    assert run.tags == ["grpo", "t4"] and run.sweep is None
    assert run.created_at == "2026-11-21T00:00:00" and run.heartbeatAt == "2026-11-22T07:30:00"
    assert run.config == {"lr": 1e-6 * 5, "model": {"n": 4}}
    assert run.summary["reward"] == 2.0 and run.summary["loss"] == 1.0
    assert run.lastHistoryStep == 0 and run.historyLineCount == 1
    assert got[3].state == "running" and got[2].group == "sweep-a"

    window = api.runs(
        "team/grpo",
        filters={
            "$and": [
                {"updatedAt": {"$gte": "2026-11-22T06:00:00Z"}},
                {"updatedAt": {"$lt": "2026-11-22T08:00:00+00:00"}},
            ]
        },
        order="-created_at",
        per_page=50,
    )
    assert sorted(r.id for r in window) == ["run2", "run3", "run4"]
    assert [r.id for r in api.runs("team/grpo", order="-updated_at", per_page=3)][:2] == ["run6", "run5"]
    assert not emu.unknown, emu.unknown


def test_scan_history_of_an_offline_run_across_the_parquet_live_boundary(tmp_path):
    rows = []
    for i in range(30):
        row = {
            "loss": 1.0 / (i + 1),
            "reward": -0.5 + i / 10,
            "tokens": 2**53 + i,
            "phase": f"p{i % 3}",
            "ok": i % 2 == 0,
        }
        if i == 3:
            row.update(loss=float("nan"), reward=float("inf"))
        if i == 4:
            row["reward"] = float("-inf")
        if i % 5 == 0:
            row["eval/acc"] = i / 30
        rows.append(row)
    folder = write_run(
        tmp_path / "runs",
        rows,
        run_id="offl1ne",
        project="grpo",
        entity="team",
        config={"lr": 3e-6, "algo": "grpo"},
        tags=["x"],
        group="g1",
    )
    expected = {r["_step"]: r for r in read_offline_run(folder)["history"]}
    assert len(expected) == 30 and all({"_runtime", "_timestamp"} <= r.keys() for r in expected.values())

    with WandbEmulator(rows_per_parquet_file=6) as emu:
        emu.add_offline_run(folder, entity="team", project="grpo", exported_fraction=0.5)
        assert [r["_step"] for r in emu.exported_rows("team", "grpo", "offl1ne")] == list(range(15))
        run = emu.api(entity="team").run("team/grpo/offl1ne")
        assert run.state == "finished" and run.config == {"lr": 3e-6, "algo": "grpo"} and run.group == "g1"

        for k in (0, 7, 15, 22):
            emu.requests.clear()
            got = list(run.scan_history(min_step=k, use_cache=False))
            steps = by_step(got)
            assert sorted(steps) == list(range(k, 30))
            for step, row in steps.items():
                assert same(row, expected[step]), (step, row, expected[step])
            # The page [k, 30) straddles the boundary: wandb-core reads the Parquet files (3 here) for it and also
            # asks `history` for the whole page, which (as the cloud's) includes the exported rows: they repeat.
            assert emu.count("RunParquetHistory") == 1 and emu.count("file") == 3
            assert emu.count("HistoryPage") == 1
            assert len(got) == (30 - k) + max(0, 15 - k)

        # Pages wholly inside the export never ask `history`; pages past it do.
        emu.requests.clear()
        got = list(run.scan_history(min_step=0, page_size=5, use_cache=False))
        assert sorted(by_step(got)) == list(range(30))
        pages = [r.variables for r in emu.requests if r.operation == "HistoryPage"]
        assert [(p["minStep"], p["maxStep"]) for p in pages] == [(15, 20), (20, 25), (25, 30)]


def test_history_without_exported_rows_in_the_live_path_has_no_duplicates(tmp_path):
    with WandbEmulator(history_includes_exported=False) as emu:
        emu.add_run(
            "team",
            "grpo",
            "r",
            history=[{"_step": i, "x": i * 0.5, "s": "a" * i} for i in range(12)],
            exported_fraction=0.5,
        )
        run = emu.api(entity="team").run("team/grpo/r")
        got = list(run.scan_history(min_step=2, use_cache=False))
        assert [r["_step"] for r in got] == list(range(2, 12))
        assert [r["x"] for r in got] == [i * 0.5 for i in range(2, 12)]


def test_real_binary_run_comes_back_as_decoded(tmp_path):
    source = next(LENGTH_COLLAPSE.glob("run-*"))
    decoded = [json.loads(line) for line in (LENGTH_COLLAPSE / "history_decoded.jsonl").read_text().splitlines()]
    with WandbEmulator() as emu:
        emu.add_offline_run(source, entity="team", project="retool_opd", exported_fraction=0.6)
        run = emu.api(entity="team").run("team/retool_opd/gjvwlq13")
        assert run.name == "qwen2_3b_opd" and run.config  # the whole Hydra config
        steps = by_step(list(run.scan_history(min_step=10, use_cache=False)))
    want = {r["_step"]: r for r in decoded if r["_step"] >= 10}
    assert sorted(steps) == sorted(want)
    for step, row in want.items():  # the reference decode spells a logged table's fields "key/field"
        assert same(flat(steps[step]), {k: v for k, v in row.items() if v is not None}), step
    table = steps[10]["val/generations"]
    assert table["_type"] == "table-file" and table["nrows"] == want[10]["val/generations/nrows"]


def flat(row: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, dict) and prefix == "" and "_type" in v:
            out.update({f"{k}/{f}": x for f, x in v.items() if f not in ("_type",) and x is not None})
            out[f"{k}/_type"] = v["_type"]
        else:
            out[k] = v
    return out


def test_running_run_grows_and_rewinds(emu):
    emu.add_run(
        "team",
        "grpo",
        "live",
        state="running",
        history=[{"_step": i, "x": i} for i in range(4)],
        exported_fraction=1.0,
        updated_at="2026-11-22T06:00:00Z",
    )
    api = emu.api(entity="team")
    cursor = "2026-11-22T06:00:00Z"
    assert list(api.runs("team/grpo", filters={"updatedAt": {"$gt": cursor}})) == []
    emu.append_history("team", "grpo", "live", [{"x": 4}, {"x": 5}])
    changed = list(api.runs("team/grpo", filters={"updatedAt": {"$gt": cursor}, "state": "running"}))
    assert [r.id for r in changed] == ["live"] and changed[0].lastHistoryStep == 5
    got = [r["_step"] for r in changed[0].scan_history(min_step=3, use_cache=False)]
    assert got == [3, 3, 4, 5]  # step 3 is exported and, through `history`, live as well
    emu.rewind("team", "grpo", "live", keep_steps_below=2)
    run = api.run("team/grpo/live")
    assert run.lastHistoryStep == 1
    assert [r["_step"] for r in run.scan_history(use_cache=False)] == [0, 1]


def test_logged_artifacts(emu):
    emu.add_run(
        "team",
        "grpo",
        "arty",
        artifacts=[
            {"name": "ckpt", "type": "model", "aliases": ["best"]},
            {"name": "ckpt", "type": "model"},
            {"name": "eval-set", "type": "dataset"},
        ],
    )
    arts = list(emu.api(entity="team").run("team/grpo/arty").logged_artifacts())
    assert [(a.name, a.type, a.version) for a in arts] == [
        ("ckpt:v0", "model", "v0"),
        ("ckpt:v1", "model", "v1"),
        ("eval-set:v0", "dataset", "v0"),
    ]
    assert arts[0].aliases == ["best"] and arts[1].aliases == ["latest"]
    assert not emu.unknown, emu.unknown


def test_429_with_retry_after_is_retried(emu):
    emu.add_run("team", "grpo", "r", history=[{"_step": i, "x": i} for i in range(6)], exported_fraction=0.5)
    run = emu.api(entity="team").run("team/grpo/r")
    emu.requests.clear()
    emu.fail("429", times=2, operation="RunParquetHistory", retry_after=1)
    started = time.monotonic()
    assert [r["_step"] for r in run.scan_history(min_step=3, use_cache=False)] == [3, 4, 5]
    assert time.monotonic() - started >= 2.0  # Retry-After honoured
    assert [r.status for r in emu.requests if r.operation == "RunParquetHistory"] == [429, 429, 200]


def test_persistent_5xx_and_a_scan_that_fails_midway_surface_in_seconds(emu):
    emu.add_run("team", "grpo", "r", history=[{"_step": i, "x": i} for i in range(40)], exported_fraction=0.25)
    api = emu.api(entity="team")
    emu.fail("503", times=100, operation="Runs")
    started = time.monotonic()
    with pytest.raises(WandbApiFailedError, match="(?s)giving up after 3 attempt.*HTTP 503"):
        list(api.runs("team/grpo", filters={"state": "finished"}))
    assert time.monotonic() - started < 10 and emu.count("Runs") == 3
    emu.clear_faults()

    run = api.run("team/grpo/r")
    emu.fail("500", times=100, operation="HistoryPage", after=1)  # the 2nd live page fails for good
    scan = run.scan_history(page_size=10, use_cache=False)
    seen = []
    with pytest.raises(Exception, match="500"):
        for row in scan:
            seen.append(row["_step"])
    assert seen == list(range(20))
    emu.clear_faults()

    emu.fail("500", times=100, operation="file")  # a Parquet download fails
    with pytest.raises(Exception, match="500"):
        list(run.scan_history(use_cache=False))
    emu.clear_faults()
    assert len(by_step(list(run.scan_history(use_cache=False)))) == 40


def test_timeout_truncated_and_dropped_answers(emu):
    emu.add_run("team", "grpo", "r", history=[{"_step": 0, "x": 1}])
    api = emu.api(entity="team")
    emu.fail("truncated", operation="Runs")
    with pytest.raises(WandbApiFailedError) as info:  # a 200 with a broken body is not retried
        list(api.runs("team/grpo", filters={"name": "r"}))
    print("truncated:", info.value)
    assert emu.count("Runs") == 1
    emu.fail("drop", operation="Runs")
    assert [r.id for r in api.runs("team/grpo", filters={"name": {"$in": ["r"]}})] == ["r"]  # retried
    assert emu.count("Runs") == 3
    emu.fail("timeout", times=100, operation="Runs", delay=30)
    started = time.monotonic()
    with pytest.raises(WandbApiFailedError, match="Timeout|deadline exceeded"):
        list(api.runs("team/grpo", filters={"name": {"$ne": "x"}}))
    assert time.monotonic() - started < 12


def test_wrong_key_is_an_authentication_error_without_the_key(emu):
    wrong = "f" * 40
    with pytest.raises(wandb.errors.AuthenticationError) as info:
        emu.api(api_key=wrong)
    assert wrong not in str(info.value) and emu.api_key not in str(info.value)
    assert [(r.operation, r.status) for r in emu.requests] == [("Viewer", 401)]
    assert emu.api_key not in repr(emu.requests)


def test_two_emulators_in_one_process(tmp_path):
    with WandbEmulator() as a, WandbEmulator() as b:
        a.add_run("team", "grpo", "only-a", history=[{"_step": 0, "v": "a"}])
        b.add_run("team", "grpo", "only-b", history=[{"_step": 0, "v": "b"}])
        api_a, api_b = a.api(entity="team"), b.api(entity="team")
        for _ in range(2):
            assert [r.id for r in api_a.runs("team/grpo", order="+created_at")] == ["only-a"]
            assert [r.id for r in api_b.runs("team/grpo", order="+created_at")] == ["only-b"]
            assert next(iter(api_b.run("team/grpo/only-b").scan_history(use_cache=False)))["v"] == "b"
            api_a, api_b = a.api(entity="team"), b.api(entity="team")
