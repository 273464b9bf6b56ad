"""pipeline/report/plots.py: real PNGs read back with matplotlib, and what the pixels show where findings are drawn."""

from __future__ import annotations

import base64
import math

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
import pytest

from pipeline.report import plots

STEPS = np.arange(100)
CURVES_SCHEMA = {"step": pl.Int64, "metric": pl.Utf8, "value": pl.Float64}


def _curves(**series) -> pl.DataFrame:
    frames = [
        pl.DataFrame(
            {"step": STEPS[: len(v)], "metric": [m] * len(v), "value": np.asarray(v, dtype=float)}, schema=CURVES_SCHEMA
        )
        for m, v in series.items()
    ]
    return pl.concat(frames)


def _png(path) -> np.ndarray:
    assert path is not None and path.read_bytes()[:4] == b"\x89PNG"
    return plt.imread(path)


def _finding(**kw) -> dict:
    return {"check": "reward_plateau", "severity": "error", "step": 30, "step_end": 60, "metric": "reward_mean"} | kw


def test_core_curves_png_size_and_panel_order(tmp_path):
    rng = np.random.default_rng(0)
    curves = _curves(
        loss=rng.normal(size=100),
        kl=rng.uniform(0.01, 0.02, 100),
        reward_mean=np.linspace(0, 1, 100),
        zzz_custom=rng.normal(size=100),
        entropy=rng.normal(size=100),
    )
    img = _png(plots.core_curves(curves, [], tmp_path / "sub" / "core.png", "core"))
    rows = math.ceil(5 / 2)
    assert img.shape[:2] == (
        round(plots.DPI * (rows * plots.PANEL_HEIGHT + plots.TOP_BAND + plots.BOTTOM_BAND)),
        round(plots.DPI * plots.WIDTH),
    )
    fig = plots.core_figure(curves, [], "core")
    try:
        assert [ax.get_title() for ax in fig.axes] == ["reward_mean", "kl", "entropy", "loss", "zzz_custom"]
    finally:
        plt.close(fig)


def test_core_curves_keeps_last_duplicate_sorts_steps_and_caps_panels():
    frame = pl.DataFrame({"step": [5, 1, 3, 1, 5], "metric": ["kl"] * 5, "value": [5.0, 1.0, 3.0, 9.0, 50.0]})
    extra = _curves(**{f"m{i}": np.ones(3) for i in range(10)})
    fig = plots.core_figure(pl.concat([frame, extra]), [], "dups")
    try:
        assert len(fig.axes) == plots.MAX_PANELS
        line = fig.axes[0].get_lines()[0]
        assert list(line.get_xdata()) == [1, 3, 5] and list(line.get_ydata()) == [9.0, 3.0, 50.0]
        assert fig.axes[0].get_yscale() == "linear"  # 50 / 3 < 100
    finally:
        plt.close(fig)


def test_log_scale_only_for_kl_and_grad_norm_spanning_decades():
    big = np.geomspace(1e-3, 10, 50)
    fig = plots.core_figure(_curves(grad_norm=big, loss=big, kl=np.r_[0.0, big[1:]]), [], "log")
    try:
        assert [ax.get_yscale() for ax in fig.axes] == ["linear", "log", "linear"]  # kl has a 0: stays linear
    finally:
        plt.close(fig)


def _pixels(curves, findings, tmp_path, name):
    return _png(plots.core_curves(curves, findings, tmp_path / name, "t"))[..., :3]


def test_finding_shades_its_span_on_its_own_panel_only(tmp_path):
    rng = np.random.default_rng(1)
    curves = _curves(reward_mean=rng.normal(size=100).cumsum(), kl=rng.uniform(0, 1, 100))
    finding = _finding(step=30, step_end=60)
    plain, shaded = _pixels(curves, [], tmp_path, "a.png"), _pixels(curves, [finding], tmp_path, "b.png")
    assert plain.shape == shaded.shape
    differ = np.abs(plain - shaded).max(axis=2) > 0.02

    fig = plots.core_figure(curves, [finding], "t")  # same layout as the saved image: where the panels are
    try:
        fig.canvas.draw()
        height = fig.bbox.height
        boxes = [ax.get_window_extent() for ax in fig.axes]
        x_of = [lambda s, ax=ax: ax.transData.transform((s, 0))[0] for ax in fig.axes]
    finally:
        plt.close(fig)

    def region(i, x0, x1):
        box = boxes[i]
        top, bottom = int(height - box.y1) + 3, int(height - box.y0) - 3
        return differ[top:bottom, int(max(x0, box.x0 + 3)) : int(min(x1, box.x1 - 3))]

    onset, end = x_of[0](30), x_of[0](60)
    assert end - onset > 60  # the span is wide enough for the assertions to mean something
    assert region(0, onset + 3, end - 3).mean() > 0.5  # shaded, apart from the curve drawn over it
    assert region(0, 0, onset - 3).mean() < 0.01  # nothing left of the onset
    assert region(0, end + 3, 1e9).mean() < 0.01  # nor right of the span's end
    other_onset = x_of[1](30)
    assert region(1, other_onset - 2, other_onset + 3).mean(axis=0).max() > 0.9  # the thin onset line, full height
    assert region(1, 0, other_onset - 3).mean() < 0.01 and region(1, other_onset + 3, 1e9).mean() < 0.01


def test_open_ended_finding_shades_to_last_step_and_unplotted_metric_is_labelled_on_first_panel():
    curves = _curves(reward_mean=np.linspace(0, 1, 100), kl=np.linspace(0, 1, 100))
    findings = [
        _finding(step=80, step_end=None, metric="kl", check="kl_spike", severity="warn"),
        _finding(step=10, step_end=None, metric="not_plotted", check="mystery", severity="info"),
        _finding(step=None, check="no_onset"),
    ]
    fig = plots.core_figure(curves, findings, "t")
    try:
        first, kl = fig.axes
        assert len(kl.patches) == 1 and not first.patches  # only kl's own finding shades, the unplotted one nowhere
        span = kl.patches[0].get_bbox()  # axvspan's Rectangle, in data x
        assert (span.x0, span.x1) == (pytest.approx(80), pytest.approx(99))
        assert [t.get_text() for t in first.texts] == ["mystery (not_plotted)"]
        assert [t.get_text() for t in kl.texts] == ["kl_spike"]
        assert fig.legends  # colours explained
    finally:
        plt.close(fig)


def test_panel_title_counts_non_finite():
    assert plots.panel_title("grad_norm", 3) == "grad_norm (3 non-finite)"
    assert plots.panel_title("kl", 0) == "kl"


def test_non_finite_values_are_marked_and_counted(tmp_path):
    grad = np.linspace(1, 2, 100)
    grad[[10, 50, 51]] = [np.nan, np.inf, -np.inf]
    curves = _curves(reward_mean=np.linspace(0, 1, 100), grad_norm=grad, task_score=np.full(20, np.nan))
    assert _png(plots.core_curves(curves, [], tmp_path / "nf.png", "nan")).shape[1] == 1000
    fig = plots.core_figure(curves, [], "nan")
    try:
        axes = {ax.get_title(): ax for ax in fig.axes}
        assert set(axes) == {"reward_mean", "task_score (20 non-finite)", "grad_norm (3 non-finite)"}
        solid = lambda ax: [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]  # noqa: E731
        assert len(solid(axes["reward_mean"])) == 1 and not solid(axes["task_score (20 non-finite)"])
        line = solid(axes["grad_norm (3 non-finite)"])[0]
        assert len(line.get_xdata()) == 97 and np.isfinite(line.get_ydata()).all()
        marks = [ln for ln in axes["grad_norm (3 non-finite)"].get_lines() if ln.get_marker() == "x"]
        assert len(marks) == 1 and list(marks[0].get_xdata()) == [10, 50, 51]
    finally:
        plt.close(fig)


def test_nothing_to_draw_gives_none(tmp_path):
    out = tmp_path / "none.png"
    assert plots.core_curves(_curves(kl=[np.nan, np.inf], loss=[np.nan]), [_finding()], out, "t") is None
    assert plots.core_curves(pl.DataFrame(schema=CURVES_SCHEMA), [], out, "t") is None
    assert plots.core_curves(pl.DataFrame(), [], out, "t") is None
    assert (
        plots.elo_gap(
            pl.DataFrame(
                schema={"step": pl.Int64, "gap": pl.Float64, "gap_ci_low": pl.Float64, "gap_ci_high": pl.Float64}
            ),
            out,
            "t",
        )
        is None
    )
    assert (
        plots.elo_gap(
            pl.DataFrame(
                {"step": [1, 2], "gap": [np.nan, None], "gap_ci_low": [None, None], "gap_ci_high": [None, None]}
            ),
            out,
            "t",
        )
        is None
    )
    assert (
        plots.reward_components(
            pl.DataFrame(schema={"step": pl.Int64, "component": pl.Utf8, "value": pl.Float64}), out, "t"
        )
        is None
    )
    assert plots.reward_components(pl.DataFrame({"step": [1], "component": ["a"], "value": [np.nan]}), out, "t") is None
    assert (
        plots.step_time_shares(
            pl.DataFrame(schema={"step": pl.Int64, "phase": pl.Utf8, "seconds": pl.Float64}), out, "t"
        )
        is None
    )
    assert (
        plots.step_time_shares(pl.DataFrame({"step": [1, 2], "phase": ["gen", "gen"], "seconds": [0.0, 0.0]}), out, "t")
        is None
    )
    assert not out.exists()


def test_single_point_draws_everywhere(tmp_path):
    one = {"step": [7]}
    assert _png(plots.core_curves(_curves(kl=[0.5]), [_finding(step=7, metric="kl")], tmp_path / "c.png", "t")).size
    assert _png(
        plots.elo_gap(
            pl.DataFrame(one | {"gap": [3.0], "gap_ci_low": [1.0], "gap_ci_high": [5.0]}), tmp_path / "e.png", "t"
        )
    ).size
    assert _png(
        plots.reward_components(pl.DataFrame(one | {"component": ["a"], "value": [-1.0]}), tmp_path / "r.png", "t")
    ).size
    assert _png(
        plots.step_time_shares(pl.DataFrame(one | {"phase": ["gen"], "seconds": [2.0]}), tmp_path / "s.png", "t")
    ).size


def test_elo_gap_png(tmp_path):
    gap = pl.DataFrame(
        {
            "step": [40, 0, 10, 20, 30, 10],
            "gap": [20.0, 0.0, 99.0, 12.0, -3.0, 5.0],
            "gap_ci_low": [None, None, -2.0, 4.0, -10.0, -2.0],
            "gap_ci_high": [None, None, 10.0, 20.0, 4.0, 10.0],
        }
    )
    img = _png(plots.elo_gap(gap, tmp_path / "elo.png", "Elo"))
    assert img.shape[:2] == (400, 1000)


def test_split_stacks():
    pos, neg = plots.split_stacks(np.array([[1.0, -2.0, np.nan], [-1.0, 3.0, 0.0]]))
    np.testing.assert_array_equal(pos, [[1, 0, 0], [0, 3, 0]])
    np.testing.assert_array_equal(neg, [[0, -2, 0], [-1, 0, 0]])


def _components(penalty: list[float]) -> pl.DataFrame:
    return pl.concat(
        [
            pl.DataFrame({"step": STEPS[:50], "component": "correctness", "value": np.linspace(0.2, 1.0, 50)}),
            pl.DataFrame({"step": STEPS[:50:10], "component": "format", "value": [0.1, 0.2, 0.3, 0.4, 0.5]}),
            pl.DataFrame({"step": [0, 20, 21, 22, 23], "component": "length_penalty", "value": penalty}),
        ]
    )


def test_component_stacks_outer_join_and_forward_fill():
    steps, names, pos, neg = plots.component_stacks(_components([0.0, -0.5, -0.7, -0.4, 0.0]).reverse())
    assert list(steps) == list(range(50)) and sorted(names) == ["correctness", "format", "length_penalty"]
    fmt, pen = names.index("format"), names.index("length_penalty")
    assert pos[fmt, 15] == pytest.approx(0.2) and pos[fmt, 49] == pytest.approx(0.5)  # held between its steps
    np.testing.assert_allclose(neg[pen, 19:25], [0.0, -0.5, -0.7, -0.4, 0.0, 0.0])
    assert (pos[pen] == 0).all() and (neg[names.index("correctness")] == 0).all()


def test_reward_components_negative_penalty_dips_below_zero(tmp_path):
    green = np.array(plt.get_cmap("tab10")(2)[:3]) * 0.85 + 0.15  # the third component's colour over white

    def greens(penalty):
        img = _png(plots.reward_components(_components(penalty), tmp_path / "r.png", "Reward"))
        assert img.shape[:2] == (450, 1000)
        return (np.abs(img[..., :3] - green).max(axis=2) < 0.03).sum()

    assert greens([0.0, -0.5, -0.7, -0.4, 0.0]) > 1000
    assert greens([0.0, 0.0, 0.0, 0.0, 0.0]) < 400  # the legend swatch only


def _phases(n: int) -> pl.DataFrame:
    rng = np.random.default_rng(2)
    frames = [
        pl.DataFrame({"step": STEPS, "phase": f"p{i:02d}", "seconds": rng.uniform(0, 10 / (i + 1), 100)})
        for i in range(n)
    ]
    return pl.concat(frames).sample(fraction=1.0, shuffle=True, seed=3)


def test_phase_shares_rolls_small_phases_into_other():
    phases = _phases(11)
    steps, names, seconds, shares = plots.phase_shares(phases)
    assert list(steps) == list(range(100)) and names == [f"p{i:02d}" for i in range(7)] + ["other"]
    rest = phases.filter(pl.col("phase").is_in(["p07", "p08", "p09", "p10"]))
    np.testing.assert_allclose(seconds[-1], rest.group_by("step").agg(pl.col("seconds").sum()).sort("step")["seconds"])
    assert sum(shares) == pytest.approx(100)
    assert shares[0] == pytest.approx(100 * seconds[0].sum() / phases["seconds"].sum())


def test_phase_shares_missing_nan_and_duplicate_steps():
    phases = pl.DataFrame(
        {
            "step": [2, 1, 3, 1, 2, 3],
            "phase": ["gen", "gen", "gen", "late", "late", "late"],
            "seconds": [2.0, 1.0, 3.0, np.nan, 4.0, 9.0],
        }
    )
    phases = pl.concat([phases, pl.DataFrame({"step": [3], "phase": ["late"], "seconds": [6.0]})])  # last one wins
    steps, names, seconds, shares = plots.phase_shares(phases)
    assert list(steps) == [1, 2, 3] and names == ["late", "gen"]
    np.testing.assert_array_equal(seconds, [[0.0, 4.0, 6.0], [1.0, 2.0, 3.0]])
    assert shares == pytest.approx([62.5, 37.5])


def test_step_time_shares_png(tmp_path):
    img = _png(plots.step_time_shares(_phases(11), tmp_path / "s.png", "t"))
    assert img.shape[:2] == (450, 1000)
    assert not plt.get_fignums()  # every figure closed once saved


def test_markdown_image_round_trips(tmp_path):
    path = plots.elo_gap(
        pl.DataFrame({"step": [0, 1], "gap": [0.0, 1.0], "gap_ci_low": [None, 0.5], "gap_ci_high": [None, 1.5]}),
        tmp_path / "e.png",
        "t",
    )
    md = plots.markdown_image(path, "Elo [gap]")
    prefix = "![Elo (gap)](data:image/png;base64,"
    assert md.startswith(prefix) and md.endswith(")")
    assert base64.b64decode(md[len(prefix) : -1], validate=True) == path.read_bytes()


def test_a_check_that_came_and_went_is_labelled_once_per_panel_with_its_count():
    """67 episodes of one rule drew 67 overlapping labels: one label, at the first onset, says how many there were;
    every episode still has its line and span."""
    curves = _curves(frac_reward_zero_std=np.linspace(0, 1, 100), kl=np.linspace(0, 1, 100))
    episodes = [
        _finding(step=s, step_end=s + 2, metric="frac_reward_zero_std", check="reward_zero_variance", severity="warn")
        for s in range(5, 95, 10)
    ]
    fig = plots.core_figure(curves, [*episodes, _finding(step=50, step_end=None, metric="kl", check="kl_spike")], "t")
    try:
        labels = sorted(([t.get_text() for t in ax.texts], len(ax.patches)) for ax in fig.axes)
        assert labels == [(["kl_spike"], 1), (["reward_zero_variance ×9"], 9)], labels
    finally:
        plt.close(fig)
