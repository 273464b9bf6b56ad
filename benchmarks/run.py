"""grpolens benchmarks (`make bench`): ingest throughput vs the parse floor, ingest peak memory, no-op refresh,
events per second, check precision and recall, W&B cloud history rows per second and its no-op refresh.

    .venv/bin/python -m benchmarks.run [--quick] [--repeats N] [--profile] [--throughput-only]

Every figure is the median over repeats measured in this run. Run files are written once with the real wandb
library (offline mode) under benchmarks/out/data/ and reused while their manifest says they are complete. Each
ingest repeat runs in a fresh interpreter (benchmarks.child) into a fresh empty lake, after the files were read
once so they are in the page cache. The last line printed is ``BENCH_JSON {...}`` with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import gen

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "benchmarks" / "out"
DATA = OUT / "data"
SCRATCH = OUT / "scratch"
PYTHON = sys.executable
RATIO_TARGET = 3.0  # ingest time within 3x of the bare read + protobuf parse
NOOP_TARGET_S = 2.0  # a refresh with nothing new, whole command

# Full sizes; --quick divides steps (or runs, for the many-small-runs set) by 10.
BIG = {"name": "big", "runs": 5, "steps": 2000, "dense": 196, "sparse": 40, "sparse_every": 10, "seed": 11}
SINGLE = {"name": "single", "runs": 1, "steps": 20000, "dense": 196, "sparse": 40, "sparse_every": 10, "seed": 12}
SMALL = {"name": "small", "runs": 100, "steps": 50, "dense": 30, "sparse": 0, "sparse_every": 10, "seed": 13}
MEMORY_BATCHES = (50_000, 200_000)


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float]) -> str:
    return f"{min(xs):.3g}..{max(xs):.3g}" if len(xs) > 1 else "-"


# --------------------------------------------------------------------------- data sets


def sized(spec: dict, quick: bool) -> dict:
    spec = dict(spec)
    if quick:
        spec["name"] += "-quick"
        if spec["name"].startswith("small"):
            spec["runs"] = max(1, spec["runs"] // 10)
        else:
            spec["steps"] = max(10, spec["steps"] // 10)
    return spec


def ensure_set(spec: dict) -> tuple[Path, dict, str]:
    """The set's folder, its manifest, and whether it was reused or written now (in a child: wandb stays out of
    here)."""
    folder = DATA / spec["name"]
    if gen.manifest_ok(folder, spec):
        return folder, gen.load_manifest(folder), "reused"
    say(
        f"writing run files for set {spec['name']!r} with wandb offline: {spec['runs']} runs x {spec['steps']} steps "
        f"x ~{spec['dense']} keys (+{spec['sparse']} sparse every {spec['sparse_every']}th step) ..."
    )
    t0 = time.perf_counter()
    proc = subprocess.run(
        [PYTHON, "-m", "benchmarks.gen", json.dumps(spec), str(folder)], cwd=ROOT, capture_output=True, text=True
    )
    if proc.returncode != 0 or not gen.manifest_ok(folder, spec):
        raise SystemExit(f"writing set {spec['name']} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    say(f"  written in {time.perf_counter() - t0:.1f}s")
    return folder, gen.load_manifest(folder), "written"


def set_files(folder: Path, manifest: dict) -> list[Path]:
    return [folder / rel for rel in sorted(manifest["files"])]


def warm_cache(files: list[Path]) -> int:
    total = 0
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while chunk := fh.read(1 << 20):
                total += len(chunk)
    return total


# --------------------------------------------------------------------------- children


def child(*args: str) -> dict:
    proc = subprocess.run([PYTHON, "-m", "benchmarks.child", *args], cwd=ROOT, capture_output=True, text=True)
    line = next((text for text in proc.stdout.splitlines() if text.startswith("CHILD_JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"benchmark child {args[:2]} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(line[len("CHILD_JSON ") :])


def fresh_lake(tag: str) -> Path:
    lake = SCRATCH / f"lake-{tag}"
    shutil.rmtree(lake, ignore_errors=True)
    lake.parent.mkdir(parents=True, exist_ok=True)
    return lake


def child_ingest(folder: Path, batch_rows: int, tag: str) -> dict:
    lake = fresh_lake(tag)
    try:
        return child("ingest", str(lake), str(batch_rows), str(folder))
    finally:
        shutil.rmtree(lake, ignore_errors=True)


# --------------------------------------------------------------------------- figure 1: throughput vs parse floor


def bench_throughput(folder: Path, manifest: dict, repeats: int) -> dict:
    files = set_files(folder, manifest)
    warm_cache(files)
    ingests, floors = [], []
    for i in range(repeats):  # interleaved, so noise from other users of the machine hits both alike
        say(f"  throughput repeat {i + 1}/{repeats}")
        floors.append(child("floor", *map(str, files)))
        ingests.append(child_ingest(folder, 100_000, f"throughput-{i}"))
    values = {r["values"] for r in ingests}
    if len(values) != 1:
        raise SystemExit(f"ingest repeats disagree on the value count: {sorted(values)}")
    n_values = values.pop()
    records = {r["records"] for r in ingests} | {r["records"] for r in floors}
    if len(records) != 1:
        raise SystemExit(f"ingest and floor disagree on the record count: {sorted(records)}")
    ingest_s = [r["seconds"] for r in ingests]
    wall_s = [r["wall"] for r in ingests]
    floor_s = [r["wall"] for r in floors]
    ratio = med(ingest_s) / med(floor_s)
    return {
        "files": len(files),
        "bytes": sum(manifest["files"].values()),
        "values": n_values,
        "records": records.pop(),
        "repeats": repeats,
        "batch_rows": 100_000,
        "ingest_s_median": med(ingest_s),
        "ingest_s_all": ingest_s,
        "ingest_wall_s_median": med(wall_s),
        "ingest_wall_s_all": wall_s,
        "values_per_s": n_values / med(ingest_s),
        "values_per_s_wall": n_values / med(wall_s),
        "floor_s_median": med(floor_s),
        "floor_s_all": floor_s,
        "floor_values_per_s": n_values / med(floor_s),
        "ratio_ingest_to_floor": ratio,
        "ratio_target": RATIO_TARGET,
        "ratio_target_met": ratio <= RATIO_TARGET,
    }


# --------------------------------------------------------------------------- figure 2: peak memory


def bench_memory(sets: list[tuple[str, Path, dict]], repeats: int) -> list[dict]:
    rows = []
    for label, folder, manifest in sets:
        warm_cache(set_files(folder, manifest))
        for batch_rows in MEMORY_BATCHES:
            runs = []
            for i in range(repeats):
                say(f"  memory {label} batch_rows={batch_rows} repeat {i + 1}/{repeats}")
                runs.append(child_ingest(folder, batch_rows, f"memory-{i}"))
            delta_mib = [(r["peak_kib"] - r["rss_before_kib"]) / 1024 for r in runs]
            sizes = list(manifest["files"].values())
            rows.append(
                {
                    "set": label,
                    "files": len(sizes),
                    "largest_file_mib": max(sizes) / 2**20,
                    "total_mib": sum(sizes) / 2**20,
                    "values": runs[0]["values"],
                    "batch_rows": batch_rows,
                    "peak_delta_mib_median": med(delta_mib),
                    "peak_delta_mib_all": delta_mib,
                    "rss_before_mib_median": med([r["rss_before_kib"] / 1024 for r in runs]),
                    "peak_mib_median": med([r["peak_kib"] / 1024 for r in runs]),
                    "values_per_s": runs[0]["values"] / med([r["seconds"] for r in runs]),
                }
            )
    return rows


def memory_summary(rows: list[dict]) -> dict:
    """How peak memory moves with batch_rows (slope per buffered value) and with file size (same batch_rows)."""
    lo, hi = MEMORY_BATCHES
    by = {(r["set"], r["batch_rows"]): r["peak_delta_mib_median"] for r in rows}
    sets = list(dict.fromkeys(r["set"] for r in rows))
    slopes = [(by[(s, hi)] - by[(s, lo)]) * 1024 / (hi - lo) for s in sets]
    size_effect = {b: max(by[(s, b)] for s in sets) - min(by[(s, b)] for s in sets) for b in MEMORY_BATCHES}
    return {"kib_per_buffered_value": med(slopes), "max_diff_between_file_sizes_mib": max(size_effect.values())}


# --------------------------------------------------------------------------- figure 3: no-op refresh


def grpolens_exe() -> str:
    beside = Path(PYTHON).with_name("grpolens")
    return str(beside if beside.exists() else ROOT / ".venv" / "bin" / "grpolens")


def history_parts(home: Path) -> list[str]:
    folder = home / "lake" / "history" / "source=wandb_offline"
    return sorted(p.name for p in folder.glob("part-*.parquet")) if folder.exists() else []


def last_ingest_id(home: Path) -> int | None:
    try:
        return json.loads((home / "lake" / "_state" / "wandb_offline.json").read_text()).get("last_ingest_id")
    except (OSError, ValueError):
        return None


def timed_command(cmd: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def bench_refresh(folder: Path, manifest: dict, repeats: int) -> dict:
    from pipeline.sources import wandb_offline

    home = SCRATCH / "refresh-home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    from pipeline.ingest import SOURCES

    # only the benchmark's runs: whatever else the caller's environment configures (make's demo folders) is not
    # part of what is measured
    env = {k: v for k, v in os.environ.items() if k not in {s.variable for s in SOURCES.values()}}
    env.update(GRPOLENS_HOME=str(home), GRPOLENS_WANDB_DIRS=str(folder))
    cmd = [grpolens_exe(), "refresh"]
    warm_cache(set_files(folder, manifest))

    say("  first refresh (full ingest + dbt build)")
    first_s, proc = timed_command(cmd, env)
    first_out = proc.stdout + proc.stderr
    if proc.returncode != 0 or "warehouse built" not in first_out:
        raise SystemExit(f"first `grpolens refresh` failed (exit {proc.returncode}):\n{first_out[-3000:]}")
    first_ingest = re.search(r"(\d+) values, (\d+) runs updated in ([\d.]+)s", first_out)
    first_dbt = re.search(r"dbt build: (.*) in ([\d.]+)s", first_out)
    parts_before, id_before = history_parts(home), last_ingest_id(home)

    noop_s, noop_ok, problems = [], True, []
    for i in range(repeats):
        say(f"  no-op refresh {i + 1}/{repeats}")
        seconds, proc = timed_command(cmd, env)
        out = proc.stdout + proc.stderr
        noop_s.append(seconds)
        checks = {
            "exit 0": proc.returncode == 0,
            "printed 'up to date'": "up to date" in out,
            "no dbt build": "building the warehouse" not in out,
            "history part count unchanged": history_parts(home) == parts_before,
            "last_ingest_id unchanged": last_ingest_id(home) == id_before,
        }
        failed = [name for name, ok in checks.items() if not ok]
        if failed:
            noop_ok = False
            problems.append(f"repeat {i + 1}: {', '.join(failed)}: {out.strip()[-500:]}")

    # The same no-op, in this process: just the ingest call (discover + one stat per file + cursors).
    lake = home / "lake"
    wandb_offline.ingest(lake, [folder])  # first call pays lazy imports; not counted
    inproc_s, inproc_reports = [], []
    for _ in range(max(repeats, 10)):
        t0 = time.perf_counter()
        report = wandb_offline.ingest(lake, [folder])
        inproc_s.append(time.perf_counter() - t0)
        inproc_reports.append(report)
    inproc_ok = all(not r.changed and r.files_read == 0 for r in inproc_reports) and history_parts(home) == parts_before
    noop_ok = noop_ok and inproc_ok

    startup_s = [timed_command([PYTHON, "-c", "pass"], env)[0] for _ in range(repeats)]
    imports_s = [
        timed_command(
            [PYTHON, "-c", "import pipeline.cli, pipeline.warehouse, pipeline.ingest, pipeline.sources.wandb_offline"],
            env,
        )[0]
        for _ in range(repeats)
    ]
    return {
        "runs": manifest["spec"]["runs"],
        "files_seen": inproc_reports[0].files_seen,
        "first_refresh_s": first_s,
        "first_ingest_values": int(first_ingest.group(1)) if first_ingest else None,
        "first_ingest_s": float(first_ingest.group(3)) if first_ingest else None,
        "first_dbt_s": float(first_dbt.group(2)) if first_dbt else None,
        "first_dbt_summary": first_dbt.group(1) if first_dbt else None,
        "history_parts": len(parts_before),
        "noop_refresh_s_median": med(noop_s),
        "noop_refresh_s_all": noop_s,
        "repeats": repeats,
        "noop_target_s": NOOP_TARGET_S,
        "noop_target_met": med(noop_s) < NOOP_TARGET_S,
        "noop_verified": noop_ok,
        "noop_problems": problems,
        "inproc_noop_ingest_ms_median": med(inproc_s) * 1000,
        "inproc_noop_ingest_ms_all": [s * 1000 for s in inproc_s],
        "python_startup_s_median": med(startup_s),
        "python_import_pipeline_s_median": med(imports_s),
    }


# --------------------------------------------------------------------------- optional profile


def profile_ingest(folder: Path, top: int = 12) -> str:
    import cProfile
    import io
    import pstats

    from pipeline.sources import wandb_offline

    lake = fresh_lake("profile")
    prof = cProfile.Profile()
    try:
        prof.runcall(wandb_offline.ingest, lake, [folder])
    finally:
        shutil.rmtree(lake, ignore_errors=True)
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


# --------------------------------------------------------------------------- report


def print_report(res: dict) -> None:
    t, r = res["throughput"], res["refresh"]
    line = "-" * 96
    print(line)
    print(
        f"grpolens benchmarks ({res['mode']}; {res['cpus']} CPUs; medians over repeats in this run; "
        f"total {res['total_s']:.0f}s)"
    )
    print(line)
    print(
        f"1. Ingest throughput: {t['files']} run files, {t['bytes'] / 2**20:.1f} MiB, {t['records']:,} records, "
        f"{t['values']:,} values (batch_rows={t['batch_rows']:,}, {t['repeats']} repeats, fresh process + lake each)"
    )
    print(f"   {'measure':<44}{'median':>12}{'values/s':>14}   {'range (s)':<16}")
    print(
        f"   {'ingest, IngestReport.seconds':<44}{t['ingest_s_median']:>11.3f}s{t['values_per_s']:>14,.0f}   "
        f"{spread(t['ingest_s_all'])}"
    )
    print(
        f"   {'ingest, wall time of the ingest() call':<44}{t['ingest_wall_s_median']:>11.3f}s"
        f"{t['values_per_s_wall']:>14,.0f}   {spread(t['ingest_wall_s_all'])}"
    )
    print(
        f"   {'parse floor: read_records + Record.FromString':<44}{t['floor_s_median']:>11.3f}s"
        f"{t['floor_values_per_s']:>14,.0f}   {spread(t['floor_s_all'])}"
    )
    verdict = "MET" if t["ratio_target_met"] else "NOT MET"
    print(
        f"   ratio ingest / floor: {t['ratio_ingest_to_floor']:.2f}x   (target <= {t['ratio_target']:.0f}x: {verdict})"
    )
    print(line)
    print("2. Ingest peak memory: ru_maxrss of the child minus its RSS right before ingest() (after imports)")
    print(
        f"   {'set':<20}{'files':>6}{'largest file':>14}{'values':>12}{'batch_rows':>12}{'peak delta':>12}"
        f"{'(range)':>16}"
    )
    for m in res["memory"]:
        print(
            f"   {m['set']:<20}{m['files']:>6}{m['largest_file_mib']:>10.1f} MiB{m['values']:>12,}"
            f"{m['batch_rows']:>12,}{m['peak_delta_mib_median']:>8.1f} MiB{spread(m['peak_delta_mib_all']):>16}"
        )
    ms = res["memory_summary"]
    print(
        f"   peak grows ~{ms['kib_per_buffered_value']:.2f} KiB per value of batch_rows; at equal batch_rows the "
        f"two file sizes differ by at most {ms['max_diff_between_file_sizes_mib']:.1f} MiB"
    )
    print(f"   (RSS after imports, before ingest: ~{res['memory'][0]['rss_before_mib_median']:.0f} MiB)")
    print(line)
    print(f"3. Refresh over {r['runs']} runs ({r['files_seen']} run files), GRPOLENS_HOME fresh under benchmarks/out")
    dbt = f"; dbt build {r['first_dbt_s']:.2f}s ({r['first_dbt_summary']})" if r["first_dbt_s"] is not None else ""
    ing = (
        f"ingest {r['first_ingest_s']:.2f}s for {r['first_ingest_values']:,} values"
        if r["first_ingest_s"] is not None
        else ""
    )
    print(f"   first refresh (full): {r['first_refresh_s']:.2f}s wall  [{ing}{dbt}]")
    verdict = "MET" if r["noop_target_met"] else "NOT MET"
    print(
        f"   no-op `grpolens refresh` (whole command): median {r['noop_refresh_s_median']:.3f}s "
        f"(range {spread(r['noop_refresh_s_all'])}, {r['repeats']} repeats; "
        f"target < {r['noop_target_s']:.0f}s: {verdict})"
    )
    print(
        f"     of which: bare `python -c pass` {r['python_startup_s_median']:.3f}s; "
        f"python + importing the CLI/ingest modules {r['python_import_pipeline_s_median']:.3f}s"
    )
    print(
        f"   no-op ingest in-process (wandb_offline.ingest, nothing new): median "
        f"{r['inproc_noop_ingest_ms_median']:.1f} ms"
    )
    check = (
        "yes (exit 0, 'up to date', no dbt, history parts and ingest id unchanged)"
        if r["noop_verified"]
        else "NO: " + "; ".join(r["noop_problems"])
    )
    print(f"   no-op verified: {check}; history parts: {r['history_parts']}")
    print(line)
    print(
        "data sets: "
        + ", ".join(f"{d['name']} ({d['status']}, {d['files']} files, {d['mib']:.0f} MiB)" for d in res["data_sets"])
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="sizes / 10, fewer repeats: a smoke run")
    parser.add_argument("--repeats", type=int, help="repeats per figure (default 5; 3 for memory; --quick: 3)")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of one in-process ingest")
    parser.add_argument(
        "--throughput-only",
        action="store_true",
        help="only figure 1 (ingest vs parse floor): a quick check while working on the ingest path",
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    repeats = args.repeats or (3 if args.quick else 5)
    mem_repeats = args.repeats or 3

    big, single, small = (sized(s, args.quick) for s in (BIG, SINGLE, SMALL))
    data_sets = []
    folders = {}
    for spec in (big, single, small):
        folder, manifest, status = ensure_set(spec)
        folders[spec["name"]] = (folder, manifest)
        data_sets.append(
            {
                "name": spec["name"],
                "status": status,
                "files": len(manifest["files"]),
                "mib": sum(manifest["files"].values()) / 2**20,
                "logged_values": manifest["logged_values"],
                "write_seconds": manifest.get("write_seconds"),
            }
        )
    SCRATCH.mkdir(parents=True, exist_ok=True)

    say("1. ingest throughput vs parse floor")
    throughput = bench_throughput(*folders[big["name"]], repeats)
    if args.throughput_only:
        t = throughput
        print(f"1. Ingest throughput: {t['files']} run files, {t['values']:,} values, {t['repeats']} repeats")
        print(
            f"   ingest median {t['ingest_s_median']:.3f}s (range {spread(t['ingest_s_all'])}), parse floor median "
            f"{t['floor_s_median']:.3f}s (range {spread(t['floor_s_all'])}), ratio {t['ratio_ingest_to_floor']:.2f}x "
            f"(target <= {t['ratio_target']:.0f}x: {'MET' if t['ratio_target_met'] else 'NOT MET'})"
        )
        if args.profile:
            print(profile_ingest(folders[big["name"]][0]))
        shutil.rmtree(SCRATCH, ignore_errors=True)
        print("BENCH_JSON " + json.dumps({"throughput": throughput}, separators=(",", ":"), default=str))
        return 0
    if not args.quick and throughput["values"] < 2_000_000:
        say(f"warning: the throughput set holds {throughput['values']:,} values, fewer than 2,000,000")
    say("2. ingest peak memory")
    memory = bench_memory(
        [
            (f"{big['name']} ({big['runs']} runs)", *folders[big["name"]]),
            (f"{single['name']} (1 run)", *folders[single["name"]]),
        ],
        mem_repeats,
    )
    say("3. refresh")
    refresh = bench_refresh(*folders[small["name"]], repeats)
    say("4. events")
    from benchmarks.events import bench_events, print_events

    events = bench_events(repeats, args.quick)
    say("6. W&B cloud ingest through the emulator")
    from benchmarks.cloud import bench_cloud, print_cloud

    cloud = bench_cloud(3, args.quick)
    say("7. run reports")
    from benchmarks.reports import bench_reports, bench_sweep, print_reports, print_sweep

    reports = bench_reports(3 if args.quick else 5)
    say("8. sweep comparison")
    sweep_bench = bench_sweep(3)
    say("9. the warehouse at team scale")
    from benchmarks.scale import bench_scale

    scale = bench_scale(args.quick)
    say("5. checks on the labelled suite")
    import tempfile

    from pipeline.evaluation.check_eval import (
        evaluate_demo,
        evaluate_real,
        evaluate_synthetic,
        format_real,
        format_table,
    )

    with tempfile.TemporaryDirectory(prefix="grpolens-bench-checks-") as tmp:
        checks_started = time.perf_counter()
        check_scores = evaluate_demo(Path(tmp), seed=7, scale=1.0)
        checks_seconds = time.perf_counter() - checks_started
    with tempfile.TemporaryDirectory(prefix="grpolens-bench-real-") as tmp:
        real_scores = evaluate_real(Path(tmp))
    with tempfile.TemporaryDirectory(prefix="grpolens-bench-synthetic-") as tmp:
        synthetic_scores = evaluate_synthetic(Path(tmp), range(2 if args.quick else 5))
    profile = profile_ingest(folders[big["name"]][0]) if args.profile else None
    shutil.rmtree(SCRATCH, ignore_errors=True)

    res = {
        "mode": "quick" if args.quick else "full",
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "data_sets": data_sets,
        "throughput": throughput,
        "memory": memory,
        "memory_summary": memory_summary(memory),
        "refresh": refresh,
        "events": events,
        "checks": check_scores,
        "checks_real": real_scores,
        "checks_synthetic": synthetic_scores,
        "cloud": cloud,
        "reports": reports,
        "sweep": sweep_bench,
        "scale": scale,
        "total_s": time.perf_counter() - started,
    }
    print_report(res)
    print_events(events)
    print("-" * 96)
    print(
        f"5. Training-health checks on the labelled demo suite (real wandb offline runs, seed 7; {checks_seconds:.0f}s "
        "to write, ingest, build and check). Targets: precision and recall >= 0.95 at warn/error"
    )
    print(format_table(check_scores))
    print(
        "5b. The same checks on the real public runs in tests/fixtures/real (labelled by reading their numbers). "
        "Targets: every problem but 2 caught, <= 1 false alarm per 10 runs, at warn/error"
    )
    print(format_real(real_scores))
    seeds = synthetic_scores["seeds"]
    print(
        f"5c. The same checks on the second generator (pipeline/evaluation/synthetic_runs.py, no code shared with the "
        f"demo), seeds {', '.join(seeds)} pooled. Targets: precision and recall >= 0.95 at warn/error"
    )
    print(format_table(synthetic_scores["pooled"]))
    print(
        "    per seed: "
        + "; ".join(f"{s}: precision {t['precision']:.2f} recall {t['recall']:.2f}" for s, t in seeds.items())
    )
    print_cloud(cloud)
    print_reports(reports)
    print_sweep(sweep_bench)
    if profile:
        print("cProfile of one in-process ingest of the throughput set (top by own time):")
        print(profile)
    print("BENCH_JSON " + json.dumps(res, separators=(",", ":"), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
