"""W&B cloud ingest figures, through the W&B API emulator with the real wandb client: history rows per second, and
a no-op refresh over 100 unchanged runs (the whole ``grpolens ingest --source wandb_cloud`` command, and the
in-process ingest), with the history requests it made (target: none)."""

from __future__ import annotations

import multiprocessing
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pipeline.sources import wandb_cloud
from tests.wandb_emulator import WandbEmulator

OUT = Path(__file__).resolve().parent / "out"
ENTITY, PROJECT = "bench", "grpo"


def _history(rng: random.Random, rows: int, keys: int) -> list[dict]:
    names = [f"train/metric_{k}" for k in range(keys)]
    return [
        {"_step": s, "_runtime": s * 1.5, "_timestamp": 1.7e9 + s, **{n: rng.gauss(0, 1) for n in names}}
        for s in range(rows)
    ]


def _serve(conn, seed: int, history_runs: tuple[int, int, int]) -> None:
    """The emulator in its own process (as the cloud is): the ingest does not share a GIL with the server.
    Answers ``"count"`` (history requests since the last count) and ``"stop"`` on the pipe."""
    rng = random.Random(seed)
    runs, rows, keys = history_runs
    with WandbEmulator() as emu:
        for i in range(runs):
            emu.add_run(ENTITY, "history", f"h{i:03d}", history=_history(rng, rows, keys), exported_fraction=0.8)
        for i in range(100):
            emu.add_run(ENTITY, PROJECT, f"r{i:03d}", history=_history(rng, 50, 3), exported_fraction=0.5)
        conn.send((emu.base_url, emu.api_key))
        while True:
            message = conn.recv()
            if message == "count":
                conn.send(emu.history_requests())
                emu.requests.clear()
            else:
                return


def bench_cloud(repeats: int, quick: bool) -> dict:
    scratch = OUT / "scratch" / "cloud"
    runs, rows, keys = (4, 2_000, 10) if quick else (10, 10_000, 10)
    WandbEmulator.client_settings(retry_max=3, wait_seconds=1, timeout_seconds=30)
    parent, child = multiprocessing.get_context("fork").Pipe()
    server = multiprocessing.get_context("fork").Process(
        target=_serve, args=(child, 7, (runs, rows, keys)), daemon=True
    )
    server.start()
    try:
        base_url, api_key = parent.recv()
        ingest_s, values = [], 0
        for i in range(repeats):
            lake = scratch / f"rows-{i}"
            shutil.rmtree(lake, ignore_errors=True)
            api = wandb_cloud.connect(api_key=api_key, base_url=base_url)
            report = wandb_cloud.ingest(lake, [f"{ENTITY}/history"], api=api)
            assert report.history_rows == runs * rows and not report.issues, report.lines()
            ingest_s.append(report.seconds)
            values = report.values

        home = scratch / "noop-home"
        shutil.rmtree(home, ignore_errors=True)
        env = {
            **os.environ,
            "GRPOLENS_HOME": str(home),
            "WANDB_BASE_URL": base_url,
            "WANDB_API_KEY": api_key,
            "GRPOLENS_WANDB_PROJECTS": f"{ENTITY}/{PROJECT}",
        }
        exe = str(Path(sys.executable).with_name("grpolens"))
        first = subprocess.run([exe, "ingest", "--source", "wandb_cloud"], env=env, capture_output=True, text=True)
        assert first.returncode == 0, first.stderr
        parent.send("count")
        parent.recv()
        noop_cmd, noop_inproc, history_requests = [], [], 0
        for _ in range(repeats):
            started = time.perf_counter()
            proc = subprocess.run([exe, "ingest", "--source", "wandb_cloud"], env=env, capture_output=True, text=True)
            noop_cmd.append(time.perf_counter() - started)
            assert proc.returncode == 0, proc.stderr
            api = wandb_cloud.connect(api_key=api_key, base_url=base_url)
            report = wandb_cloud.ingest(home / "lake", [f"{ENTITY}/{PROJECT}"], api=api)
            noop_inproc.append(report.seconds)
            assert report.runs_listed == 100 and report.runs_changed == 0, report.lines()
            parent.send("count")
            history_requests += parent.recv()
    finally:
        parent.send("stop")
        server.join(10)
    shutil.rmtree(scratch, ignore_errors=True)
    med = statistics.median(ingest_s)
    return {
        "runs": runs,
        "rows": runs * rows,
        "values": values,
        "ingest_s_median": med,
        "rows_per_s": runs * rows / med,
        "values_per_s": values / med,
        "noop_runs": 100,
        "noop_command_s_median": statistics.median(noop_cmd),
        "noop_ingest_s_median": statistics.median(noop_inproc),
        "noop_history_requests": history_requests,
        "noop_target_s": 5.0,
    }


def print_cloud(c: dict) -> None:
    print("-" * 96)
    print(
        "6. W&B cloud ingest through the W&B API emulator (real wandb client and wandb-core; the emulator in its "
        "own process on 127.0.0.1)"
    )
    print(
        f"   {c['runs']} runs x {c['rows'] // c['runs']:,} history rows (80% served as Parquet exports, the rest live):"
        f" median {c['ingest_s_median']:.2f}s = {c['rows_per_s']:,.0f} history rows/s"
        f" ({c['values_per_s']:,.0f} values/s)"
    )
    verdict = (
        "met" if c["noop_command_s_median"] < c["noop_target_s"] and c["noop_history_requests"] == 0 else "NOT met"
    )
    print(
        f"   no-op refresh over {c['noop_runs']} unchanged runs: `grpolens ingest --source wandb_cloud` median "
        f"{c['noop_command_s_median']:.2f}s (in-process ingest {c['noop_ingest_s_median']:.2f}s); history requests "
        f"made: {c['noop_history_requests']}  (target < {c['noop_target_s']:.0f}s and none: {verdict})"
    )


if __name__ == "__main__":
    print_cloud(bench_cloud(3, "--quick" in sys.argv))
