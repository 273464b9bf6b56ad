"""Reader for the framing of W&B's `.wandb` transaction log.

The current wandb package no longer ships a reader for its own offline files. The format is LevelDB's log format:
a 7-byte file header (``:W&B``, magic 0xBEE1, version 0), then 32 KiB blocks of chunks, each with a 7-byte header
(crc32 little-endian, length uint16, type byte) where the checksum is ``zlib.crc32`` of the type byte plus the data.
A record is one FULL chunk or a FIRST, MIDDLE…, LAST sequence; a block tail shorter than a header is padding.

The reader can start at any record boundary (the byte offset a previous read stopped at), reads one block at a time
(memory bounded by the largest record, not by the file), and never raises on damage: a corrupt chunk is reported and
reading resumes at the next intact chunk that starts a record in the same block (its checksum proves it), else at
the next block, the way LevelDB recovers. An incomplete tail (a file still being written, or one cut short) ends
the read with the offset of the last complete record, so the next read picks up from there; but a chunk that runs
past the end of the file is damage, not a record being written, when an intact chunk follows it or the caller
knows the writer has finished (an exit record, or a file nobody has written to for a while).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

BLOCK_SIZE = 32 * 1024
HEADER_SIZE = 7
FILE_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_CHUNK = struct.Struct("<IHB")
_TYPE_CRC = {t: zlib.crc32(bytes([t])) for t in range(256)}


class NotAWandbFile(ValueError):
    """The file does not start with the `.wandb` header: it is not a W&B transaction log at all."""


class HeaderNotWritten(NotAWandbFile):
    """Shorter than the header and consistent with it: a file wandb has only begun to write."""


@dataclass
class Damage:
    offset: int  # where the damage was found
    bytes_skipped: int
    kind: str  # checksum | bad_chunk | orphan_chunk
    message: str


@dataclass
class ReadResult:
    """What one pass over a file found besides the records it yielded."""

    end_offset: int = 0  # the byte after the last complete record: where the next read starts
    damage: list[Damage] = field(default_factory=list)
    incomplete_tail: int = 0  # bytes after end_offset that do not yet form a complete record


def check_header(fh: BinaryIO) -> None:
    fh.seek(0)
    head = fh.read(HEADER_SIZE)
    if head != FILE_HEADER:
        if len(head) < HEADER_SIZE and FILE_HEADER.startswith(head):
            raise HeaderNotWritten("file is shorter than the 7-byte .wandb header (still being created?)")
        raise NotAWandbFile(f"not a .wandb file: header {head!r}, expected {FILE_HEADER!r}")


def read_records(fh: BinaryIO, start: int, result: ReadResult, finished: bool = False) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, record_bytes)`` for each complete record from ``start`` (a record boundary) on.

    ``result`` is filled as the read goes: ``end_offset`` always names where the next read must start (after the
    last complete record, or after a damaged block that was skipped), so a caller that stops early knows how far
    it got. ``finished``: nothing more will be written, so an incomplete last chunk is damage.
    """
    start = max(start, HEADER_SIZE)
    result.end_offset = start
    fh.seek(start)
    pos = start  # file offset of buf[0]
    pending: list[bytes] | None = None  # chunks of a record spanning blocks
    pending_start = 0
    block_left = BLOCK_SIZE - (pos % BLOCK_SIZE)
    while True:
        buf = fh.read(block_left)
        if not buf:
            break
        whole_block = len(buf) == block_left
        view = memoryview(buf)
        n = len(buf)
        i = 0
        while n - i >= HEADER_SIZE:
            crc, length, ctype = _CHUNK.unpack_from(view, i)
            data_end = i + HEADER_SIZE + length
            if ctype == 0 and length == 0 and crc == 0:
                i = n  # zeros: nothing more was written in this block
                break
            if data_end > n:
                if not whole_block and not finished and _next_intact(view, i + 1, n) is None:
                    break  # this chunk is still being written: an incomplete tail
                kind, why = "bad_chunk", f"chunk length {length} runs past the end of its block"
            elif ctype not in (FULL, FIRST, MIDDLE, LAST):
                kind, why = "bad_chunk", f"unknown chunk type {ctype}"
            elif zlib.crc32(view[i + HEADER_SIZE : data_end], _TYPE_CRC[ctype]) != crc:
                kind, why = "checksum", "chunk checksum mismatch"
            else:
                kind = ""
            if kind:
                # Drop the record in progress; resume at the next intact record start in this block, else (as
                # LevelDB does) at the next block.
                resume = _next_intact(view, i + 1, n)
                pending = None
                if resume is None:
                    result.damage.append(Damage(pos + i, n - i, kind, why + "; rest of the block skipped"))
                    result.end_offset = pos + block_left
                    i = n
                    break
                result.damage.append(Damage(pos + i, resume - i, kind, why + "; read on from the next intact chunk"))
                i = resume
                result.end_offset = pos + i
                continue
            chunk_offset = pos + i
            data = view[i + HEADER_SIZE : data_end]
            i = data_end
            if ctype in (FULL, FIRST):
                if pending is not None:
                    _orphan(
                        result, pending_start, chunk_offset - pending_start, "a record's FIRST chunk never got its LAST"
                    )
                if ctype == FULL:
                    pending = None
                    result.end_offset = pos + i
                    yield chunk_offset, bytes(data)
                else:
                    pending, pending_start = [bytes(data)], chunk_offset
            elif pending is None:
                _orphan(result, chunk_offset, pos + i - chunk_offset, "a MIDDLE/LAST chunk without its FIRST")
                result.end_offset = pos + i
            else:
                pending.append(bytes(data))
                if ctype == LAST:
                    record = b"".join(pending)
                    pending = None
                    result.end_offset = pos + i
                    yield pending_start, record
        if not whole_block:
            break  # the last block is not complete yet: what is left is an incomplete tail
        pos += n
        block_left = BLOCK_SIZE
    file_end = fh.seek(0, 2)
    result.incomplete_tail = max(0, file_end - result.end_offset)


def _next_intact(view: memoryview, start: int, n: int) -> int | None:
    """The position of the first chunk from ``start`` on that begins a record (FULL or FIRST), lies inside the
    buffer and whose checksum holds; None when there is none."""
    for j in range(start, n - HEADER_SIZE + 1):
        ctype = view[j + 6]
        if ctype != FULL and ctype != FIRST:
            continue
        crc, length, _ = _CHUNK.unpack_from(view, j)
        end = j + HEADER_SIZE + length
        if end <= n and zlib.crc32(view[j + HEADER_SIZE : end], _TYPE_CRC[ctype]) == crc:
            return j
    return None


def _orphan(result: ReadResult, offset: int, skipped: int, message: str) -> None:
    result.damage.append(Damage(offset, skipped, "orphan_chunk", message))
