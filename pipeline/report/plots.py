"""PNG plots of a per-run report, drawn with matplotlib's Agg backend (no display) from polars frames.

Why: a GRPO run fails in a few recognisable shapes (KL or grad-norm blow-ups, NaNs, length collapse, reward hacking
through one component, a phase eating the step time) that a reader sees at once on a curve with the findings drawn
on it, and not in a table. The images go into Markdown reports and Dagster metadata: ~10 in wide at 100 dpi, every
figure closed once saved (a batch draws hundreds), None instead of an empty picture when there is nothing to draw.
Frames may be unsorted and repeat a step: the last row of a (step, series) pair in frame order wins."""

from __future__ import annotations

import base64
import math
import os
from pathlib import Path
from typing import cast

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
from matplotlib.artist import Artist  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

WIDTH, DPI = 10.0, 100
CORE_ORDER = (
    "reward_mean",
    "task_score",
    "kl",
    "grad_norm",
    "entropy",
    "response_length_mean",
    "response_clip_ratio",
    "loss",
    "clip_fraction",
)
MAX_PANELS, MAX_PHASES, MARKERS_BELOW = 8, 8, 40
PANEL_HEIGHT, TOP_BAND, BOTTOM_BAND = 2.3, 0.3, 0.35  # inches: one panel row, the title, the legend strip
SEVERITY_COLOURS = {"error": "tab:red", "warn": "tab:orange", "info": "grey"}
LOG_METRICS = ("kl", "grad_norm")
LABEL_BOX = {"boxstyle": "round,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8}


def _last_per_step(frame: pl.DataFrame, *keys: str) -> pl.DataFrame:
    """One row per (step, *keys), the last one in frame order, sorted by step."""
    frame = frame.filter(pl.col("step").is_not_null())
    return frame.unique(["step", *keys], keep="last", maintain_order=True).sort("step", maintain_order=True)


def _save(fig: Figure, out: Path) -> Path:
    """Write the figure as PNG next to `out` and rename it into place (no half-written file), then close it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, dpi=DPI, format="png")
        os.replace(tmp, out)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return out


def _markers(n: int) -> dict:  # dots only while they can be told apart
    return {"marker": "o", "markersize": 3} if n < MARKERS_BELOW else {}


def panel_title(metric: str, n_nonfinite: int) -> str:
    """A core-curve panel's title: the metric, and how many of its points were NaN or infinite."""
    return f"{metric} ({n_nonfinite} non-finite)" if n_nonfinite else metric


def _log_scale(metric: str, finite: np.ndarray) -> bool:
    """kl and grad_norm span decades when they blow up; a linear axis would flatten everything before."""
    return metric in LOG_METRICS and finite.size > 0 and finite.min() > 0 and finite.max() / finite.min() > 100


def core_figure(curves: pl.DataFrame, findings: list[dict], title: str) -> Figure | None:
    """The figure `core_curves` saves (the caller must close it), or None when no metric has a finite value."""
    if curves.is_empty():
        return None
    frame = _last_per_step(curves.filter(pl.col("value").is_not_null() & pl.col("metric").is_not_null()), "metric")
    present = set(frame.get_column("metric").to_list())
    metrics = ([m for m in CORE_ORDER if m in present] + sorted(present - set(CORE_ORDER)))[:MAX_PANELS]
    frame = frame.filter(pl.col("metric").is_in(metrics))
    if frame.filter(pl.col("value").is_finite()).is_empty():
        return None
    series = {key[0]: part for key, part in frame.partition_by("metric", as_dict=True).items()}
    # an integer column: polars types its min/max as any Python value
    lo, hi = cast(int, frame.get_column("step").min()), cast(int, frame.get_column("step").max())

    ncols = 2 if len(metrics) > 1 else 1
    nrows = math.ceil(len(metrics) / ncols)
    height = nrows * PANEL_HEIGHT + TOP_BAND + BOTTOM_BAND
    fig, grid = plt.subplots(nrows, ncols, figsize=(WIDTH, height), dpi=DPI, sharex=True, squeeze=False)
    axes = list(grid.flat)
    for ax in grid[-1]:
        ax.set_xlabel("step")
    for extra in axes[len(metrics) :]:  # an odd count leaves the last slot empty: the axis above it gets the ticks
        extra.remove()
        grid[nrows - 2, ncols - 1].xaxis.set_tick_params(labelbottom=True)
        grid[nrows - 2, ncols - 1].set_xlabel("step")
    axes = axes[: len(metrics)]
    panel = dict(zip(metrics, axes, strict=True))
    any_nonfinite = False
    for metric, ax in panel.items():
        steps, values = series[metric].get_column("step").to_numpy(), series[metric].get_column("value").to_numpy()
        ok = np.isfinite(values)
        if ok.any():
            ax.plot(steps[ok], values[ok], color="tab:blue", linewidth=1.2, **_markers(int(ok.sum())))
            if _log_scale(metric, values[ok]):
                ax.set_yscale("log")
        else:
            ax.text(0.5, 0.5, "no finite values", transform=ax.transAxes, ha="center", va="center", color="grey")
            ax.set_yticks([])
        if (~ok).any():
            any_nonfinite = True
            ax.plot(
                steps[~ok],
                np.full((~ok).sum(), 0.04),
                "x",
                color="red",
                markersize=5,
                transform=ax.get_xaxis_transform(),
            )
        ax.set_title(panel_title(metric, int((~ok).sum())), fontsize=10)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_xlim(lo - 0.5 if lo == hi else lo, hi + 0.5 if lo == hi else hi)  # shared by all panels
    onsets = _draw_findings(panel, findings or [], lo, hi)
    handles: list[Artist] = []
    if onsets:
        handles += [Patch(color=c, alpha=0.35, label=s) for s, c in SEVERITY_COLOURS.items()]
        handles += [
            Line2D([], [], color="black", linestyle="--", label="onset + span on the finding's metric"),
            Line2D([], [], color="black", alpha=0.3, linewidth=0.6, label="onset on another metric"),
        ]
    if any_nonfinite:
        handles.append(Line2D([], [], color="red", marker="x", linestyle="none", label="NaN/inf value"))
    if handles:
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
    fig.suptitle(title, fontsize=12)
    # Fixed margins, not tight_layout: measuring every tick label costs a second a report, and the bands stay
    # where they are whatever the findings add.
    fig.subplots_adjust(
        left=0.08,
        right=0.98,
        bottom=(BOTTOM_BAND + 0.45) / height,
        top=1 - (TOP_BAND + 0.3) / height,
        hspace=0.38,
        wspace=0.2,
    )
    return fig


def _draw_findings(panel: dict, findings: list[dict], lo: int, hi: int) -> list[dict]:
    """Onset lines and spans on the panels (metric -> axes); returns the findings drawn. A check is labelled once
    per panel, at its first onset, with the number of its episodes: a condition that came and went 67 times drew
    67 overlapping labels. A finding on a metric with no panel of its own is labelled on the first panel with its
    metric's name, or it would read as a finding about that panel's metric."""
    axes = list(panel.values())
    onsets = sorted((f for f in findings if f.get("step") is not None), key=lambda f: f["step"])
    stagger = {id(ax): 0 for ax in axes}  # labels on one panel step down so that close onsets stay readable
    episodes: dict[tuple, int] = {}
    for f in onsets:
        key = (f.get("check"), f.get("metric"))
        episodes[key] = episodes.get(key, 0) + 1
    labelled: set[tuple] = set()
    for f in onsets:
        colour = SEVERITY_COLOURS.get(f.get("severity", ""), "grey")
        start = f["step"]
        end = max(start, f["step_end"] if f.get("step_end") is not None else hi)
        for metric, ax in panel.items():
            if metric == f.get("metric"):
                ax.axvline(start, color=colour, linestyle="--", linewidth=1.2)
                ax.axvspan(start, end, color=colour, alpha=0.15, linewidth=0)
            else:
                ax.axvline(start, color=colour, linewidth=0.6, alpha=0.3)
        key = (f.get("check"), f.get("metric"))
        if key in labelled:
            continue
        ax = panel.get(f.get("metric"), axes[0])
        elsewhere = f.get("metric") not in panel and f.get("metric")
        labelled.add(key)
        level, stagger[id(ax)] = stagger[id(ax)], stagger[id(ax)] + 1
        right = start > lo + 0.7 * (hi - lo)  # near the right edge the label goes left of its line
        count = episodes[key]
        ax.annotate(
            str(f.get("check", "")) + (f" ×{count}" if count > 1 else "") + (f" ({elsewhere})" if elsewhere else ""),
            xy=(start, 0.95 - 0.13 * (level % 5)),
            xycoords=ax.get_xaxis_transform(),
            xytext=(-3 if right else 3, 0),
            textcoords="offset points",
            ha="right" if right else "left",
            va="top",
            fontsize=7,
            color=colour,
            bbox=LABEL_BOX,
        ).set_in_layout(False)  # labels never move axes
    return onsets


def core_curves(curves: pl.DataFrame, findings: list[dict], out: Path, title: str) -> Path | None:
    """Small multiples of the core training metrics with the findings' onsets and spans drawn on them."""
    fig = core_figure(curves, findings, title)
    return None if fig is None else _save(fig, out)


def elo_gap(gap: pl.DataFrame, out: Path, title: str) -> Path | None:
    """The Elo gap between the best checkpoint and the base model over steps, with its confidence band."""
    if gap.is_empty() or (frame := _last_per_step(gap).filter(pl.col("gap").is_finite())).is_empty():
        return None
    steps, values = frame.get_column("step").to_numpy(), frame.get_column("gap").to_numpy().astype(float)
    low, high = (
        frame.get_column(c).to_numpy().astype(float) if c in frame.columns else np.full(len(frame), np.nan)
        for c in ("gap_ci_low", "gap_ci_high")
    )
    band = np.isfinite(low) & np.isfinite(high)
    fig, ax = plt.subplots(figsize=(WIDTH, 4), dpi=DPI)
    if band.any():
        ax.fill_between(
            steps,
            np.where(band, low, values),
            np.where(band, high, values),
            where=band,
            color="tab:blue",
            alpha=0.2,
            linewidth=0,
            label="confidence interval",
        )
    ax.plot(steps, values, color="tab:blue", linewidth=1.5, label="Elo gap", **_markers(len(steps)))
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set(title=title, xlabel="step", ylabel="Elo gap (best checkpoint − base model)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return _save(fig, out)


def _wide(frame: pl.DataFrame, key: str, value: str) -> pl.DataFrame:
    """One column per `key`, one row per step (full outer on steps), non-finite values as null."""
    frame = _last_per_step(frame.filter(pl.col(key).is_not_null()), key)
    if frame.is_empty():
        return pl.DataFrame({"step": []})
    frame = frame.with_columns(pl.when(pl.col(value).is_finite()).then(pl.col(value)).alias(value))
    return frame.pivot(on=key, index="step", values=value).sort("step")


def split_stacks(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positive parts, negative parts) of a (series, steps) array; NaN/inf count as 0."""
    values = np.nan_to_num(np.asarray(values, dtype=float), nan=0.0, posinf=0.0, neginf=0.0)
    return np.clip(values, 0, None), np.clip(values, None, 0)


def component_stacks(components: pl.DataFrame) -> tuple[np.ndarray, list[str], np.ndarray, np.ndarray] | None:
    """(steps, names, positive stack, negative stack) of the reward components on the union of their steps.

    A component logged more sparsely than the others holds its last value (forward fill); before its first value
    it counts as 0. None when no component has a finite value."""
    wide = _wide(components, "component", "value")
    names = [c for c in wide.columns if c != "step"]
    if not names or all(n == wide.height for n in wide.select(names).null_count().row(0)):
        return None
    wide = wide.with_columns(pl.col(names).forward_fill().fill_null(0.0))
    return (wide.get_column("step").to_numpy(), names, *split_stacks(wide.select(names).to_numpy().T))


def _area_steps(steps: np.ndarray, stack: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A single step has no area: widen it to a one-step-wide block so it is still visible."""
    if len(steps) == 1:
        return np.array([steps[0] - 0.5, steps[0] + 0.5]), np.repeat(stack, 2, axis=1)
    return steps, stack


def _colours(n: int) -> list:
    return [plt.get_cmap("tab10")(i % 10) for i in range(n)]


def reward_components(components: pl.DataFrame, out: Path, title: str) -> Path | None:
    """Reward components stacked over steps, their negative parts (penalties) stacked down from zero."""
    if components.is_empty() or (stacks := component_stacks(components)) is None:
        return None
    steps, names, pos, neg = stacks
    fig, ax = plt.subplots(figsize=(WIDTH, 4.5), dpi=DPI)
    ax.stackplot(*_area_steps(steps, pos), labels=names, colors=_colours(len(names)), alpha=0.85)
    if (neg < 0).any():
        ax.stackplot(*_area_steps(steps, neg), colors=_colours(len(names)), alpha=0.85)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set(title=title, xlabel="step", ylabel="reward (stacked; negative parts below 0)")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize=8, title="component", title_fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def phase_shares(phases: pl.DataFrame) -> tuple[np.ndarray, list[str], np.ndarray, list[float]] | None:
    """(steps, phase names by total time, seconds as (phase, step), each phase's % of the total) or None.

    A phase missing at a step (or NaN there) counts 0 s. More than MAX_PHASES phases: the largest MAX_PHASES - 1
    are kept and the rest summed into "other"."""
    wide = pl.DataFrame() if phases.is_empty() else _wide(phases, "phase", "seconds").fill_null(0.0)
    if not (names := [c for c in wide.columns if c != "step"]):
        return None
    wide = wide.with_columns(pl.col(names).clip(lower_bound=0.0))
    totals = wide.select(pl.col(names).sum()).row(0, named=True)
    names = sorted(names, key=lambda n: -totals[n])
    if len(names) > MAX_PHASES:
        keep, rest = names[: MAX_PHASES - 1], names[MAX_PHASES - 1 :]
        other = "other" if "other" not in keep else "other phases"
        wide = wide.with_columns(pl.sum_horizontal(rest).alias(other))
        totals[other] = sum(totals[n] for n in rest)
        names = keep + [other]
    grand = sum(totals[n] for n in names)
    if grand <= 0:
        return None
    shares = [100 * totals[n] / grand for n in names]
    return wide.get_column("step").to_numpy(), names, wide.select(names).to_numpy().T, shares


def step_time_shares(phases: pl.DataFrame, out: Path, title: str) -> Path | None:
    """Seconds per phase per step, stacked, with each phase's share of the total time in a bar chart beside it."""
    if (table := phase_shares(phases)) is None:
        return None
    steps, names, seconds, shares = table
    colours = _colours(len(names))
    fig, (ax, bars) = plt.subplots(1, 2, figsize=(WIDTH, 4.5), dpi=DPI, gridspec_kw={"width_ratios": [3, 1]})
    ax.stackplot(*_area_steps(steps, seconds), labels=names, colors=colours, alpha=0.85)
    ax.set(title=title, xlabel="step", ylabel="seconds per step")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    y = np.arange(len(names))[::-1]
    bars.barh(y, shares, color=colours)
    bars.set_yticks(y, names, fontsize=8)
    for yi, share in zip(y, shares, strict=True):
        bars.text(share + 1, yi, f"{share:.1f}%", va="center", fontsize=8)
    bars.set(xlim=(0, max(shares) * 1.35 + 1), xlabel="share of total time (%)", title="time share")
    fig.tight_layout()
    return _save(fig, out)


def markdown_image(path: Path, alt: str) -> str:
    """`![alt](data:image/png;base64,...)` of the PNG at `path`, for Dagster's Markdown metadata.

    The file is embedded as is, whatever its size: a 100 dpi plot is typically 30-150 kB, and base64 adds a third.
    Above ~400 kB the metadata gets heavy for the Dagster UI, but nothing here re-encodes or shrinks it."""
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    alt = alt.replace("[", "(").replace("]", ")")
    return f"![{alt}](data:image/png;base64,{data})"
