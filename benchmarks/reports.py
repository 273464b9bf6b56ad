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
            subprocess.run([_grpolens(), "report", "verl-length-collapse", "--format", "json"], env=env, check=True,
                           capture_output=True)
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
    return {"command_s": command, "command_s_median": statistics.median(command), "build_s": inproc,
            "build_s_median": statistics.median(inproc), "all_runs": len(summaries), "all_runs_s": every,
            "noop_s": noop}


def print_reports(res: dict) -> None:
    print("-" * 96)
    print(f"7. Run reports on the demo home ({res['all_runs']} runs). Targets: one report <= 2 s median, every run "
          "<= 20 s")
    print(f"   `grpolens report verl-length-collapse` (whole command, checks + Markdown + 4 plots): median "
          f"{res['command_s_median']:.2f}s  (range {min(res['command_s']):.2f}-{max(res['command_s']):.2f})")
    print(f"   one report in-process (run_report.build): median {res['build_s_median']:.2f}s")
    print(f"   every run's report from scratch (batch.write_reports): {res['all_runs_s']:.1f}s; again with nothing "
          f"changed: {res['noop_s']:.2f}s")
