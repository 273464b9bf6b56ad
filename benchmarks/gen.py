"""Write benchmark run files with the real wandb library in offline mode (run in a child process).

A data set is a folder holding ``wandb/offline-run-*/run-*.wandb`` plus ``manifest.json``, written last: a set
without a manifest matching its spec (or whose files changed size since) is incomplete and is written again.

    python -m benchmarks.gen SPEC_JSON OUT_DIR
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1

# Dense key families, ~logged every step by GRPO trainers (verl/TRL-like names); counts add up to `dense` keys.
FAMILIES = (
    ("actor", 0.30),
    ("critic", 0.15),
    ("rollout", 0.15),
    ("reward", 0.10),
    ("timing_s", 0.15),
    ("perf", 0.08),
    ("response_length", 0.07),
)
INT_FAMILIES = {"perf"}  # logged as ints (token counts), so the lake's value_int path is exercised too


def key_names(dense: int, sparse: int) -> tuple[list[str], list[str]]:
    names: list[str] = []
    for i, (family, share) in enumerate(FAMILIES):
        count = dense - len(names) if i == len(FAMILIES) - 1 else round(dense * share)
        names += [f"{family}/m{j:03d}" for j in range(count)]
    return names[:dense], [f"val/sparse_{j:03d}" for j in range(sparse)]


def run_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("wandb/offline-run-*/run-*.wandb") if not p.is_symlink())


def manifest_ok(folder: Path, spec: dict) -> bool:
    """True when the folder holds a complete set written from exactly this spec, files unchanged since."""
    try:
        man = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if man.get("version") != MANIFEST_VERSION or man.get("spec") != spec:
        return False
    for rel, size in man.get("files", {}).items():
        try:
            if (folder / rel).stat().st_size != size:
                return False
        except OSError:
            return False
    return len(man.get("files", {})) == spec["runs"]


def load_manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())


def write_set(spec: dict, folder: Path) -> dict:
    """spec: name, runs, steps, dense, sparse, sparse_every, seed."""
    import numpy as np
    import wandb

    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    dense_keys, sparse_keys = key_names(spec["dense"], spec["sparse"])
    int_mask = np.array([k.split("/")[0] in INT_FAMILIES for k in dense_keys])
    started = time.perf_counter()
    settings = wandb.Settings(silent=True, x_disable_stats=True, console="off")
    for r in range(spec["runs"]):
        rng = np.random.default_rng([spec["seed"], r])
        run = wandb.init(
            mode="offline",
            dir=str(folder),
            project="bench",
            id=f"{spec['name']}-{r:03d}",
            name=f"{spec['name']}-{r:03d}",
            config={"lr": 1e-6, "seed": spec["seed"], "run": r},
            settings=settings,
        )
        for step in range(spec["steps"]):
            vals = rng.standard_normal(len(dense_keys)) * 10
            row = {
                k: (int(abs(v) * 1000) if is_int else float(v))
                for k, v, is_int in zip(dense_keys, vals, int_mask, strict=True)
            }
            if sparse_keys and step % spec["sparse_every"] == 0:
                row.update(zip(sparse_keys, rng.standard_normal(len(sparse_keys)).tolist(), strict=True))
            run.log(row)
        run.finish()
    wandb.teardown()  # finish() can return before wandb-core has written the tail of the last run's file
    files = run_files(folder)
    wait_until_complete(files, spec)
    manifest = {
        "version": MANIFEST_VERSION,
        "spec": spec,
        "files": {str(p.relative_to(folder)): p.stat().st_size for p in files},
        "logged_values": spec["runs"] * expected_values_per_run(spec),
        "write_seconds": round(time.perf_counter() - started, 2),
    }
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp, folder / MANIFEST)
    return manifest


def wait_until_complete(files: list[Path], spec: dict, timeout: float = 60.0) -> None:
    """Every file ends with its exit record and holds one history record per step (else: still being written)."""
    from wandb.proto import wandb_internal_pb2 as pb

    from pipeline.sources import wandb_log

    if len(files) != spec["runs"]:
        raise RuntimeError(f"expected {spec['runs']} run files, found {len(files)}")
    deadline = time.monotonic() + timeout
    for path in files:
        while True:
            history, exited = 0, False
            with open(path, "rb") as fh:
                wandb_log.check_header(fh)
                for _offset, data in wandb_log.read_records(fh, 0, wandb_log.ReadResult()):
                    kind = pb.Record.FromString(data).WhichOneof("record_type")
                    history += kind == "history"
                    exited |= kind == "exit"
            if exited and history == spec["steps"]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path}: {history} history records of {spec['steps']}, exit record: {exited}")
            time.sleep(0.2)


def expected_values_per_run(spec: dict) -> int:
    """Values the trainer logged (not counting W&B's own _step/_timestamp/_runtime)."""
    sparse_rows = (spec["steps"] + spec["sparse_every"] - 1) // spec["sparse_every"] if spec["sparse"] else 0
    return spec["steps"] * spec["dense"] + sparse_rows * spec["sparse"]


if __name__ == "__main__":
    result = write_set(json.loads(sys.argv[1]), Path(sys.argv[2]))
    print(json.dumps({k: v for k, v in result.items() if k != "files"}))
