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


class GroupProgress:
    """Reads dbt's output line by line and says once per group when its last model or seed is built."""

    def __init__(self, manifest: Path, say: Callable[[str], None]):
        self.say = say
        self.left: dict[str, set[str]] = {}
        self.group: dict[str, str] = {}
        try:
            nodes = json.loads(manifest.read_text(encoding="utf-8"))["nodes"].values()
        except (OSError, ValueError, KeyError):  # no manifest yet: the build says nothing per group
            nodes = []
        for node in nodes:
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
