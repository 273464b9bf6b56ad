"""Events ingest figures: events per second from NDJSON files and through the Axiom emulator (the real client on
loopback), and the cost of a refresh with nothing new on each path."""

from __future__ import annotations

import shutil
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pipeline.demo.events import serve_demo_events, write_demo_events
from pipeline.sources import axiom, event_files

OUT = Path(__file__).resolve().parent / "out"


def _events_file(hours: float) -> tuple[Path, int]:
    path = OUT / "data" / f"events-{hours:g}h" / "diplomacy.ndjson"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        write_demo_events(tmp, datetime.now(UTC) - timedelta(hours=hours), hours=hours)
        tmp.rename(path)
    with open(path, "rb") as fh:
        return path, sum(1 for _ in fh)


def bench_events(repeats: int, quick: bool) -> dict:
    path, count = _events_file(3.0 if quick else 18.0)
    scratch = OUT / "scratch" / "events"
    ndjson, ndjson_noop, api, api_noop = [], [], [], []
    for i in range(repeats):
        lake = scratch / f"ndjson-{i}"
        shutil.rmtree(lake, ignore_errors=True)
        first = event_files.ingest(lake, [path.parent])
        ndjson.append(first.seconds)
        started = time.perf_counter()
        event_files.ingest(lake, [path.parent])
        ndjson_noop.append(time.perf_counter() - started)
    # The event file's times end when it was written: the client walks up to now, so it reads all of them.
    with serve_demo_events(path) as (url, token):
        for i in range(repeats):
            lake = scratch / f"api-{i}"
            shutil.rmtree(lake, ignore_errors=True)
            started = time.perf_counter()
            axiom.ingest(lake, ["diplomacy"], url=url, token=token)
            api.append(time.perf_counter() - started)
            started = time.perf_counter()
            axiom.ingest(lake, ["diplomacy"], url=url, token=token)
            api_noop.append(time.perf_counter() - started)
    shutil.rmtree(scratch, ignore_errors=True)
    med = statistics.median
    return {
        "events": count,
        "repeats": repeats,
        "ndjson_s": med(ndjson),
        "ndjson_events_per_s": count / med(ndjson),
        "ndjson_noop_s": med(ndjson_noop),
        "api_s": med(api),
        "api_events_per_s": count / med(api),
        "api_noop_s": med(api_noop),
        "ndjson_all": ndjson,
        "api_all": api,
    }


def print_events(res: dict) -> None:
    print(f"4. Events ingest: {res['events']:,} demo events ({res['repeats']} repeats, fresh lake each)")
    print(
        f"   NDJSON files:                  median {res['ndjson_s']:.2f}s  {res['ndjson_events_per_s']:,.0f} events/s"
        f"   no-op refresh {res['ndjson_noop_s'] * 1000:.1f} ms"
    )
    print(
        f"   Axiom API via the emulator:    median {res['api_s']:.2f}s  {res['api_events_per_s']:,.0f} events/s"
        f"   no-op refresh {res['api_noop_s'] * 1000:.0f} ms (re-reads the overlap window)"
    )
    print("   (the emulator runs in this process on 127.0.0.1 and builds its JSON answers here too)")
