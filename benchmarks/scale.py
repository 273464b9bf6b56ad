"""Section 9: the warehouse at team scale. JSONL trainer logs (benchmarks/scale_data.py) through the real
trainer-log source and the real `grpolens` command: a first (full) refresh, refreshes after ~1 % more data each
(the median of three, with the seconds dbt took), a no-op refresh, `grpolens check` reading a current table and
re-checking every run (thresholds changed), and `grpolens build --full-refresh`, each with the peak RSS of the
command and its children (dbt). Two sizes show how the cost grows: with what exists for a full build, with what
changed for an incremental one. Then, every run's report drawn (not measured), the Dagster refresh job as a schedule
runs it (`dagster job execute`) after ~1 % more values, with the seconds of each of its steps."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.scale_data import grow, write_set
from pipeline.report import batch
from pipeline.resources import dagster_home
from pipeline.settings import Settings

OUT = Path(__file__).resolve().parent / "out"
# (label, runs, steps, metrics): 1e7 and 3e7 values
SIZES = (("1e7", 100, 1000, 100), ("3e7", 100, 3000, 100))
TARGETS = {"full_s": 120.0, "peak_gib": 3.0, "incremental_share": 0.05, "check_s": 10.0}
INCREMENTS = 3  # +1 % refreshes in a row at each size; the table shows their median

# Runs a command and prints its wall time and the peak RSS of its largest process (itself or a child: dbt).
_MEASURE = """
import resource, subprocess, sys, time
t = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t
peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.stderr.write(proc.stdout + proc.stderr)
print(f"MEASURE {proc.returncode} {wall:.3f} {peak}")
"""


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def measured(args: list[str], env: dict, command: str = "grpolens", keep: int = 1500) -> dict:
    exe = str(Path(sys.executable).with_name(command))
    proc = subprocess.run([sys.executable, "-c", _MEASURE, exe, *args], env=env, capture_output=True, text=True)
    line = next((text for text in proc.stdout.splitlines() if text.startswith("MEASURE ")), None)
    if line is None:
        raise SystemExit(f"{command} {' '.join(args)} could not be measured:\n{proc.stderr[-2000:]}")
    code, wall, peak = line.split()[1:]
    if int(code) not in (0, 2):
        raise SystemExit(f"{command} {' '.join(args)} failed ({code}):\n{proc.stderr[-3000:]}")
    return {"s": float(wall), "peak_gib": int(peak) / 2**20, "output": proc.stderr[-keep:]}


def dagster_refresh(env: dict) -> dict:
    """The Dagster refresh job through Dagster's own command, with the seconds of each step (from its log)."""
    step = measured(["job", "execute", "-m", "pipeline.definitions", "-j", "refresh"], env, "dagster", keep=10**7)
    found = re.findall(r'Finished execution of step "(\w+)" in ([0-9.]+)(ms|s)', step["output"])
    step["steps"] = {name: float(value) / (1000 if unit == "ms" else 1) for name, value, unit in found}
    if "run_reports" not in step["steps"]:
        raise SystemExit(f"the Dagster refresh job did not run its reports:\n{step['output'][-3000:]}")
    step["output"] = step["output"][-1500:]
    return step


def bench_size(label: str, runs: int, steps: int, metrics: int) -> dict:
    data = OUT / f"scale-{label}"
    say(f"  {label}: writing {runs} runs x {steps} steps x {metrics} metrics (kept between benches)")
    manifest = write_set(data, runs, steps, metrics)
    home = OUT / f"scale-{label}-home"
    shutil.rmtree(home, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPOLENS_") and not k.startswith("WANDB_")}
    env.update(GRPOLENS_HOME=str(home), GRPOLENS_TRAINER_LOGS=str(data))
    result = {"label": label, "values": manifest["values"], "runs": runs}
    say(f"  {label}: first refresh (ingest, full build, checks)")
    result["full"] = measured(["refresh"], env)
    say(f"  {label}: no-op refresh")
    result["noop"] = measured(["refresh"], env)
    say(f"  {label}: `grpolens check`")
    result["check"] = measured(["check", "--format", "json"], env)
    say(f"  {label}: `grpolens check` with a threshold changed (every run checked again)")
    config = home / "bench-thresholds.yaml"
    config.write_text("checks:\n  kl_spike:\n    mad_factor: 7\n")
    result["recheck"] = measured(["check", "--format", "json"], {**env, "GRPOLENS_CONFIG": str(config)})
    measured(["check", "--format", "json"], env)  # back to the default thresholds (not measured)
    steps = []
    for _ in range(INCREMENTS):
        added = grow(data)
        say(f"  {label}: refresh after {added:,} more values")
        step = measured(["refresh"], env)
        built = re.search(r"dbt build: .* in ([0-9.]+)s", step["output"])
        step["dbt_s"] = float(built.group(1)) if built else None
        steps.append(step)
    result["added_values"] = added
    result["increments"] = steps
    result["incremental"] = sorted(steps, key=lambda s: s["s"])[len(steps) // 2]  # the median run
    say(f"  {label}: `grpolens build --full-refresh`")
    result["rebuild"] = measured(["build", "--full-refresh"], env)
    result["disk_gib"] = sum(p.stat().st_size for p in home.rglob("*") if p.is_file()) / 2**30  # lake + warehouse
    say(f"  {label}: every run's report (not measured), as a first Dagster refresh would draw them")
    batch.write_reports(Settings(home=home))
    dagster_env = {**env, "DAGSTER_HOME": str(dagster_home(Settings(home=home)))}
    grow(data)
    say(f"  {label}: the Dagster refresh job after ~1 % more values")
    result["dagster_incremental"] = dagster_refresh(dagster_env)
    shutil.rmtree(home, ignore_errors=True)
    return result


def bench_scale(quick: bool = False) -> list[dict]:
    sizes = SIZES[:1] if quick else SIZES
    started = time.perf_counter()
    results = [bench_size(*size) for size in sizes]
    say(f"  section 9 took {time.perf_counter() - started:.0f}s")
    return results


def print_scale(results: list[dict]) -> None:
    print("-" * 96)
    print(
        "9. The warehouse at team scale: JSONL trainer logs (100 runs x 100 metrics) through the real source and "
        "`grpolens`; wall time of the whole command, peak RSS of its largest process (dbt's included). +1%: the "
        f"median of {INCREMENTS} refreshes in a row, each after ~1% more values (three runs go on, one starts), and "
        "the seconds its dbt build took. check: reading a current anomalies table; recheck: every rule on every "
        f"run (a threshold changed). Targets at 3e7: full refresh <= {TARGETS['full_s']:.0f}s in <= "
        f"{TARGETS['peak_gib']:.0f} GiB, +1% refresh <= {TARGETS['incremental_share']:.0%} of it, check <= "
        f"{TARGETS['check_s']:.0f}s"
    )
    print(
        f"   {'values':<8}{'first refresh':>18}{'+1% refresh':>18}{'(dbt)':>7}{'share':>7}{'no-op':>8}{'check':>8}"
        f"{'recheck':>9}{'--full-refresh':>18}{'disk':>8}"
    )
    for r in results:

        def cell(m):
            return f"{m['s']:6.1f}s {m['peak_gib']:4.2f}GiB"

        inc = r["incremental"]
        share = inc["s"] / r["full"]["s"]
        dbt = f"{inc['dbt_s']:5.1f}s" if inc.get("dbt_s") is not None else "  –"
        print(
            f"   {r['label']:<8}{cell(r['full']):>18}{cell(inc):>18}{dbt:>7}{share:>7.1%}{r['noop']['s']:>7.2f}s"
            f"{r['check']['s']:>7.2f}s{r['recheck']['s']:>8.2f}s{cell(r['rebuild']):>18}{r['disk_gib']:>6.2f}GiB"
        )
        print(f"   {'':<8}+1% refreshes: " + ", ".join(f"{s['s']:.1f}s" for s in r["increments"]))
        if dagster := r.get("dagster_incremental"):
            steps = sorted(dagster["steps"].items(), key=lambda item: -item[1])
            print(
                f"   {'':<8}Dagster refresh job after +1%: {dagster['s']:.1f}s, {dagster['peak_gib']:.2f}GiB; steps: "
                + ", ".join(f"{name} {seconds:.1f}s" for name, seconds in steps if seconds >= 0.1)
            )
    if len(results) > 1:
        a, b = results[0], results[-1]
        grown = b["values"] / a["values"]
        print(
            f"   {b['label']} holds {grown:.0f}x the values of {a['label']}: first refresh x"
            f"{b['full']['s'] / a['full']['s']:.2f}, "
            f"build --full-refresh x{b['rebuild']['s'] / a['rebuild']['s']:.2f}, "
            f"+1% refresh x{b['incremental']['s'] / a['incremental']['s']:.2f} (it adds x"
            f"{b['added_values'] / a['added_values']:.0f} the values), recheck x"
            f"{b['recheck']['s'] / a['recheck']['s']:.2f}"
        )
