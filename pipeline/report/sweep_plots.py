"""PNG plots of a sweep comparison: the runs of a hyper-parameter sweep ranked, their curves, score against a
parameter, and the score/cost Pareto front.

Same conventions as `plots` (whose helpers these reuse): Agg backend, ~10 in wide at 100 dpi, atomic `_save`, every
figure closed, None instead of an empty picture. Rows with a null or non-finite score (or value, cost) are dropped
before drawing; a run name longer than NAME_CHARS is cut with "…"."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import polars as pl
from matplotlib.lines import Line2D

from pipeline.report.plots import DPI, LABEL_BOX, WIDTH, _colours, _last_per_step, _log_scale, _markers, _save

NAME_CHARS, PANEL_CHARS, MAX_CURVE_PANELS, CURVE_COLUMNS, MAX_LEGEND_RUNS, MAX_POINTS = 40, 32, 60, 5, 12, 1000
RUN_HEIGHT, MIN_HEIGHT, CURVE_PANEL_HEIGHT = 0.3, 2.5, 1.6  # inches
STRONG, PLAIN, MUTED = "tab:red", "tab:blue", "grey"


def _short(name: object, chars: int = NAME_CHARS) -> str:
    return str(name) if len(str(name)) <= chars else str(name)[: chars - 1] + "…"


def _finite(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """Rows whose `columns` are all finite, those columns cast to Float64."""
    frame = frame.with_columns(pl.col(c).cast(pl.Float64) for c in columns)
    return frame.filter(pl.all_horizontal(pl.col(c).is_finite() for c in columns)) if columns else frame


def _interval(frame: pl.DataFrame, centre: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(error-bar lengths below and above `centre` as a (2, n) array, ci_low, ci_high); a missing bound: no bar."""
    mid, n = frame.get_column(centre).to_numpy(), frame.height
    low, high = (
        frame.get_column(c).cast(pl.Float64).to_numpy() if c in frame.columns else np.full(n, np.nan)
        for c in ("ci_low", "ci_high")
    )
    return np.nan_to_num(np.vstack([mid - low, high - mid]), nan=0.0).clip(0, None), low, high


def ranked_order(runs: pl.DataFrame, higher_is_better: bool) -> pl.DataFrame:
    """The runs with a finite score, best first (the drawing order, top to bottom); ties keep run-name order."""
    runs = _finite(runs, "score")
    return runs.sort(["score", "run"], descending=[higher_is_better, False], nulls_last=True)


def ranked_scores(runs: pl.DataFrame, metric: str, higher_is_better: bool, out: Path, title: str) -> Path | None:
    """Each run's score with its confidence interval, best at the top; the runs whose interval overlaps the best
    run's (column `tied_with_best`, the best run itself always counted) in colour, a dashed line at the best run's
    lower bound (upper bound when lower is better). A missing CI bound draws no error bar on that side."""
    if runs.is_empty() or (order := ranked_order(runs, higher_is_better)).is_empty():
        return None
    n, score, (err, low, high) = order.height, order.get_column("score").to_numpy(), _interval(order, "score")
    tied = order.get_column("tied_with_best").fill_null(False).to_numpy().astype(bool)
    tied[0] = True
    y = np.arange(n)[::-1]  # the best on top
    height = max(MIN_HEIGHT, RUN_HEIGHT * n + 1.3)
    fig, ax = plt.subplots(figsize=(WIDTH, height), dpi=DPI)
    for mask, colour in ((tied, PLAIN), (~tied, MUTED)):
        if mask.any():
            ax.errorbar(score[mask], y[mask], xerr=err[:, mask], fmt="o", color=colour, ms=4, capsize=2, lw=1)
    handles = [
        Line2D([], [], color=PLAIN, marker="o", label="tied with the best (intervals overlap)"),
        Line2D([], [], color=MUTED, marker="o", label="other runs"),
    ]
    bound = low[0] if higher_is_better else high[0]
    if np.isfinite(bound):
        ax.axvline(bound, color=PLAIN, linestyle="--", linewidth=1)
        handles.append(
            Line2D(
                [],
                [],
                color=PLAIN,
                linestyle="--",
                label=f"best run's {'lower' if higher_is_better else 'upper'} CI bound",
            )
        )
    names = [_short(r) for r in order.get_column("run").to_list()]
    ax.set_yticks(y, names, fontsize=8)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlabel(f"{metric} ({'higher' if higher_is_better else 'lower'} is better)")
    ax.grid(axis="x", alpha=0.3)
    ax.tick_params(axis="x", labelsize=8)
    ax.set_title(title, fontsize=11)
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    # Fixed margins (see plots.core_figure): the names' column from the longest name, the legend strip in inches.
    left = min(0.45, (0.3 + 0.06 * max(map(len, names))) / WIDTH)
    fig.subplots_adjust(left=left, right=0.97, bottom=0.85 / height, top=1 - 0.4 / height)
    return _save(fig, out)


def thin(steps: np.ndarray, values: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ~max_points points for drawing: every k-th point (k = ceil(n / max_points)) plus the last one, so the
    curve still ends where the run ended. Spikes between the kept points are not drawn."""
    n = len(steps)
    if n <= max_points:
        return steps, values
    keep = np.arange(0, n, math.ceil(n / max_points))
    if keep[-1] != n - 1:
        keep = np.append(keep, n - 1)
    return steps[keep], values[keep]


def curves_title(title: str, n_runs: int, max_panels: int = MAX_CURVE_PANELS) -> str:
    """The small multiples' title, saying when runs were left out."""
    return f"{title} (first {max_panels} of {n_runs} runs)" if n_runs > max_panels else title


def curves(
    curves: pl.DataFrame, metric: str, out: Path, title: str, overlay: bool = False, highlight: list[str] | None = None
) -> Path | None:
    """One metric's curve per run: small multiples (shared axes, the first MAX_CURVE_PANELS runs) or all in one
    axes. Runs come in the frame's order of first appearance (pass them ranked to see the best first); the last row
    of a (run, step) pair wins; non-finite values are dropped; each curve is thinned to ~MAX_POINTS (see `thin`).
    kl and grad_norm go on a log axis when they span more than two decades, as in the per-run report."""
    frame = _finite(curves, "value").filter(pl.col("run").is_not_null() & pl.col("step").is_not_null())
    if frame.is_empty():
        return None
    runs = frame.get_column("run").cast(pl.Utf8).unique(maintain_order=True).to_list()
    frame = _last_per_step(frame.with_columns(pl.col("run").cast(pl.Utf8)), "run")
    parts = {key[0]: part for key, part in frame.partition_by("run", as_dict=True).items()}
    series = {r: thin(parts[r].get_column("step").to_numpy(), parts[r].get_column("value").to_numpy()) for r in runs}
    strong = set(highlight or ()) & set(runs)
    log = _log_scale(metric, frame.get_column("value").to_numpy())
    if overlay:
        return _overlay(series, strong, metric, log, out, title)
    shown = runs[:MAX_CURVE_PANELS]
    nrows, ncols = math.ceil(len(shown) / CURVE_COLUMNS), min(CURVE_COLUMNS, len(shown))
    height = nrows * CURVE_PANEL_HEIGHT + 1.1
    chars = min(NAME_CHARS, PANEL_CHARS * CURVE_COLUMNS // ncols)  # what fits above a panel at 6 pt
    fig, grid = plt.subplots(nrows, ncols, figsize=(WIDTH, height), dpi=DPI, sharex=True, sharey=True, squeeze=False)
    for i, extra in enumerate(list(grid.flat)[len(shown) :]):  # the axes above an empty slot get the x ticks
        extra.remove()
        grid[nrows - 2, ncols - 1 - i].xaxis.set_tick_params(labelbottom=True)
    for run, ax in zip(shown, grid.flat, strict=False):  # the grid may have empty slots
        (steps, values), hot = series[run], run in strong
        ax.plot(steps, values, color=STRONG if hot else PLAIN, linewidth=1.6 if hot else 1, **_markers(len(steps)))
        ax.set_title(_short(run, chars), fontsize=6, color=STRONG if hot else "black", weight="bold" if hot else None)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    if log:
        grid[0, 0].set_yscale("log")
    fig.suptitle(curves_title(title, len(runs)), fontsize=11, y=1 - 0.1 / height, va="top")  # bands in inches
    fig.supxlabel("step", fontsize=9, y=0.05 / height, va="bottom")
    fig.supylabel(metric, fontsize=9)
    # Fixed margins, not tight_layout: 60 panels would take seconds to measure.
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.55 / height, top=1 - 0.65 / height, hspace=0.45, wspace=0.12)
    return _save(fig, out)


def _overlay(series: dict, strong: set, metric: str, log: bool, out: Path, title: str) -> Path:
    """All runs in one axes: a legend of every run up to MAX_LEGEND_RUNS runs (colours repeat dashed after ten,
    highlighted runs thicker); beyond that the runs are thin and grey, and only the highlighted ones are coloured and
    named in the legend (names at the curves' ends would overlap where the curves do)."""
    every = len(series) <= MAX_LEGEND_RUNS
    fig, ax = plt.subplots(figsize=(WIDTH, 4.5), dpi=DPI)
    colours = iter(_colours(len(series) if every else len(strong)))
    for i, (run, (steps, values)) in enumerate(series.items()):
        if every:
            ax.plot(
                steps,
                values,
                color=next(colours),
                linestyle="-" if i < 10 else "--",
                label=_short(run),
                linewidth=2.2 if run in strong else 1.1,
                zorder=3 if run in strong else 2,
                **_markers(len(steps)),
            )
        elif run in strong:
            ax.plot(steps, values, color=next(colours), linewidth=1.8, zorder=3, label=_short(run))
        else:
            ax.plot(steps, values, color=MUTED, alpha=0.3, linewidth=0.7, zorder=1)
    if log:
        ax.set_yscale("log")
    ax.set(xlabel="step", ylabel=metric)
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    if every or strong:
        ax.legend(
            loc="upper left",
            bbox_to_anchor=(1.01, 1),
            fontsize=7,
            title_fontsize=8,
            title="run" if every else f"highlighted (of {len(series)} runs)",
        )
    fig.subplots_adjust(left=0.08, right=0.7 if every or strong else 0.97, bottom=0.12, top=0.92)
    return _save(fig, out)


def score_vs_param(
    points: pl.DataFrame, param: str, log_x: bool, levels: pl.DataFrame | None, out: Path, title: str
) -> Path | None:
    """Each run's score against its value of `param`, with the level means and their CIs when `levels` is given.

    A non-numeric `value` is categorical: one position per level (the order of `levels`, then the other values
    sorted), the runs jittered around it (fixed seed), log_x ignored. Numeric levels are joined by a line; with
    log_x, values <= 0 are dropped. The best level gets a star: the rows of a boolean `best` column in `levels` if
    there is one (pass it when lower is better), else the highest mean."""
    if points.is_empty() or "value" not in points.columns:
        return None
    cat = not points.schema["value"].is_numeric()
    points = _finite(points, "score").filter(pl.col("value").is_not_null())
    if levels is not None and (
        levels.is_empty() or (levels := _finite(levels, "mean").filter(pl.col("value").is_not_null())).is_empty()
    ):
        levels = None
    if not cat:  # numeric: finite values, and positive ones on a log axis
        positive = pl.col("value") > 0 if log_x else pl.lit(True)
        points = _finite(points, "value").filter(positive).sort("value")
        if levels is not None:
            levels = _finite(levels, "value").filter(positive).sort("value")
    if points.is_empty():
        return None
    fig, ax = plt.subplots(figsize=(WIDTH, 4.5), dpi=DPI)
    if cat:
        names = [] if levels is None else [str(v) for v in levels.get_column("value").to_list()]
        names += sorted({str(v) for v in points.get_column("value").to_list()} - set(names))
        where = {name: i for i, name in enumerate(names)}
        x = np.array([where[str(v)] for v in points.get_column("value").to_list()], dtype=float)
        x += np.random.default_rng(0).uniform(-0.15, 0.15, len(x))
        tilt = len(names) > 6 or max(map(len, names)) > 12
        ax.set_xticks(
            range(len(names)),
            [_short(n) for n in names],
            fontsize=8,
            rotation=30 if tilt else 0,
            ha="right" if tilt else "center",
        )
        ax.set_xlim(-0.6, len(names) - 0.4)
    else:
        x = points.get_column("value").to_numpy()
    ax.scatter(x, points.get_column("score").to_numpy(), s=18, color=MUTED, alpha=0.7, label="runs", zorder=2)
    if levels is not None and not levels.is_empty():
        lx = (
            np.array([where[str(v)] for v in levels.get_column("value").to_list()], dtype=float)
            if cat
            else levels.get_column("value").to_numpy()
        )
        mean, err = levels.get_column("mean").to_numpy(), _interval(levels, "mean")[0]
        ax.errorbar(
            lx,
            mean,
            yerr=err,
            fmt="s" if cat else "s-",
            color=PLAIN,
            markersize=5,
            capsize=3,
            linewidth=1.2,
            label="level mean (CI)",
            zorder=3,
        )
        best = (
            levels.get_column("best").fill_null(False).to_numpy().astype(bool)
            if "best" in levels.columns
            else np.arange(len(mean)) == np.argmax(mean)
        )
        if best.any():
            ax.plot(lx[best], mean[best], "*", color=STRONG, markersize=15, label="best level", zorder=4)
    if log_x and not cat:
        ax.set_xscale("log")
    ax.set(xlabel=param, ylabel="score")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _save(fig, out)


def pareto(runs: pl.DataFrame, cost_label: str, higher_is_better: bool, out: Path, title: str) -> Path | None:
    """Score against cost; the front (column `on_front`) in colour, joined by a step line (the best score reachable
    at each cost) and named; the other runs grey."""
    if runs.is_empty() or (frame := _finite(runs, "score", "cost")).is_empty():
        return None
    frame = frame.with_columns(pl.col("on_front").fill_null(False))
    front, rest = frame.filter(pl.col("on_front")).sort("cost"), frame.filter(~pl.col("on_front"))
    fig, ax = plt.subplots(figsize=(WIDTH, 5), dpi=DPI)
    ax.scatter(
        rest.get_column("cost").to_numpy(),
        rest.get_column("score").to_numpy(),
        s=18,
        color=MUTED,
        alpha=0.7,
        label="other runs",
        zorder=2,
    )
    if not front.is_empty():
        cost, score = front.get_column("cost").to_numpy(), front.get_column("score").to_numpy()
        ax.step(cost, score, where="post", color=STRONG, linewidth=1.2, zorder=3)
        ax.scatter(cost, score, s=30, color=STRONG, label="Pareto front", zorder=4)
        for run, c, s in zip(front.get_column("run").to_list(), cost, score, strict=True):
            ax.annotate(_short(run), (c, s), xytext=(4, 4), textcoords="offset points", fontsize=7, bbox=LABEL_BOX)
    ax.set(xlabel=cost_label, ylabel=f"score ({'higher' if higher_is_better else 'lower'} is better)")
    ax.set_title(title, fontsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _save(fig, out)
