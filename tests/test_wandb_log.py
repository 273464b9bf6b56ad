"""The `.wandb` framing reader on the real binary run file and on damaged copies of it."""

from __future__ import annotations

import collections
import shutil

import pytest
from wandb.proto import wandb_internal_pb2 as pb

from pipeline.sources import wandb_log
from tests.conftest import LENGTH_COLLAPSE

REAL_FILE = next(LENGTH_COLLAPSE.glob("run-*/run-*.wandb"))


def read_all(path, start=0):
    result = wandb_log.ReadResult()
    with open(path, "rb") as fh:
        wandb_log.check_header(fh)
        records = list(wandb_log.read_records(fh, start, result))
    return records, result


def kinds(records):
    return collections.Counter(pb.Record.FromString(data).WhichOneof("record_type") for _, data in records)


def test_real_file_yields_every_complete_record():
    records, result = read_all(REAL_FILE)
    # The counts SOURCE.txt gives for this file (written by wandb 0.23.0 while the run was still going).
    assert kinds(records) == {
        "stats": 1079,
        "output_raw": 653,
        "summary": 118,
        "history": 59,
        "files": 7,
        "telemetry": 2,
        "environment": 2,
        "header": 1,
        "run": 1,
    }
    assert result.damage == []
    # The copy ends inside a record that spans into a block that was never written: read up to before it.
    assert result.incomplete_tail == REAL_FILE.stat().st_size - result.end_offset > 0


@pytest.mark.parametrize("cut", [7, 100, 32_767, 32_768, 32_775, 500_001, 1_048_576 + 3])
def test_cut_file_reads_to_last_complete_record_and_resumes_exactly(tmp_path, cut):
    full, _ = read_all(REAL_FILE)
    part = tmp_path / "run-cut.wandb"
    data = REAL_FILE.read_bytes()
    part.write_bytes(data[:cut])
    head, result = read_all(part)
    assert all(offset + len(rec) <= cut for offset, rec in head)
    assert result.end_offset <= cut
    part.write_bytes(data)  # the writer carries on
    rest, _ = read_all(part, start=result.end_offset)
    assert [r for _, r in head] + [r for _, r in rest] == [r for _, r in full]


def test_corrupt_chunk_is_skipped_reported_and_the_rest_still_read(tmp_path):
    full, _ = read_all(REAL_FILE)
    damaged = tmp_path / "run-damaged.wandb"
    shutil.copy(REAL_FILE, damaged)
    block = 20
    spot = block * wandb_log.BLOCK_SIZE + 100  # inside the data of some chunk of block 20
    with open(damaged, "r+b") as fh:
        fh.seek(spot)
        byte = fh.read(1)
        fh.seek(spot)
        fh.write(bytes([byte[0] ^ 0xFF]))
    records, result = read_all(damaged)
    assert len(result.damage) >= 1
    first = result.damage[0]
    assert first.kind == "checksum"
    assert block * wandb_log.BLOCK_SIZE <= first.offset <= spot
    # Only records touching block 20 are lost; every record entirely outside it comes back unchanged.
    lo, hi = block * wandb_log.BLOCK_SIZE, (block + 1) * wandb_log.BLOCK_SIZE
    untouched = [(o, r) for o, r in full if o + len(r) + 7 < lo or o >= hi]
    got = dict(records)
    assert all(got.get(o) == r for o, r in untouched)
    assert len(records) >= len(untouched)
    assert len(records) < len(full)


def test_garbage_is_not_a_wandb_file(tmp_path):
    bogus = tmp_path / "run-bogus.wandb"
    bogus.write_bytes(b"definitely not a transaction log")
    with pytest.raises(wandb_log.NotAWandbFile):
        read_all(bogus)
    young = tmp_path / "run-young.wandb"
    young.write_bytes(wandb_log.FILE_HEADER[:3])
    with pytest.raises(wandb_log.HeaderNotWritten):
        read_all(young)
