"""The one place a rich Console is made for command output."""

from __future__ import annotations

import sys
from typing import IO

from ..errors import printable


def console_for(stream: IO[str] | None = None, *, width: int = 200):
    """A Console for ``stream`` (stdout by default). A terminal gets rich's own sizing and colour;
    a pipe or a capture gets a wide, uncoloured table instead of rich's 80-column fallback, so
    nothing a script greps for is wrapped."""
    stream = sys.stdout if stream is None else stream
    cls = _safe_console_class()
    if stream.isatty():
        return cls(file=stream, highlight=False)
    return cls(file=stream, width=width, no_color=True, highlight=False)


def _safe_console_class():
    """A rich Console whose strings have their control characters (an ANSI escape from a tensor
    name or a model file's name) escaped before they reach the terminal; line breaks of the
    report's own text stay."""
    from rich.console import Console

    class SafeConsole(Console):
        def render_str(self, text: str, **kw):  # type: ignore[override]
            return super().render_str(safe_lines(text), **kw)

    return SafeConsole


def safe_lines(text: str) -> str:
    """``text`` with every control character but the line break escaped (see
    :func:`gpuplan.errors.printable`)."""
    return "\n".join(printable(line) for line in text.split("\n"))
