"""pipeline/report/sweep_plots.py: real PNGs read back with matplotlib, the drawing order, the panel cap and the
thinning of long curves."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest

from pipeline.report import plots
from pipeline.report import sweep_plots as sp


@pytest.fixture(autouse=True)
def _no_open_figures():
    plt.close("all")
    yield
    assert plt.get_fignums() == [], "a figure was left open"


def _png(path) -> np.ndarray:
    assert path is not None and path.exists() and path.read_bytes()[:4] == b"\x89PNG"
    img = plt.imread(path)
    assert img.ndim == 3 and img.shape[1] == round(plots.DPI * plots.WIDTH)
    return img


def _runs(n: int = 5) -> pl.DataFrame:
    score = np.array([0.5, 0.9, 0.1, 0.7, 0.85, 0.3, 0.2][:n])
    return pl.DataFrame(
        {
            "run": [f"run-{i}" for i in range(n)],
            "score": score,
            "ci_low": score - 0.1,
            "ci_high": score + 0.1,
            "tied_with_best": score >= 0.75,
        }
    )


def _curves(n_runs: int, n_steps: int = 20) -> pl.DataFrame:
    steps = np.arange(n_steps)
    return pl.concat(
        [pl.DataFrame({"run": [f"r{i}"] * n_steps, "step": steps, "value": np.sqrt(steps) + i}) for i in range(n_runs)]
    )


def test_ranked_order_best_first_in_both_directions():
    runs = _runs().vstack(
        pl.DataFrame(
            {"run": ["nan"], "score": [float("nan")], "ci_low": [None], "ci_high": [None], "tied_with_best": [None]},
            schema=_runs().schema,
        )
    )
    assert sp.ranked_order(runs, True).get_column("run").to_list() == ["run-1", "run-4", "run-3", "run-0", "run-2"]
    assert sp.ranked_order(runs, False).get_column("run").to_list() == ["run-2", "run-0", "run-3", "run-4", "run-1"]


def test_ranked_scores_png_height_and_best_on_top(tmp_path, monkeypatch):
    seen = {}
    real_save = sp._save
    monkeypatch.setattr(sp, "_save", lambda fig, out: seen.update(ax=fig.axes[0]) or real_save(fig, out))
    img = _png(sp.ranked_scores(_runs(3), "task_score", True, tmp_path / "a" / "rank.png", "ranking"))
    assert img.shape[0] == round(plots.DPI * sp.MIN_HEIGHT)
    many = pl.DataFrame(
        {
            "run": [f"a-very-long-run-name-from-the-sweep-number-{i:03d}" for i in range(40)],
            "score": np.linspace(0, 1, 40),
            "ci_low": [None] * 40,
            "ci_high": [None] * 40,
            "tied_with_best": [False] * 40,
        },
        schema_overrides={"ci_low": pl.Float64, "ci_high": pl.Float64},
    )
    img = _png(sp.ranked_scores(many, "loss", False, tmp_path / "many.png", "lower is better"))
    assert img.shape[0] > round(plots.DPI * 0.3 * 40)
    # the best run (lowest loss) at the top, names cut to 40 characters; no CI: no dashed line
    labels = sorted(((t.get_position()[1], t.get_text()) for t in seen["ax"].get_yticklabels()), reverse=True)
    assert labels[0][1] == sp._short(many["run"][0]) and labels[-1][1] == sp._short(many["run"][-1])
    assert all(len(text) <= sp.NAME_CHARS for _, text in labels) and labels[0][1].endswith("…")
    assert not [ln for ln in seen["ax"].get_lines() if ln.get_linestyle() == "--"]
    _png(sp.ranked_scores(_runs(), "task_score", True, tmp_path / "b.png", "ranking"))
    top = max(seen["ax"].get_yticklabels(), key=lambda t: t.get_position()[1]).get_text()
    dashed = [ln for ln in seen["ax"].get_lines() if ln.get_linestyle() == "--"]
    assert top == "run-1" and len(dashed) == 1 and dashed[0].get_xdata()[0] == pytest.approx(0.8)


def test_ranked_scores_nothing_to_draw(tmp_path):
    assert sp.ranked_scores(_runs().clear(), "s", True, tmp_path / "x.png", "t") is None
    nan = _runs().with_columns(pl.lit(float("nan")).alias("score"))
    assert sp.ranked_scores(nan, "s", True, tmp_path / "x.png", "t") is None
    assert not (tmp_path / "x.png").exists()


def test_curves_title_and_thinning_helpers():
    assert sp.curves_title("kl", 60) == "kl"
    assert sp.curves_title("kl", 75) == "kl (first 60 of 75 runs)"
    steps = np.arange(2501)  # every 3rd point: 0, 3, ..., 2499, and the last one
    s, v = sp.thin(steps, steps * 2.0)
    assert s[0] == 0 and s[-2] == 2499 and s[-1] == 2500 and v[-1] == 5000.0 and len(s) <= sp.MAX_POINTS + 1
    assert np.all(np.diff(s) > 0)
    s, v = sp.thin(steps[:1000], steps[:1000])
    assert len(s) == 1000


def test_curves_small_multiples_cap_and_downsampling(tmp_path, monkeypatch):
    saved = {}
    real_save = sp._save

    def spy(fig, out):
        saved["titles"] = [ax.get_title() for ax in fig.axes]
        saved["suptitle"] = fig.get_suptitle()
        saved["lines"] = [ax.get_lines()[0] for ax in fig.axes]
        saved["ylim"] = {ax.get_ylim() for ax in fig.axes}
        return real_save(fig, out)

    monkeypatch.setattr(sp, "_save", spy)
    frame = _curves(63)
    _png(sp.curves(frame, "reward", tmp_path / "multi.png", "reward", highlight=["r2"]))
    assert len(saved["titles"]) == 60 and saved["titles"][0] == "r0"
    assert saved["suptitle"] == "reward (first 60 of 63 runs)"
    assert len(saved["ylim"]) == 1  # shared y
    assert saved["lines"][2].get_color() == sp.STRONG and saved["lines"][0].get_color() == sp.PLAIN

    long = pl.DataFrame({"run": ["long"] * 3003, "step": np.arange(3003), "value": np.arange(3003, dtype=float)})
    long = long.with_columns(pl.when(pl.col("step") == 8).then(float("nan")).otherwise(pl.col("value")).alias("value"))
    _png(sp.curves(long, "kl", tmp_path / "long.png", "long"))
    xs = saved["lines"][0].get_xdata()
    assert len(xs) <= sp.MAX_POINTS + 1 and xs[-1] == 3002 and 8 not in xs and saved["suptitle"] == "long"


def test_curves_overlay_legend_and_labels(tmp_path, monkeypatch):
    seen = {}
    real_save = sp._save
    monkeypatch.setattr(
        sp, "_save", lambda fig, out: seen.update(legend=fig.axes[0].get_legend()) or real_save(fig, out)
    )
    _png(sp.curves(_curves(4), "reward", tmp_path / "o.png", "few", overlay=True, highlight=["r1"]))
    assert [t.get_text() for t in seen["legend"].get_texts()] == ["r0", "r1", "r2", "r3"]
    _png(sp.curves(_curves(20), "reward", tmp_path / "o2.png", "many", overlay=True, highlight=["r5", "nope"]))
    assert [t.get_text() for t in seen["legend"].get_texts()] == ["r5"]
    assert seen["legend"].get_title().get_text() == "highlighted (of 20 runs)"
    _png(sp.curves(_curves(20), "reward", tmp_path / "o3.png", "many", overlay=True))
    assert seen["legend"] is None


def test_curves_nothing_to_draw(tmp_path):
    frame = _curves(2).with_columns(pl.lit(float("inf")).alias("value"))
    assert sp.curves(frame, "m", tmp_path / "c.png", "t") is None
    assert sp.curves(frame.clear(), "m", tmp_path / "c.png", "t", overlay=True) is None


def test_score_vs_param_categorical_and_log(tmp_path, monkeypatch):
    seen = {}
    real_save = sp._save
    monkeypatch.setattr(
        sp,
        "_save",
        lambda fig, out: (
            seen.update(
                ax=fig.axes[0],
                xscale=fig.axes[0].get_xscale(),
                ticks=[t.get_text() for t in fig.axes[0].get_xticklabels()],
            )
            or real_save(fig, out)
        ),
    )
    points = pl.DataFrame(
        {
            "value": ["adam", "sgd", "adam", "lion", "sgd"],
            "score": [0.5, 0.2, 0.6, float("nan"), 0.3],
            "run": list("abcde"),
        }
    )
    levels = pl.DataFrame(
        {"value": ["sgd", "adam"], "mean": [0.25, 0.55], "ci_low": [0.2, 0.5], "ci_high": [None, 0.6]}
    )
    _png(sp.score_vs_param(points, "optimizer", True, levels, tmp_path / "cat.png", "optimizer"))
    assert seen["ticks"] == ["sgd", "adam"] and seen["xscale"] == "linear"  # lion has no finite score
    star = [ln for ln in seen["ax"].get_lines() if ln.get_marker() == "*"]
    assert list(star[0].get_xdata()) == [1.0]  # adam, the higher mean
    xs = seen["ax"].collections[0].get_offsets()[:, 0]
    assert len(xs) == 4 and np.all(np.abs(xs - np.round(xs)) <= 0.15)  # jittered around the level positions
    best_low = levels.with_columns(best=pl.Series([True, False]))
    _png(sp.score_vs_param(points, "optimizer", False, best_low, tmp_path / "cat2.png", "lower is better"))
    star = [ln for ln in seen["ax"].get_lines() if ln.get_marker() == "*"]
    assert list(star[0].get_xdata()) == [0.0]

    lr = np.array([1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 0.0])
    points = pl.DataFrame({"value": lr, "score": [0.1, 0.3, 0.6, 0.5, 0.2, 0.9], "run": list("abcdef")})
    levels = pl.DataFrame(
        {"value": lr[:5], "mean": [0.1, 0.3, 0.6, 0.5, 0.2], "ci_low": [0.05] * 5, "ci_high": [0.7] * 5}
    )
    _png(sp.score_vs_param(points, "learning_rate", True, levels, tmp_path / "lr.png", "lr"))
    assert seen["xscale"] == "log"
    star = [ln for ln in seen["ax"].get_lines() if ln.get_marker() == "*"]
    assert len(star) == 1 and list(star[0].get_xdata()) == [1e-5]
    _png(sp.score_vs_param(points, "learning_rate", False, pl.DataFrame([]), tmp_path / "lin.png", "lr"))
    assert seen["xscale"] == "linear"
    assert sp.score_vs_param(points.clear(), "lr", True, None, tmp_path / "e.png", "t") is None
    assert sp.score_vs_param(points.filter(pl.col("value") == 0), "lr", True, None, tmp_path / "e.png", "t") is None


def test_pareto_front_drawn(tmp_path, monkeypatch):
    seen = {}
    real_save = sp._save
    monkeypatch.setattr(sp, "_save", lambda fig, out: seen.update(ax=fig.axes[0]) or real_save(fig, out))
    runs = pl.DataFrame(
        {
            "run": ["cheap", "mid", "dear", "bad", "nan"],
            "score": [0.3, 0.6, 0.9, 0.2, float("nan")],
            "cost": [1.0, 2.0, 4.0, 3.0, 1.0],
            "on_front": [True, True, True, False, None],
        }
    )
    img = _png(sp.pareto(runs, "GPU hours", True, tmp_path / "p.png", "pareto"))
    assert img.shape[0] == round(plots.DPI * 5)
    ax = seen["ax"]
    assert [t.get_text() for t in ax.texts] == ["cheap", "mid", "dear"]
    step = ax.get_lines()[0]
    assert step.get_drawstyle() == "steps-post" and list(step.get_xdata()) == [1.0, 2.0, 4.0]
    assert sp.pareto(runs.clear(), "c", True, tmp_path / "q.png", "t") is None
    no_cost = runs.with_columns(pl.lit(None, pl.Float64).alias("cost"))
    assert sp.pareto(no_cost, "c", True, tmp_path / "q.png", "t") is None
