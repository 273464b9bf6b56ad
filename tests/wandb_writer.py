"""Write real W&B offline runs for tests, with the wandb library itself (no fake files)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import wandb

QUIET = dict(silent=True, x_disable_stats=True, console="off")


def write_run(
    root: Path,
    rows: Iterable[dict | tuple[dict, dict]],
    *,
    run_id: str,
    name: str | None = None,
    project: str = "tests",
    entity: str = "testers",
    config: dict | None = None,
    tags=None,
    group: str | None = None,
    exit_code: int = 0,
    resume: str | None = None,
    finish: bool = True,
):
    """Log each row (a dict, or ``(dict, log_kwargs)`` for ``step=``/``commit=``); returns the run folder."""
    run = wandb.init(
        mode="offline",
        dir=str(root),
        id=run_id,
        name=name,
        project=project,
        entity=entity,
        config=config or {},
        tags=tags,
        group=group,
        resume=resume,
        settings=wandb.Settings(**QUIET),
    )
    for row in rows:
        data, kwargs = row if isinstance(row, tuple) else (row, {})
        run.log(data, **kwargs)
    folder = Path(run.dir).parent
    if finish:
        run.finish(exit_code=exit_code)
        wait_until_written(folder)
    return folder


def wait_until_written(folder: Path, timeout: float = 30.0) -> None:
    """run.finish() can return before wandb's writer process has flushed the file's end (seen on a loaded
    machine): wait until the exit record is on disk, so a test reads the run the way it was logged."""
    from wandb.proto import wandb_internal_pb2 as pb

    from pipeline.sources import wandb_log

    deadline = time.monotonic() + timeout
    while True:
        path = next(folder.glob("run-*.wandb"), None)
        if path is not None:
            with open(path, "rb") as fh:
                try:
                    wandb_log.check_header(fh)
                    records = wandb_log.read_records(fh, 0, wandb_log.ReadResult())
                    if any(pb.Record.FromString(data).WhichOneof("record_type") == "exit" for _, data in records):
                        return
                except wandb_log.NotAWandbFile:
                    pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"wandb did not finish writing {folder} within {timeout}s")
        time.sleep(0.05)


def run_file(folder: Path) -> Path:
    return next(folder.glob("run-*.wandb"))
