"""What the file-reading sources share: which paths may be read, and whether a file still holds what was read.

Only regular files are read: a FIFO, socket or device named like a log would block ``open()`` forever (with the
source's lock held) or never end, so it is reported and skipped. A configured root that does not exist, or that
is a symlink loop, is said, not taken for "no files".

Byte-offset cursors assume a file only grows. A file rewritten in place (a log truncated and written again, a
file replaced by another of the same or larger size) would be read from the old offset and lose what now stands
before it. So a cursor keeps a fingerprint of the bytes it has read: a hash of the file's first block and of the
block just before the offset (two small reads, only for files whose size or mtime changed). A file whose
fingerprint no longer matches is read again from the start.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from pipeline.values import loads_checked

BLOCK = 4096  # bytes hashed at the head of a file and before its cursor
QUIET_S = 30 * 60  # a file untouched this long has no writer any more (see quiet)


@dataclass
class FileIssue:
    """Something an ingest skipped, and where: one ``ingest_issues`` row."""

    path: str
    offset: int
    bytes_skipped: int
    kind: str
    message: str

    def __post_init__(self) -> None:
        # A message may quote what was skipped (a bad line's _time, a server's answer): it is printed, shown in
        # Dagster and written to the lake, so credentials in it are replaced here, once (pipeline.secrets).
        from pipeline.secrets import redact_text

        if type(self.message) is str:
            self.message = redact_text(self.message)
        if type(self.path) is str:
            self.path = redact_text(self.path)


@dataclass
class IngestReport:
    """What one ingest of a source did; each source words its own lines (this one is the W&B offline reader's).
    Here, not in that reader, so that a source can report without importing wandb (0.8 s)."""

    files_seen: int = 0
    files_read: int = 0
    records: int = 0
    values: int = 0
    runs_touched: list[str] = field(default_factory=list)
    issues: list[FileIssue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    ingest_id: int | None = None

    @property
    def changed(self) -> bool:
        return self.ingest_id is not None

    def lines(self) -> list[str]:
        files, runs = self.files_seen, len(self.runs_touched)
        out = [
            f"wandb offline: {files} run file{'s' * (files != 1)}, {self.files_read} read, {self.records} records, "
            f"{self.values} values, {runs} run{'s' * (runs != 1)} updated in {self.seconds:.2f}s"
        ]
        out += [f"  note: {n}" for n in self.notes]
        out += [f"  skipped: {i.path} @ byte {i.offset}: {i.kind}: {i.message}" for i in self.issues]
        return out


def failed_file(path: Path | str, exc: Exception) -> FileIssue:
    """A file whose reading failed in a way no reader anticipated: reported, the other files go on, and it is
    read again next time (its cursor does not move)."""
    return FileIssue(
        str(path),
        0,
        0,
        "failed",
        f"could not be read: {type(exc).__name__}: {exc}; "
        "the other files were ingested, this one is tried again next time",
    )


def root_issues(roots: Iterable[Path], variable: str) -> list[FileIssue]:
    """Configured roots that cannot be searched: missing, a symlink loop, or neither a folder nor a regular file."""
    issues = []
    for root in roots:
        try:
            mode = os.stat(root).st_mode
        except FileNotFoundError:
            issues.append(FileIssue(str(root), 0, 0, "missing_root", f"{variable} names {root}, which does not exist"))
            continue
        except OSError as exc:  # ELOOP, EACCES, ENOTDIR
            issues.append(FileIssue(str(root), 0, 0, "bad_root", f"{variable} names {root}: {exc.strerror}"))
            continue
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            issues.append(
                FileIssue(
                    str(root),
                    0,
                    0,
                    "not_regular",
                    f"{variable} names {root}, a {_kind(mode)}, not a folder or a regular file",
                )
            )
    return issues


def regular(path: Path | str, skipped: list[FileIssue] | None = None, follow: bool = False) -> bool:
    """A regular file and not a symlink (one lstat). A special file is added to ``skipped``; a symlink is not:
    links are never followed (``latest-run``), silently. With ``follow`` (the trainer-log source, whose roots are
    often a folder of links assembling a sweep) a link to a regular file is one, and a link to nothing is added to
    ``skipped``."""
    try:
        mode = (os.stat if follow else os.lstat)(path).st_mode
    except OSError as exc:
        if follow and skipped is not None and os.path.islink(path):
            why = f"a symlink to {os.readlink(path)}, which cannot be opened ({exc.strerror}): not read"
            skipped.append(FileIssue(str(path), 0, 0, "broken_link", why))
        return False
    if stat.S_ISREG(mode):
        return True
    if skipped is not None and not (stat.S_ISLNK(mode) or stat.S_ISDIR(mode)):
        skipped.append(FileIssue(str(path), 0, 0, "not_regular", f"a {_kind(mode)}, not a regular file: not read"))
    return False


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISDIR, "folder"),
        (stat.S_ISLNK, "symlink"),
    ):
        if test(mode):
            return name
    return "special file"


def quiet(mtime_ns: int) -> bool:
    """Not written to for a while: wandb writes system stats every few seconds while a run lives, and a trainer
    appends to its log at every logging step, so a file this quiet has no writer. What is incomplete at its end is
    final: a ``.wandb`` file's cut record is damage, a log's last line without its newline is its last line."""
    return time.time() - mtime_ns / 1e9 > QUIET_S


def not_text(fh: BinaryIO, json_lines: bool) -> str | None:
    """Why a file is no text file, or None: a binary file named like a log would otherwise be read as lines and
    reported one garbled line at a time. Judged on its first block: a NUL byte there (git's and grep's sign of a
    binary file; random bytes hold one all but surely, text never), and not one line of it that a text file of its
    kind would hold: JSON (``json_lines``), or for a console log a line of UTF-8 without NUL bytes. A log with one
    damaged line (a crash's zeros, garbage) has such lines, so it is read and only that line reported; bytes that
    are not UTF-8 alone are no sign (a JSON log may hold a model's broken characters in one of its lines)."""
    fh.seek(0)
    head = fh.read(BLOCK)
    nul = head.find(b"\0")
    if nul < 0 or any(_text_line(line, json_lines) for line in head.split(b"\n")):
        return None
    kind = "JSON" if json_lines else "text"
    return f"a NUL byte at byte {nul}, and no line of its first {len(head)} bytes is {kind}"


def _text_line(line: bytes, json_lines: bool) -> bool:
    if b"\0" in line or not line.strip():
        return False
    try:
        if json_lines:
            loads_checked(line)
        else:
            line.decode("utf-8")
    except ValueError:  # UnicodeDecodeError is one
        return False
    return True


def _digest(fh: BinaryIO, start: int, end: int) -> str:
    fh.seek(start)
    return hashlib.blake2b(fh.read(end - start), digest_size=16).hexdigest()


def fingerprint(fh: BinaryIO, offset: int) -> dict:
    """What a cursor at ``offset`` remembers of the bytes before it."""
    return {"head": _digest(fh, 0, min(offset, BLOCK)), "tail": _digest(fh, max(0, offset - BLOCK), offset)}


def head_digest(fh: BinaryIO, size: int) -> str | None:
    """The file's first block, for telling a copy of an already-read file; None while it is shorter than that."""
    return _digest(fh, 0, BLOCK) if size >= BLOCK else None


def rewritten(fh: BinaryIO, cursor: dict) -> bool:
    """Whether the bytes before the cursor are no longer the ones that were read (cursors from before
    fingerprints were kept are taken as they are)."""
    if "head" not in cursor or not cursor.get("offset"):
        return False
    return fingerprint(fh, cursor["offset"]) != {"head": cursor["head"], "tail": cursor["tail"]}


def changed(paths: Iterable[Path], cursors: dict) -> tuple[list[tuple[Path, int, int, dict | None]], list[FileIssue]]:
    """The files whose size or mtime differs from their cursor's (new, grown, touched or rewritten), by one stat
    each: ``(path, size, mtime_ns, cursor)``. Also a file unchanged since a read that left an unfinished last line
    (its cursor's ``tail_waits``) once it has gone quiet: that line is final now and is read."""
    todo, unreadable = [], []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as exc:
            unreadable.append(FileIssue(str(path), 0, 0, "unreadable", str(exc)))
            continue
        cursor = cursors.get(str(path))
        if (
            cursor is None
            or st.st_size != cursor["size"]
            or st.st_mtime_ns != cursor.get("mtime_ns", st.st_mtime_ns)
            or (cursor.get("tail_waits") and quiet(st.st_mtime_ns))
        ):
            todo.append((path, st.st_size, st.st_mtime_ns, cursor))
    return todo, unreadable
