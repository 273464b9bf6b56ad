"""Random bytes and random JSON thrown at every parser for a bounded time: nothing may escape as an exception, and
what each ingest says it read adds up. ``GRPOLENS_FUZZ_SECONDS`` (default 2 per target) runs longer; a failure
names the seed that reproduces it (``GRPOLENS_FUZZ_SEED``)."""

from __future__ import annotations

import json
import math
import os
import random
import time

import duckdb
import httpx

from pipeline.sources import axiom, event_files, files, trainer_log_lines, trainer_logs, wandb_log, wandb_offline
from tests import wandb_frames as wf

SECONDS = float(os.environ.get("GRPOLENS_FUZZ_SECONDS", "2"))
SEED = int(os.environ.get("GRPOLENS_FUZZ_SEED", str(random.SystemRandom().randrange(2**32))))

_STRINGS = [
    "",
    "step",
    "_step",
    "_time",
    "_timestamp",
    "loss",
    "global_step",
    "data",
    "event",
    "\ud800",
    "\udc80x",
    "é",
    "😀",
    "\x00",
    "a.b",
    "NaN",
    "Infinity",
    "2024-02-30T00:00:00Z",
    "2024-01-01T00:00:00+99:99",
    "2024-01-01T00:00:00.123456789Z",
    "np.float64(1.5)",
    "tensor(2.0, device='cuda:0')",
    "'",
    '"',
    "\\",
]
_NUMBERS = [
    0,
    1,
    -1,
    2**53 + 1,
    2**63,
    2**70,
    -(2**64),
    10**40,
    1e300,
    -1e-300,
    1.5,
    1e22,
    1e17,
    1.7e9,
    1.7e18,
    math.nan,
    math.inf,
    -math.inf,
    0.1,
]


def random_json(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth > 5 or roll < 0.45:
        return rng.choice(
            [
                rng.choice(_NUMBERS),
                rng.choice(_STRINGS),
                rng.random() * 10 ** rng.randint(-5, 25),
                rng.randint(-(2**70), 2**70),
                True,
                False,
                None,
                "".join(chr(rng.randint(1, 0x10FFFF)) for _ in range(rng.randint(0, 6))),
            ]
        )
    if roll < 0.55:  # a chain far deeper than any metric
        inner = random_json(rng, 99)
        for _ in range(rng.choice([10, 70, 200])):
            inner = [inner] if rng.random() < 0.5 else {"a": inner}
        return inner
    if roll < 0.75:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(_STRINGS + [str(rng.random())]): random_json(rng, depth + 1) for _ in range(rng.randint(0, 5))}


def dumps(value) -> bytes:
    return json.dumps(value, ensure_ascii=random.random() < 0.5).encode("utf-8", "surrogatepass")


def random_bytes(rng: random.Random, n: int) -> bytes:
    return bytes(rng.getrandbits(8) for _ in range(n))


def mutate(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        at = rng.randrange(len(data) + 1)
        if op < 0.5 and data:
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op < 0.75:
            data[at:at] = random_bytes(rng, rng.randint(1, 8))
        else:
            del data[at : at + rng.randint(1, 8)]
    return bytes(data)


def rounds(name: str):
    """Seeds for one target until its time is up (at least 20 rounds)."""
    rng = random.Random(f"{SEED}:{name}")
    deadline = time.monotonic() + SECONDS
    n = 0
    while n < 20 or time.monotonic() < deadline:
        n += 1
        yield rng.randrange(2**32)


def test_fuzz_line_parsers_only_return_or_say_why():
    for seed in rounds("lines"):
        rng = random.Random(seed)
        raw = dumps(random_json(rng)) if rng.random() < 0.7 else random_bytes(rng, rng.randint(0, 64))
        try:
            row = trainer_log_lines.jsonl_row(raw)
        except trainer_log_lines.BadLine:
            row = None
        if isinstance(row, trainer_log_lines.ConfigRecord):  # a stepless record of settings
            assert isinstance(row.settings, dict), f"seed {SEED}/{seed}"
        else:
            assert row is None or (isinstance(row[0], int) and -(2**63) <= row[0] < 2**63), f"seed {SEED}/{seed}"
        text = raw.decode("utf-8", "replace")
        trainer_log_lines.dict_line(text.replace('"', "'"))
        trainer_log_lines.verl_line("step:1 - " + text.replace("\n", " "), cut=rng.random() < 0.5)
        for line in (text, "[Step 3] " + text.replace("\n", " | "), "Epoch:[1/2](4/9), " + text.replace("\n", ", ")):
            pairs = trainer_log_lines.kv_line(line)
            assert pairs is None or -(2**63) <= pairs.step < 2**63, f"seed {SEED}/{seed}"
        trainer_log_lines.console_value(text)
        ns = event_files.parse_time_ns(random_json(rng) if rng.random() < 0.5 else rng.choice(_STRINGS + _NUMBERS))
        assert ns is None or -62_135_596_800 * 10**9 <= ns < 253_402_300_800 * 10**9, f"seed {SEED}/{seed}"


def test_fuzz_event_and_jsonl_files_every_line_lands_or_is_said(tmp_path):
    for seed in rounds("files"):
        rng = random.Random(seed)
        lines = []
        for i in range(rng.randint(1, 20)):
            doc = random_json(rng)
            if isinstance(doc, dict) and rng.random() < 0.7:
                doc.update({"_time": f"2024-01-01T00:00:{i:02d}Z", "step": i})
            lines.append(
                dumps(doc) if rng.random() < 0.85 else random_bytes(rng, rng.randint(1, 40)).replace(b"\n", b"")
            )
        folder = tmp_path / str(seed)
        folder.mkdir()
        (folder / "events.ndjson").write_bytes(b"\n".join(lines) + b"\n")
        (folder / "metrics.jsonl").write_bytes(b"\n".join(lines) + b"\n")
        ev = event_files.ingest(folder / "lake", [folder / "events.ndjson"])
        blank = sum(not line.strip() for line in lines)
        if [i.kind for i in ev.issues] == ["not_text"]:  # garbage with a NUL byte and no line of JSON: said once
            head = (folder / "events.ndjson").read_bytes()[: files.BLOCK]
            assert b"\0" in head and ev.events == ev.bad_lines == 0, f"seed {SEED}/{seed}"
        else:
            assert ev.events + ev.bad_lines + blank == len(lines), f"seed {SEED}/{seed}"
        tl = trainer_logs.ingest(folder / "lake", [folder / "metrics.jsonl"])
        assert not [i for i in ev.issues + tl.issues if i.kind == "failed"], f"seed {SEED}/{seed}"
        duckdb.sql(f"select count(*) from read_parquet('{folder}/lake/*/*/*.parquet', union_by_name=true)").fetchall()


def test_fuzz_trainer_state_documents(tmp_path):
    for seed in rounds("trainer_state"):
        rng = random.Random(seed)
        doc = (
            random_json(rng, 3)
            if rng.random() < 0.2
            else {
                "global_step": random_json(rng, 5),
                "max_steps": random_json(rng, 5),
                "stateful_callbacks": random_json(rng, 3),
                "log_history": [
                    random_json(rng, 3) if rng.random() < 0.3 else {"step": i, "loss": random_json(rng, 4)}
                    for i in range(rng.randint(0, 10))
                ],
            }
        )
        folder = tmp_path / str(seed)
        folder.mkdir()
        (folder / "trainer_state.json").write_bytes(dumps(doc))
        report = trainer_logs.ingest(folder / "lake", [folder])
        assert not [i for i in report.issues if i.kind == "failed"], f"seed {SEED}/{seed}: {report.issues}"


def _records(rng: random.Random) -> list[bytes]:
    out = [wf.run_record(f"fuzz{rng.randrange(10)}")]
    for step in range(rng.randint(1, 30)):
        kind = rng.random()
        texts = {f"k{j}": json.dumps(random_json(rng)) for j in range(rng.randint(0, 4))}  # ASCII, as wandb writes
        if kind < 0.7:
            out.append(wf.history(str(step) if rng.random() < 0.9 else json.dumps(random_json(rng)), **texts))
        elif kind < 0.85:
            out.append(wf.summary(**texts))
        else:
            out.append(wf.config(**texts))
    if rng.random() < 0.5:
        out.append(wf.exit_record(rng.choice([0, 1, -1])))
    return out


def test_fuzz_wandb_files_damaged_records_and_damaged_frames(tmp_path):
    for seed in rounds("wandb"):
        rng = random.Random(seed)
        records = _records(rng)
        if rng.random() < 0.5:  # damage inside records: framing intact, so the bytes reach the decoders
            records = [mutate(r, rng) if rng.random() < 0.3 else r for r in records]
            data = wf.frame(records)
        else:  # damage to the framing itself
            data = mutate(wf.frame(records), rng)
        folder = tmp_path / str(seed)
        path = folder / "runs" / "run-20250101_000000-x" / "run-x.wandb"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        result = wandb_log.ReadResult()
        with open(path, "rb") as fh:
            try:
                wandb_log.check_header(fh)
                offsets = [offset for offset, _ in wandb_log.read_records(fh, 0, result, finished=rng.random() < 0.5)]
            except wandb_log.NotAWandbFile:
                offsets = []
        block_end = -(-len(data) // wandb_log.BLOCK_SIZE) * wandb_log.BLOCK_SIZE  # damage skips to a block's end
        assert offsets == sorted(offsets) and result.end_offset <= max(block_end, 7), f"seed {SEED}/{seed}"
        report = wandb_offline.ingest(folder / "lake", [folder / "runs"])
        assert not [i for i in report.issues if i.kind == "failed"], f"seed {SEED}/{seed}: {report.issues}"
        again = wandb_offline.ingest(folder / "lake", [folder / "runs"])
        assert not again.changed, f"seed {SEED}/{seed}"


def test_fuzz_axiom_answers(tmp_path):
    client = axiom.AxiomClient("http://127.0.0.1:9", "xaat-fuzz")
    try:
        for seed in rounds("axiom"):
            rng = random.Random(seed)
            if rng.random() < 0.5:
                names = ["_time", *(rng.choice(_STRINGS) for _ in range(rng.randint(0, 3)))]
                body = {
                    "status": {},
                    "tables": [
                        {
                            "fields": [{"name": n} for n in names],
                            "columns": [[random_json(rng) for _ in range(3)] for _ in names],
                        }
                    ],
                }
                content = dumps(body)
            else:
                content = dumps(random_json(rng)) if rng.random() < 0.7 else random_bytes(rng, rng.randint(0, 64))
            try:
                table = client._parse(httpx.Response(200, content=content))
            except axiom.AxiomError:
                continue
            list(table.rows())
    finally:
        client.close()
