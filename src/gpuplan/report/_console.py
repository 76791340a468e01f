"""The one place a rich Console is made for command output."""

from __future__ import annotations

import sys
from typing import IO


def console_for(stream: IO[str] | None = None, *, width: int = 200):
    """A Console for ``stream`` (stdout by default). A terminal gets rich's own sizing and colour;
    a pipe or a capture gets a wide, uncoloured table instead of rich's 80-column fallback, so
    nothing a script greps for is wrapped."""
    from rich.console import Console

    stream = sys.stdout if stream is None else stream
    if stream.isatty():
        return Console(file=stream, highlight=False)
    return Console(file=stream, width=width, no_color=True, highlight=False)
