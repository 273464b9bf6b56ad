"""Section 7 of `make bench`: per-run reports on the demo home (issue #13's targets: one report <= 2 s median,
every demo run's report <= 20 s)."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _grpolens() -> str:
    return str(Path(sys.executable).with_name("grpolens"))


def bench_reports(repeats: int = 5) -> dict:
    from pipeline import checks, warehouse
    from pipeline.report import batch, run_report
    from pipeline.settings import Settings

    with tempfile.TemporaryDirectory(prefix="grpolens-bench-reports-") as tmp:
        env = {**os.environ, "GRPOLENS_HOME": tmp}
        subprocess.run([_grpolens(), "demo"], env=env, check=True, capture_output=True)
        settings = Settings(home=Path(tmp))
        command = []
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run(
                [_grpolens(), "report", "verl-length-collapse", "--format", "json"],
                env=env,
                check=True,
                capture_output=True,
            )
            command.append(time.perf_counter() - started)
        rules = checks.load_checks()
        con = warehouse.connect_readonly(settings)
        try:
            run_key = con.execute("select run_key from runs where name = 'verl-length-collapse'").fetchone()[0]
            out = Path(tmp) / "bench-report"
            run_report.build(con, run_key, rules, out)  # warm: imports, matplotlib's font cache
            inproc = []
            for _ in range(repeats):
                started = time.perf_counter()
                run_report.build(con, run_key, rules, out)
                inproc.append(time.perf_counter() - started)
        finally:
            con.close()
        started = time.perf_counter()
        summaries = batch.write_reports(settings, only_changed=False)
        every = time.perf_counter() - started
        started = time.perf_counter()
        batch.write_reports(settings)
        noop = time.perf_counter() - started
    return {
        "command_s": command,
        "command_s_median": statistics.median(command),
        "build_s": inproc,
        "build_s_median": statistics.median(inproc),
        "all_runs": len(summaries),
        "all_runs_s": every,
        "noop_s": noop,
    }


def print_reports(res: dict) -> None:
    print("-" * 96)
    print(
        f"7. Run reports on the demo home ({res['all_runs']} runs). Targets: one report <= 2 s median, every run "
        "<= 20 s"
    )
    print(
        f"   `grpolens report verl-length-collapse` (whole command, checks + Markdown + 4 plots): median "
        f"{res['command_s_median']:.2f}s  (range {min(res['command_s']):.2f}-{max(res['command_s']):.2f})"
    )
    print(f"   one report in-process (run_report.build): median {res['build_s_median']:.2f}s")
    print(
        f"   every run's report from scratch (batch.write_reports): {res['all_runs_s']:.1f}s; again with nothing "
        f"changed: {res['noop_s']:.2f}s"
    )


def write_sweep_logs(folder: Path, runs: int = 50, steps: int = 2000, seed: int = 0) -> None:
    """A 50-run sweep as HF trainer_state.json files (top-level keys are the run's config): learning rate and
    generations per prompt vary, the reward rises towards a level that depends on both."""
    import json

    import numpy as np

    rng = np.random.default_rng(seed)
    for i in range(runs):
        lr, gens = float(10 ** rng.uniform(-6.5, -4)), int(rng.choice([4, 8, 16]))
        level = 0.8 - 0.08 * (np.log10(lr) + 5) ** 2 + 0.02 * np.log2(gens)
        t = np.arange(1, steps + 1)
        reward = level * (1 - np.exp(-t / (0.2 * steps))) + rng.normal(0, 0.03, steps)
        history = [
            {
                "step": int(s),
                "reward": float(r),
                "kl": float(0.01 + 1e-5 * s),
                "grad_norm": 0.5,
                "loss": 0.01,
                "completion_length": 300.0,
            }
            for s, r in zip(t, reward, strict=True)
        ]
        state = {
            "global_step": steps,
            "max_steps": steps,
            "log_history": history,
            "learning_rate": lr,
            "num_generations": gens,
            "seed": i,
        }
        path = folder / f"bench-sweep-{i:02d}" / "trainer_state.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(state))


def bench_sweep(repeats: int = 3) -> dict:
    from pipeline import warehouse
    from pipeline.report import sweep, sweep_report
    from pipeline.settings import Settings

    with tempfile.TemporaryDirectory(prefix="grpolens-bench-sweep-") as tmp:
        logs = Path(tmp) / "logs"
        write_sweep_logs(logs)
        env = {**os.environ, "GRPOLENS_HOME": str(Path(tmp) / "home"), "GRPOLENS_TRAINER_LOGS": str(logs)}
        started = time.perf_counter()
        subprocess.run([_grpolens(), "refresh"], env=env, check=True, capture_output=True)
        refresh = time.perf_counter() - started
        command = []
        for _ in range(repeats):
            started = time.perf_counter()
            subprocess.run(
                [_grpolens(), "sweep", "--prefix", "bench-sweep-", "--format", "json"],
                env=env,
                check=True,
                capture_output=True,
            )
            command.append(time.perf_counter() - started)
        settings = Settings(home=Path(tmp) / "home")
        con = warehouse.connect_readonly(settings)
        try:
            started = time.perf_counter()
            doc = sweep_report.analyse(con, sweep.select(con, prefix="bench-sweep-"))
            analysis = time.perf_counter() - started
        finally:
            con.close()
    return {
        "runs": len(doc["runs"]),
        "steps": 2000,
        "refresh_s": refresh,
        "command_s": command,
        "command_s_median": statistics.median(command),
        "analysis_s": analysis,
        "best": doc["runs"][0]["run"],
        "effects": [(e["param"], e["spearman"], e["significant"]) for e in doc["effects"]],
    }


def print_sweep(res: dict) -> None:
    print(
        f"8. Sweep comparison: {res['runs']} runs x {res['steps']} steps (trainer_state.json, refresh "
        f"{res['refresh_s']:.1f}s). Target: <= 10 s"
    )
    print(
        f"   `grpolens sweep --prefix bench-sweep-` (whole command, analysis + Markdown + plots): median "
        f"{res['command_s_median']:.2f}s (range {min(res['command_s']):.2f}-{max(res['command_s']):.2f}); "
        f"analysis alone {res['analysis_s']:.2f}s"
    )
    print(
        "   effects found: "
        + "; ".join(f"{p} rho {r:+.2f}{' (significant)' if s else ''}" for p, r, s in res["effects"] if r is not None)
    )
