"""Incremental ingest of W&B cloud runs through the official client (``wandb.Api``) into the lake.

Cloud runs land as the same rows as offline run files (``run_key`` ``wandb:<entity>/<project>/<run_id>``, history
long form), so a run read both ways is one run. What makes it incremental:

- **Listing** per project is filtered server-side on ``updatedAt > watermark``; the watermark is when the previous
  listing started, minus ``overlap`` for clock skew between us and the server. The lightweight listing carries
  each run's heartbeat, history line count and state; a run whose signature equals its cursor's costs nothing more
  (no history request), so the overlap is cheap.
- **Changed runs** get their config, summary, tags, sweep and artifacts fetched, and their history read with
  ``scan_history(min_step=<last ingested step + 1>)`` (complete pages, never the sampled ``history()``). When the
  last step or the row count went down the run was rewound: its history is read again from step 0 and the run's
  ``history_from_ingest`` tells staging to drop the rows of earlier ingests.
- **Cursors** are per run (``_state/wandb_cloud/runs/<digest>.json``, each with its own lock) so Dagster can ingest
  runs one partition at a time, concurrently; the project watermarks live in ``_state/wandb_cloud.json``. A run that
  fails (429 after the client's retries, 5xx, timeout, an error mid-scan) is reported and keeps its cursor, and the
  watermark of its project does not pass it: the next refresh reads it again; other runs go on.

The API key is the client's (``WANDB_API_KEY``); it is scrubbed from every message we keep.

The client side (connect, listing, signatures, history texts, scrubbing) is in pipeline.sources.wandb_cloud_client;
its names are re-exported here.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import CancelledError, ThreadPoolExecutor, as_completed
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pipeline import lake
from pipeline.secrets import redact, redact_name
from pipeline.sources.files import FileIssue, IngestReport
from pipeline.sources.wandb_cloud_client import (
    _AUTH_TEXT,
    AuthRefused,
    CloudUnavailable,
    RunRef,
    _micros,
    connect,
    history_texts,
    iso_z,
    list_runs,
    parse_projects,
    parse_time,
    run_signature,
    scrub_secret,
)
from pipeline.values import json_text

__all__ = [
    "AuthRefused",
    "CloudIngest",
    "CloudReport",
    "CloudUnavailable",
    "RunRef",
    "changed_runs",
    "connect",
    "history_texts",
    "ingest",
    "iso_z",
    "list_changed",
    "list_runs",
    "load_cursor",
    "parse_projects",
    "parse_time",
    "run_signature",
    "scrub_secret",
]

SOURCE = "wandb_cloud"
OVERLAP = timedelta(minutes=5)
DEFAULT_CONCURRENCY = 4


@dataclass
class CloudReport(IngestReport):
    projects: int = 0
    runs_listed: int = 0
    runs_changed: int = 0
    runs_failed: int = 0
    history_rows: int = 0

    def lines(self) -> list[str]:
        out = [
            f"wandb cloud: {self.projects} projects, {self.runs_listed} runs listed, {self.runs_changed} changed, "
            f"{self.history_rows} history rows, {self.values} values, {self.runs_failed} failed "
            f"in {self.seconds:.2f}s"
        ]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  skipped: {i.path}: {i.kind}: {i.message}" for i in self.issues]
        return out


def changed_runs(lake_root: Path, refs: Iterable[RunRef]) -> list[RunRef]:
    """The listed runs whose signature differs from their cursor's (read-only: sensors call it)."""
    out = []
    for ref in refs:
        cursor = load_cursor(Path(lake_root), ref.run_key)
        if cursor is None or cursor.get("signature") != ref.signature:
            out.append(ref)
    return out


def _cursor_name(run_key: str) -> str:
    """Cursor and lock files are named by a digest: run names are whatever the user typed."""
    return f"{SOURCE}/runs/{hashlib.sha1(run_key.encode()).hexdigest()[:20]}"


def load_cursor(lake_root: Path, run_key: str) -> dict | None:
    data = lake.IngestState.load(lake_root, _cursor_name(run_key)).data
    return data if data.get("run_key") == run_key else None


@dataclass
class _RunResult:
    ref: RunRef
    row: dict
    cursor: dict
    rows: int = 0


class CloudIngest:
    """One ingest pass over the configured projects, or over named runs (``run_paths``, one Dagster partition)."""

    def __init__(
        self,
        lake_root: Path,
        projects: Iterable[str],
        progress: Callable[[str], None] | None = None,
        *,
        api=None,
        run_paths: Iterable[str] | None = None,
        batch_rows: int = 100_000,
        concurrency: int | None = None,
        overlap: timedelta = OVERLAP,
        page_size: int = 1_000,
        default_entity: str | None = None,
        chunk_runs: int = 200,
    ):
        self.lake_root = Path(lake_root)
        self.default_entity = default_entity or os.environ.get("WANDB_ENTITY") or None
        self.projects = parse_projects(projects, self.default_entity)
        self.run_paths = list(run_paths) if run_paths is not None else None
        self.progress = progress or (lambda _msg: None)
        self._api = api
        self.batch_rows = batch_rows
        self.concurrency = max(
            1, concurrency or int(os.environ.get("GRPOLENS_WANDB_CONCURRENCY") or DEFAULT_CONCURRENCY)
        )
        self.overlap = overlap
        self.page_size = page_size
        self.chunk_runs = chunk_runs  # runs per commit: bounds open lock files and what a crash costs
        self._done = 0
        self._written: set[int] = set()

    # -- helpers

    @property
    def api(self):
        if self._api is None:
            self._api = connect()
        return self._api

    def scrub(self, text: Any) -> str:
        return scrub_secret(text, getattr(self._api, "api_key", None))

    def _fail(self, report: CloudReport, path: str, kind: str, exc: BaseException) -> None:
        message = self.scrub(f"{type(exc).__name__}: {exc}")
        report.issues.append(FileIssue(path, 0, 0, kind, message))

    @staticmethod
    def _is_auth_error(exc: BaseException) -> bool:
        return bool(_AUTH_TEXT.search(str(exc)))

    # -- the pass

    def run(self) -> CloudReport:
        started = time.perf_counter()
        report = CloudReport()
        report.projects = len(self.projects)
        lake.ensure_layout(self.lake_root, SOURCE)
        with ExitStack() as stack:
            if self.run_paths is None:  # a full pass owns the watermarks
                stack.enter_context(lake.ingest_lock(self.lake_root, SOURCE))
            state = lake.IngestState.load(self.lake_root, SOURCE)
            try:
                self._check_key()
                if self.run_paths is None:
                    listed, listing = self._list_projects(state, report)
                else:
                    listed, listing = self._list_named(report), {}
            except CloudUnavailable as exc:  # said once, in the report's lines
                report.issues.append(FileIssue(self._base_url(), 0, 0, exc.kind, str(exc)))
                self._write_issues(report)
                report.seconds = time.perf_counter() - started
                return report
            report.runs_listed = len(listed)
            changed = listed if self.run_paths is not None else changed_runs(self.lake_root, listed)
            report.runs_changed = len(changed)
            failed_projects: set[tuple[str, str]] = set()
            try:
                for start in range(0, len(changed), self.chunk_runs):
                    self._ingest_runs(changed[start : start + self.chunk_runs], report, failed_projects)
            except AuthRefused as exc:
                report.issues.append(FileIssue(self._base_url(), 0, 0, exc.kind, str(exc)))
                failed_projects.update(self.projects_of(listed))
            self._write_issues(report)
            if self.run_paths is None:
                self._save_watermarks(state, listing, failed_projects)
        report.seconds = time.perf_counter() - started
        return report

    def _base_url(self) -> str:
        settings = getattr(self._api, "settings", None) or {}
        return str(settings.get("base_url") or os.environ.get("WANDB_BASE_URL") or "https://api.wandb.ai")

    def _check_key(self) -> None:
        """Making the client checks the key (wandb.Api sends a Viewer query); not ``api.viewer``, which would
        fetch the user's API key list."""
        try:
            self.api.flush()  # a long-lived client caches listings by filter; ours must be fresh
        except Exception as exc:
            if self._is_auth_error(exc):
                raise AuthRefused(
                    f"W&B refused the API key at {self._base_url()} (check WANDB_API_KEY): {self.scrub(exc)}"
                ) from None
            if "no api key" in str(exc).lower():
                raise CloudUnavailable("no W&B API key: set WANDB_API_KEY (or run `wandb login`)") from None
            raise CloudUnavailable(f"W&B at {self._base_url()} did not answer: {self.scrub(exc)}") from None

    def _list_projects(self, state: lake.IngestState, report: CloudReport):
        """Runs updated since each project's watermark; returns them and, per project, when its listing began."""
        watermarks: dict = state.data.setdefault("projects", {})
        listed: list[RunRef] = []
        listing: dict[tuple[str, str], datetime] = {}
        for n, (entity, project) in enumerate(self.projects, 1):
            entity = entity or self._viewer_entity()
            label = f"{entity}/{project}"
            began = datetime.now(UTC)
            mark = parse_time((watermarks.get(label) or {}).get("listed_at"))
            self.progress(f"[{n}/{len(self.projects)}] listing {label}")
            try:
                listed += list_runs(self.api, entity, project, mark - self.overlap if mark else None)
            except Exception as exc:
                if self._is_auth_error(exc):
                    raise AuthRefused(f"W&B refused the API key listing {label}: {self.scrub(exc)}") from None
                self._fail(report, f"wandb:{label}", "list_failed", exc)
                continue
            listing[(entity, project)] = began
        return listed, listing

    def _viewer_entity(self) -> str:
        entity = getattr(self.api, "default_entity", None)
        if not entity:
            raise CloudUnavailable("no entity: give projects as entity/project or set WANDB_ENTITY")
        return entity

    def _list_named(self, report: CloudReport) -> list[RunRef]:
        refs = []
        for path in self.run_paths or []:
            parts = path.strip("/").split("/")
            if len(parts) != 3:
                report.issues.append(FileIssue(path, 0, 0, "bad_run_path", "expected entity/project/run_id"))
                continue
            refs.append(RunRef(parts[0], parts[1], parts[2], ""))
        return refs

    def _save_watermarks(self, state: lake.IngestState, listing: dict, failed: set) -> None:
        """A project's watermark moves to when its listing began, unless one of its runs failed."""
        marks = state.data.setdefault("projects", {})
        for (entity, project), began in listing.items():
            if (entity, project) not in failed:
                marks[f"{entity}/{project}"] = {"listed_at": iso_z(began)}
        state.save(int(state.data.get("last_ingest_id", 0)))

    # -- runs

    @staticmethod
    def projects_of(refs: Iterable[RunRef]) -> set[tuple[str, str]]:
        return {(ref.entity, ref.project) for ref in refs}

    def _ingest_runs(self, chunk: list[RunRef], report: CloudReport, failed_projects: set) -> None:
        """One ingest of some runs: one part per table, then their cursors (each run locked meanwhile)."""
        with ExitStack() as locks:
            todo, cursors = [], {}
            for ref in chunk:
                try:
                    locks.enter_context(lake.ingest_lock(self.lake_root, _cursor_name(ref.run_key)))
                except lake.IngestBusy:
                    report.notes.append(f"{ref.path}: another ingest of this run is running; left to it")
                    failed_projects.add((ref.entity, ref.project))
                    continue
                todo.append(ref)
                cursors[ref.run_key] = load_cursor(self.lake_root, ref.run_key)  # read under the run's lock
            previous = [int(c.get("ingest_id", 0)) for c in cursors.values() if c]
            ingest_id = max([int(time.time() * 1_000_000)] + [p + 1 for p in previous])
            writer = lake.PartWriter(self.lake_root, "history", SOURCE, ingest_id)
            buffer = lake.HistoryBuffer(writer, ingest_id, self.batch_rows)
            buffer_lock = threading.Lock()
            results: list[_RunResult] = []
            issues_before = len(report.issues)
            try:
                with ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="wandb-cloud") as pool:
                    futures = {
                        pool.submit(self._ingest_run, ref, cursors[ref.run_key], ingest_id, buffer, buffer_lock): ref
                        for ref in todo
                    }
                    refused = None
                    for future in as_completed(futures):
                        ref = futures[future]
                        try:
                            results.append(future.result())
                        except Exception as exc:
                            report.runs_failed += 1
                            failed_projects.add((ref.entity, ref.project))
                            if self._is_auth_error(exc):
                                refused = refused or exc
                                for other in futures:
                                    other.cancel()
                            elif not isinstance(exc, CancelledError):
                                self._fail(report, ref.path, "run_failed", exc)
                        self._done += 1
                        self._show_progress(self._done, report.runs_changed)
                with buffer_lock:
                    buffer.flush()
                writer.commit()
            except BaseException:
                writer.abort()
                raise
            report.values += buffer.total
            report.history_rows += sum(r.rows for r in results)
            now_us = int(time.time() * 1_000_000)
            lake.write_part(
                self.lake_root,
                "runs",
                SOURCE,
                ingest_id,
                [dict(r.row, ingest_id=ingest_id, ingested_at=now_us) for r in results],
            )
            self._write_issues(report, ingest_id, report.issues[issues_before:])
            for result in results:
                cursor = lake.IngestState.load(self.lake_root, _cursor_name(result.ref.run_key))
                cursor.data.update(result.cursor)
                cursor.save(ingest_id)
        if results:
            report.ingest_id = ingest_id
            report.runs_touched = sorted(set(report.runs_touched) | {r.ref.run_key for r in results})
        if refused is not None:
            raise AuthRefused(
                f"W&B refused the API key at {self._base_url()} (check WANDB_API_KEY): {self.scrub(refused)}"
            )

    def _write_issues(
        self, report: CloudReport, ingest_id: int | None = None, issues: list[FileIssue] | None = None
    ) -> None:
        """Issues not yet written (a run's ingest writes its own; listing and key problems come here)."""
        issues = [i for i in (report.issues if issues is None else issues) if id(i) not in self._written]
        if not issues:
            return
        lake.write_issues(self.lake_root, SOURCE, ingest_id or int(time.time() * 1_000_000), issues)
        self._written.update(id(i) for i in issues)

    def _show_progress(self, done: int, total: int) -> None:
        filled = 20 * done // total
        if done == total or filled != 20 * (done - 1) // total:  # one line per 5%, not one per run
            self.progress(f"wandb cloud: [{'#' * filled}{'.' * (20 - filled)}] {done}/{total} runs")

    def _ingest_run(
        self, ref: RunRef, cursor: dict | None, ingest_id: int, buffer: lake.HistoryBuffer, buffer_lock: threading.Lock
    ) -> _RunResult:
        run = self.api.run(ref.path)
        attrs = run._attrs
        signature = run_signature(attrs)
        last_step = run.lastHistoryStep
        line_count = attrs.get("historyLineCount")
        from_ingest = cursor.get("history_from_ingest") if cursor else None
        min_step = 0
        if cursor and cursor.get("last_step") is not None:
            rewound = last_step < cursor["last_step"] or (
                line_count is not None and cursor.get("line_count") is not None and line_count < cursor["line_count"]
            )
            if rewound:
                self.progress(
                    f"{ref.path}: history got shorter (last step {cursor['last_step']} -> {last_step}, "
                    f"rows {cursor.get('line_count')} -> {line_count}); reading it again from step 0"
                )
                from_ingest = ingest_id
            else:
                min_step = cursor["last_step"] + 1
        rows = 0
        top = cursor.get("last_step") if cursor and from_ingest != ingest_id else None
        if last_step >= min_step:
            # wandb-core merges exported Parquet files (in no promised order) with the live rows of the history
            # API, and a page straddling the export boundary yields a step from both: keep each step once.
            seen: set[int] = set()
            scan = run.scan_history(min_step=min_step, page_size=self.page_size, use_cache=False)
            for seq, raw in enumerate(scan):
                step, ts_us, keys, texts = history_texts(raw)
                if step is None or step < min_step or step in seen:
                    continue
                seen.add(step)
                with buffer_lock:
                    buffer.add_row(ref.run_key, step, ts_us, seq, keys, texts)
                rows += 1
                top = step if top is None else max(top, step)
        artifacts = [
            {"name": a.name, "type": a.type, "version": a.version, "aliases": list(a.aliases or [])}
            for a in run.logged_artifacts()
        ]
        sweep = attrs.get("sweepName") or None
        row = {
            "run_key": ref.run_key,
            "source": "wandb",
            "origin": "cloud",
            "entity": ref.entity,
            "project": ref.project,
            "run_id": ref.run_id,
            "name": redact_name(attrs.get("displayName") or run.name),
            "state": attrs.get("state"),
            "exit_code": None,
            "tags": [redact_name(tag) for tag in attrs.get("tags") or []],
            "group_name": redact_name(attrs.get("group")) or None,
            "job_type": attrs.get("jobType") or None,
            "sweep_id": sweep,
            "created_at": _micros(parse_time(attrs.get("createdAt"))),
            "heartbeat_at": _micros(parse_time(attrs.get("heartbeatAt"))),
            "config": json_text(redact(dict(run.config))),  # json_text writes NaN/inf as W&B shows them
            "summary": json_text(redact(dict(run.summary_metrics))),
            "last_step": top,
            "history_rows": line_count,
            "wandb_version": None,
            "source_files": [],
            "step_offsets": None,
            "artifacts": json_text(redact(artifacts)),
            "history_from_ingest": from_ingest,
        }
        new_cursor = {
            "run_key": ref.run_key,
            "signature": signature,
            "last_step": top,
            "line_count": line_count,
            "history_from_ingest": from_ingest,
            "ingest_id": ingest_id,
        }
        return _RunResult(ref, row, new_cursor, rows)


def ingest(
    lake_root: Path, projects: Iterable[str], progress: Callable[[str], None] | None = None, **options
) -> CloudReport:
    """Read what changed in each project (``entity/project`` or ``project``) into lake/*/source=wandb_cloud."""
    return CloudIngest(lake_root, projects, progress, **options).run()


def list_changed(
    lake_root: Path,
    projects: Iterable[str],
    updated_after: datetime | None,
    api=None,
    default_entity: str | None = None,
) -> tuple[list[RunRef], list[RunRef]]:
    """For sensors: the runs listed as updated after the time, and those of them the lake has not caught up
    with. Reads nothing but the listing and the cursors; writes nothing."""
    api = api or connect()
    default_entity = default_entity or os.environ.get("WANDB_ENTITY") or None
    listed: list[RunRef] = []
    for entity, project in parse_projects(projects, default_entity):
        listed += list_runs(api, entity or api.default_entity, project, updated_after)
    return listed, changed_runs(Path(lake_root), listed)
