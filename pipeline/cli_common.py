"""What every `grpolens` command shares: the one-line failure a user can act on, and progress on stderr."""

from __future__ import annotations

import sys


class UserError(Exception):
    """A failure the user can act on: printed as one line, exit status 1."""


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
