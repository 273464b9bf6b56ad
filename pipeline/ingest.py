"""Run the configured ingest sources; an unconfigured source is skipped with one line saying so."""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from pipeline import lake
from pipeline.settings import Settings


@dataclass(frozen=True)
class Source:
    """A source module exposes ``ingest(lake_root, roots, progress)`` and writes lake/<table>/source=<name>/."""

    label: str
    variable: str  # the environment variable that configures it
    setting: str  # the Settings attribute holding its roots
    module: str


SOURCES: dict[str, Source] = {
    "wandb_offline": Source("wandb offline", "GRPOLENS_WANDB_DIRS", "wandb_dirs", "pipeline.sources.wandb_offline"),
    "trainer_log": Source("trainer logs", "GRPOLENS_TRAINER_LOGS", "trainer_logs", "pipeline.sources.trainer_logs"),
}
# Sources of events only; their lake folders must exist for dbt even before they are wired in.
EVENT_SOURCES = ("axiom", "event_files")


def ensure_lake(settings: Settings) -> None:
    """Every source's folders exist (with their zero-row schema files) so dbt can read all of them."""
    for name in (*SOURCES, *EVENT_SOURCES):
        lake.ensure_layout(settings.lake, name)


def ingest(settings: Settings, sources: tuple[str, ...] = tuple(SOURCES),
           progress: Callable[[str], None] | None = None) -> dict[str, object]:
    """Returns each source's report (or the reason it was skipped), in order."""
    say = progress or (lambda _msg: None)
    reports: dict[str, object] = {}
    for name in sources:
        if name not in SOURCES:
            raise ValueError(f"unknown source {name!r}; known: {', '.join(SOURCES)}")
        source = SOURCES[name]
        roots = getattr(settings, source.setting)
        if not roots:
            reports[name] = f"skipped: {source.variable} is not set"
            say(f"{source.label}: {reports[name]}")
            continue
        report = importlib.import_module(source.module).ingest(settings.lake, roots, progress=say)
        reports[name] = report
        for line in report.lines():
            say(line)
    return reports
