"""Write real W&B offline runs for tests, with the wandb library itself (no fake files)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import wandb

QUIET = dict(silent=True, x_disable_stats=True, console="off")


def write_run(root: Path, rows: Iterable[dict | tuple[dict, dict]], *, run_id: str, name: str | None = None,
              project: str = "tests", entity: str = "testers", config: dict | None = None, tags=None,
              group: str | None = None, exit_code: int = 0, resume: str | None = None, finish: bool = True):
    """Log each row (a dict, or ``(dict, log_kwargs)`` for ``step=``/``commit=``); returns the run folder."""
    run = wandb.init(mode="offline", dir=str(root), id=run_id, name=name, project=project, entity=entity,
                     config=config or {}, tags=tags, group=group, resume=resume, settings=wandb.Settings(**QUIET))
    for row in rows:
        data, kwargs = row if isinstance(row, tuple) else (row, {})
        run.log(data, **kwargs)
    folder = Path(run.dir).parent
    if finish:
        run.finish(exit_code=exit_code)
    return folder


def run_file(folder: Path) -> Path:
    return next(folder.glob("run-*.wandb"))
