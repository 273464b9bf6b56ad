"""`grpolens docs`: the dbt documentation site of the built warehouse (models, columns, tests, lineage), generated
into the data home and served on 127.0.0.1 only.

dbt's own `dbt docs serve` is not used: it serves the whole target folder (compiled SQL, run results) from the
process's working directory, opens a browser, and takes its address from $DBT_HOST; this server shows the three files
of the site and listens on the loopback interface whatever the environment says.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from pipeline.settings import Settings
from pipeline.terminal import strip_ansi

SITE_FILES = ("index.html", "manifest.json", "catalog.json")
HOST = "127.0.0.1"


class DocsUnavailable(RuntimeError):
    """The site cannot be generated or served; the message says what to do."""


def site_dir(settings: Settings) -> Path:
    return settings.home / "docs"


def generate(
    settings: Settings, progress: Callable[[str], None] | None = None, echo: Callable[[str], None] | None = None
) -> Path:
    """Run `dbt docs generate` against the built warehouse and copy the site into ``<home>/docs``; returns it.
    ``progress`` hears what is being done, ``echo`` dbt's own output.

    The arguments are run_dbt's (warehouse.dbt_args: same target and log paths); the output is read whole here
    because a failure is judged by the site files as well as the exit code."""
    from pipeline import warehouse
    from pipeline.dbt_process import DbtProcess

    if not settings.duckdb_path.exists():
        raise DocsUnavailable(
            f"no warehouse at {settings.duckdb_path}: the docs describe the built models and their "
            "columns, so run `grpolens refresh` (or `grpolens build`) first"
        )
    warehouse.wait_for_write_lock(settings)  # dbt opens the database to read the catalog: a held lock is one line
    if progress:
        progress("generating the dbt docs …")
    target = settings.home / "dbt_target"
    with DbtProcess(settings) as dbt:
        code, output = dbt.run(warehouse.dbt_args(settings, "docs", "generate"))
    lines = [strip_ansi(line) for line in output]
    if echo:
        for line in lines:
            echo(line)
    missing = [name for name in SITE_FILES if not (target / name).exists()]
    if code != 0 or missing:
        text = "\n".join(lines)
        problem = warehouse.os_error_in(text)
        if problem is not None:
            raise problem
        last = next((line for line in reversed(lines) if line.strip()), "no output")
        raise DocsUnavailable(f"dbt docs generate failed (exit {code}): {last.strip()}")
    out = site_dir(settings)
    out.mkdir(parents=True, exist_ok=True)
    for name in SITE_FILES:
        shutil.copyfile(target / name, out / name)
    return out


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # one line per request is noise in a terminal
        pass


def server(folder: Path, port: int) -> ThreadingHTTPServer:
    """An HTTP server for ``folder`` bound to 127.0.0.1:``port`` (0: a free port); serve_forever() runs it."""
    import errno

    try:
        return ThreadingHTTPServer((HOST, port), functools.partial(_QuietHandler, directory=str(folder)))
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise DocsUnavailable(
                f"port {port} on {HOST} is in use: pick another with --port (0 picks a free one)"
            ) from None
        if exc.errno in (errno.EACCES, errno.EPERM):
            raise DocsUnavailable(
                f"cannot listen on port {port}: {os.strerror(exc.errno).lower()} (ports below "
                "1024 need privileges; the default is 8080)"
            ) from None
        raise
