"""The W&B cloud side of the wandb_cloud source: connecting ``wandb.Api``, the lightweight run listing and its
signatures, history rows as texts, timestamps, and scrubbing the API key from messages. Split from the ingest
(pipeline.sources.wandb_cloud: cursors, watermarks, lake writes), which re-exports these names."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pipeline.secrets import redact_text
from pipeline.values import logged_json

# What a refused key looks like through wandb-core: its AuthenticationError also wraps "server did not answer",
# so the class alone does not tell; the server's words do.
_AUTH_TEXT = re.compile(
    r"(?i)(status|code|http)\D{0,5}401\b|unauthori[sz]ed|not logged in|invalid api key"
    r"|api key (is )?(invalid|not valid)|permission denied"
)


class CloudUnavailable(Exception):
    """Nothing can be read this time (the server refused the key, or does not answer): the source stops."""

    kind = "unavailable"


class AuthRefused(CloudUnavailable):
    kind = "auth_refused"


@dataclass(frozen=True)
class RunRef:
    """A run as the lightweight listing shows it."""

    entity: str
    project: str
    run_id: str
    signature: str  # what changes when the run does: heartbeat, history line count, state, name, tags, group

    @property
    def path(self) -> str:
        return f"{self.entity}/{self.project}/{self.run_id}"

    @property
    def run_key(self) -> str:
        return f"wandb:{self.path}"


def parse_projects(names: Iterable[str], default_entity: str | None) -> list[tuple[str | None, str]]:
    """``entity/project`` or ``project`` (entity from ``WANDB_ENTITY``, else the key's default entity)."""
    out = []
    for name in names:
        name = str(name).strip().strip("/")
        if not name:
            continue
        entity, _, project = name.rpartition("/")
        if "/" in entity:
            raise ValueError(f"{name!r} is not 'entity/project' or 'project'")
        out.append((entity or default_entity or None, project))
    return out


def connect(api_key: str | None = None, base_url: str | None = None, timeout: int = 30):
    """The official client, configured from the arguments or the variables it reads itself."""
    import wandb

    overrides = {}
    base_url = base_url or os.environ.get("WANDB_BASE_URL")
    if base_url:
        overrides["base_url"] = base_url
    return wandb.Api(overrides=overrides, timeout=timeout, api_key=api_key or os.environ.get("WANDB_API_KEY"))


def scrub_secret(text: Any, *secrets: str | None) -> str:
    """One line of an error message with the API key (ours and the environment's) blanked out, and any other
    credential in it (pipeline.secrets' value rule: a header or token the server quoted back)."""
    text = str(text)
    for secret in {*secrets, os.environ.get("WANDB_API_KEY")}:
        if secret and len(secret) >= 8:
            text = text.replace(secret, "***")
    lines = redact_text(text).strip().splitlines()
    return lines[0][:500] if lines else ""


def parse_time(value: Any) -> datetime | None:
    """W&B's ISO timestamps, with or without ``Z``; naive ones are UTC."""
    if not value:
        return None
    if isinstance(value, datetime):
        stamp = value
    else:
        try:
            stamp = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)


def iso_z(stamp: datetime) -> str:
    return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _micros(stamp: datetime | None) -> int | None:
    return None if stamp is None else int(stamp.timestamp() * 1_000_000)


def list_runs(api, entity: str, project: str, updated_after: datetime | None) -> list[RunRef]:
    """The project's runs updated after the given time (all when None), from the lightweight listing."""
    filters = {"updatedAt": {"$gt": iso_z(updated_after)}} if updated_after else None
    runs = api.runs(f"{entity}/{project}", filters=filters, order="+created_at", per_page=200, lazy=True)
    return [RunRef(entity, project, run.id, run_signature(run._attrs)) for run in runs]


def run_signature(attrs: dict) -> str:
    """A digest of the listing's fields that change when a run does. ``attrs`` is the run's ``_attrs``: the fields
    exactly as the server sent them (the client has no public accessor for ``historyLineCount`` or the raw
    ``heartbeatAt``)."""
    parts = [
        attrs.get(k)
        for k in ("heartbeatAt", "historyLineCount", "state", "displayName", "group", "jobType", "sweepName")
    ]
    parts.append(sorted(attrs.get("tags") or []))
    return hashlib.sha1(json.dumps(parts, default=str).encode()).hexdigest()[:16]


def history_texts(row: dict) -> tuple[int | None, int | None, list[str], list[str]]:
    """One ``scan_history`` row → (step, time in µs, keys, JSON texts) as an offline history record gives them.

    The cloud's history is wide: a key not logged at a step comes back as None (or is left out), so None is
    dropped; that is also how W&B itself shows it.
    """
    keys, texts = [], []
    step = ts_us = None
    for key, value in row.items():
        if value is None:
            continue
        if key == "_step":
            try:
                step = int(value)
            except (TypeError, ValueError):
                step = None
            continue
        if key == "_timestamp" and isinstance(value, (int, float)) and math.isfinite(value):
            ts_us = int(round(value * 1_000_000))
        keys.append(str(key))
        texts.append(logged_json(value))
    return step, ts_us, keys, texts
