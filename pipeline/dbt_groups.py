"""The warehouse's layers as dbt folders name them, for the Dagster groups and for a build's progress lines.

A model's group is its folder: staging/ → `staging`, marts/<group>/ → that group (core, elo, training,
pipeline), intermediate/int_<entity>__… → the mart group of its entity (int_elo__… → elo), else `core`. Seeds
are reference data beside the lake: `staging`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path, PurePosixPath

MART_GROUPS = ("core", "elo", "training", "pipeline")
_DONE = re.compile(
    r"\d+ of \d+ (OK created|ERROR creating|SKIP relation|OK loaded|ERROR loading)\b.*?"
    r"\b(model|seed file)\s+[\w\"]+\.[\"]?(?P<name>\w+)"
)


def group_of(node: dict) -> str | None:
    parts = PurePosixPath(node.get("original_file_path") or "").parts
    if node.get("resource_type") == "seed":
        return "staging"
    if "marts" in parts[:-1] and parts.index("marts") + 2 < len(parts):
        return parts[parts.index("marts") + 1]
    if "intermediate" in parts:
        entity = node.get("name", "").removeprefix("int_").split("__")[0]
        return entity if entity in MART_GROUPS else "core"
    if "staging" in parts:
        return "staging"
    return None


def downstream(manifest: dict, sources: list[str]) -> set[str]:
    """The unique_ids of every node below the lake's source tables ``sources`` (``trainer_log_history``…): what
    ``dbt build --select source:lake.<name>+`` builds."""
    children = manifest.get("child_map", {})
    found: set[str] = set()
    todo = [f"source.grpolens.lake.{name}" for name in sources]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class GroupProgress:
    """Reads dbt's output line by line and says once per group when its last model or seed is built; with
    ``sources`` (an incremental build), counting only the models downstream of those lake tables."""

    def __init__(self, manifest: Path, say: Callable[[str], None], sources: list[str] | None = None):
        self.say = say
        self.left: dict[str, set[str]] = {}
        self.group: dict[str, str] = {}
        try:
            loaded = json.loads(manifest.read_text(encoding="utf-8"))
            nodes = loaded["nodes"].values()
        except (OSError, ValueError, KeyError):  # no manifest yet: the build says nothing per group
            loaded, nodes = {}, []
        built = downstream(loaded, sources) if sources is not None else None
        for node in nodes:
            if built is not None and node.get("unique_id") not in built:
                continue
            group = group_of(node) if node.get("resource_type") in ("model", "seed") else None
            if group:
                self.group[node["name"]] = group
                self.left.setdefault(group, set()).add(node["name"])
        self.total = {group: len(names) for group, names in self.left.items()}
        self.failed: set[str] = set()

    def __call__(self, line: str) -> None:
        found = _DONE.search(line)
        if not found or found["name"] not in self.group:
            return
        group = self.group[found["name"]]
        if "ERROR" in found.group(1):
            self.failed.add(group)
        names = self.left.get(group)
        if names is None or found["name"] not in names:
            return
        names.discard(found["name"])
        if not names:
            status = "with errors" if group in self.failed else "built"
            self.say(f"  {group}: {self.total[group]} tables and views {status}")
