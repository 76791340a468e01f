"""File helpers shared by every command: bounded reads and all-or-nothing writes."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .errors import InputError, ModelFileError, field_of, opt, shown

__all__ = ["read_bounded", "write_atomic", "check_writable", "json_text", "json_problem"]


def read_bounded(path: str | os.PathLike, limit: int, *, what: str = "file") -> bytes:
    """Read a whole file that must not exceed ``limit`` bytes."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > limit:
            raise ModelFileError(p, f"{what} is {size} bytes, larger than the {limit}-byte limit")
        with p.open("rb") as f:
            data = f.read(limit + 1)
    except FileNotFoundError:
        raise ModelFileError(p, f"no such {what}") from None
    except IsADirectoryError:
        raise ModelFileError(p, f"is a directory, expected a {what}") from None
    except PermissionError:
        raise ModelFileError(p, f"permission denied reading the {what}") from None
    if len(data) > limit:
        raise ModelFileError(p, f"{what} grew past the {limit}-byte limit while being read")
    return data


def check_writable(path: str | os.PathLike, *, what: str = opt("plot")) -> Path:
    """Fail early, before any work, when ``path`` cannot be written as a regular file: its
    directory missing (or a file), the path a directory, a FIFO, a device or a link that leads
    nowhere (a write would block, or replace a device node), a name the file system refuses."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    name = shown(str(p))

    def bad(problem: str) -> InputError:
        return InputError(f"{what} {name}: {problem}", field=field_of(what), value=str(p))

    try:
        if not parent.exists():
            raise bad(f"directory {shown(str(parent))} does not exist")
        if not parent.is_dir():
            raise bad(f"{shown(str(parent))} is a file, not a directory")
        if p.is_dir():
            raise bad("is a directory; give a file name")
        if (p.exists() or p.is_symlink()) and not p.is_file():
            raise bad("not a regular file (a FIFO, a device or a broken link); give a file name "
                      "in a directory")
    except OSError as e:
        raise bad(f"{e.strerror or e}; give a shorter or plainer path") from None
    if len(p.name.encode("utf-8", "surrogateescape")) > 200:  # room for write_atomic's temp name
        raise bad("a file name of over 200 bytes; give a shorter one")
    if not os.access(parent, os.W_OK):
        raise bad("directory is not writable")
    return p


def check_plot(path: str | os.PathLike, *, formats: tuple[str, ...] = ("png",)) -> Path:
    """A chart's file name, checked before any work: writable, and named for a format the chart
    is written in (a PNG is never written into ``x.txt``)."""
    if not str(path).strip():
        raise InputError(f"{opt('plot')} '': give the chart's file name, e.g. {opt('plot')} "
                         "plan.png", field="plot", value=str(path))
    p = check_writable(path, what=opt("plot"))
    suffix = p.suffix.lower().lstrip(".")
    if suffix not in formats:
        names = ", ".join(f".{f}" for f in formats)
        raise InputError(f"{opt('plot')} {str(p)!r}: the chart is written as {names}; give "
                         f"a file name ending in {' or '.join(f'.{f}' for f in formats)}",
                         field="plot", value=str(p), accepted=names)
    return p


def write_atomic(path: str | os.PathLike, data: bytes | str) -> None:
    """Write ``data`` to ``path`` completely or not at all (temp file + rename)."""
    import tempfile  # only commands that write files pay for it

    p = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name[:200]}.",
                                   dir=p.parent if str(p.parent) else ".")
    except OSError as e:
        raise InputError(f"cannot write {shown(str(p))}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp creates the file 0600; give it the mode an ordinary open() would.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):  # a full disk, a quota, a vanished directory: one line
            raise InputError(f"cannot write {shown(str(p))}: {e.strerror or e}; nothing "
                             "was written") from None
        raise


def json_text(obj: object, *, indent: int | None = None, default=None) -> str:
    """``obj`` as strict JSON, the one way every JSON output (CLI ``--json``, the web API) is
    written: a NaN or infinity -- a value that does not exist, such as a rate over zero time --
    becomes ``null`` (JSON has no such numbers; ``json.dumps`` would write ``NaN``, which JSON
    readers reject), and ``allow_nan=False`` guarantees no other one slips through."""
    import json  # noqa: PLC0415 -- only commands that print JSON pay for it

    return json.dumps(_finite(obj), indent=indent, allow_nan=False, default=default)


def _finite(obj: object) -> object:
    """A copy of a result's plain data with non-finite floats as None (results are a few levels
    deep, built by gpuplan itself, never by a user's input)."""
    if isinstance(obj, float):
        return obj if obj - obj == 0 else None  # inf - inf and nan - nan are nan
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def json_problem(e: BaseException, *, lines: bool = True) -> str:
    """Why ``json.loads`` refused a text, in the user's terms: the parser's message and where
    (``lines``: with the line), "nested too deeply" (a RecursionError), or an integer over
    Python's digit limit (a plain ValueError, whose text advises ``sys.set_int_max_str_digits``)."""
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at {f'line {e.lineno}, ' if lines else ''}column {e.colno}"
    if isinstance(e, RecursionError):
        return "nested too deeply"
    m = re.search(r"\(([0-9]+) digits\).*value has ([0-9]+) digits", str(e))
    if m:
        return f"an integer of {m.group(2)} digits; at most {m.group(1)} are read"
    return str(e)  # e.g. a parse_constant hook refusing NaN
