"""One measurement in a fresh interpreter, so every repeat pays the same imports and starts from the same state.

    python -m benchmarks.child ingest LAKE BATCH_ROWS ROOT...   # wandb_offline.ingest into LAKE (must not exist)
    python -m benchmarks.child floor FILE...                    # read + protobuf-parse every record, nothing else

Prints one line ``CHILD_JSON {...}`` on stdout.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path


def rss_kib() -> int:
    """Current resident set size of this process (VmRSS), KiB."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def peak_rss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def do_ingest(lake: Path, batch_rows: int, roots: list[Path]) -> dict:
    from pipeline.sources import wandb_offline  # imports (pyarrow, protobuf, wandb.proto) before the baseline

    if lake.exists():
        raise SystemExit(f"lake {lake} already exists: each repeat ingests into a fresh empty folder")
    before = rss_kib()
    peak_before = peak_rss_kib()
    t0 = time.perf_counter()
    report = wandb_offline.ingest(lake, roots, batch_rows=batch_rows)
    wall = time.perf_counter() - t0
    peak = peak_rss_kib()
    return {
        "values": report.values,
        "records": report.records,
        "files_read": report.files_read,
        "issues": len(report.issues),
        "seconds": report.seconds,
        "wall": wall,
        "rss_before_kib": before,
        "peak_before_kib": peak_before,
        "peak_kib": peak,
        "rss_after_kib": rss_kib(),
    }


def do_floor(files: list[Path]) -> dict:
    from wandb.proto import wandb_internal_pb2 as pb

    from pipeline.sources import wandb_log

    records = nbytes = 0
    t0 = time.perf_counter()
    for path in files:
        with open(path, "rb") as fh:
            wandb_log.check_header(fh)
            for _offset, data in wandb_log.read_records(fh, 0, wandb_log.ReadResult()):
                pb.Record.FromString(data)
                records += 1
                nbytes += len(data)
    wall = time.perf_counter() - t0
    return {"records": records, "record_bytes": nbytes, "wall": wall, "peak_kib": peak_rss_kib()}


def main(argv: list[str]) -> None:
    mode, *rest = argv
    if mode == "ingest":
        result = do_ingest(Path(rest[0]), int(rest[1]), [Path(p) for p in rest[2:]])
    elif mode == "floor":
        result = do_floor([Path(p) for p in rest])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print("CHILD_JSON " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
