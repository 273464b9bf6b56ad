"""How a line of each trainer-log format becomes a step and its values (the formats themselves are described in
pipeline.sources.trainer_logs): a JSONL object, an HF Trainer console dict, a verl console ``step:N - key:value``
line, a hand-written trainer's ``key: value`` line with a step, and the numbers inside them (``nan``, numpy/torch
wrappers, numeric strings). Pure functions of one line, so the fuzz tests can throw anything at them; only
``complete_lines`` touches a file."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from pipeline.secrets import redact_text
from pipeline.values import MAX_DEPTH, depth, is_int64, loads_checked, time_us, without_surrogates

# system/step: ROLL; iteration: custom trainers that count the outer loop of rollouts and updates; current_steps:
# LLaMA-Factory's trainer_log.jsonl
STEP_FIELDS = ("step", "global_step", "_step", "train/global_step", "system/step", "iteration", "iter", "current_steps")
# A record with none of STEP_FIELDS is at the first of its keys named like a step counter that holds an integer (the
# CS336 GRPO trainer's `grpo_step`, `train_step`, `rl_step`, `trainer/step`: the names duplicate_steps takes for
# counters); one whose word names a bound or a mark (`max_step`, `best_step`) is not the record's step.
_COUNTER_NAME = re.compile(r"(?:^|[/.])(?:(?P<word>[a-z]+)_)?step$")
_NOT_COUNTERS = frozenset({"max", "min", "total", "num", "n", "best", "last", "next", "target", "warmup"})
NO_STEP_FIELDS = ", ".join(STEP_FIELDS) + ", or an integer under a name like grpo_step or trainer/step"  # said
# A record that is an evaluation's says so under one of these keys (or with `"eval": true`): its values are not the
# training's at that step (the CS336 trainer's `{"type": "eval", "grpo_step": 5, "reward": …}` beside its rollout's
# `reward`).
EVAL_MARKERS = ("type", "split", "phase", "mode")
EVAL_NAMES = frozenset({"eval", "evaluation", "val", "validation", "test"})
# A key already named as an evaluation's (`eval_loss`, as the HF Trainer writes it, `eval/acc`, verl's `val-core/…`).
_EVAL_PREFIXED = re.compile(r"(?:eval|evaluation|val|valid|validation|test)(?:[-_/.@]|$)", re.IGNORECASE)
# The keys a custom trainer writes its settings under in a record of their own at the top of its metric log
# (`{"type": "config", "argv": [...], "args": {"lr": 2e-05, ...}}`, `{"hparams": {...}}`).
CONFIG_RECORD_KEYS = ("config", "args", "hparams", "hyperparameters")
_READ_CHUNK = 1 << 20


_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE)
_WRAPPED = re.compile(r"^(?:(?:np|numpy|torch)\.[A-Za-z_]\w*|tensor)\((.*)\)$", re.DOTALL)
_WORDS = {"True": True, "False": False, "None": None}
_WRAPPER_CALLS = {"tensor", "torch.tensor"}
_LITERAL_NAMES = {
    "nan": math.nan,
    "NaN": math.nan,
    "inf": math.inf,
    "Infinity": math.inf,
    "true": True,
    "false": False,
    "null": None,
}


def number(text: str) -> int | float | None:
    """A number written as text (``12``, ``-0.5``, ``1e-05``, ``nan``, ``inf``), else None."""
    text = text.strip()
    if _INT.fullmatch(text):
        return int(text) if len(text) <= 4000 else float(text)  # Python refuses longer int conversions
    if _FLOAT.fullmatch(text):
        return float(text)
    return None


def console_value(text: str) -> Any:
    """A value as verl's console logger prints it: unwrapped from ``np.float64(...)``/``tensor(...)``."""
    inner = text.strip()
    while (match := _WRAPPED.match(inner)) is not None:
        inner = match.group(1).split(",", 1)[0].strip()  # tensor(0.5, device='cuda:0')
    parsed = number(inner)
    if parsed is not None:
        return parsed
    return _WORDS.get(inner, text.strip())


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


class _Literals(ast.NodeTransformer):
    """Makes a printed dict evaluable by ``ast.literal_eval``: ``nan``/``inf`` names, JSON's true/false/null, and
    numpy/torch scalar wrappers (``np.float64(0.5)``) become constants. Nothing is ever executed."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in _LITERAL_NAMES:
            return ast.copy_location(ast.Constant(_LITERAL_NAMES[node.id]), node)
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        name = _dotted(node.func)
        wrapper = name in _WRAPPER_CALLS or re.fullmatch(r"(np|numpy)\.\w+", name)
        if wrapper and len(node.args) == 1:
            return self.visit(node.args[0])
        return node


# A repr in angle brackets as a keyword argument of a printed call, outside the quoted strings: torch's
# `tensor(1.0001, device='mps:0', grad_fn=<DivBackward0>)` of a value computed with gradients. A quote that never
# closes runs to the end of the line, so each character is looked at once whatever the line holds.
_ANGLE_ARGUMENT = re.compile(r"""('(?:[^'\\]|\\.?)*+(?:'|$)|"(?:[^"\\]|\\.?)*+(?:"|$))|(?<=\w=)<[^<>'"]*>""")


def dict_line(line: str) -> dict | None:
    """A whole line that is one dict literal with at least one number (the HF Trainer's per-step log), else None."""
    if not (line.startswith("{") and line.endswith("}")):
        return None
    if "=<" in line:  # no Python syntax: a placeholder the wrapper's unwrapping drops with its other keywords
        line = _ANGLE_ARGUMENT.sub(lambda found: found.group(1) or "None", line)
    try:
        parsed = ast.literal_eval(_Literals().visit(ast.parse(line, mode="eval")).body)
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(parsed, dict) or not all(isinstance(k, str) for k in parsed):
        return None
    values = {k: (number(v) if isinstance(v, str) and number(v) is not None else v) for k, v in parsed.items()}
    if not any(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values.values()):
        return None
    if depth(values) > MAX_DEPTH:
        return None
    try:  # tuples, sets, bytes inside a value become what JSON can hold; lone surrogates their escapes
        return without_surrogates(json.loads(json.dumps(values, default=repr)))
    except (TypeError, ValueError, RecursionError):
        return None


_BAR_BEFORE_DICT = re.compile(r"^(?:.*[|\]]\s*)?(?=\{['\"])")


def embedded_dict(whole: str) -> tuple[str, dict] | None:
    """A printed log dict sharing its physical line with progress bars: the tqdm redraws around it, joined to it by
    carriage returns (a log captured with nohup or tee keeps them all), or a bar left without its newline before it
    (``… 0%|          |{'loss': 2.03, …}``): (the text before it, the dict). What a terminal shows is only the last
    redraw, which is no dict. A dict after other text (``config: {…}``) is not a log line."""
    segments = whole.split("\r")
    for n, segment in enumerate(segments):
        found = _BAR_BEFORE_DICT.match(segment)
        if found and (values := dict_line(segment[found.end() :].rstrip())) is not None:
            return "\r".join([*segments[:n], segment[: found.end()]]), values
    return None


# tqdm's counter, `{bar}| {n}/{total} [{elapsed}<{remaining}, {rate}]` (`| 5/100 [26:14<8:17:55, 314.48s/it]`).
_BAR_COUNT = re.compile(r"\|\s*(\d{1,18})/(\d{1,18})\s*\[")


def bar_counts(text: str) -> list[tuple[int, int]]:
    """Every tqdm counter in ``text`` (the redraws before a printed dict), as (n, total), in the order drawn."""
    return [(int(m.group(1)), int(m.group(2))) for m in _BAR_COUNT.finditer(text)]


# A `'key': number` pair of a printed dict (`'loss': 0.0`, `'kl': np.float64(0.001)`, `'grad_norm': nan`).
_DICT_NUMBER = re.compile(r"""['"][^'"]+['"]\s*:\s*(?:(?:np|numpy|torch)\.\w+\(|tensor\()?[+-]?(?:\d|\.\d|nan|inf)""")


def opens_metric_dict(text: str) -> bool:
    """Whether ``text`` is the start of a printed metric dict (``{'loss': 0.0, 'grad_norm': 0.63, …``): a brace, then
    at least two numeric pairs. A config printed over lines (``{'model_name': 'Qwen',``, pprint's ``{'lr': 1e-06,``,
    one pair a line) is not one."""
    return re.match(r"\{\s*['\"]", text) is not None and len(_DICT_NUMBER.findall(text, 0, 4096)) >= 2


_VERL_STEP = re.compile(r"step:(\d+)(?: - |$)")


def verl_line(line: str, cut: bool) -> tuple[int, dict] | None:
    """``step:N - key:value - ...`` → (N, values). ``cut``: the line may have lost its end, so its last pair is
    dropped (only a pair followed by `` - `` is known to be whole)."""
    match = _VERL_STEP.match(line)
    if match is None or len(match.group(1)) > 19 or not is_int64(int(match.group(1))):
        return None
    rest = line[match.end() :]
    pairs = rest.split(" - ") if rest else []
    if cut and pairs:
        pairs.pop()
    items = {}
    for pair in pairs:
        key, sep, text = pair.partition(":")
        if sep and key:
            items[key] = console_value(text)
    return int(match.group(1)), items


# A hand-written trainer's metric line: `key: value` or `key=value` pairs, the key one to four words (`Actor Loss`,
# `actor/kl`), the value a plain number followed by a separator (`12.5s`, `10.77GB` and `[0.9, 0.95]` are not
# values), each pair at the line's start or after a separator, so `global_step=10` inside `epoch=0/global_step=10`
# and the `08:59` of a timestamp are not pairs.
_KV_PAIR = re.compile(
    r"(?:^|(?<=[\s,|;(\[{]))"
    r"(?P<key>[A-Za-z_][\w/.\-]*(?: [A-Za-z_][\w/.\-]*){0,3})"
    r"\s*[:=]\s*"
    r"(?P<value>[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|nan|inf))"
    r"(?=$|[\s,|;)\]}])",
    re.IGNORECASE,
)
# The step of such a line, as trainers print it: a pair (`step: 12`, `global_step=12`, `iter: 3`), or a word and a
# number (`[Step 20]`, `[Update 40]`, `GRPO step 10/500`), or an epoch and a step within it (MiniMind's
# `Epoch:[1/2](3/500)`).
KV_STEP_KEYS = ("global_step", "step", "train_step", "training_step", "iteration", "iter", "update")
_KV_STEP_WORD = re.compile(
    r"(?:^|(?<=[\s,|;(\[{]))(?:global[ _])?(?:step|iter|iteration|update)\s+#?(?P<step>\d{1,18})"
    r"(?:\s*/\s*(?P<total>\d{1,18}))?(?=$|[\s,|;:)\]}])",
    re.IGNORECASE,
)
_KV_EPOCH = re.compile(
    r"(?:^|(?<=[\s,|;(\[{]))epoch\s*[:=]?\s*\[?\s*(?P<epoch>\d{1,9})\s*/\s*\d{1,9}\s*\]?"
    r"(?:\s*[,:]?\s*\(\s*(?P<step>\d{1,18})\s*/\s*(?P<total>\d{1,18})\s*\))?",
    re.IGNORECASE,
)
_SPACED_ASSIGNMENT = re.compile(r"\s=\s")
_OPENS, _CLOSES = re.compile(r"\s*\(\s*"), re.compile(r"\s*\)")  # a pair alone in parentheses
KV_MIN_VALUES = 2  # a line with a step and fewer values is a progress or housekeeping line (`step=10, skipped=4`)


@dataclass(frozen=True)
class KvLine:
    step: int  # as printed: within its epoch when the trainer counts per epoch (pipeline.sources.trainer_logs)
    epoch: int | None  # the epoch the line names, if any
    per_epoch: int | None  # steps per epoch, when the line says (`(3/500)` after an epoch)
    values: dict[str, int | float]


def kv_key(key: str) -> str:
    """A printed key as the lake keeps it: lower case, words joined by `_` (`Actor Loss` -> `actor_loss`)."""
    return "_".join(key.split()).lower()


def kv_line(line: str) -> KvLine | None:
    """A hand-written trainer's metric line (``[Step 20] loss=1.5 | kl=0.01``, ``epoch: 0|step: 3|act_loss: 0.2|…``,
    ``Epoch:[1/1](3/500), Reward: 0.38, KL_ref: 0.0004``): its step and at least KV_MIN_VALUES numeric values, else
    None. An `epoch` pair stays a value, as the HF Trainer logs it. A pair alone in parentheses right after another
    one's value is a statistic of that value, named after both: ``reward=0.300 (std=0.459)`` is ``reward_std``
    (a bare ``std`` would say nothing of what it is the spread of)."""
    pairs: dict[str, int | float] = {}
    before = None
    for match in _KV_PAIR.finditer(line):
        value = number(match.group("value"))
        key = kv_key(match.group("key"))
        if (
            before is not None
            and _OPENS.fullmatch(line, before.end(), match.start())
            and _CLOSES.match(line, match.end())
        ):
            key = f"{kv_key(before.group('key'))}_{key}"
        if value is not None:
            pairs.setdefault(key, value)
        before = match
    step = next((integral(pairs.pop(k)) for k in KV_STEP_KEYS if k in pairs), None)
    for key in KV_STEP_KEYS:  # a second spelling of the step is not a value either
        pairs.pop(key, None)
    epoch = pairs.get("epoch")
    per_epoch = None
    least = KV_MIN_VALUES
    if step is None and (words := list(_KV_STEP_WORD.finditer(line))):
        # an outer loop and a step on one line (`Iteration 1/1, Step 37/500, loss: 0.0004`): the step counts, and
        # counted out of its total it makes a metric line of a single value that ends the line (not a stage of a
        # script, `[Step 3/6] Loading model (LoRA r=16)...`)
        word = next((w for w in words if "step" in w.group(0).lower()), words[0])
        step = int(word.group("step"))
        last = list(_KV_PAIR.finditer(line))[-1:]
        if word.group("total") is not None and "step" in word.group(0).lower() and last:
            least = 1 if not line[last[0].end() :].strip() and last[0].start() > word.end() else KV_MIN_VALUES
    if (found := _KV_EPOCH.search(line)) is not None:
        epoch = int(found.group("epoch"))
        if step is None and found.group("step") is not None:
            step, per_epoch = int(found.group("step")), int(found.group("total"))
    if step is None or not is_int64(step) or len(pairs) - ("epoch" in pairs) < least:
        return None
    return KvLine(step, integral(epoch) if epoch is not None else None, per_epoch, pairs)


def kv_trailing(line: str) -> dict[str, int | float] | None:
    """Values printed on a line of their own, without a step (DeepSpeed-Chat's ``average reward score: -0.68`` under
    its ``epoch: 0|step: 0|…`` line): the pairs, when the line holds nothing else (but its indentation); else None. A
    step or an epoch on the line, prose around a number (``Attempted loss scale: 65536, reducing to 32768``), a
    unit (``latency=7.99s``), an assignment spaced as code and mathematics write it (``x = 8``, ``test_index = 1``
    in a completion the trainer prints), or anything before the first pair make it no such line: a markdown bullet
    in a printed completion (``* Number of sweaters: 4``) is prose, and a label (``Config: steps=50, lr=5e-06``) says
    what the pairs are, the settings of a launch rather than values of the step before."""
    found = list(_KV_PAIR.finditer(line))
    if not found or line[: found[0].start()].strip() or _KV_PAIR.sub("", line[found[0].start() :]).strip(" \t,|;"):
        return None
    if any(_SPACED_ASSIGNMENT.search(match.group(0)) for match in found):
        return None
    pairs: dict[str, int | float] = {}
    for match in found:
        value = number(match.group("value"))
        if value is None:
            return None
        pairs.setdefault(kv_key(match.group("key")), value)
    if {*KV_STEP_KEYS, "epoch"} & set(pairs) or _KV_STEP_WORD.search(line) or _KV_EPOCH.search(line):
        return None
    return pairs


def integral(value: Any) -> int | None:
    """A step value: an int, or a float with no fraction (``10.0``), within 64 bits; bools and anything else
    (``1e300``, ``2**70``) are not steps."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and is_int64(value):
        return value
    return None


@dataclass(frozen=True)
class ConfigRecord:
    """A JSONL record that holds the run's settings rather than a step's values (config_record)."""

    settings: dict


def config_record(obj: dict) -> ConfigRecord | None:
    """A stepless record that is the run's config: the mapping under one of CONFIG_RECORD_KEYS of a record that
    holds nothing else (besides a ``type``), or of one marked ``"type": "config"`` (what else it holds, the command
    line as typed, a note, repeats or describes the invocation; such a record without a mapping is its other keys).
    None for any other record: a stepless line of values is no config."""
    key = next((k for k in CONFIG_RECORD_KEYS if isinstance(obj.get(k), dict)), None)
    if key is not None and (obj.get("type") == "config" or set(obj) <= {key, "type"}):
        return ConfigRecord(obj[key])
    if obj.get("type") == "config":
        return ConfigRecord({k: v for k, v in obj.items() if k != "type"})
    return None


# The step column of a metrics dict saved as columns (columns): the steps its other columns' entries are at.
COLUMN_STEP_KEYS = frozenset({"step", "steps", "global_step", "global_steps", "iteration", "iterations", "iter"})


@dataclass(frozen=True)
class Columns:
    """A metrics dict saved column by column, as the log_history it makes (columns)."""

    log_history: list[dict]
    settings: dict  # its values that are no list: the run's settings, as a trainer state's top-level keys
    left_out: list[str]  # its lists that cannot be placed at steps (another length than the run's)
    by_index: bool  # no step column: entry i is step i + 1


def _number(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _rising(values: list) -> list[int] | None:
    """A step column's steps: integers that only go up, else None."""
    steps = [integral(x) for x in values]
    if any(step is None for step in steps):
        return None
    counted = [step for step in steps if step is not None]
    return counted if all(a < b for a, b in pairwise(counted)) else None


def columns(doc: Any) -> Columns | None:
    """A custom loop's metrics saved as ``json.dump({"rewards_avg": [0.2, 0.3, …], "kl_avg": […]})``: entry i of each
    list of numbers of the longest length is a value of step i + 1, or of the step a step column among them gives
    (COLUMN_STEP_KEYS, integers that only go up); a null is no value. Lists of another length (an evaluation every
    few steps, a per-epoch summary) say nothing of which steps they are at and are left out, named; the dict's other
    values that are no list or mapping are the run's settings. None for anything else (a trainer state, a config
    whose lists are not all numbers)."""
    if not isinstance(doc, dict) or "log_history" in doc:
        return None
    lists = {k: v for k, v in doc.items() if isinstance(v, list) and v and all(_number(x) for x in v)}
    longest = max((len(v) for v in lists.values()), default=0)
    full = {k: v for k, v in lists.items() if len(v) == longest}
    if longest < 2:
        return None
    counted = {k: rising for k, v in full.items() if k.lower() in COLUMN_STEP_KEYS and (rising := _rising(v))}
    step_key = next(iter(counted), None)
    steps: list[int] | range = counted[step_key] if step_key is not None else range(1, longest + 1)
    history = [
        {"step": step, **{k: v[i] for k, v in full.items() if k != step_key and v[i] is not None}}
        for i, step in enumerate(steps)
    ]
    settings = {k: v for k, v in doc.items() if not isinstance(v, (list, dict))}
    left_out = sorted(k for k, v in doc.items() if isinstance(v, list) and k not in full)
    return Columns(history, settings, left_out, step_key is None)


class BadLine(ValueError):
    def __init__(self, kind: str, message: str, step_like: tuple[str, ...] = ()):
        super().__init__(message)
        self.kind = kind
        self.step_like = step_like  # of a record with no step: its keys that look like one, for the file's message


def counter_name(key: str) -> bool:
    """Whether a key is named like a step counter (`grpo_step`, `trainer/step`), not a bound or a mark."""
    found = _COUNTER_NAME.search(key)
    return found is not None and found.group("word") not in _NOT_COUNTERS


def step_field(obj: dict) -> str | None:
    """The key of a record's step: the first of STEP_FIELDS it has, else the first key in the record's order named
    like a step counter (counter_name) whose value is an integer (`grpo_step` before `optimizer_step`, as the CS336
    trainer writes them in every record)."""
    known = next((f for f in STEP_FIELDS if f in obj), None)
    if known is not None:
        return known
    return next((k for k, v in obj.items() if counter_name(k) and integral(v) is not None), None)


def evaluation_values(items: dict, marker: str | None = None) -> dict:
    """An evaluation's values, named as evaluation series: each key under `eval/` (what eval_summary and the alias
    seed's `eval/reward`, `eval/accuracy` read), so that it never overwrites the training's value of that key at
    the same step. As in a trainer_state.json's eval entries (`eval_loss`, beside a plain `epoch`), what says where
    in training it was taken stays as written: `epoch`, step counters (`optimizer_step`), internal `_` keys and the
    ``marker`` that made it an evaluation, and so does a key already named as an evaluation's."""
    return {
        key
        if key in (marker, "epoch") or key.startswith("_") or counter_name(key) or _EVAL_PREFIXED.match(key)
        else f"eval/{key}": value
        for key, value in items.items()
    }


def evaluation_marker(items: dict) -> str | None:
    """The key that marks a JSONL record as an evaluation's (EVAL_MARKERS, ``"eval": true``), else None."""
    if items.get("eval") is True:
        return "eval"
    return next(
        (k for k in EVAL_MARKERS if isinstance(items.get(k), str) and items[k].strip().lower() in EVAL_NAMES), None
    )


def jsonl_row(raw: bytes) -> tuple[int, int | None, dict] | ConfigRecord | None:
    """One JSONL line → (step, ts_us, values), or the run's settings (config_record); None for a blank line;
    BadLine for anything unusable. An evaluation's record has its values under `eval/` (evaluation_values)."""
    if not raw.strip():
        return None
    try:
        obj = loads_checked(raw)
    except ValueError as exc:  # includes bad UTF-8 and nesting beyond MAX_DEPTH
        raise BadLine("bad_line", f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise BadLine("bad_line", f"a JSON {type(obj).__name__}, not an object")
    field = step_field(obj)
    step = integral(obj[field]) if field else None
    if step is None and field:
        raise BadLine("bad_step", f"{field} {shown(obj[field])} is not an integer within 64 bits")
    if step is None and (record := config_record(obj)) is not None:
        return record
    if step is None:
        step_like = tuple(k for k in obj if re.search("step|iter", k, re.IGNORECASE))
        raise BadLine("no_step", f"no integer step field ({NO_STEP_FIELDS})", step_like)
    del obj[field]  # not a value; the others keep their order
    items = obj
    if isinstance(items.get("data"), dict):  # verl's file logger: {"step": N, "data": {...}}
        items = {**{k: v for k, v in items.items() if k != "data"}, **items["data"]}
    if (marker := evaluation_marker(items)) is not None:
        items = evaluation_values(items, marker)
    stamp = items.get("_timestamp")
    ts_us = None
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        ts_us = time_us(float(stamp)) if abs(stamp) < 1e300 else None  # out of range: the row stays, untimed
    return step, ts_us, items


def shown(value: Any) -> str:
    """A value quoted in a message: short, whatever it is, and never a credential (cut after redaction, so no
    part of one is left)."""
    text = redact_text(repr(value))
    return text if len(text) <= 40 else text[:37] + "..."


def whole_line(raw: bytes, kind: str) -> bool:
    """Whether a last line still without its newline is complete all the same: a JSON object (``kind`` jsonl) or a
    printed dict ends with its closing brace, and no part of one that is still being written parses as one. (A
    verl or ``key: value`` line could still grow by a pair: those wait for their newline, or for the file to go
    quiet.) A log downloaded or copied without its final newline is then read whole at once, not 30 minutes later."""
    text = raw.rstrip()
    if not text.endswith(b"}"):
        return False
    if kind == "jsonl":
        try:
            return isinstance(loads_checked(text), dict)
        except ValueError:
            return False
    return dict_line(text.decode("utf-8", errors="replace")) is not None


def complete_lines(
    fh, start: int, end: int, finished: bool = False, kind: str | None = None
) -> Iterator[tuple[int, bytes]]:
    """(offset, line without its newline) for every complete line between ``start`` and ``end``; a last line
    without its newline is not yielded (the writer is still writing it) unless the file is ``finished``
    (files.quiet), then it is the file's last line, or the line is whole as it is (``whole_line`` of the file's
    ``kind``). A caller's cursor after a line is
    ``min(offset + len(line) + 1, end)``: right after that last line, so that what a later writer appends is read
    from there, on its own (a line it starts with a newline is a blank line first)."""
    fh.seek(start)
    pos, pending, remaining = start, [], end - start
    while remaining > 0:
        data = fh.read(min(_READ_CHUNK, remaining))
        if not data:
            break
        remaining -= len(data)
        if b"\n" not in data:  # a long line (a tqdm bar redrawn with \r only): join its pieces once, later
            pending.append(data)
            continue
        lines = b"".join([*pending, data]).split(b"\n")
        pending = [lines.pop()]
        for line in lines:
            yield pos, line
            pos += len(line) + 1
    tail = b"".join(pending)
    if tail and (finished or (kind is not None and whole_line(tail, kind))):
        yield pos, tail
