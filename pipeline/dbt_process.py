"""dbt in a child process that can be started before it is needed.

A child, not dbtRunner in the calling process: dbt-duckdb keeps its database open while any of its connections
lives, and the calling process's own connections (read-only ones, or the checks' writer) must not meet a second
configuration of the same file. Two costs of a child are avoidable, and at team scale they were a quarter of an
incremental refresh (docs/scale.md): importing dbt (1.8 s on this machine) and the interpreter's teardown of dbt's
objects after the work is done (0.9 s). So the child imports dbt as soon as it starts and then waits for its
arguments on stdin — `grpolens refresh` starts it before it ingests, and the import overlaps the ingest and the
build plan — and it leaves with ``os._exit`` once dbt has closed the database, written its artifacts and its log.

Run as ``python -m pipeline.dbt_process``; it reads one JSON list of dbt arguments (``["build", "--select", …]``)
and exits with dbt's own codes: 0 success, 1 a node failed, 2 dbt could not run. With ``--no-write-json`` among
them it writes run_results.json itself in the target (``--target-path``, else ``DBT_TARGET_PATH`` as dagster-dbt
sets it), where dbt would write neither it nor manifest.json. An empty stdin (a caller that died) makes it exit 0
without running anything. The Dagster dbt asset runs dbt through dagster-dbt, which starts its executable
itself: ``grpolens-dbt`` (``cli`` below) is that executable, with the same exit.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from importlib.metadata import version
from typing import NoReturn

from pipeline.settings import Settings


class DbtProcess:
    """One dbt invocation in a child started now; ``run`` gives it its arguments. Close it (or use ``with``) in
    any case: a child that was never needed is stopped there."""

    def __init__(self, settings: Settings):
        settings.export()  # GRPOLENS_HOME, memory limit and threads: profiles.yml reads them
        env = os.environ.copy()
        # dbt's thread pool leaves semaphores behind when the child skips the teardown; nothing to clean up
        quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
        env["PYTHONWARNINGS"] = ",".join(filter(None, [env.get("PYTHONWARNINGS"), quiet]))
        self.proc = subprocess.Popen(
            # -P: `-m` would put the caller's working folder first on the import path, and a `logging.py` or
            # `inspect.py` of the user's there would replace the standard module in dbt's process
            [sys.executable, "-P", "-m", "pipeline.dbt_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            preexec_fn=(
                functools.partial(_die_with_parent, os.getpid())
                if threading.current_thread() is threading.main_thread()
                else None
            ),
        )
        self.used = False

    def run(self, args: list[str], echo: Callable[[str], None] | None = None) -> tuple[int, list[str]]:
        """Run dbt with ``args`` (no executable); ``echo`` hears each line of its output as it comes. Returns the
        exit code and every line of output."""
        if self.used:
            raise RuntimeError("a DbtProcess runs dbt once")
        self.used = True
        assert self.proc.stdin is not None and self.proc.stdout is not None  # both PIPE
        try:
            self.proc.stdin.write(json.dumps(args) + "\n")
            self.proc.stdin.close()
        except BrokenPipeError:  # the child died before it read them: its output says why
            pass
        lines = []
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            lines.append(line)
            if echo:
                echo(line)
        return self.proc.wait(), lines

    def close(self) -> None:
        """End the child. One that ran to its end has exited already; one that never got its arguments (it has only
        been importing dbt), or whose run an error or Ctrl-C here cut short, is stopped: a build stopped anywhere
        is completed by the next one (tests/test_incremental_build.py)."""
        if self.proc.poll() is None:
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None and not stream.closed:
                with contextlib.suppress(BrokenPipeError):
                    stream.close()
        self.proc.wait()

    def __enter__(self) -> DbtProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _die_with_parent(parent: int) -> None:
    """In the child, before it runs: the kernel kills it when the process that started it dies (Linux's
    PR_SET_PDEATHSIG). A `grpolens refresh` killed with SIGKILL cannot stop its dbt child itself, and the orphan
    went on holding the warehouse's write lock, so the user's next refresh failed on a lock "held by process N",
    its own orphan. A build stopped anywhere is completed by the next one (tests/test_incremental_build.py). The
    signal comes when the parent's *thread* ends, which is why only the main thread asks for it (DbtProcess)."""
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    try:
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: the orphan finishes its build and exits
        return
    if os.getppid() != parent:  # the parent died before the request was made
        os._exit(1)


def serialize_ast_parsing() -> None:
    """Make this process's threads take turns in ``ast.parse``.

    CPython (3.11 here) keeps the ast module's recursion counter per interpreter, not per thread: when two threads
    build ast objects at once and one gives up the GIL in the middle (a garbage collection running Python code is
    enough), the other's count goes wrong and ``compile`` raises "SystemError: AST constructor recursion depth
    mismatch" (python/cpython#106905). dbt's threads do that on every node: Jinja's native rendering calls
    ``ast.literal_eval`` on what it renders. It failed a build of the test suite once, a node error with nothing
    wrong in the project or the data. The ast objects dbt makes come through ``ast.parse`` (``literal_eval`` calls
    it; Jinja compiles its templates from source, with no ast objects), and parsing is a small part of compiling a
    node."""
    import ast
    import threading

    if getattr(ast.parse, "serialized", False):
        return
    parse, lock = ast.parse, threading.Lock()

    def serialized(*args, **kwargs):
        with lock:
            return parse(*args, **kwargs)

    serialized.serialized = True  # type: ignore[attr-defined]
    ast.parse = serialized


def _invoke(args: list[str]) -> NoReturn:
    """Run dbt with ``args`` in this process, then leave without the interpreter's teardown."""
    import logging
    import traceback

    from dbt.adapters.duckdb.connections import DuckDBConnectionManager  # dbt would import it on its way
    from dbt.artifacts.schemas.run import RunExecutionResult
    from dbt.cli.exceptions import DbtUsageException
    from dbt.cli.main import dbtRunner

    serialize_ast_parsing()  # dbt's threads would otherwise race in the ast module (see there)
    try:
        result = dbtRunner().invoke(args)
        code = 0 if result.success else (2 if result.exception is not None else 1)
        target = args[args.index("--target-path") + 1] if "--target-path" in args else os.getenv("DBT_TARGET_PATH")
        if "--no-write-json" in args and target and isinstance(result.result, RunExecutionResult):
            # dbt then writes neither the manifest (twice, 0.6 s at team scale) nor run_results.json, which the
            # caller reads: write that one
            result.result.write(os.path.join(target, "run_results.json"))
        if isinstance(result.exception, DbtUsageException):  # dbt has said every other error itself
            print(f"Usage error: {result.exception}", flush=True)
    except BaseException:  # noqa: BLE001  # say it, as dbt's CLI would, and exit 2
        traceback.print_exc(file=sys.stdout)
        code = 2
    # what dbt-duckdb leaves to atexit, which os._exit skips: close the database (a checkpoint: the WAL goes into
    # the file, else the next connection replays it)
    DuckDBConnectionManager.close_all_connections()
    logging.shutdown()  # dbt's log file
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip the teardown: dbt has closed the database and written its artifacts


def _main() -> None:
    import dbt.cli.main  # noqa: F401  # the slow part, done while the caller still ingests

    line = sys.stdin.readline()
    if not line.strip():
        os._exit(0)
    _invoke(json.loads(line))


def cli() -> None:
    """``grpolens-dbt``: dbt's command line with the same exit, the executable of the Dagster dbt resource
    (dagster-dbt starts it with the arguments and reads its JSON log). ``--version``, which dagster-dbt asks before
    every invocation, is answered from the installed package, without importing dbt (1.9 s)."""
    args = sys.argv[1:]
    if args == ["--version"]:
        print(f"Core:\n  - installed: {version('dbt-core')}")
        return
    _invoke(args)


if __name__ == "__main__":
    _main()
