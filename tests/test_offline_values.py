"""Values written by the real wandb offline writer come back exactly through ingest and the dbt warehouse."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import wandb

from pipeline import warehouse
from pipeline.ingest import ingest
from pipeline.settings import Settings
from tests.wandb_writer import write_run

HOSTILE_NAMES = ["'; DROP TABLE runs; --", "../../etc/passwd", 'quote"s and \\back', "模型 🚀 ünïcode"]
HOSTILE_KEYS = ["it's", 'a"b', "../up", "x; DROP TABLE history", "метрика/λ", "spaced key"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Settings:
    root = tmp_path_factory.mktemp("runs")
    rows = [
        {
            "a": 1.5,
            "nan": float("nan"),
            "pos_inf": float("inf"),
            "neg_inf": float("-inf"),
            "big": 2**53 + 1,
            "min64": -(2**63),
            "huge": 2**70,
            "neg": -7,
            "text": "hello, 'world'",
            "flag": True,
            "nested": {"x": 1, "y": {"z": 2.25}},
            "lst": [1, 2, 3],
        },
        ({"sparse": 10.0}, {"commit": False}),  # merged into the next committed row
        {"b": 3.0},
        ({"a": 4.0}, {"step": 10}),  # explicit step
        ({"img": wandb.Image(np.zeros((4, 4, 3), dtype=np.uint8)), "h": wandb.Histogram([1, 2, 3])}, {"step": 11}),
        ({"sparse": 20.0}, {"step": 15}),
    ]
    write_run(
        root,
        rows,
        run_id="values01",
        name="values",
        project="exact",
        config={
            "lr": 1e-5,
            "api_key": "sk-SECRET",
            "hub": {"hf_token": "hf_SECRET"},
            "max_new_tokens": 512,
            "tokenizer": "qwen",
        },
    )
    for i, name in enumerate(HOSTILE_NAMES):
        write_run(
            root,
            [{key: float(j) for j, key in enumerate(HOSTILE_KEYS)}],
            run_id=f"hostile{i}",
            name=name,
            project="hostile ' project",
            tags=[name],
        )
    settings = Settings(home=tmp_path_factory.mktemp("home"), wandb_dirs=(root,))
    ingest(settings)
    warehouse.build(settings)
    return settings


def history(settings, run_id):
    con = warehouse.connect_readonly(settings)
    try:
        rows = con.sql(f"""select step, key, value, value_int, value_text, value_type, ts
                           from history where run_key like '%/{run_id}' order by step, key""").fetchall()
    finally:
        con.close()
    return {(step, key): (value, vint, text, vtype, ts) for step, key, value, vint, text, vtype, ts in rows}


def test_numbers_and_specials_exact(built):
    h = history(built, "values01")
    assert h[(0, "a")][0] == 1.5
    assert math.isnan(h[(0, "nan")][0])
    assert h[(0, "pos_inf")][0] == math.inf and h[(0, "neg_inf")][0] == -math.inf
    assert h[(0, "big")][1] == 2**53 + 1  # a DOUBLE alone could not say this
    assert h[(0, "min64")][1] == -(2**63)
    # wandb itself writes integers beyond int64 as floating-point text: the value is what it wrote
    assert h[(0, "huge")][:3] == (float(2**70), None, None)
    assert h[(0, "neg")][:2] == (-7.0, -7)
    assert h[(0, "flag")][:2] == (1.0, 1) and h[(0, "flag")][3] == "bool"


def test_text_nested_and_media(built):
    h = history(built, "values01")
    assert h[(0, "text")][2:4] == ("hello, 'world'", "string") and h[(0, "text")][0] is None
    assert h[(0, "nested.x")][0] == 1 and h[(0, "nested.y.z")][0] == 2.25
    assert json.loads(h[(0, "lst")][2]) == [1, 2, 3] and h[(0, "lst")][3] == "list"
    image = json.loads(h[(11, "img")][2])
    assert h[(11, "img")][3] == "image-file" and image["width"] == 4 and image["path"].endswith(".png")
    assert h[(11, "h")][3] == "histogram" and sum(json.loads(h[(11, "h")][2])["values"]) == 3


def test_every_value_keeps_its_own_step(built):
    h = history(built, "values01")
    steps = {key: sorted(s for s, k in h if k == key) for key in ("a", "b", "sparse")}
    assert steps == {"a": [0, 10], "b": [1], "sparse": [1, 15]}  # commit=False joined step 1's row
    assert h[(10, "a")][0] == 4.0 and h[(15, "sparse")][0] == 20.0
    assert all(v[4] is not None for v in h.values())  # every row carries its _timestamp


def test_run_metadata_and_no_secrets(built):
    con = warehouse.connect_readonly(built)
    try:
        name, state, config, last_step, entity = con.sql(
            "select name, state, config, last_step, entity from runs where run_id = 'values01'"
        ).fetchone()
        dump = " ".join(str(r) for r in con.sql("select * from runs").fetchall())
    finally:
        con.close()
    assert (name, state, last_step, entity) == ("values", "finished", 15, "testers")
    assert json.loads(config)["lr"] == 1e-5
    assert "sk-SECRET" not in dump and "redacted" in json.loads(config)["api_key"]
    assert "hf_SECRET" not in dump and json.loads(config)["hub"]["hf_token"] == "***redacted***"
    # keys that merely contain a credential-like word are ordinary settings
    assert json.loads(config)["max_new_tokens"] == 512 and json.loads(config)["tokenizer"] == "qwen"
    lake_bytes = b"".join(p.read_bytes() for p in built.lake.rglob("*") if p.is_file())
    assert b"sk-SECRET" not in lake_bytes and b"hf_SECRET" not in lake_bytes


def test_hostile_names_and_keys_stored_literally(built):
    con = warehouse.connect_readonly(built)
    try:
        names = {r[0] for r in con.sql("select name from runs where project = 'hostile '' project'").fetchall()}
        keys = {r[0] for r in con.sql("select distinct key from history where run_key like '%/hostile%'").fetchall()}
        tags = {r[0][0] for r in con.sql("select tags from runs where run_id like 'hostile%'").fetchall()}
    finally:
        con.close()
    assert names == set(HOSTILE_NAMES) and tags == set(HOSTILE_NAMES)
    assert set(HOSTILE_KEYS) <= keys
    # Nothing in the lake is named after a run: no path can escape it.
    assert not any(".." in p.name or "passwd" in str(p) for p in built.lake.rglob("*"))
