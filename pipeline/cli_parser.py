"""The parts of the `grpolens` command line that are not its commands (cli.py builds the parser; cli_build.py and
cli_read.py hold the commands): "did you mean …?" for a mistyped command or choice, numbers held to their range,
subcommands whose --help ends with examples, the version."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

SQL_EXAMPLE = "sql/questions/learning_dynamics_by_run.sql"  # cited by `sql --help`; a test holds it to an existing file


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed

    try:
        return installed("grpolens")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class Parser(argparse.ArgumentParser):
    """argparse, plus "did you mean …?" for a mistyped command or choice (exit status 2 as for any usage error)."""

    def _check_value(self, action, value):  # where argparse refuses a choice (a private hook, stable since 3.2)
        try:
            super()._check_value(action, value)
        except argparse.ArgumentError as exc:
            import difflib

            choices = [str(c) for c in action.choices or ()]
            close = difflib.get_close_matches(str(value), choices, n=1, cutoff=0.6)
            if not close or "did you mean" in str(exc):
                raise
            raise argparse.ArgumentError(
                action, f"invalid choice: {value!r}; did you mean {close[0]}? (choose from {', '.join(choices)})"
            ) from None


def number(
    kind: type[int] | type[float], low: float, high: float = math.inf, low_allowed: bool = True
) -> Callable[[str], float]:
    """An argparse type: a ``kind`` from ``low`` (itself only if ``low_allowed``) to ``high``, finite. Anything else
    is a usage error (exit status 2) naming the range before the command starts, not a failure deep inside it (a
    port past 65535 once failed at bind() after the docs were generated)."""

    def parse(text: str) -> float:
        value = kind(text)  # a ValueError: argparse says "invalid int value: 'x'"
        if not math.isfinite(value) or value > high or value < low or (value == low and not low_allowed):
            bounds = f"{low} to {high}" if high < math.inf else f"{low} or more" if low_allowed else f"more than {low}"
            raise argparse.ArgumentTypeError(f"{text} is out of range ({bounds})")
        return value

    parse.__name__ = kind.__name__
    return parse


def command(sub, name: str, help: str, *examples: str, description: str | None = None) -> argparse.ArgumentParser:
    """A subcommand whose --help ends with examples."""
    import textwrap

    text = description or help[0].upper() + help[1:] + "."
    return sub.add_parser(
        name,
        help=help,
        description=textwrap.fill(text, 100),
        epilog="Example" + "s" * (len(examples) > 1) + ":\n  " + "\n  ".join(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
