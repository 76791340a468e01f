"""Units: the one place where bytes, counts, FLOPs and seconds are parsed and formatted.

Internally gpuplan uses integers of bytes and floats of FLOPs and seconds. Decimal units
(GB = 10^9 bytes) are the default display, as in the source documents, papers and vendor
sheets; binary units (GiB = 2^30) on request. PyTorch's own messages are in GiB.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from .bounds import BOUNDS, MAX_DIGITS
from .errors import InputError, field_of, opt, shown

__all__ = [
    "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB",
    "ByteUnits", "parse_count", "parse_bytes", "parse_positive_int", "parse_number", "parse_flops",
    "parse_bandwidth",
    "format_bytes", "format_count", "format_flops", "format_rate", "format_per_s", "format_seconds",
    "MAX_PARAMS",
]

KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40

ByteUnits = Literal["GB", "GiB"]

#: Largest parameter count accepted: 10^15 (a thousand times the largest model trained so far).
MAX_PARAMS = 10**15

_COUNT_SUFFIX = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "G": 10**9, "T": 10**12}
#: The patterns are compiled on first use (re caches them), not at import: a plan parses none.
_COUNT_RE = r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KkMmBbGgTt]?)\s*$"

_BYTE_SUFFIX = {
    "": 1, "B": 1,
    "KB": KB, "MB": MB, "GB": GB, "TB": TB,
    "KIB": KiB, "MIB": MiB, "GIB": GiB, "TIB": TiB,
}
_BYTES_RE = r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$"


def _bad(what: str, text: object, problem: str) -> InputError:
    """``what`` (an :func:`~gpuplan.errors.opt` marker or words) and the value, then the problem;
    the field and the value as data."""
    return InputError(f"{what} {shown(text)}: {problem}", field=field_of(what), value=text)


def _text(text: object, what: str, accepted: str) -> str:
    """A value to parse as text: a str no longer than :data:`~gpuplan.bounds.MAX_DIGITS`."""
    if not isinstance(text, str):
        raise _bad(what, text, f"expected {accepted}")
    if len(text.strip()) > MAX_DIGITS:
        raise _bad(what, text, f"too long for a number; expected {accepted}")
    return text


def _as_float(value: int | float) -> float:
    try:
        return float(value)
    except OverflowError:  # an int beyond 1.8e308
        return math.inf


def parse_count(text: str | int | float, *, what: str = opt("params"), maximum: int = MAX_PARAMS,
                whole: bool = False) -> int:
    """Parse a positive count such as ``7B``, ``350M``, ``1.3e9`` or ``124439808``.

    Suffixes are decimal: K = 10^3, M = 10^6, B (or G) = 10^9, T = 10^12. ``whole``: a count of
    things that come whole (elements), refused rather than rounded when it is not.
    """
    accepted = "a positive count such as 7B, 350M, 1.3e9 or 124439808"
    if isinstance(text, bool):
        raise _bad(what, text, f"expected {accepted}")
    if isinstance(text, (int, float)):
        value = _as_float(text)
    else:
        m = re.match(_COUNT_RE, _text(text, what, accepted))
        if not m:
            raise _bad(what, text, f"expected {accepted}")
        value = float(m.group(1)) * _COUNT_SUFFIX[m.group(2).upper()]
    if not math.isfinite(value) or value < 1:
        raise _bad(what, text, f"expected {accepted}")
    if value > maximum:
        raise _bad(what, text, f"larger than the limit {maximum:.0e}; "
                         f"expected {accepted}")
    if whole and abs(value - round(value)) > 1e-9 * value:  # 0.3B is whole, 1.5 is not
        raise _bad(what, text, f"not a whole number; expected {accepted}")
    return int(round(value))


def parse_positive_int(text: str | int, *, what: str, maximum: int | None = None,
                       minimum: int = 1) -> int:
    """Parse an integer >= ``minimum`` (1 by default: batch, sequence length, GPU count ...) and
    <= ``maximum`` (default: the ``int`` range of :mod:`gpuplan.bounds`, 2^31)."""
    hi = BOUNDS["int"].high if maximum is None else maximum
    try:
        if isinstance(text, (bool, float)) or not isinstance(text, (int, str)):
            raise ValueError
        if isinstance(text, str) and len(text.strip()) > MAX_DIGITS:
            raise _bad(what, text, f"too long; expected a whole number "
                             f">= {minimum} and <= {hi}")
        value = int(text)
        if isinstance(text, str) and str(value) != text.strip().lstrip("+"):
            raise ValueError
    except (TypeError, ValueError) as e:
        if isinstance(e, InputError):
            raise
        raise _bad(what, text, f"expected a whole number >= {minimum}") from None
    if value < minimum:
        raise _bad(what, text, f"expected a whole number >= {minimum}")
    if value > hi:
        raise _bad(what, text, f"at most {hi} is supported")
    return value


def parse_number(text: str | int | float, *, what: str, bound: str) -> float:
    """Parse a finite number (``1.5``, ``2e3``, a leading ``$`` allowed) within the range
    ``bound`` of :mod:`gpuplan.bounds` (``price``, ``seconds``, ``epochs``, ``fraction`` ...)."""
    b = BOUNDS[bound]
    if isinstance(text, str):
        try:
            value: object = float(_text(text, what, b.what).strip().lstrip("$"))
        except ValueError:
            raise _bad(what, text, f"expected a number {b.text()}") from None
    else:
        value = text
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not b.contains(_as_float(value)):
        raise _bad(what, text, f"expected {b.what} {b.text()}")
    return _as_float(value)


def parse_bytes(text: str | int, *, what: str = "size") -> int:
    """Parse a byte size such as ``80GB``, ``80 GiB``, ``512MiB`` or ``1024`` (bytes), at most
    2^60 bytes (:mod:`gpuplan.bounds`)."""
    accepted = "a size such as 80GB, 24GiB or 512MiB"
    limit = BOUNDS["bytes"].high
    if isinstance(text, int) and not isinstance(text, bool):
        if not 0 <= text <= limit:
            raise _bad(what, text, f"expected {accepted}, at most 2^60 bytes")
        return text
    if not isinstance(text, str):
        raise _bad(what, text, f"expected {accepted}")
    m = re.match(_BYTES_RE, _text(text, what, accepted))
    if not m or m.group(2).upper() not in _BYTE_SUFFIX:
        raise _bad(what, text, f"expected {accepted}")
    value = float(m.group(1)) * _BYTE_SUFFIX[m.group(2).upper()]
    if not math.isfinite(value) or value < 0 or value > limit:
        raise _bad(what, text, f"expected {accepted}, at most 2^60 bytes")
    return int(round(value))


_FLOPS_SUFFIX = {"": 1.0, "G": 1e9, "T": 1e12, "P": 1e15}
_FLOPS_RE = r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([GgTtPp]?)(?:F|FLOPS?|FLOP/S)?\s*$"


def parse_flops(text: str | int | float, *, what: str = "peak") -> float:
    """Parse a positive rate of FLOP/s such as ``165TF``, ``165 TFLOPS``, ``1.5PF`` or ``165e12``.

    Suffixes are decimal: G = 10^9, T = 10^12, P = 10^15; a bare number is FLOP/s; at most
    10^21 (:mod:`gpuplan.bounds`).
    """
    accepted = "a peak such as 165TF, 1.5PF or 165e12 (FLOP/s)"
    if isinstance(text, bool):
        raise _bad(what, text, f"expected {accepted}")
    if isinstance(text, (int, float)):
        value = _as_float(text)
    else:
        m = re.match(_FLOPS_RE, _text(text, what, accepted), re.IGNORECASE)
        if not m:
            raise _bad(what, text, f"expected {accepted}")
        value = float(m.group(1)) * _FLOPS_SUFFIX[m.group(2).upper()]
    if not BOUNDS["flops"].contains(value):
        raise _bad(what, text, f"expected {accepted}, {BOUNDS['flops'].text()}")
    return value


def parse_bandwidth(text: str, *, what: str = "bandwidth") -> float:
    """Parse a positive rate of bytes/s such as ``1000GB/s``, ``3.35 TB/s`` or ``1008e9``, at
    most 10^16 B/s (:mod:`gpuplan.bounds`)."""
    accepted = "a bandwidth such as 1000GB/s, 3.35TB/s or 900GiB/s"
    raw = str(text).strip() if isinstance(text, (str, float)) else text
    size = raw[:-2] if isinstance(raw, str) and raw.lower().endswith("/s") else raw
    try:
        value = parse_bytes(size, what=what)
    except InputError:
        raise _bad(what, text, f"expected {accepted}") from None
    if not BOUNDS["bandwidth"].contains(value):
        raise _bad(what, text, f"expected {accepted}, "
                         f"{BOUNDS['bandwidth'].text()}")
    return float(value)


def format_bytes(n: float, units: ByteUnits = "GB", *, digits: int = 1) -> str:
    """``14e9 -> '14.0 GB'``; small values step down (MB/MiB, kB/KiB) so nothing reads 0.0."""
    if units not in ("GB", "GiB"):
        raise InputError(f"units {units!r}: expected GB or GiB")
    if units == "GB":
        steps = (("TB", TB), ("GB", GB), ("MB", MB), ("kB", KB))
    else:
        steps = (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB))
    sign = "-" if n < 0 else ""
    a = abs(n)
    if a == 0:
        return f"0 {units}"
    (top, top_scale), (mid, mid_scale) = steps[0], steps[1]
    # The main unit (GB/GiB) covers 0.1 .. 10,000 of itself, so a table reads in one unit.
    if a >= 10_000 * mid_scale:
        return f"{sign}{a / top_scale:.{digits}f} {top}"
    if a >= mid_scale / 10:
        return f"{sign}{a / mid_scale:.{digits}f} {mid}"
    for name, scale in steps[2:]:
        if a >= scale:
            return f"{sign}{a / scale:.{digits}f} {name}"
    return f"{sign}{a:.0f} B"


def format_count(n: float, *, digits: int = 2) -> str:
    """``6738415616 -> '6.74B'`` (decimal suffixes, as parameter counts are quoted)."""
    a = abs(n)
    for name, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if a >= scale:
            return f"{n / scale:.{digits}f}{name}"
    return f"{n:.0f}"


def format_flops(n: float, *, digits: int = 2) -> str:
    """``3.1e12 -> '3.10 TFLOP'``."""
    a = abs(n)
    for name, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9),
                        ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if a >= scale:
            return f"{n / scale:.{digits}f} {name}"
    return f"{n:.0f} FLOP"


def format_rate(n: float, unit: str = "FLOP/s", *, digits: int = 1) -> str:
    """``989.4e12 -> '989.4 TFLOP/s'``; ``3.35e12, 'B/s' -> '3.4 TB/s'``."""
    a = abs(n)
    for prefix, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if a >= scale:
            return f"{n / scale:.{digits}f} {prefix}{unit}"
    return f"{n:.{digits}f} {unit}"


def format_per_s(n: float) -> str:
    """A rate of tokens or samples: whole and grouped from 10 up (``40530.5 -> '40,530'``),
    three significant digits below (``0.00421 -> '0.00421'``, so a slow job does not read 0)."""
    return f"{n:,.0f}" if n == 0 or abs(n) >= 10 else f"{n:.3g}"


def format_seconds(s: float) -> str:
    """Human duration: ``0.00042 -> '420 µs'``, ``93784 -> '26.1 h'``, ``259200 -> '3.0 days'``."""
    a = abs(s)
    if a < 1e-6:
        return f"{s * 1e9:.0f} ns"
    if a < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if a < 1:
        return f"{s * 1e3:.1f} ms"
    if a < 120:
        return f"{s:.2f} s"
    if a < 7200:
        return f"{s / 60:.1f} min"
    if a < 2 * 86400:
        return f"{s / 3600:.1f} h"
    if a < 1e6 * 86400:
        return f"{s / 86400:.1f} days"
    return f"{s / 86400:.3g} days"  # 2e301 s (a 1e-300 GB/s link) is not 300 digits
