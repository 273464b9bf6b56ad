"""Hand-built `.wandb` files for inputs the real writer never produces (hostile values, damage in chosen places).

The framing is LevelDB's log format, as pipeline/sources/wandb_log.py reads it; the records are wandb's own
protobuf classes. Real runs come from tests/wandb_writer.py: this is only for what wandb would refuse to write.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

from pipeline.sources.wandb_log import BLOCK_SIZE, FILE_HEADER, FIRST, FULL, HEADER_SIZE, LAST, MIDDLE


def frame(records: list[bytes]) -> bytes:
    """The bytes of a `.wandb` file holding ``records`` (each split over blocks as LevelDB does)."""
    out = bytearray(FILE_HEADER)
    for data in records:
        first = True
        while True:
            left = BLOCK_SIZE - len(out) % BLOCK_SIZE
            if left < HEADER_SIZE:
                out += b"\0" * left
                left = BLOCK_SIZE
            chunk, data = data[: left - HEADER_SIZE], data[left - HEADER_SIZE :]
            last = not data
            kind = FULL if first and last else FIRST if first else LAST if last else MIDDLE
            out += struct.pack("<IHB", zlib.crc32(bytes([kind]) + chunk), len(chunk), kind) + chunk
            first = False
            if last:
                break
    return bytes(out)


def run_record(run_id: str, project: str = "hostile", start: int = 1_700_000_000) -> bytes:
    record = pb.Record(run=pb.RunRecord(run_id=run_id, project=project, entity="tests", display_name=run_id))
    record.run.start_time.seconds = start
    return record.SerializeToString()


def history(step_json: str, **values: str) -> bytes:
    """A history record; values are JSON texts as wandb writes them (``value_json``)."""
    items = [pb.HistoryItem(key="_step", value_json=step_json)]
    items += [pb.HistoryItem(key=k, value_json=v) for k, v in values.items()]
    return pb.Record(history=pb.HistoryRecord(item=items)).SerializeToString()


def config(**values: str) -> bytes:
    return pb.Record(
        config=pb.ConfigRecord(update=[pb.ConfigItem(key=k, value_json=v) for k, v in values.items()])
    ).SerializeToString()


def summary(**values: str) -> bytes:
    return pb.Record(
        summary=pb.SummaryRecord(update=[pb.SummaryItem(key=k, value_json=v) for k, v in values.items()])
    ).SerializeToString()


def exit_record(code: int = 0) -> bytes:
    return pb.Record(exit=pb.RunExitRecord(exit_code=code)).SerializeToString()


def write(folder: Path, run_id: str, records: list[bytes]) -> Path:
    """``folder/run-<time>-<id>/run-<id>.wandb`` holding the records; returns the file."""
    path = Path(folder) / f"run-20250101_000000-{run_id}" / f"run-{run_id}.wandb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(frame(records))
    return path
