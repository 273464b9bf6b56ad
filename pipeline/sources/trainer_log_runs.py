"""Where trainer logs are and which run each belongs to: discovery of trainer_state.json, JSONL, CSV and console
logs and notebooks below the roots (and of the config file saved beside a log), run identity (run_id, run_key,
project and name) and the runs-table record ``RunInfo``. The ingest itself is pipeline.sources.trainer_logs."""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline.secrets import redact, redact_name
from pipeline.sources import files
from pipeline.sources.files import FileIssue
from pipeline.sources.trainer_log_csv import CSV_STEP_FIELDS, csv_step_column
from pipeline.sources.trainer_log_csv import HEAD_BYTES as CSV_HEAD_BYTES
from pipeline.values import MAX_DEPTH, depth, finite, json_text, loads_checked

SOURCE = "trainer_log"
ENTITY = "local"
DEFAULT_PROJECT = "trainer_logs"
STATE_FILE = "trainer_state.json"
CONSOLE_SUFFIXES = (".log", ".txt", ".out")  # .out: what SLURM captures of a job's stdout
NOTEBOOK_SUFFIX = ".ipynb"
CSV_SUFFIX = ".csv"
# A log whose stem is made of these words alone (`metrics`, `train_metrics`, `training-log`, LLaMA-Factory's
# `trainer_log`) is named after its folder; any other stem names the run itself.
GENERIC_STEMS = {
    "output",
    "stdout",
    "stderr",
    "console",
    "log",
    "logs",
    "train",
    "training",
    "trainer",
    "metrics",
    "metric",
    "stats",
    "history",
    "events",
    "progress",
    "run",
}
# Text files that are never logs: tokenizer files inside checkpoints, package lists, and the prose beside a run
# (a README, a licence, a note of where the files came from), whose "two lr=1e-4 restarts" read as metrics.
NOT_LOGS = {"requirements.txt", "merges.txt", "vocab.txt"}
NOT_LOG_STEMS = {
    "readme",
    "license",
    "licence",
    "notice",
    "copying",
    "authors",
    "citation",
    "changelog",
    "changes",
    "notes",
    "source",
    "sources",
    "todo",
}
# JSON files a training folder holds that are never a trainer state (the model's and tokenizer's files): not opened.
NOT_STATES = {
    "config.json",
    "generation_config.json",
    "adapter_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "preprocessor_config.json",
}
# What a training's output folder holds besides its logs, none of them a log: the model's weights, the tokenizer's
# files and the Trainer's pickled arguments (save_pretrained, save_model), and the code beside a run. Not opened, and
# not said to be skipped either (discover): a sweep of thirty runs would get a page of "not a log" about adapters.
NOT_LOG_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".gguf",
    ".onnx",
    ".model",
    ".jinja",
    ".tiktoken",
    ".py",
    ".sh",
)
# What a trainer state looks like from its first bytes: an object with a log_history list (the Trainer sorts its
# keys, so it comes after a few short ones), or the log_history list on its own (flat entries, each with a step).
_STATE_HEAD = re.compile(rb'^\s*(\{.*?"log_history"\s*:\s*\[|\[\s*\{[^{}]*?"step"\s*:)', re.DOTALL)
# A custom loop's metrics saved column by column, `json.dump({"rewards_avg": [...], "kl_avg": [...]})`: its first key
# named like a metric or a step counter, holding a list that starts with two numbers (trainer_log_lines.columns).
_COLUMNS_HEAD = re.compile(
    rb'^\s*\{\s*"[^"]{0,100}(?:reward|loss|kl|acc|entropy|score|return|length|step|iter)[^"]{0,100}"\s*:\s*\['
    rb"\s*(?:-?[\d.]|NaN|-?Infinity)[^,\]]{0,40},\s*(?:-?[\d.]|NaN|-?Infinity|null)",
    re.IGNORECASE,
)
STATE_HEAD_BYTES = 65536
# A run's configuration as its trainer saved it beside the log, the first of these names the folder holds: the Tinker
# cookbook's ml_log writes config.json next to metrics.jsonl, a W&B run's files/ folder holds config.yaml next to
# output.log, and trainers configured with OmegaConf or Hydra save their resolved config.yaml in the output folder.
CONFIG_FILES = ("config.json", "config.yaml", "config.yml")
CONFIG_MAX_BYTES = 1 << 20  # a run's config is kilobytes: a bigger file of that name is something else
CONFIG_MAX_VALUES = 100_000  # values once YAML's aliases are expanded (a "billion laughs" file is no config)
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_WANDB_RUN = re.compile(r"^(offline-)?run-")


# --------------------------------------------------------------------------------------------------- discovery


@dataclass
class Found:
    logs: list[tuple[Path, str]] = field(default_factory=list)  # append-only files and their kind (jsonl|console)
    snapshots: dict[str, list[Path]] = field(default_factory=dict)  # run folder (realpath) -> its trainer_state.json
    configs: dict[str, Path] = field(default_factory=dict)  # folder (realpath) of append-only logs -> its config file

    @property
    def count(self) -> int:
        return len(self.logs) + sum(len(v) for v in self.snapshots.values()) + len(self.configs)


LLAMA_FACTORY_LOG = "trainer_log.jsonl"  # LLaMA-Factory's LogCallback: a few keys of each log_history entry


def _kind(name: str) -> str | None:
    lower = name.lower()
    if name == STATE_FILE:
        return "trainer_state"
    if lower.endswith(".jsonl"):
        return "jsonl"
    if lower.endswith(CSV_SUFFIX):
        return "csv"
    if lower.endswith(NOTEBOOK_SUFFIX):
        return "notebook"
    if lower.endswith(CONSOLE_SUFFIXES) and lower not in NOT_LOGS and lower.rsplit(".", 1)[0] not in NOT_LOG_STEMS:
        return "console"
    return None


def _not_read(name: str) -> str | None:
    """Why a folder scan does not read a file of this name, or None when it is plainly no log and goes unsaid (a
    hidden file, the model's and tokenizer's files, code, prose, a config file, which is read beside a log)."""
    lower = name.lower()
    stem = lower.rsplit(".", 1)[0]
    if lower.startswith(".") or lower in {*NOT_STATES, *NOT_LOGS, *CONFIG_FILES} or stem in NOT_LOG_STEMS:
        return None
    if lower.endswith(NOT_LOG_SUFFIXES):
        return None
    if lower.endswith(".wandb"):
        return "a W&B run file: GRPOLENS_WANDB_DIRS reads it, not the trainer-log source"
    return f"not a format trainer logs are read from ({READ_FORMATS})"


READ_FORMATS = (
    "trainer_state.json or another JSON holding a log_history, *.jsonl, *.csv with a step column, *.ipynb, "
    "*.log/*.txt/*.out console logs"
)


def _holds_log_history(path: Path) -> bool:
    """A JSON file that is a trainer state whatever it is called: a ``trainer_state.json`` saved as
    ``training_logs.json`` or under a checkpoint's name, or its ``log_history`` list written on its own (public TRL
    projects do both), or a custom loop's metrics saved as columns, one list per metric (read as the log_history
    they make: trainer_log_lines.columns)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(STATE_HEAD_BYTES)
    except OSError:
        return False
    head = head.removeprefix(b"\xef\xbb\xbf")
    return _STATE_HEAD.match(head) is not None or _COLUMNS_HEAD.match(head) is not None


def _text(path: Path) -> bool:
    """A text file by the rule every log is read by (files.not_text). A file someone names (a terminal capture saved
    as run_terminal.md, as a public TRL fork does; a log without a suffix) is read as a console log: a folder scan
    keeps to the suffixes, since a folder also holds READMEs and configs, but a name given is a log given. A binary
    file given is not read."""
    try:
        with open(path, "rb") as fh:
            return files.not_text(fh, json_lines=False) is None
    except OSError:
        return False


def state_run_dir(path: Path) -> Path:
    """A ``trainer_state.json``'s run: the output folder holding the ``checkpoint-*`` folders, or its own folder."""
    return path.parent.parent if _CHECKPOINT.match(path.parent.name) else path.parent


def _csv_log(path: Path) -> bool:
    """A CSV whose header names a step column: a metric log, not a dataset or a results table."""
    try:
        with open(path, "rb") as fh:
            return csv_step_column(fh.read(CSV_HEAD_BYTES)) is not None
    except OSError:
        return False


def _identity(folder: Path | str) -> tuple[int, int] | None:
    """A folder's (device, inode): the same for every path that leads to it, links included."""
    try:
        st = os.stat(folder)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def discover(roots: Iterable[Path], skipped: list[FileIssue] | None = None, lake_root: Path | None = None) -> Found:
    """Every trainer-log file below the roots (files or folders), once each; hidden folders left out, and the lake
    (``lake_root``: its cursor files are JSON). A symlink is followed, to a file or a folder: a folder of
    links to run folders is how a sweep is assembled. A file is known by its real path, so one reached through two
    links (W&B's ``latest-run`` beside the run folder it points to) is read once, and a folder already searched (a
    link back up the tree) is not searched again.

    Inside a ``checkpoint-N`` folder only ``trainer_state.json`` counts (the rest are weights and tokenizer files),
    and a console log, a notebook or LLaMA-Factory's ``trainer_log.jsonl`` in a folder that has its
    trainer_state.json snapshots is left out ("where that is all there is"). Elsewhere any ``*.json`` whose first
    bytes show a ``log_history`` (``_holds_log_history``) is a snapshot of its folder's run, as a
    ``trainer_state.json`` there would be, and a ``*.csv`` is a log when its header names a step column. A folder
    holding logs is looked at for a config file (CONFIG_FILES), one stat per name.

    What is not read is added to ``skipped`` with why, once per file (the ingest says each once, the first time it
    meets it): a file of a format not read, a JSON without a log_history, a CSV without a step column, a console log
    beside its run's trainer_state.json, a link to nothing, a special file, a folder that cannot be searched. Left
    unsaid: files inside checkpoint folders, hidden ones, a model's, tokenizer's, code and prose files
    (``_not_read``), and what a W&B run folder holds besides its ``.wandb`` file (media, summaries, its console
    ``files/output.log``: the W&B source's, whose ``.wandb`` file holds the run; read here too, the console made a
    second run of the same training). A W&B run folder without its ``.wandb`` file (a repository that committed the
    console alone) is searched as any folder, and a file named as a root is read wherever it is.
    """
    logs: dict[str, str] = {}
    snapshots: dict[str, set[str]] = {}
    unread: dict[str, FileIssue] = {}
    searched: set[tuple[int, int]] = set()  # (device, inode) of each folder searched: a link loop ends there
    lake = _identity(lake_root) if lake_root is not None else None

    def skip(full: Path, kind: str, why: str) -> None:
        unread.setdefault(os.path.realpath(full), FileIssue(str(full), 0, 0, kind, why))

    def add(full: Path, named: bool = False, wandb: bool = False) -> None:
        kind = _kind(full.name)
        lower = full.name.lower()
        if wandb and not lower.endswith(".wandb"):
            return  # a W&B run's own files: its .wandb file holds the run, its console and summaries say it again
        json_file = kind is None and lower.endswith(".json") and lower not in NOT_STATES
        if kind is None and not named and not json_file:
            why = _not_read(full.name)
            if why is not None and files.regular(full, special, True):
                skip(full, "not_read", why)
            return
        if not files.regular(full, special, follow=True):
            return
        if json_file and _holds_log_history(full):
            kind = "trainer_state"
        elif kind is None and not named:
            skip(full, "not_read", "a JSON file without a log_history (a config, results, a dataset): not read")
            return
        if kind == "csv" and not _csv_log(full):
            step_fields = ", ".join(CSV_STEP_FIELDS)
            skip(full, "not_read", f"a CSV whose header names no step column ({step_fields}): not a metric log")
            return
        if kind is None:  # a file named on its own: a console log whatever its suffix, unless it is binary
            if not _text(full):
                skip(full, "not_a_log", "a binary file, not a log: not read")
                return
            kind = "console"
        real = os.path.realpath(full)
        if kind == "trainer_state":
            snapshots.setdefault(str(state_run_dir(Path(real))), set()).add(real)
        else:
            logs.setdefault(real, kind)

    def unsearchable(exc: OSError) -> None:  # a root that cannot be searched is files.root_issues' to say
        if os.fspath(exc.filename) not in given and not isinstance(exc, FileNotFoundError):  # not gone meanwhile
            skip(Path(exc.filename), "unreadable", f"a folder that cannot be searched: {exc.strerror}")

    roots = [Path(root) for root in roots]
    given = {os.fspath(root) for root in roots}

    special: list[FileIssue] = []
    wandb_runs: list[str] = []  # W&B run folders: their files are that source's, said only of the run file itself
    for root in roots:
        if root.is_file():
            add(root, named=True)
            continue
        for dirpath, dirnames, filenames in os.walk(root, onerror=unsearchable, followlinks=True):
            here = _identity(dirpath)
            if here is None or here in searched or here == lake:
                dirnames[:] = []  # searched already (a loop, a second link to one folder), or the lake
                continue
            searched.add(here)
            if _WANDB_RUN.match(os.path.basename(dirpath)) and any(f.endswith(".wandb") for f in filenames):
                wandb_runs.append(dirpath + os.sep)
            wandb = any(dirpath.startswith(run) or dirpath + os.sep == run for run in wandb_runs)
            # links last, so that a folder and a link to it beside it (latest-run) are searched under its own name
            dirnames[:] = sorted(
                (d for d in dirnames if not d.startswith(".")),
                key=lambda d: (os.path.islink(os.path.join(dirpath, d)), d),
            )
            if _CHECKPOINT.match(os.path.basename(dirpath)):
                filenames = [f for f in filenames if f == STATE_FILE]
            for name in sorted(filenames):
                add(Path(dirpath) / name, wandb=wandb)
    # A console log next to a trainer_state.json prints the same log_history entries, rounded, and LLaMA-Factory's
    # trainer_log.jsonl copies some of their keys: the trainer state wins.
    for path, kind in list(logs.items()):
        copy = kind == "jsonl" and os.path.basename(path) == LLAMA_FACTORY_LOG
        if (kind in ("console", "notebook") or copy) and os.path.dirname(path) in snapshots:
            del logs[path]
            state = os.path.basename(min(snapshots[os.path.dirname(path)]))
            what, does = ("LLaMA-Factory's log", "copies") if copy else ("a console log", "prints")
            skip(
                Path(path),
                "not_read",
                f"{what} beside its run's trainer state ({state}), whose log_history it {does}: not read",
            )
    configs = {}
    for folder in sorted({os.path.dirname(p) for p in logs}):
        config = next((n for n in CONFIG_FILES if files.regular(os.path.join(folder, n), special, follow=True)), None)
        if config is not None:
            configs[folder] = Path(folder) / config
    if skipped is not None:
        skipped += special + [unread[p] for p in sorted(unread)]
    return Found(
        logs=[(Path(p), k) for p, k in sorted(logs.items())],
        snapshots={run: [Path(p) for p in sorted(paths)] for run, paths in sorted(snapshots.items())},
        configs=configs,
    )


def trainer_log_files(root: Path) -> list[Path]:
    """The real path of every file a trainer-log ingest of ``root`` reads: what its runs' ``source_files`` hold."""
    found = discover([root])
    return [path for path, _kind in found.logs] + [path for paths in found.snapshots.values() for path in paths]


def load_config(path: Path) -> dict | None:
    """The settings a config file beside a log holds, nested as written (the sweep flattens them as it does a W&B
    run's config). None for a model's own config.json (``save_pretrained``'s: architectures, hidden sizes), which
    describes the network rather than the training. ValueError, with the reason, for a file that is not a config."""
    with open(path, "rb") as fh:
        raw = fh.read(CONFIG_MAX_BYTES + 1)
    if len(raw) > CONFIG_MAX_BYTES:
        raise ValueError(f"larger than {CONFIG_MAX_BYTES} bytes")
    doc = loads_checked(raw) if path.suffix == ".json" else _yaml_config(raw)
    if not isinstance(doc, dict):
        raise ValueError(f"a {type(doc).__name__}, not a mapping of settings")
    if "transformers_version" in doc and ("architectures" in doc or "model_type" in doc):
        return None
    return _unwrapped_wandb_config(doc)


def _unwrapped_wandb_config(doc: dict) -> dict:
    """A W&B run's files/config.yaml wraps every setting as ``{desc: ..., value: ...}`` (``{value: ...}`` since
    wandb 0.19) beside ``wandb_version`` and wandb's own ``_wandb``: the settings are the values, as
    ``wandb.init(config=…)`` was given them and as the offline reader and the W&B API give them. Only a file whose
    every setting has that shape is unwrapped, so a trainer's own config with a ``value`` key stays as written."""
    settings = {k: v for k, v in doc.items() if k not in ("wandb_version", "_wandb")}
    wrapped = all(isinstance(v, dict) and "value" in v and set(v) <= {"desc", "value"} for v in settings.values())
    if not settings or not wrapped or ("wandb_version" not in doc and "_wandb" not in doc and len(settings) < 2):
        return doc
    return {k: v["value"] for k, v in settings.items()}


def _yaml_config(raw: bytes) -> object:
    """A YAML config as the JSON values a runs row holds (dates as text)."""
    import yaml

    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ValueError(f"not YAML: {exc}") from None
    except RecursionError:
        raise ValueError("nested too deeply for a YAML parser") from None
    stack, seen = [doc], 0
    while stack:  # aliases repeat a value without copying it: count what writing it out would write
        item = stack.pop()
        seen += 1
        if seen > CONFIG_MAX_VALUES:
            raise ValueError(f"more than {CONFIG_MAX_VALUES} values once its aliases are expanded")
        stack.extend(item.values() if isinstance(item, dict) else item if isinstance(item, list) else ())
    if depth(doc) > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
    try:
        return json.loads(json.dumps(doc, default=str))
    except (TypeError, ValueError) as exc:  # a key that is a list or a mapping
        raise ValueError(f"not a mapping JSON can hold: {exc}") from None


# ---------------------------------------------------------------------------------------------------- identity


def run_id_for(identity: str) -> str:
    return hashlib.sha1(identity.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def run_key_for(project: str, run_id: str) -> str:
    return f"{SOURCE}:{ENTITY}/{project}/{run_id}"


def _project(folder: Path) -> str:
    return folder.name or DEFAULT_PROJECT


def log_identity(path: Path, launch: int = 1) -> tuple[str, str, str]:
    """(project, run_id, name) of a JSONL or console log's run. ``launch``: which training appended to the file the
    run is (a console log holding a second ``python train.py`` after the first one's end): the second is
    ``<name> #2``, its identity the file's path and that number, so each launch is a run of its own."""
    folder = path.parent
    if folder.name == "files" and _WANDB_RUN.match(folder.parent.name):
        folder = folder.parent  # a W&B run folder's files/output.log belongs to the run folder
    if all(word in GENERIC_STEMS for word in re.split(r"[-_.\s]+", path.stem.lower()) if word):
        project, name = _project(folder.parent), folder.name or path.stem
    else:
        project, name = _project(folder), path.stem
    if launch == 1:
        return project, run_id_for(str(path)), name
    return project, run_id_for(f"{path} #{launch}"), f"{name} #{launch}"


@dataclass
class RunInfo:
    """What the runs table says about one run; kept in the cursor file so a refresh can rewrite the row."""

    run_key: str
    project: str
    run_id: str
    name: str
    origin: str
    state: str = "unknown"
    config: dict = field(default_factory=dict)  # what the log itself says of the run (step_source, a config record)
    file_config: dict = field(default_factory=dict)  # the config file beside the log (load_config)
    summary: dict = field(default_factory=dict)  # last value written per key, as W&B keeps it
    last_step: int | None = None
    history_rows: int = 0
    source_files: list[str] = field(default_factory=list)
    heartbeat_us: int | None = None
    history_from_ingest: int | None = None  # the log was read again from its start by this ingest

    @classmethod
    def from_state(cls, data: dict) -> RunInfo:
        return cls(**data)

    def to_state(self) -> dict:
        state = asdict(self)
        # The summary holds the logged values as they came; the cursor file lives in the lake: no secrets in it.
        state.update(
            config=redact(self.config),
            file_config=redact(self.file_config),
            summary=redact(self.summary),
            name=redact_name(self.name),
        )
        return finite(state)  # the cursor file is strict JSON

    def reset_history(self) -> None:
        self.summary, self.last_step, self.history_rows = {}, None, 0

    def observe(self, step: int, items: dict) -> None:
        self.history_rows += 1
        if self.last_step is None or step > self.last_step:
            self.last_step = step
        self.summary.update(items)

    def touch(self, path: Path, mtime_ns: int) -> None:
        if str(path) not in self.source_files:
            self.source_files.append(str(path))
        self.heartbeat_us = max(self.heartbeat_us or 0, mtime_ns // 1000)

    def row(self, ingest_id: int, now: float) -> dict:
        return {
            "run_key": self.run_key,
            "source": SOURCE,
            "origin": self.origin,
            "entity": ENTITY,
            "project": self.project,
            "run_id": self.run_id,
            "name": redact_name(self.name),
            "state": self.state,
            "exit_code": None,
            "tags": [],
            "group_name": None,
            "job_type": None,
            "sweep_id": None,
            "created_at": None,
            "heartbeat_at": self.heartbeat_us,
            "config": json_text(redact({**self.file_config, **self.config})),
            "summary": json_text(redact(self.summary)),
            "last_step": self.last_step,
            "history_rows": self.history_rows,
            "wandb_version": None,
            "source_files": self.source_files,
            "step_offsets": json_text({}),
            "ingest_id": ingest_id,
            "ingested_at": int(now * 1_000_000),
            "history_from_ingest": self.history_from_ingest,
        }
