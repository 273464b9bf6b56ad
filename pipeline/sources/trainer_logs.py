"""Incremental ingest of what a trainer wrote itself, for runs that have no W&B: ``trainer_state.json``, JSONL and
CSV metric logs, console logs and the notebooks that ran a training. The lake rows have the same shape as W&B
runs, so every mart and check works on them.
This module keeps the cursors and runs the ingest; finding the files and naming the runs is
pipeline.sources.trainer_log_runs, and how one line of each format is read is pipeline.sources.trainer_log_lines.

Formats, and why each is read the way it is:

- **Hugging Face Trainer ``trainer_state.json``** (``origin = "trainer_state"``). The Trainer rewrites the whole file
  at every checkpoint, so it is not an append-only log: when its size or mtime changes, the run is reloaded from the
  newest snapshot (every value again; staging keeps the newest ingest's). ``output/checkpoint-N/trainer_state.json``
  files are snapshots of one run, the output folder; the one with the highest ``global_step`` wins. Each
  ``log_history`` entry is a row at its own ``step`` (train and eval entries at one step have different keys, both
  stay; the ``epoch`` they both repeat is written once); ``file_offset`` is the entry's index. Every other top-level
  key is the run's config. The same holds for any ``*.json`` that is one by its content (a trainer state saved as
  ``training_logs.json``, or its ``log_history`` list on its own, as public TRL projects publish them). Snapshots
  are copies of one file, under one name: files of different names in a run's folder are different series of the
  run (a custom trainer's ``step_stat_history.json`` and ``eval_history.json``), each read (its newest snapshot) and
  merged by step, ``file_offset`` counting entries on across them in path order; the keys of one named as an
  evaluation's (``eval``, ``val``, ``validation``, ``test`` in its name) go under ``eval/``, as a JSONL
  evaluation record's.
- **JSONL metric logs** (``*.jsonl``, ``origin = "jsonl"``): one object per line with a step field (``step``,
  ``global_step``, ``_step``, ``train/global_step`` or ROLL's ``system/step``, first found wins and is not stored
  as a value; without any, the first key named like a step counter that holds an integer, the CS336 GRPO trainer's
  ``grpo_step``, trainer_log_lines.step_field), including
  verl's file logger ``{"step": N, "data": {...}}``. Keys are kept as the file writes them (a nested dict value is
  spread over ``key.sub`` keys by the lake's decoder, as for W&B), except in an evaluation's record (``"type"``,
  ``"split"``, ``"phase"`` or ``"mode"`` ``eval``/``val``/``validation``/``test``, or ``"eval": true``): its values go
  under ``eval/`` (trainer_log_lines.evaluation_values), so they never overwrite the training's at that step. A
  record that repeats a value another record of its step wrote (train and eval records both carry the ``epoch``)
  does not write it again, as a trainer_state.json's entries do not; one that writes a key again with another value
  (several train records of one step) is a second version, the last one the step's value, as W&B keeps it. A step
  count that starts over where its launch began (_starts_over, as in a console log) is a second launch appended to
  the file (a script run again), a run of its own, unless the record's ``epoch`` went up with it (a count per
  epoch); a count that goes back less far is a resume, the same run. ``_timestamp`` (seconds, as W&B writes it)
  gives the row's time. A stepless record of settings (``{"type": "config", "args": {...}}``,
  trainer_log_lines.config_record) is the run's config. A bad line is skipped and reported (``bad_line``/``no_step``
  with its byte offset), never fatal; a read of a log none of whose records has a step is one ``no_step`` issue
  naming the keys that look like one.
- **Console logs** (``*.log``, ``*.txt``, ``*.out``, or any text file named on its own rather than found in a
  folder), read where that is all there is (not next to the run's
  ``trainer_state.json``, which holds the same entries unrounded). Only two kinds of line mean anything; the rest
  (tqdm bars, pretty-printed dicts spread over lines, warnings, checkpoint messages) is ignored. A file's first
  such line fixes its format:
  ``console_trl``: a whole line that is one Python dict literal, as the HF Trainer prints per logging step
  (``nan``/``inf``, numpy/torch scalar wrappers, ``tensor(0.5, device='cuda:0', grad_fn=<MeanBackward0>)`` too,
  and numeric strings are read as numbers), or such a line a terminal
  capture hard-wrapped at its width: pieces as wide as the first (within a column) are joined until the dict is
  whole (the last piece of any width, so a dict a newline broke once anywhere, inside a key too, is joined), and
  one whose last piece is not written yet is read at the next ingest. The start of a metric dict (a brace and two
  numeric pairs) whose rest never comes, or a whole one that is no Python literal, is a ``bad_line`` issue, each
  one, never lost without a word; it is still one of the file's metric lines (it fixes the format, so the
  ``key: value`` lines around it are not read instead, and takes its ordinal). The step is the dict's
  ``step`` if it has one, else the count of the train progress bar drawn before it on its line (TRL's console:
  ``5/100 [26:14<…]{'loss': …}`` is step 5; ``step_source: "progress_bar"``, _bar_step, while the counts keep to the
  Trainer's logging grid: a block-buffered output prints its dicts in bursts after the bar ran ahead, and such a log
  is numbered by ordinals from its start, bar_contradiction), else, in a log whose first
  dict has no such count, the line's 1-based ordinal among the file's dict lines, and the run's config then says
  ``step_source: "ordinal"`` so nobody mistakes it for the trainer step, until the training ends: then the bar's
  total and the number of dicts give the Trainer's logging grid, if the printed epochs confirm it (logging_grids),
  and the dicts are at its steps (``step_source: "logging_grid"``). The end-of-training dict
  (``{'train_runtime': …, 'train_loss': …}``) is the run's summary, not a step. A dict after it, unless an
  evaluation's (``trainer.evaluate()`` after ``trainer.train()``), is a new launch: a second ``python train.py``
  appended to the same file, a run of its own (``<name> #2``, see Identity) whose steps, step source and bar count
  from its own first dict, as the file's first launch's do; the ingest's notes say at which byte it began.
  ``console_verl``: ``step:N - key:value - ...`` with ``np.float64(...)``/``np.int32(...)``/``tensor(...)`` wrappers.
  W&B's console capture cuts lines at 4096 characters: a pair is kept only when `` - `` follows it, or when it ends a
  line that ended with a newline and is shorter than 4096 characters.
  ``console_kv``: a hand-written trainer's own print, ``key: value`` or ``key=value`` pairs with a step on the line
  (``[Step 20] loss=1.55 | kl=0.01``, ``GRPO step 10/500 | loss: 0.0``, ``epoch: 0|step: 3|act_loss: 0.21|…``,
  MiniMind's ``Epoch:[1/1](3/500), Reward: 0.38, KL_ref: 0.0004``) and at least two numeric values (one when the
  step is counted out of its total, ``Iteration 1/1, Step 37/500, loss: 0.0004``: that step wins); keys are kept
  lower case with ``_`` for spaces (``Actor Loss`` → ``actor_loss``), and a pair alone in parentheses after a value
  is a statistic of it (``reward=0.3 (std=0.46)`` → ``reward_std``), so the alias seed can map them. Later lines
  must share a key with the file's first such line (a progress line with a step is not a metric line). A per-epoch
  count is made global: ``(i/N)`` after an epoch, or a count that goes back as the printed epoch advances. A line
  of nothing but such pairs without a step (DeepSpeed-Chat's ``average reward score: …`` under its step line)
  belongs to the step of the metric line before it; one before any metric line has no step and is not read.
  In a ``console_verl`` or ``console_kv`` log, a step count that goes back to where its launch began, or to 0 or 1,
  after it went past it is a new launch, as a dict after the end-of-training dict is (_starts_over: an ablation
  driver's arms run one after the other, ``[Step 50/50]`` then ``[Step 1/50]``); a count that goes back less far
  is a resume from a checkpoint, the same run.
- **CSV metric logs** (``*.csv`` whose header names a step column, ``origin = "csv"``; the others are datasets,
  said and not read): a row per step, read line by line from a byte offset as a JSONL log is; the header, the
  file's first line, is kept in the cursor. pipeline.sources.trainer_log_csv. A table of several trainings one
  after the other (an ablation's arms, each from step 0, an ``arm`` or ``run`` column naming it) is a run per
  training: a step that starts over, as in a console log, on a row whose text cells changed is a new launch. A step
  that starts over under the same labels stays in the run (a restart, which duplicate_steps reports).
- **Jupyter notebooks** (``*.ipynb``): read whole each time they are saved (_read_notebook), their printed output
  as a console log (``console_trl``…), their training-progress tables as runs of their own
  (``origin = "notebook_table"``). pipeline.sources.trainer_log_notebooks.

Append-only files (JSONL, console) keep a byte offset per file, and only complete lines are read: a last line
without its newline waits for the next ingest, unless it is whole as it is (a JSON object or a printed dict:
trainer_log_lines.whole_line) or the file has not been written to for 30 minutes (files.quiet, the rule that ends a
``.wandb`` file; also when it went quiet after the read that left it): then it
is the file's last line, read (or reported, like any bad line), and the cursor stands right after it, so that a
later append is read from there on its own. A refresh with nothing new costs one ``stat`` per file. A log that
shrank or whose bytes before the cursor changed (rewritten in place, pipeline.sources.files) is read again from
the start, and its run's earlier values are superseded (``history_from_ingest``). A line, entry or file no reader
anticipated (a step beyond 64 bits, 5,000-deep JSON, a section of an unexpected type) is skipped with an
``ingest_issues`` row; the rest of the file and every other file still land. As in
``wandb_offline``, one ingest writes at most one part per table and saves the cursors last.

Identity. ``run_key = trainer_log:local/<project>/<run_id>``, ``run_id`` a short hash of the run's identity path
(realpath), so two folders with the same name never collide. The identity of a ``trainer_state.json`` run is its
output folder; that of a JSONL or console log is the file itself (several logs side by side are several runs), and
for the n-th launch appended to a console log, the file and ``#n``, named ``<name> #n``; the cursor keeps the runs
of the file's earlier launches (``launches``), so a later ingest carries on in the current one and a rewritten or
shrunk file starts over from its first. The
run is named after its folder when the file's name says nothing (``output.log``, ``metrics.jsonl``...; a W&B run's
``files/`` folder is skipped), else after the file's stem; ``project`` is the name of the folder above.

Config. A ``trainer_state.json`` run's config is the state's keys that configure the run (``max_steps``,
``num_train_epochs``, ``train_batch_size``, ``logging_steps``…), not what training produced (STATE_BOOKKEEPING). A
JSONL or console log's run takes the config file saved beside it (``config.json``, else ``config.yaml`` or
``config.yml``: the Tinker cookbook, W&B's ``files/``, OmegaConf; trainer_log_runs.load_config), nested as written
(W&B's ``{desc, value}`` wrapping taken off), when the logs in that folder are that one run's: beside several runs (a
console log of several launches included) a config configures none of them for sure, and it is said. A config
file is read again when its size or mtime changes (one stat per ingest); one that cannot be read is an
``ingest_issues`` row (the run keeps the config read before), never fatal; a model's own ``config.json``
(``save_pretrained``'s) is not a run's config. What the log itself says of the run (``step_source``, a JSONL log's
config record) wins over the file's key of the same name.

State. ``trainer_state``: ``finished`` when ``global_step`` reached ``max_steps`` (or the Trainer recorded
``should_training_stop``, or a log_history ends with the end-of-training entry), else ``running``; a log_history list
on its own (no ``max_steps``) is ``unknown``, as a JSONL log. A JSONL or console log cannot tell a finished run from a
crashed or a live one: its state is ``unknown``, except a ``console_trl`` launch that printed its end-of-training dict
(``finished``: a launch before another always is, the last one only once its own came); ``heartbeat_at`` is the
file's mtime, the last time the trainer wrote to it.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline import lake
from pipeline.secrets import redact
from pipeline.sources import files
from pipeline.sources import trainer_log_notebooks as notebooks
from pipeline.sources.files import FileIssue, IngestReport, failed_file
from pipeline.sources.trainer_log_csv import CSV_STEP_FIELDS, CsvHeader
from pipeline.sources.trainer_log_csv import header as csv_header
from pipeline.sources.trainer_log_csv import row as csv_row
from pipeline.sources.trainer_log_lines import (
    EVAL_NAMES,
    NO_STEP_FIELDS,
    BadLine,
    ConfigRecord,
    KvLine,
    bar_counts,
    columns,
    complete_lines,
    dict_line,
    embedded_dict,
    evaluation_values,
    integral,
    jsonl_row,
    kv_line,
    kv_trailing,
    opens_metric_dict,
    shown,
    verl_line,
)
from pipeline.sources.trainer_log_runs import (
    SOURCE,
    Found,
    RunInfo,
    _project,
    discover,
    load_config,
    log_identity,
    run_id_for,
    run_key_for,
)
from pipeline.values import (
    MAX_DEPTH,
    depth,
    finite,
    may_hold_surrogates,
    without_surrogates,
)

CONSOLE_CUT = 4096  # W&B's console capture cuts lines at this many characters
# What a trainer_state.json records of the training's progress and of the process that saved it, beside the
# arguments that configure the run (max_steps, num_train_epochs, train_batch_size, logging/eval/save_steps): state
# that training produces, so never the run's config. A sweep compared runs by how far their epoch had got
# ("epoch: rho = -0.87") and suggested "epoch 0.114" as a setting.
STATE_BOOKKEEPING = frozenset(
    {
        "log_history",
        "epoch",
        "global_step",
        "total_flos",
        "num_input_tokens_seen",
        "best_metric",
        "best_model_checkpoint",
        "best_global_step",
        "is_hyper_param_search",
        "is_local_process_zero",
        "is_world_process_zero",
        "stateful_callbacks",  # the TrainerControl flags (should_save, should_training_stop) and callbacks' state
    }
)
# What sits in front of a trainer's own line in a captured console: terminal colour codes, and Ray's tag of the
# process that printed it (verl's driver prints through Ray: "\x1b[36m(TaskRunner pid=678203)\x1b[0m step:1 - ...").
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RAY_TAG = re.compile(r"^\((?:[\w.]+)\s+pid=\d+(?:,\s*ip=[\w.:]+)?\)\s*")
# A terminal capture (copied from the screen, `screen`/`tmux` logs) hard-wraps a long dict line at the terminal's
# width, mid-word: every piece but the last is that wide, give or take one column. A piece this narrow or narrower
# is no such wrap (a pretty-printed dict's lines, a config dict printed over several lines: not metrics).
WRAP_MIN_WIDTH = 80
WRAP_MAX_PIECES = 64
UNREAD_SHOWN = 20  # files of formats not read said one per line in an ingest's report; the rest in one line


class TrainerLogReport(IngestReport):
    """wandb_offline's report, worded for this source."""

    def lines(self) -> list[str]:
        files, runs = self.files_seen, len(self.runs_touched)
        out = [
            (
                f"trainer logs: {files} file{'s' * (files != 1)}, {self.files_read} read, "
                f"{self.records} lines/entries, {self.values} values, {runs} run{'s' * (runs != 1)} updated in "
                f"{self.seconds:.2f}s"
            )
        ]
        out += [f"  note: {n}" for n in self.notes]
        # a folder of plots or W&B media tables is said in a few lines; the lake's ingest_issues keeps every file
        unread = {id(i) for i in [i for i in self.issues if i.kind == "not_read"][UNREAD_SHOWN:]}
        said = [i for i in self.issues if id(i) not in unread]
        out += [f"  skipped: {i.path} @ byte {i.offset}: {i.kind}: {i.message}" for i in said]
        if unread:
            out.append(f"  skipped: {len(unread)} more files not read (`ingest_issues` lists each, and why)")
        return out


def _unsaid(skipped: list[FileIssue], said: dict, found: Found, report: TrainerLogReport) -> list[FileIssue]:
    """What discovery skipped that no ingest has said yet (``said``: path -> kind, kept in the cursor file), now
    added to the report's issues: each file once, the first time it is met, and again only if why changes; a
    refresh repeats none of it. When nothing is left to read, that is said each time, and why is where to look."""
    unsaid = [issue for issue in skipped if said.get(issue.path) != issue.kind]
    report.issues += unsaid
    if skipped and not unsaid and not found.count:
        report.notes.append(
            f"no trainer log found: {_files(len(skipped))} skipped, as an earlier ingest said (`grpolens sql "
            "\"select path, message from ingest_issues where source = 'trainer_log'\"` lists why)"
        )
    return unsaid


def _files(n: int) -> str:
    return "the one file found was" if n == 1 else f"the {n} files found were"


# ------------------------------------------------------------------------------------------------------ cursors


def _signature(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns


def logs_with_new_bytes(
    logs: list[tuple[Path, str]], cursors: dict
) -> tuple[list[tuple[Path, str, int, int, dict | None]], list[FileIssue]]:
    """The append-only files whose size or mtime differs from their cursor's (new, grown, touched or rewritten):
    one stat each."""
    kinds = dict(logs)
    todo, unreadable = files.changed([path for path, _kind in logs], cursors)
    return [(path, kinds[path], size, mtime_ns, cursor) for path, size, mtime_ns, cursor in todo], unreadable


@dataclass
class SnapshotPlan:
    """A trainer_state run with a new or rewritten snapshot, and each snapshot's (size, mtime_ns)."""

    run_dir: str
    signatures: dict[str, tuple[int, int]]
    changed: list[str]


def snapshots_changed(snapshots: dict[str, list[Path]], cursors: dict) -> tuple[list[SnapshotPlan], list[FileIssue]]:
    """Runs whose snapshots changed (or whose chosen snapshot disappeared, or a series was left unread): one stat per
    snapshot file."""
    plans, unreadable = [], []
    for run_dir, paths in snapshots.items():
        known = cursors.get(run_dir, {}).get("files", {})
        signatures, changed = {}, []
        for path in paths:
            try:
                signatures[str(path)] = _signature(path)
            except OSError as exc:
                unreadable.append(FileIssue(str(path), 0, 0, "unreadable", str(exc)))
                continue
            old = known.get(str(path))
            if old is None or (old["size"], old["mtime_ns"]) != signatures[str(path)]:
                changed.append(str(path))
        chosen = _chosen(cursors.get(run_dir, {}))
        # a file of a name none of the chosen has was never read (a cursor saved when one file hid the others)
        readable = {Path(p).name for p, f in known.items() if p in signatures and not f.get("rejected")}
        if changed or any(path not in signatures for path in chosen) or readable - {Path(p).name for p in chosen}:
            plans.append(SnapshotPlan(run_dir, signatures, changed))
    return plans, unreadable


def configs_changed(found: Found, cursors: dict) -> list[Path]:
    """Config files beside logs that are new, rewritten or gone since the last ingest: one stat each."""
    present = list(found.configs.values())
    todo, unreadable = files.changed(present, cursors)
    gone = set(cursors) - {str(path) for path in present}
    return [item[0] for item in todo] + [Path(p) for p in sorted(gone)] + [Path(i.path) for i in unreadable]


def pending_files(lake_root: Path, roots: Iterable[Path]) -> list[Path]:
    """What the next ingest would read: for sensors, which must not take the ingest lock or write anything."""
    state = lake.IngestState.load(Path(lake_root), SOURCE)
    found = discover(roots, lake_root=Path(lake_root))
    todo, _ = logs_with_new_bytes(found.logs, state.data.get("files", {}))
    plans, _ = snapshots_changed(found.snapshots, state.data.get("snapshots", {}))
    configs = configs_changed(found, state.data.get("configs", {}))
    return [item[0] for item in todo] + [Path(p) for plan in plans for p in (plan.changed or plan.signatures)] + configs


# ------------------------------------------------------------------------------------------------------ ingest


class TrainerLogIngest:
    """One ingest pass; ``run()`` returns what it did. Not reentrant (the caller holds the source lock)."""

    def __init__(
        self,
        lake_root: Path,
        roots: Iterable[Path],
        progress: Callable[[str], None] | None = None,
        batch_rows: int = 100_000,
    ):
        self.lake_root = Path(lake_root)
        self.roots = [Path(r) for r in roots]
        self.progress = progress or (lambda _msg: None)
        self.batch_rows = batch_rows

    def run(self) -> TrainerLogReport:
        started = time.perf_counter()
        report = TrainerLogReport()
        lake.ensure_layout(self.lake_root, SOURCE)
        with lake.ingest_lock(self.lake_root, SOURCE) as leftovers:
            report.notes += leftovers
            state = lake.IngestState.load(self.lake_root, SOURCE)
            cursors: dict = state.data.setdefault("files", {})
            snapshot_cursors: dict = state.data.setdefault("snapshots", {})
            config_cursors: dict = state.data.setdefault("configs", {})
            self.runs: dict = state.data.setdefault("runs", {})
            report.issues += files.root_issues(self.roots, "GRPOLENS_TRAINER_LOGS")
            skipped: list[FileIssue] = []
            found = discover(self.roots, skipped, self.lake_root)
            unsaid = _unsaid(skipped, state.data.get("skipped", {}), found, report)
            report.files_seen = found.count
            todo, unreadable = logs_with_new_bytes(found.logs, cursors)
            plans, unreadable_snapshots = snapshots_changed(found.snapshots, snapshot_cursors)
            report.issues += unreadable + unreadable_snapshots
            if not todo and not plans and not configs_changed(found, config_cursors) and not unsaid:
                report.seconds = time.perf_counter() - started
                return report

            ingest_id = state.next_ingest_id()
            writer = lake.PartWriter(self.lake_root, "history", SOURCE, ingest_id)
            self.buffer = lake.HistoryBuffer(writer, ingest_id, self.batch_rows)
            self.touched: dict[str, RunInfo] = {}
            self.report = report
            total = len(plans) + len(todo)
            try:
                for n, plan in enumerate(plans, 1):
                    self.progress(f"[{n}/{total}] {plan.run_dir}")
                    try:
                        snapshot_cursors[plan.run_dir] = self._read_snapshots(plan, snapshot_cursors.get(plan.run_dir))
                    except Exception as exc:
                        report.issues.append(failed_file(plan.run_dir, exc))
                for n, (path, kind, size, mtime_ns, cursor) in enumerate(todo, len(plans) + 1):
                    self.progress(f"[{n}/{total}] {path}")
                    read = self._read_notebook if kind == "notebook" else self._read_log
                    try:
                        new_cursor = read(path, kind, size, mtime_ns, cursor)
                    except Exception as exc:
                        report.issues.append(failed_file(path, exc))
                        continue
                    if new_cursor is not None:
                        cursors[str(path)] = new_cursor
                self._attach_configs(found, cursors, config_cursors)
                self.buffer.flush()
                writer.commit()
            except BaseException:
                writer.abort()
                raise
            report.values = self.buffer.total
            now = time.time()
            lake.write_part(
                self.lake_root, "runs", SOURCE, ingest_id, [info.row(ingest_id, now) for info in self.touched.values()]
            )
            lake.write_issues(self.lake_root, SOURCE, ingest_id, report.issues, now)
            for key, info in self.touched.items():
                self.runs[key] = info.to_state()
            state.data["skipped"] = {issue.path: issue.kind for issue in skipped}
            state.save(ingest_id)
            report.ingest_id = ingest_id
            report.runs_touched = sorted(self.touched)
        report.seconds = time.perf_counter() - started
        return report

    # -- shared

    def _run(self, run_key: str, **identity: Any) -> RunInfo:
        """The run's info for this ingest: as stored, or new from ``identity`` (project, run_id, name, origin)."""
        if run_key not in self.touched:
            stored = self.runs.get(run_key)
            self.touched[run_key] = RunInfo.from_state(stored) if stored else RunInfo(run_key=run_key, **identity)
        return self.touched[run_key]

    def _attach_configs(self, found: Found, cursors: dict, config_cursors: dict) -> None:
        """Give each folder's config file to the one run whose logs are in that folder, reading it when it is new or
        rewritten or its run changed (the run's first line arrived, a second run's log appeared); a run whose config
        file went away, or went to no run, loses it."""
        runs_in: dict[str, set[str]] = {}
        for path, _kind in found.logs:
            # a console log of two launches is two runs: a config beside it configures neither for sure
            for run_key in _log_runs(cursors.get(str(path)) or {"run_key": None}):
                if run_key:
                    runs_in.setdefault(os.path.dirname(path), set()).add(run_key)
        present = {str(path) for path in found.configs.values()}
        for gone in [p for p in config_cursors if p not in present]:
            self._give_config(config_cursors.pop(gone).get("run_key"), {})
        for folder, path in found.configs.items():
            runs = runs_in.get(folder, set())
            owner = next(iter(runs)) if len(runs) == 1 else None
            known = config_cursors.get(str(path), {})
            try:
                size, mtime_ns = _signature(path)
            except OSError as exc:
                self.report.issues.append(FileIssue(str(path), 0, 0, "unreadable", str(exc)))
                continue
            if (known.get("size"), known.get("mtime_ns"), known.get("run_key")) == (size, mtime_ns, owner):
                continue
            config_cursors[str(path)] = {"size": size, "mtime_ns": mtime_ns, "run_key": owner}
            if known.get("run_key") not in (None, owner):
                self._give_config(known["run_key"], {})
            if len(runs) > 1:
                self.report.notes.append(
                    f"{path} is beside the logs of {len(runs)} runs: it is the config of none of them (a run's "
                    "config file is read from a folder that holds that run's log alone)"
                )
            if owner is None:
                continue
            try:
                config = load_config(path)
            except (OSError, ValueError, RecursionError) as exc:
                why = f"not a run config: {exc}; the run keeps the config read before, if any"
                self.report.issues.append(FileIssue(str(path), 0, size, "bad_config", why))
                continue
            self._give_config(owner, config or {})
            self.report.files_read += 1

    def _give_config(self, run_key: str | None, config: dict) -> None:
        if run_key is not None and (run_key in self.runs or run_key in self.touched):
            self._run(run_key).file_config = config

    def _emit(self, info: RunInfo, step: int, ts_us: int | None, offset: int, items: dict) -> None:
        if items:
            self.buffer.add_decoded(info.run_key, step, ts_us, offset, items)
            info.observe(step, items)

    # -- trainer_state.json

    def _read_snapshots(self, plan: SnapshotPlan, cursor: dict | None) -> dict:
        """Pick the newest snapshot of each of a run's state files (parsing only new or rewritten files) and reload
        the run from them. Snapshots are copies of one file, saved under one name (``checkpoint-N/trainer_state.json``):
        the one with the highest ``global_step`` wins. Files of other names in the run's folder are other series of
        the run (a custom trainer's ``step_stat_history.json`` and ``eval_history.json``): each is read, none hides
        another."""
        known = (cursor or {}).get("files", {})
        files: dict[str, dict] = {}
        parsed: dict[str, dict] = {}
        for path, (size, mtime_ns) in plan.signatures.items():
            if path not in plan.changed:
                files[path] = known[path]
                continue
            doc = self._load_state_file(Path(path), size)
            ok = doc is not None
            step = integral(doc.get("global_step")) if doc is not None else None
            if doc is not None:
                parsed[path] = doc
                self.report.files_read += 1
            files[path] = {"size": size, "mtime_ns": mtime_ns, "global_step": step, "rejected": not ok}
        previous = _chosen(cursor or {})
        run_dir = Path(plan.run_dir)
        run_key = (cursor or {}).get("run_key") or run_key_for(_project(run_dir.parent), run_id_for(plan.run_dir))
        snapshots: dict[str, list[str]] = {}
        for path in (p for p, f in files.items() if not f["rejected"]):
            snapshots.setdefault(Path(path).name, []).append(path)
        newest = {
            name: max(paths, key=lambda p: (files[p]["global_step"] or -1, files[p]["mtime_ns"]))
            for name, paths in snapshots.items()
        }
        waiting = {Path(p).name: p for p in previous if files.get(p, {}).get("rejected")}
        new_cursor = {"run_key": run_key, "files": files, "chosen": sorted({**newest, **waiting}.values())}
        if waiting:  # caught mid-rewrite: wait for it, do not fall back to an older snapshot; the run's values stand
            return new_cursor
        chosen = new_cursor["chosen"]
        if not chosen or (chosen == previous and not set(chosen) & set(plan.changed)):
            return new_cursor  # an older snapshot changed, or none can be read: the run's values stand
        docs = []
        for path in chosen:
            doc = parsed.get(path)
            if doc is None:  # unchanged, but not chosen before (a newer one vanished) or beside one that changed
                doc = self._load_state_file(Path(path), files[path]["size"])
                if doc is None:
                    return {**new_cursor, "chosen": previous}
                self.report.files_read += 1
            docs.append((Path(path), doc, files[path]["mtime_ns"]))
        self._load_trainer_state(docs, run_key, run_dir)
        return new_cursor

    def _load_state_file(self, path: Path, size: int) -> dict | None:
        try:
            with open(path, "rb") as fh:
                raw = fh.read()
            doc = json.loads(raw)
        except OSError as exc:
            self.report.issues.append(FileIssue(str(path), 0, 0, "unreadable", str(exc)))
            return None
        except (ValueError, RecursionError) as exc:  # being rewritten right now, or damaged: read again once it changes
            why = "nested too deeply for a JSON decoder" if isinstance(exc, RecursionError) else exc
            self.report.issues.append(FileIssue(str(path), 0, size, "bad_file", f"not JSON: {why}"))
            return None
        if may_hold_surrogates(raw):
            doc = without_surrogates(doc)
        if isinstance(doc, list) and any(isinstance(entry, dict) for entry in doc):  # the log_history saved alone
            doc = {"log_history": doc}  # (a list of no entries, [1, 2, 3] or [], is no run: the wrong shape below)
        elif (saved := columns(doc)) is not None:  # a custom loop's metrics saved as one list per metric
            if saved.left_out:
                self.report.notes.append(
                    f"{path}: {', '.join(saved.left_out)}: lists of another length than its "
                    f"{len(saved.log_history)} steps, so at no known step: not read"
                )
            doc = {"log_history": saved.log_history, **saved.settings}
            if saved.by_index:
                doc["step_source"] = "ordinal"  # the run's config says the steps are the lists' positions
        if not isinstance(doc, dict) or not isinstance(doc.get("log_history"), list):
            self.report.issues.append(FileIssue(str(path), 0, size, "bad_file", "no log_history list"))
            return None
        return doc

    def _load_trainer_state(self, docs: list[tuple[Path, dict, int]], run_key: str, run_dir: Path) -> None:
        """Reload a run from its state files (path, document, mtime_ns), their entries merged by step: the
        ``file_offset`` of an entry is its index plus its file's position among the run's files (by name) times
        2**32, so the last file's value wins where two give one key at one step, and a file that grows does not move
        the next one's entries (a moved entry would count as a second version of its values)."""
        info = self._run(
            run_key,
            project=_project(run_dir.parent),
            run_id=run_id_for(str(run_dir)),
            name=run_dir.name,
            origin="trainer_state",
        )
        previous_last = info.last_step
        info.reset_history()
        info.source_files = []
        info.config = {}
        written: dict[tuple[int, str], Any] = {}
        for position, (path, doc, mtime_ns) in enumerate(sorted(docs, key=lambda d: d[0].name)):
            info.touch(path, mtime_ns)
            self._state_entries(info, path, doc, written, position << 32)
            info.config.update(self._state_config(path, doc))
        info.config = finite(redact(info.config))
        # a bare log_history (no max_steps) cannot tell a run still going from one that crashed, as a JSONL log cannot
        if any(_finished(doc) for _path, doc, _mtime in docs):
            info.state = "finished"
        elif any(_positive(doc.get("max_steps")) for _path, doc, _mtime in docs):
            info.state = "running"
        else:
            info.state = "unknown"
        if previous_last is not None and (info.last_step is None or info.last_step < previous_last):
            self.report.notes.append(
                f"{docs[0][0] if len(docs) == 1 else run_dir}: history now ends at step {info.last_step}, earlier it "
                f"reached {previous_last} (training restarted in the same folder?); values after it stay in the lake"
            )

    def _state_entries(self, info: RunInfo, path: Path, doc: dict, written: dict, first: int) -> None:
        """A state file's log_history entries, each at its step (``first``: the file_offset of its first entry). A
        file named as an evaluation's (``eval_history.json``) holds evaluation series: its keys go under `eval/`, as
        a JSONL evaluation record's (trainer_log_lines.evaluation_values), and never overwrite the training's. An
        entry that repeats an earlier one of the file whole (every key but ``epoch`` with the same value at the same
        step: steps appended twice) is written again, a second version of its values that ``duplicate_steps``
        counts; a key another entry of the step already gave alike (the ``epoch`` train and eval entries share) is
        not."""
        evaluation = bool(EVAL_NAMES & set(re.split(r"[^a-z]+", path.stem.lower())))
        in_file: dict[tuple[int, str], Any] = {}
        for index, entry in enumerate(doc["log_history"]):
            self.report.records += 1
            step = integral(entry.get("step")) if isinstance(entry, dict) else None
            if step is None:
                self.report.issues.append(
                    FileIssue(str(path), 0, 0, "no_step", f"log_history[{index}] has no integer step within 64 bits")
                )
                continue
            if depth(entry) > MAX_DEPTH:
                self.report.issues.append(
                    FileIssue(
                        str(path),
                        0,
                        0,
                        "bad_entry",
                        f"log_history[{index}] is nested more than {MAX_DEPTH} levels deep",
                    )
                )
                continue
            values = {k: v for k, v in entry.items() if k != "step"}
            if evaluation:
                values = evaluation_values(values)
            # Train, eval and end-of-training entries at one step all repeat `epoch`: one value, not a repeated step.
            items = {k: v for k, v in values.items() if not ((step, k) in written and _same(written[(step, k)], v))}
            own = [k for k in values if k != "epoch"]
            if own and all((step, k) in in_file and _same(in_file[(step, k)], values[k]) for k in own):
                items = values
            written.update(((step, k), v) for k, v in items.items())
            in_file.update(((step, k), v) for k, v in values.items())
            try:
                self._emit(info, step, None, first + index, items)
            except Exception as exc:  # one entry no reader anticipated: skipped and said
                self.report.issues.append(
                    FileIssue(
                        str(path), 0, 0, "bad_entry", f"log_history[{index}] not usable: {type(exc).__name__}: {exc}"
                    )
                )

    def _state_config(self, path: Path, doc: dict) -> dict:
        """The keys of a state file that configure the run (not STATE_BOOKKEEPING)."""
        config = {}
        for key, value in doc.items():
            if key in STATE_BOOKKEEPING:
                continue
            if depth(value) > MAX_DEPTH:
                self.report.issues.append(
                    FileIssue(
                        str(path), 0, 0, "bad_entry", f"{key} is nested more than {MAX_DEPTH} levels deep; left out"
                    )
                )
                continue
            config[key] = value
        return config

    # -- append-only logs

    def _read_log(
        self, path: Path, kind: str, size: int, mtime_ns: int, cursor: dict | None, text: bytes | None = None
    ) -> dict | None:
        """Read one JSONL, CSV or console log from its cursor; returns the new cursor, None if it could not be read.
        ``text``: the console a notebook's outputs hold (_read_notebook), read in place of the file, whole."""
        cursor = dict(cursor) if cursor else {"offset": 0, "size": 0, "format": None, "ordinal": 0, "run_key": None}
        cursor.setdefault("bar", None if cursor["ordinal"] == 0 else {"total": 0})  # read before bars counted: ordinal
        cursor.setdefault("steps", None if cursor["offset"] == 0 else [None, None])  # read before launches were told
        if size < cursor["size"]:
            self._restart(cursor, f"{path} shrank from {cursor['size']} to {size} bytes")
        end = cursor["offset"]
        finished = text is not None or files.quiet(mtime_ns)
        try:
            with open(path, "rb") if text is None else io.BytesIO(text) as fh:
                if cursor["offset"] and files.rewritten(fh, cursor):
                    self._restart(cursor, f"{path}: the lines already read have changed (file rewritten)")
                    end = 0
                if cursor["offset"] == 0 and (why := files.not_text(fh, json_lines=kind == "jsonl")):
                    self.report.issues.append(FileIssue(str(path), 0, size, "not_text", f"not a text file: {why}"))
                    cursor.update(size=size, mtime_ns=mtime_ns, tail_waits=False)  # read again when it changes
                    return cursor
                if kind == "console" and not cursor.get("ordinals") and cursor["format"] in (None, "console_trl"):
                    lines = (raw for _, raw in complete_lines(fh, cursor["offset"], size, finished, kind))
                    if (why := bar_contradiction(lines, cursor.get("bar"))) is not None:
                        if cursor["offset"] and (cursor.get("bar") or {}).get("total"):  # earlier reads used it
                            self._restart(cursor, f"{path}: {why}, so its progress bar does not give the steps")
                        cursor["ordinals"] = True
                if kind == "console" and cursor["format"] in (None, "console_trl"):
                    self._find_grids(fh, path, cursor, size, finished)
                try:
                    end = self._read_lines(fh, path, cursor, size, finished, kind)
                except BarNotSteps as exc:  # the dry run above missed what the reading found: read it again
                    self._restart(
                        cursor,
                        f"{path}: {exc}, so its progress bar does not give the steps (its output "
                        "was buffered?): its dicts are numbered in the order printed",
                    )
                    cursor["ordinals"] = True
                    cursor.pop("wrap", None)
                    end = self._read_lines(fh, path, cursor, size, finished, kind)
                if (wrap := cursor.pop("wrap", None)) is not None and finished:  # its last piece will not come
                    self._dict_not_read(path, wrap, "the file ends before it does", cursor)
                elif wrap is not None:  # its last piece is not written yet
                    end = wrap[0]
                cursor.update(files.fingerprint(fh, end))
        except OSError as exc:
            self.report.issues.append(FileIssue(str(path), end, 0, "unreadable", str(exc)))
            return None
        self.report.files_read += 1
        for run_key in _log_runs(cursor):
            if run_key in self.touched:
                self.touched[run_key].touch(path, mtime_ns)
        if kind == "console" and cursor["format"] is None and cursor["offset"] == 0 and end > 0 and text is None:
            self.report.notes.append(
                f"{path}: no metric line found (read as a console log: a TRL/HF dict per line, verl's "
                "`step:N - key:value - …`, or `key: value` pairs with a step); nothing taken from it"
            )
        cursor.update(offset=end, size=size, mtime_ns=mtime_ns, tail_waits=end < size and not finished)
        return cursor

    def _find_grids(self, fh, path: Path, cursor: dict, size: int, finished: bool) -> None:
        """Before a console log's new lines are read: when they end a training (the end-of-training dict), the
        logging grids of the file's trainings (logging_grids), so that a training its dicts' ordinals number gets
        the trainer's steps; one that earlier ingests read by ordinals is read again from the start."""
        if cursor["offset"] == 0:  # a first read, or a file rewritten: grids of what it held before are no more
            cursor.pop("grids", None)
        new = complete_lines(fh, cursor["offset"], size, finished, "console")
        if not any(b"train_runtime" in raw for _, raw in new):
            return
        found = logging_grids(complete_lines(fh, 0, size, finished, "console"))
        known = cursor.get("grids") or {}
        if not set(found) - set(known):
            return
        cursor["grids"] = {**known, **found}
        if any(int(at) < cursor["offset"] for at in set(found) - set(known)):
            self._restart(
                cursor,
                f"{path}: a training it numbered by its printed dicts ended, and its progress "
                "bar's total and printed epochs give the trainer's logging interval",
            )

    def _read_lines(self, fh, path: Path, cursor: dict, size: int, finished: bool, kind: str) -> int:
        """Read a log's complete lines from its cursor's offset; returns the offset read up to."""
        read_line = {"jsonl": self._jsonl_line, "csv": self._csv_line}.get(kind, self._console_line)
        end = cursor["offset"]
        issues, values = len(self.report.issues), self.buffer.total
        self.step_like: dict[str, None] = {}  # of the records read without a step: their keys that look like one
        for offset, raw in complete_lines(fh, cursor["offset"], size, finished, kind):
            end = min(offset + len(raw) + 1, size)  # a quiet file's last line may have no newline
            self.report.records += 1
            try:
                read_line(path, offset, raw, cursor)
            except BarNotSteps:
                raise
            except Exception as exc:  # one line no reader anticipated: skipped and said, never fatal
                self.report.issues.append(
                    FileIssue(
                        str(path),
                        offset,
                        len(raw) + 1,
                        "bad_line",
                        f"line not usable: {type(exc).__name__}: {exc}",
                    )
                )
        if kind == "jsonl" and self.buffer.total == values:
            self._no_step_at_all(path, cursor["offset"], end, issues)
        return end

    def _no_step_at_all(self, path: Path, start: int, end: int, first_issue: int) -> None:
        """A JSONL log none of whose records read has a step, in a format the reader does not know: one issue that
        says so and names the keys that look like a step, not one per record (a trainer's 249 records were 249
        identical lines and then 'no run found')."""
        stepless = [i for i in self.report.issues[first_issue:] if i.kind == "no_step" and i.path == str(path)]
        if len(stepless) < 2:
            return
        ids = {id(i) for i in stepless}
        self.report.issues[first_issue:] = [i for i in self.report.issues[first_issue:] if id(i) not in ids]
        where = f" from byte {start} on" if start else ""
        seen = ", ".join(self.step_like) if self.step_like else "none"
        self.report.issues.append(
            FileIssue(
                str(path),
                stepless[0].offset,
                end - stepless[0].offset,
                "no_step",
                f"none of its {len(stepless)} records{where} has a step ({NO_STEP_FIELDS}); keys in them that look "
                f"like one: {seen}; nothing taken from them",
            )
        )

    def _restart(self, cursor: dict, why: str) -> None:
        """Read a log again from its start, and from its first launch: the values of its runs from earlier ingests
        are superseded (staging keeps this source's rows of a run from this ingest on), so steps the new content
        lacks do not linger, and whether a launch finished is what the new content says."""
        self.report.notes.append(f"{why}; reading it again from the start")
        runs = _log_runs(cursor)
        cursor.update(
            offset=0, format=None, ordinal=0, kv=None, bar=None, at_step=None, steps=None, run_key=runs[0], launches=[]
        )
        self._supersede(runs)

    def _supersede(self, runs: list[str | None]) -> None:
        """The values of these runs from earlier ingests give way to what this one reads of them."""
        for run_key in runs:
            if run_key is not None and (run_key in self.runs or run_key in self.touched):
                info = self._run(run_key)
                info.reset_history()
                info.state = "unknown"
                info.history_from_ingest = self.buffer.ingest_id

    def _log_run(self, path: Path, cursor: dict, origin: str) -> RunInfo:
        if cursor["run_key"] in self.touched:
            return self.touched[cursor["run_key"]]
        project, run_id, name = log_identity(path, len(cursor.get("launches") or []) + 1)
        cursor["run_key"] = cursor["run_key"] or run_key_for(project, run_id)
        info = self._run(cursor["run_key"], project=project, run_id=run_id, name=name, origin=origin)
        info.origin = origin
        return info

    def _jsonl_line(self, path: Path, offset: int, raw: bytes, cursor: dict) -> None:
        try:
            row = jsonl_row(raw)
        except BadLine as exc:
            self.report.issues.append(FileIssue(str(path), offset, len(raw) + 1, exc.kind, str(exc)))
            self.step_like.update(dict.fromkeys(exc.step_like))
            return
        if isinstance(row, ConfigRecord):  # the run's settings, as a config file beside the log gives them
            self._log_run(path, cursor, "jsonl").config.update(row.settings)
            return
        if row is not None:
            step, ts_us, items = row
            epoch = items.get("epoch") if isinstance(items.get("epoch"), (int, float)) else None
            # a step count that starts over where its launch began: a second launch appended to the file, unless the
            # epoch went up with it (a trainer that counts its steps per epoch)
            if not (epoch is not None and epoch > cursor.get("epoch", epoch)):
                self._launch_boundary(path, offset, cursor, "jsonl", step)
            cursor["steps"] = _advanced(cursor["steps"], step, step)
            if epoch is not None:
                cursor["epoch"] = epoch
            if ts_us is None and isinstance(items.get("_timestamp"), (int, float)):
                self.report.issues.append(
                    FileIssue(
                        str(path),
                        offset,
                        0,
                        "bad_time",
                        f"_timestamp {shown(items['_timestamp'])} is not a time in years "
                        "1-9999; the row is kept without a time",
                    )
                )
            self._emit(self._log_run(path, cursor, "jsonl"), step, ts_us, offset, _not_repeated(cursor, step, items))

    def _csv_line(self, path: Path, offset: int, raw: bytes, cursor: dict) -> None:
        """A line of a CSV metric log (pipeline.sources.trainer_log_csv): the header at the file's start (again when
        it is read again from there), then a row per step."""
        if offset == 0:
            head = csv_header(raw)
            cursor["csv"] = head.to_state() if head is not None else None
            if head is None:  # discovery read this header with a step column: the file was rewritten since
                why = f"the header names no step column ({', '.join(CSV_STEP_FIELDS)}): the file is not read"
                self.report.issues.append(FileIssue(str(path), 0, len(raw) + 1, "no_step", why))
            return
        if cursor.get("csv") is None:
            return
        try:
            row = csv_row(raw, CsvHeader.from_state(cursor["csv"]))
        except BadLine as exc:
            self.report.issues.append(FileIssue(str(path), offset, len(raw) + 1, exc.kind, str(exc)))
            return
        if row is not None:
            step, ts_us, items = row
            labels = {k: v for k, v in items.items() if isinstance(v, str)}
            changed = sorted(k for k, v in labels.items() if (cursor.get("csv_labels") or {}).get(k, v) != v)
            if changed:  # the next arm of a table of several (`arm` column)
                self._launch_boundary(path, offset, cursor, "csv", step, f"{', '.join(changed)} changed")
            self._emit(self._log_run(path, cursor, "csv"), step, ts_us, offset, items)
            cursor["steps"] = _advanced(cursor["steps"], step, step)
            cursor["csv_labels"] = labels

    def _read_notebook(self, path: Path, kind: str, size: int, mtime_ns: int, cursor: dict | None) -> dict | None:
        """A Jupyter notebook (pipeline.sources.trainer_log_notebooks), read whole each time it is saved: Jupyter
        rewrites the file and a cell run again replaces its outputs, so no byte offset in it holds. Its printed
        output is read as a console log is (its offsets are into that text), a training in it the run ``<name>``
        and the next ones ``<name> #2``…; its progress tables are the trainings after those, one each (a row's
        offset is its index). What an earlier read of the file wrote of its runs gives way to this read."""
        try:
            with open(path, "rb") as fh:
                notebook = notebooks.read(fh.read())
        except OSError as exc:
            self.report.issues.append(FileIssue(str(path), 0, 0, "unreadable", str(exc)))
            return None
        except ValueError as exc:  # being saved right now, or no notebook: read again once it changes
            self.report.issues.append(FileIssue(str(path), 0, size, "bad_file", f"not a Jupyter notebook: {exc}"))
            fresh = {"offset": 0, "format": None, "ordinal": 0, "run_key": None}
            return {**(cursor or fresh), "size": size, "mtime_ns": mtime_ns}  # its runs, if any, stay as read
        if cursor:
            self._supersede(_log_runs(cursor))
        read = self._read_log(path, "console", len(notebook.text), mtime_ns, None, notebook.text)
        if read is None:
            return None
        read.update(size=size, tail_waits=False)  # the notebook's own size: one stat tells whether it changed
        for table in notebook.tables:
            if read["run_key"] is not None:
                read["launches"] = [*(read.get("launches") or []), read["run_key"]]
            read["run_key"] = None
            info = self._log_run(path, read, "notebook_table")
            for index, (step, values) in enumerate(table.rows):
                self._emit(info, step, None, index, values)
            info.touch(path, mtime_ns)
            if table.finished:
                info.state = "finished"
            self.report.records += len(table.rows)
        for problem in notebook.problems + [p for table in notebook.tables for p in table.problems]:
            self.report.issues.append(FileIssue(str(path), 0, 0, "bad_line", problem))
        if read["format"] is None and not notebook.tables:
            self.report.notes.append(
                f"{path}: no metric line in its cells' output (a TRL/HF dict per line, verl's `step:N - key:value - "
                "…`, `key: value` pairs with a step) and no training-progress table numbered by steps: nothing "
                "taken from it"
            )
        return read

    def _console_dict(self, path: Path, offset: int, values: dict, cursor: dict, before: str = "") -> None:
        """One of the HF Trainer's printed log dicts: at its `step`, else at the step its progress bar counted on its
        line (``before`` it: _bar_step), else at its ordinal among the file's dicts. The end-of-training dict
        (`train_runtime`, `train_loss`, and what the trainer averaged since its last log) is no step: it goes to the
        run's summary and says the training finished. A dict after it is a new launch (_new_launch), unless it is an
        evaluation's (``trainer.evaluate()`` after ``trainer.train()``), which belongs to the training it evaluated."""
        cursor["format"] = "console_trl"
        if self._log_run(path, cursor, "console_trl").state == "finished" and not _evaluation(values):
            self._new_launch(path, offset, cursor, "console_trl", "after the end-of-training dict of the one before")
        info = self._log_run(path, cursor, "console_trl")
        if "train_runtime" in values and "step" not in values:
            info.summary.update(values)
            info.state = "finished"
            return
        if cursor["ordinal"] == 0:  # the launch's first dict: the key of its logging grid (logging_grids)
            cursor["launch_at"] = offset
        cursor["ordinal"] += 1
        step = integral(values.get("step"))
        if step is not None:
            del values["step"]
        elif (step := _bar_step(cursor, values, before)) is not None:
            info.config["step_source"] = "progress_bar"
            # an eval dict at its train dict's step repeats its `epoch`: one value, not a repeated step (as in a
            # trainer_state.json, whose entries at one step repeat it the same way); the cursor file is strict JSON
            last, cursor["bar"]["epoch"] = cursor["bar"]["epoch"], [step, finite(values.get("epoch"))]
            if "epoch" in values and last == cursor["bar"]["epoch"]:
                del values["epoch"]
        elif (grid := (cursor.get("grids") or {}).get(str(cursor.get("launch_at")))) is not None:
            step = _grid_step(grid, cursor["ordinal"])
            info.config.update(step_source="logging_grid", logging_steps=grid[0], max_steps=grid[2])
        else:
            step = cursor["ordinal"]
            info.config["step_source"] = "ordinal"
        self._emit(info, step, None, offset, values)

    def _launch_boundary(self, path: Path, offset: int, cursor: dict, origin: str, step: int, also: str = "") -> bool:
        """Whether the line at ``offset``, numbered ``step`` as printed, begins a new launch because its step count
        starts over (_starts_over), and if so the new launch (_new_launch); ``also`` says what else marked it. Each
        format decides first whether a count going back can mean a new launch at all (a JSONL epoch that went up, a
        CSV label that changed, a count printed per epoch)."""
        if not _starts_over(cursor["steps"], step):
            return False
        why = f"where the step count starts over at {step} after the one before reached {cursor['steps'][1]}"
        self._new_launch(path, offset, cursor, origin, f"{why} and {also}" if also else why)
        return True

    def _new_launch(self, path: Path, offset: int, cursor: dict, origin: str, why: str) -> None:
        """A training that starts after the end of the one before in the same console log: a second ``python
        train.py`` appended to the file (``tee -a``, a shell's capture, a driver that runs an ablation's arms one
        after the other). Read as part of the first, its steps started over mid-run, and every trend, onset and plot
        mixed two trainings; it is a run of its own (log_identity's ``<name> #2``), numbered, configured and
        finished on its own. The cursor keeps the earlier launches' runs (``launches``), so a later ingest carries
        on in this one and a restart goes back to the first."""
        cursor["launches"] = [*(cursor.get("launches") or []), cursor["run_key"]]
        cursor.update(run_key=None, ordinal=0, bar=None, kv=None, steps=None, at_step=None)
        info = self._log_run(path, cursor, origin)
        self.report.notes.append(
            f"{path}: a new training begins at byte {offset}, {why}: read as run {info.name!r} ({info.run_key})"
        )

    def _dict_not_read(self, path: Path, wrap: list, why: str, cursor: dict) -> None:
        """A printed dict that never came whole, or whole but no Python literal: a metric dict is an issue, never
        silently lost (a config printed over lines is no metric dict and stays ignored, as every other line is). It
        is still one of the file's metric lines: it makes the file a ``console_trl`` log, so that each later dict is
        read or said rather than passed over for the ``key: value`` lines around it, and it takes its ordinal, so
        that the dicts after it keep their steps."""
        if opens_metric_dict(wrap[1]):
            if wrap[1].rstrip().endswith("}"):
                message = f"a printed metric dict that is no Python literal: not read: {shown(wrap[1])}"
            else:
                message = f"a printed metric dict that does not end ({why}): not read: {shown(wrap[1])}"
            self.report.issues.append(FileIssue(str(path), wrap[0], len(wrap[1].encode()), "bad_line", message))
            cursor["format"] = "console_trl"
            cursor["ordinal"] += 1

    def _console_line(self, path: Path, offset: int, raw: bytes, cursor: dict) -> None:
        whole = raw.decode("utf-8", errors="replace").rstrip("\r")
        self._console_text(path, offset, whole, cursor)
        bar = cursor.get("bar")
        if bar and bar["total"] and "/" in whole:  # the train bar's last count, for a dict printed on a later line
            bar["seen"] = next((n for n, total in reversed(bar_counts(whole)) if total == bar["total"]), bar["seen"])

    def _console_text(self, path: Path, offset: int, whole: str, cursor: dict) -> None:
        line = _on_screen(whole)
        fmt = cursor["format"]
        if (pending := cursor.get("wrap")) is not None and fmt in (None, "console_trl"):
            joined = _unwrapped(cursor, line)
            if joined is not None:  # a piece of a dict the terminal wrapped: read whole once its last piece came
                if joined[1] is not None:
                    self._console_dict(path, joined[0], joined[1], cursor, pending[4])
                return
            self._dict_not_read(path, pending, "the line after it does not complete it", cursor)
            fmt = cursor["format"]  # a metric dict, even one not read, made the file a console_trl log
        verl = line.startswith("step:") and fmt in (None, "console_verl")
        if verl and (parsed := verl_line(line, cut=len(whole) >= CONSOLE_CUT)) is not None and parsed[1]:
            cursor["format"] = "console_verl"
            self._launch_boundary(path, offset, cursor, "console_verl", parsed[0])
            self._emit(self._log_run(path, cursor, "console_verl"), parsed[0], None, offset, parsed[1])
            cursor["steps"] = _advanced(cursor["steps"], parsed[0], parsed[0])
        elif fmt == "console_kv" and line.startswith("{") and _trainer_step_dict(dict_line(line.rstrip())):
            # a script's own metric lines, then the Trainer's (a hand-written SFT loop, then TRL's GRPOTrainer): a
            # file read as `key: value` lines to its end passes over every dict after the switch
            self._new_launch(path, offset, cursor, "console_trl", "where the Trainer's printed dicts take over")
            cursor["format"] = None
            self._console_text(path, offset, whole, cursor)
        elif fmt in (None, "console_trl") and line.startswith("{"):
            before = whole[: whole.rfind("\r")] if "\r" in whole else ""
            values = dict_line(line.rstrip())
            if values is None:
                if len(line) > WRAP_MIN_WIDTH or opens_metric_dict(line):  # perhaps the first piece of a wrapped one
                    cursor["wrap"] = [offset, line, len(line), 1, before]
                return
            self._console_dict(path, offset, values, cursor, before)
        elif fmt in (None, "console_trl") and "{" in whole and (found := embedded_dict(whole)) is not None:
            self._console_dict(path, offset, found[1], cursor, found[0])
        elif fmt in (None, "console_kv") and not line.startswith("{"):  # `step:3 | loss=0.1 | …` too: no verl line
            pairs = kv_line(line)
            state = dict(cursor.get("kv") or {})  # a copy: the cursor the ingest started from stays as it was
            if pairs is None and "step" in state and (trailing := kv_trailing(line)):
                # a metric line's key alone is not a value of this step, nor is a value this step already took from
                # a line of its own: a summary printed after the last step (`Mean IoU: 0.903`, twice) is no second
                # version of it
                if not set(trailing) & {*state["keys"], *state.get("trailing", ())}:
                    self._emit(self._log_run(path, cursor, "console_kv"), state["step"], None, offset, trailing)
                    cursor["kv"] = {**state, "trailing": sorted({*state.get("trailing", ()), *trailing})}
                return
            if pairs is None or (state.get("keys") and not set(pairs.values) & set(state["keys"])):
                return  # not a metric line, or one of another kind than the file's first (a progress line)
            # a count printed per epoch starts over in every epoch but the first: only there is it a fresh start
            first_epoch = pairs.epoch is None or pairs.epoch <= state.get("first_epoch", pairs.epoch)
            if first_epoch and self._launch_boundary(path, offset, cursor, "console_kv", pairs.step):
                state = {}
            cursor["format"] = "console_kv"
            cursor["kv"] = state
            state.pop("trailing", None)
            state.setdefault("keys", sorted(pairs.values))
            state["step"] = _kv_step(state, pairs)
            self._emit(self._log_run(path, cursor, "console_kv"), state["step"], None, offset, pairs.values)
            cursor["steps"] = _advanced(cursor["steps"], pairs.step, state["step"])


def _unwrapped(cursor: dict, line: str) -> tuple[int, dict | None] | None:
    """With the first pieces of a wrapped dict line pending in ``cursor["wrap"]`` ([offset, text, width, pieces,
    the text before it on its line]): (its offset, the dict) when ``line`` completes it, (its offset, None) when
    ``line`` is one more piece of it, and None when ``line`` is not part of it (the pending text is dropped, and the
    line read on its own). The last piece may be of any width: a dict is also broken where no terminal wraps it
    (a log copied by hand, a second writer's newline), anywhere in it, a quoted key included
    (``'completions/max_terminated_length`` / ``': 578.0, …}``); the middle pieces of a terminal's wrap are as wide
    as the first."""
    offset, text, width, pieces, before = cursor["wrap"]
    values = None if line.startswith("{") else dict_line((text + line).rstrip())
    if values is not None:
        cursor["wrap"] = None
        return offset, values
    if abs(len(line) - width) <= 1 and pieces < WRAP_MAX_PIECES and not line.startswith("{"):
        cursor["wrap"] = [offset, text + line, width, pieces + 1, before]
        return offset, None
    cursor["wrap"] = None
    return None


def _on_screen(whole: str) -> str:
    """What a terminal shows of a captured console line: the text after tqdm's last carriage return, without colour
    codes or the tag of the Ray process that printed it."""
    line = whole.rsplit("\r", 1)[-1]
    if "\x1b" in line or line.startswith("("):
        line = _RAY_TAG.sub("", _ANSI.sub("", line))
    return line


class BarNotSteps(Exception):
    """The progress bar's counts are not the printed dicts' steps: the log is read again by its dicts' ordinals."""


def bar_contradiction(lines: Iterable[bytes], bar: dict | None) -> str | None:
    """A dry run of _bar_step over a console log's new lines, before any of their rows is written: why the progress
    bar's counts are not its dicts' steps (a block-buffered standard output prints dicts in bursts, long after the bar
    counted their steps), or None when they are (or no bar numbers the log). A row written at a count and then
    renumbered by its ordinal would stay in the lake at both steps; so the log is numbered by ordinals from the
    start. It parses the new dict lines a second time, once per read: console logs are small next to what a read
    costs them otherwise."""
    cursor: dict = {"bar": json.loads(json.dumps(bar)) if bar is not None else None}
    for raw in lines:
        whole = raw.decode("utf-8", errors="replace").rstrip("\r")
        line = _on_screen(whole)
        values, before = None, ""
        if line.startswith("{"):
            values, before = dict_line(line.rstrip()), whole[: whole.rfind("\r")] if "\r" in whole else ""
        elif "{" in whole and (found := embedded_dict(whole)) is not None:
            before, values = found
        if values is not None and "step" not in values:
            if "train_runtime" in values:  # the end of a launch: the next one's bar decides for itself
                cursor["bar"] = None
                continue
            try:
                _bar_step(cursor, values, before)
            except BarNotSteps as exc:
                return str(exc)
        tally = cursor.get("bar")
        if tally and tally["total"] and "/" in whole:
            tally["seen"] = next((n for n, t in reversed(bar_counts(whole)) if t == tally["total"]), tally["seen"])
    return None


# How far a printed epoch may stand from the one a logging grid puts there: the Trainer prints it rounded to two
# places, and the end-of-training dict's epoch, which scales the rest, is rounded too.
GRID_EPOCH_TOLERANCE = 0.011


def logging_grids(lines: Iterable[tuple[int, bytes]]) -> dict[str, list[int]]:
    """The Trainer's logging grid of each finished training in a console log, for the logs its dicts' ordinals
    number: {byte offset of the training's first dict: [logging interval, 1 if it also logged its first step,
    max_steps]}. A dry run over the whole file, as bar_contradiction's.

    A capture through a file (``nohup python train.py > train.log``) block-buffers the dicts while tqdm's bar reaches
    the file at once, so no count stands before a dict and the log is numbered by ordinals: its KL blow-up reads
    "step 70" where the trainer was at step 1400. Once the end-of-training dict is printed, the bar's total
    (max_steps, the bar with the most distinct counts that reached its total) and the number of train dicts give
    the interval: the Trainer logs every ``logging_steps`` (and at step 1 with ``logging_first_step``, or at the
    last step too), so n dicts fit exactly one interval. The printed epochs must agree, dict by dict: a grid is
    taken only when exactly one fits. A training with an evaluation's dict, a dict with its own step, or a dict
    line that did not parse (a wrapped one) keeps its ordinals."""
    grids: dict[str, list[int]] = {}
    launch: dict[str, Any] = {"at": None, "epochs": [], "counts": {}, "clean": True}
    for offset, raw in lines:
        whole = raw.decode("utf-8", errors="replace").rstrip("\r")
        if "/" in whole:
            for n, total in bar_counts(whole):
                launch["counts"].setdefault(total, set()).add(n)
        line = _on_screen(whole)
        values = None
        if line.startswith("{"):
            values = dict_line(line.rstrip())
            if values is None and (len(line) > WRAP_MIN_WIDTH or opens_metric_dict(line)):
                launch["clean"] = False
        elif "{" in whole and (found := embedded_dict(whole)) is not None:
            values = found[1]
        if values is None:
            continue
        if "train_runtime" in values and "step" not in values:
            if launch["at"] is not None and launch["clean"]:
                grid = _fitting_grid(launch["epochs"], launch["counts"], finite(values.get("epoch")))
                if grid is not None:
                    grids[str(launch["at"])] = grid
            launch = {"at": None, "epochs": [], "counts": {}, "clean": True}
            continue
        if launch["at"] is None and _evaluation(values):  # trainer.evaluate() after the end: the training's
            continue
        if launch["at"] is None:
            launch["at"] = offset
        if "step" in values or _evaluation(values):
            launch["clean"] = False
        launch["epochs"].append(finite(values.get("epoch")))
    return grids


def _fitting_grid(epochs: list, counts: dict[int, set[int]], end_epoch: Any) -> list[int] | None:
    """The one logging grid [interval, first step logged, max_steps] that puts these train dicts' printed epochs
    where they are, or None (see logging_grids)."""
    if len(epochs) < 2 or not isinstance(end_epoch, (int, float)) or end_epoch <= 0:
        return None
    if any(not isinstance(e, (int, float)) or isinstance(e, bool) for e in epochs):
        return None
    finished = {total: len(seen) for total, seen in counts.items() if total in seen}
    if not finished:
        return None
    most = max(finished.values())
    totals = [total for total, n in finished.items() if n == most]
    if len(totals) != 1:
        return None
    total, n = totals[0], len(epochs)
    fits = []
    for first in (0, 1):
        for last in (0, 1):
            k = n - first  # the dicts on the grid (and the last step's, if it is off the grid)
            if k < 1 + last:
                continue
            intervals: Iterable[int]
            if last:  # (k-1)·L < total < k·L: the final dict at the total, off the grid
                intervals = range(total // k + 1, -(-total // (k - 1)))
            else:  # k·L <= total < (k+1)·L: total // k, if it fits
                intervals = [total // k] if (k + 1) * (total // k) > total else []
            for interval in intervals:
                if interval < 2:
                    continue
                steps = [1] * first + [interval * i for i in range(1, k + 1 - last)] + [total] * last
                if all(
                    abs(e - end_epoch * s / total) <= GRID_EPOCH_TOLERANCE for e, s in zip(epochs, steps, strict=True)
                ):
                    fits.append([interval, first, total])
    return fits[0] if len(fits) == 1 else None


def _grid_step(grid: list[int], ordinal: int) -> int:
    """The trainer step of a launch's ``ordinal``-th dict on its logging grid; past the grid's end (an evaluation
    after the training), the last step."""
    interval, first, total = grid
    if first and ordinal == 1:
        return 1
    return min(interval * (ordinal - first), total)


def _bar_step(cursor: dict, values: dict, before: str) -> int | None:
    """The trainer's step of a printed dict without one, from the tqdm counter drawn before it: the Trainer's bar
    counts optimizer steps out of max_steps and is redrawn right before each log is printed, so
    ``5/100 [26:14<8:17:55, 314.48s/it]{'loss': …}`` is step 5. The file's first train dict decides: a counter
    before it on its line numbers the file by its bar (``cursor["bar"]["total"]`` = that bar's total); none leaves
    the file numbered by its dicts' ordinals, as before (total 0, and the answer None). Other bars (an evaluation's
    ``25/25``, vLLM's ``Processed prompts``) have other totals and are passed over; a train dict whose line shows
    only another total is a new training in the same log, whose bar counts from then on. An eval dict (``eval_*``
    keys) is at the count the bar showed last (``seen``): the step it evaluated, and so is a train dict printed a
    line or more after the bar's redraw (something was printed between them).

    The counts are the steps only while the train dicts' counts keep to the Trainer's logging grid (the first
    interval may differ: ``logging_first_step``; the last may be shorter when it ends at the bar's total). Standard
    output redirected to a file is block-buffered while tqdm writes to the unbuffered standard error, so a capture
    can print six dicts in a row after the bar reached 40 of 200 although they logged steps 5 to 30: then
    BarNotSteps, and the file is read again by its ordinals (evenly spaced, if not the trainer's numbers)."""
    if cursor.get("ordinals"):  # a bar found not to count the steps, in any launch of the file
        return None
    evaluation = _evaluation(values)
    counts = bar_counts(before) if "/" in before else []
    if cursor.get("bar") is None:
        if evaluation:
            return None
        total = counts[-1][1] if counts else 0
        cursor["bar"] = {"total": total, "step": None, "seen": None, "grid": None, "gaps": 0, "epoch": None}
    bar = cursor["bar"]
    if not bar["total"]:
        return None
    steps = [n for n, total in counts if total == bar["total"]]
    if not steps and counts and not evaluation:
        bar["total"], steps = counts[-1][1], [counts[-1][0]]
    last = bar["step"]  # the step of the file's last train dict
    if evaluation:
        return steps[-1] if steps else bar["seen"] if bar["seen"] is not None else last
    step = steps[-1] if steps else bar["seen"]  # printed a line or more after the bar's redraw: at that count
    if step is None:
        raise BarNotSteps("a train dict with no count of the bar before it")
    if last is not None:
        gap = step - last
        bar["gaps"] += 1
        if bar["gaps"] == 2:
            bar["grid"] = gap
        on_grid = gap > 0 and (bar["gaps"] == 1 or gap == bar["grid"] or (gap < bar["grid"] and step == bar["total"]))
        if not on_grid:
            raise BarNotSteps(f"the bar counted {last} and then {step} for two train dicts in a row")
    bar["step"] = step
    return step


def _trainer_step_dict(values: dict | None) -> bool:
    """Whether a printed dict is a Hugging Face Trainer's log of a training step: it has a numeric `loss` and
    `epoch`, which a config or a results dict printed among a script's metric lines does not have both of."""
    return values is not None and all(
        isinstance(values.get(k), (int, float)) and not isinstance(values.get(k), bool) for k in ("loss", "epoch")
    )


def _evaluation(values: dict) -> bool:
    """Whether a printed dict is an evaluation's (the Trainer prefixes its metrics ``eval_``), not a train step's."""
    return any(key.startswith("eval_") for key in values)


def _log_runs(cursor: dict) -> list[str | None]:
    """The runs a log's cursor has read into: each launch's, the first first (the last is the current one)."""
    return [*(cursor.get("launches") or []), cursor["run_key"]]


def _starts_over(steps: list | None, step: int) -> bool:
    """Whether a step line of a ``console_verl`` or ``console_kv`` log begins a new launch in the same file: its step
    goes back to where the current launch began, or to 0 or 1, after the launch's count went past it (an ablation
    driver's ``[Step 50/50]`` then ``[Step 1/50]`` of its next arm, a second ``python train.py`` under ``tee -a``). A
    resume from a checkpoint goes back less far, to the step it saved, and stays the same run (its repeated steps
    are what duplicate_steps reports). ``steps``: the launch's [first step as printed, last step], the first None
    when an earlier read did not keep it (then only 0 or 1 is a fresh start)."""
    if steps is None or steps[1] is None:
        return False
    first = steps[0] if steps[0] is not None else 1
    return step < steps[1] and step <= max(first, 1)


def _advanced(steps: list | None, printed: int, step: int) -> list:
    """The launch's [first step as printed, last step] after a step line (``printed`` its step as printed, ``step``
    the trainer's, which differ when the trainer counts per epoch)."""
    return [printed, step] if steps is None else [steps[0], step]


def _kv_step(state: dict, line: KvLine) -> int:
    """The trainer's step of a ``key: value`` line. A trainer that counts steps per epoch and says so
    (``Epoch:[2/3](7/500)``) is on step (epoch - first epoch) x 500 + 7; one that prints its epoch and a count that
    goes back when the epoch advances (DeepSpeed-Chat's ``epoch: 1|step: 0|…``) continues from the last step of the
    epoch before. ``state`` (the file's cursor) keeps what that needs."""
    if line.epoch is None:
        return line.step
    first = state.setdefault("first_epoch", line.epoch)
    if line.per_epoch is not None:
        return (line.epoch - first) * line.per_epoch + line.step
    base, last = state.get("base", 0), state.get("last")  # last: [epoch, step as printed]
    state.setdefault("zero_based", line.step == 0)
    if last is not None and line.epoch > last[0] and line.step <= last[1]:
        base += last[1] + (1 if state["zero_based"] else 0)
    state.update(base=base, last=[line.epoch, line.step])
    return base + line.step


def _not_repeated(cursor: dict, step: int, items: dict) -> dict:
    """A JSONL record's values less those another record at its step wrote with the same value: train and eval
    records at one step both carry the `epoch`, written once, as a trainer_state.json's entries (a repeat counted as a
    second version of the value, which duplicate_steps took for a restarted run). A key written again with another
    value is another version (the last wins). A record that repeats every value it holds is written whole: a second
    log call of the same values, which duplicate_steps is there to see (a trainer that logs each step twice). The
    records of a step come together: the cursor remembers the last step's scalar values (``at_step``), so a record
    of that step in the next ingest is compared too."""
    last = cursor.get("at_step")
    seen = dict(last[1]) if last and last[0] == step else {}  # a copy: the cursor the ingest started from stays
    fresh = {k: v for k, v in items.items() if not (k in seen and _same(seen[k], v))}
    if not fresh:
        return items
    seen.update((k, v) for k, v in fresh.items() if _remembered(v))
    cursor["at_step"] = [step, seen]
    return fresh


def _remembered(value: Any) -> bool:
    """Whether ``_not_repeated`` keeps a value in the cursor file: a scalar strict JSON holds, not a text or
    structure that would make the cursor as large as the records."""
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, (bool, int)) or (isinstance(value, str) and len(value) <= 256)


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))


def _chosen(cursor: dict) -> list[str]:
    """The state files a run was last read from (a cursor written before a run's series were all read holds one)."""
    chosen = cursor.get("chosen")
    return [chosen] if isinstance(chosen, str) else list(chosen or [])


def _positive(value: Any) -> bool:
    number = integral(value)
    return number is not None and number > 0


def _finished(doc: dict) -> bool:
    global_step, max_steps = integral(doc.get("global_step")), integral(doc.get("max_steps"))
    if global_step is not None and max_steps is not None and max_steps > 0 and global_step >= max_steps:
        return True
    entries = [entry for entry in doc.get("log_history") or [] if isinstance(entry, dict)]
    if entries and "train_runtime" in entries[-1]:  # the Trainer's end-of-training entry (a log_history saved alone)
        return True
    callbacks = doc.get("stateful_callbacks")
    control = callbacks.get("TrainerControl") if isinstance(callbacks, dict) else None
    args = control.get("args") if isinstance(control, dict) else None
    return isinstance(args, dict) and args.get("should_training_stop") is True


def ingest(
    lake_root: Path, roots: Iterable[Path], progress: Callable[[str], None] | None = None, batch_rows: int = 100_000
) -> IngestReport:
    return TrainerLogIngest(lake_root, roots, progress, batch_rows).run()
