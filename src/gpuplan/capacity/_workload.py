"""The requests a capacity simulation serves: an open loop at a rate (Poisson, gamma or constant
arrivals), a closed loop of C clients, or a JSONL trace; prompt and output lengths fixed, drawn
from a distribution, or read from the trace. One seeded RNG; no global state."""

from __future__ import annotations

import json
import math
import os
import random
from types import MappingProxyType

from .._io import json_problem, read_bounded
from .._record import record
from ..bounds import MAX_SIM_REQUESTS, check_int, check_number
from ..errors import InputError, opt, shown

__all__ = ["Request", "Workload", "Dist", "parse_dist", "parse_arrivals", "make_workload",
           "check_load_options", "SYNTHETIC_OPTIONS", "WORKLOAD_DEFAULTS", "read_workload",
           "MAX_WORKLOAD_BYTES", "MAX_REQUESTS", "MAX_ARRIVAL_SPAN_S"]

#: A workload file is read whole; larger ones are refused (one line, exit 2).
MAX_WORKLOAD_BYTES = 64 * 2**20
#: Requests one simulation serves (a trace's lines, --requests): why, in gpuplan.bounds.
MAX_REQUESTS = MAX_SIM_REQUESTS
#: Longest expected arrival span (requests / rate) of a synthetic workload, in seconds. The
#: simulation's clock is a float: at t = 10^9 s one unit in the last place is 2^-23 s (0.12 us),
#: well under the ~10 us a step takes, so every step is still timed; at 1e-300 requests/s the
#: arrivals sat ~10^301 s apart, where adding a 7 ms step leaves the clock unchanged and every
#: latency printed 0.0 ms. A --max-rate search starts at 0.01/s, so 10^6 requests (10^8 s) fit.
MAX_ARRIVAL_SPAN_S = 10**9

_DISTS = ("uniform", "normal", "lognormal")


@record(kw_only=False)
class Request:
    arrival_s: float
    input_tokens: int
    output_tokens: int
    prefix_id: str | None = None
    prefix_tokens: int = 0


@record(kw_only=False)
class Dist:
    """A length distribution: ``fixed:N``, ``uniform:LO:HI``, ``normal:MEAN:STD``,
    ``lognormal:MEDIAN:SIGMA`` (sigma of the log); draws are rounded and at least 1."""

    kind: str
    a: float
    b: float = 0.0

    def draw(self, rng: random.Random) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            x = rng.uniform(self.a, self.b)
        elif self.kind == "normal":
            x = rng.gauss(self.a, self.b)
        else:
            x = self.a * math.exp(rng.gauss(0.0, self.b))
        return max(1, min(2**31, round(x)))

    @property
    def mean(self) -> float:
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "normal":
            return self.a
        return self.a * math.exp(self.b ** 2 / 2)

    def text(self) -> str:
        return f"{self.a:g}" if self.kind == "fixed" else f"{self.kind}:{self.a:g}:{self.b:g}"


@record
class Workload:
    """What arrives: ``requests`` in arrival order (open loop), or, with ``concurrency``, the
    prompts that ``concurrency`` clients send one after the other (closed loop; arrival_s is 0
    and each client sends its next request when its last one finished)."""

    requests: tuple[Request, ...]
    rate: float | None = None
    concurrency: int | None = None
    arrivals: str = "poisson"
    source: str = ""
    cached_prefixes: tuple[str, ...] = ()
    """Prefix ids (:attr:`Request.prefix_id`) the engine's prefix cache already holds when the
    run starts (left by earlier traffic on the same server): the first request naming one hits
    it, as a later one does."""

    @property
    def mean_input(self) -> float:
        return sum(r.input_tokens for r in self.requests) / len(self.requests)

    @property
    def mean_output(self) -> float:
        return sum(r.output_tokens for r in self.requests) / len(self.requests)

    @property
    def most_replicas(self) -> int:
        """The most replicas that each get a request (and, closed loop, a client) when the
        requests are dealt round robin: where a capacity search stops adding replicas."""
        n = len(self.requests)
        return n if self.concurrency is None else min(n, self.concurrency)

    def to_dict(self) -> dict:
        return {"requests": len(self.requests), "rate": self.rate,
                "concurrency": self.concurrency, "arrivals": self.arrivals,
                "mean_input_tokens": self.mean_input, "mean_output_tokens": self.mean_output,
                "source": self.source}


def parse_dist(text: str, *, what: str) -> Dist:
    """``uniform:LO:HI``, ``normal:MEAN:STD``, ``lognormal:MEDIAN:SIGMA`` or a whole number."""
    parts = str(text).strip().split(":")
    if len(parts) == 1:
        try:
            n = int(parts[0])
        except ValueError:
            n = None
        if n is None:
            raise InputError(f"{what} {shown(text)}: expected a token count or "
                             "uniform:LO:HI, normal:MEAN:STD, lognormal:MEDIAN:SIGMA")
        return Dist("fixed", check_int(n, "seq", what=what))
    if parts[0] not in _DISTS or len(parts) != 3:
        raise InputError(f"{what} {shown(text)}: expected uniform:LO:HI, normal:MEAN:STD or "
                         "lognormal:MEDIAN:SIGMA (e.g. lognormal:2000:0.5)")
    try:
        a, b = float(parts[1]), float(parts[2])
    except ValueError:
        raise InputError(f"{what} {shown(text)}: its parameters must be numbers") from None
    check_number(a, "tokens", what=f"{what} {parts[0]} first parameter")
    if not math.isfinite(b) or b < 0 or b > 2**31:  # before LO <= HI: a NaN HI is this error
        raise InputError(f"{what} {shown(text)}: the second parameter must be a number >= 0 "
                         "and <= 2^31")
    if parts[0] == "uniform" and not a <= b:
        raise InputError(f"{what} {shown(text)}: uniform needs LO <= HI")
    if parts[0] == "lognormal" and b > 5:
        raise InputError(f"{what} {shown(text)}: a sigma above 5 draws lengths over e^5 times "
                         "the median; give a smaller sigma")
    return Dist(parts[0], a, b)


def parse_arrivals(text: str) -> tuple[str, float]:
    """``poisson``, ``constant`` or ``gamma:CV`` (coefficient of variation of the gaps; 1 is
    Poisson) -> (kind, cv)."""
    t = str(text).strip().lower()
    if t == "poisson":
        return "poisson", 1.0
    if t == "constant":
        return "constant", 0.0
    if t.startswith("gamma:"):
        try:
            cv = float(t[6:])
        except ValueError:
            cv = math.nan
        # below 10^-3 the gaps differ from constant ones by under 0.1% (and 1 / CV^2, the
        # gamma's shape, overflows or divides by zero at 1e-200 / 1e-300)
        if not (1e-3 <= cv <= 100):
            raise InputError(f"arrivals {shown(text)}: gamma's CV must be >= 0.001 and <= 100 "
                             "(1 is Poisson; for even gaps use constant)", field="arrivals",
                             value=text)
        return "gamma", cv
    raise InputError(f"arrivals {shown(text)}: expected poisson, constant or gamma:CV",
                     field="arrivals", value=text, accepted="poisson, constant, gamma:CV")


#: The synthetic workload's defaults where a caller gives none: :func:`gpuplan.capacity.capacity`,
#: :func:`make_workload`, ``gpuplan capacity`` and ``POST /api/capacity`` all read these.
WORKLOAD_DEFAULTS = MappingProxyType({"input": 2000, "output": 256, "requests": 2000,
                                      "arrivals": "poisson", "seed": 0})
#: The synthetic workload's options (and web keys), in the order a refusal names them.
SYNTHETIC_OPTIONS = ("rate", "concurrency", "input", "output", "input_dist", "output_dist",
                     "requests", "seed", "arrivals")


def check_load_options(given: dict[str, object]) -> None:
    """Refuse, in one line, load options the workload would silently ignore (qa43); ``given``
    maps ``workload`` and :data:`SYNTHETIC_OPTIONS` to what was given (None: left out). A
    workload file's requests carry their own lengths, count and arrivals; rate and concurrency
    are two loads; a closed loop sends a request as one ends, so it has no arrivals; a length
    distribution replaces the fixed length. The command line and ``POST /api/capacity`` both
    apply it, each naming the fields its own way (:func:`gpuplan.errors.opt`)."""
    g = {k: v for k, v in given.items() if v is not None}
    if "workload" in g:
        extra = [k for k in SYNTHETIC_OPTIONS if k in g]
        if extra:
            raise InputError(f"{opt('workload')} carries its own requests and arrivals; drop "
                             f"{', '.join(opt(k) for k in extra)}", field=extra[0])
        return
    if "rate" in g and "concurrency" in g:
        raise InputError(f"{opt('rate')} (an open loop) and {opt('concurrency')} (a closed "
                         "loop) are two loads; give one of them", field="concurrency")
    if "concurrency" in g and "arrivals" in g:
        raise InputError(f"{opt('arrivals')} {str(g['arrivals'])!r:.40}: {opt('concurrency')}'s "
                         "closed loop sends a request as one ends, with no arrival gaps; drop "
                         f"{opt('arrivals')} or give {opt('rate')}", field="arrivals",
                         value=g["arrivals"])
    for key in ("input", "output"):
        if key in g and f"{key}_dist" in g:
            raise InputError(f"{opt(key + '_dist')} draws the lengths {opt(key)} fixes; give "
                             "one of them", field=f"{key}_dist")


def make_workload(*, input: Dist, output: Dist, requests: int = WORKLOAD_DEFAULTS["requests"],
                  rate: float | None = None, concurrency: int | None = None,
                  arrivals: str = WORKLOAD_DEFAULTS["arrivals"],
                  seed: int = WORKLOAD_DEFAULTS["seed"]) -> Workload:
    """A synthetic workload: ``requests`` requests with lengths drawn from ``input`` and
    ``output``, arriving at ``rate`` per second (``arrivals``), or sent by ``concurrency``
    clients in a closed loop."""
    check_int(requests, "requests", what="requests")
    if requests > MAX_REQUESTS:
        raise InputError(f"{opt('requests')} {requests}: one simulation serves at most "
                         f"{MAX_REQUESTS} requests (each is simulated step by step and kept for "
                         f"exact percentiles: ~10 s and ~110 MB at the cap); give "
                         f"{opt('requests')} {MAX_REQUESTS} or fewer", field="requests",
                         value=requests, accepted=f"<= {MAX_REQUESTS}",
                         fix={"requests": MAX_REQUESTS})
    if (rate is None) == (concurrency is None):
        raise InputError("give a request rate or a concurrency (closed loop), not both and not "
                         "neither", field="rate")
    if rate is not None:
        check_number(rate, "rate", field="rate")
        if requests / rate > MAX_ARRIVAL_SPAN_S:
            raise InputError(f"{opt('rate')} {rate:g} with {opt('requests')} {requests}: the "
                             f"arrivals would span {requests / rate:.3g} s, over the "
                             f"{MAX_ARRIVAL_SPAN_S:.0e} s a simulated clock times steps in; give "
                             f"a rate of at least {requests / MAX_ARRIVAL_SPAN_S:.3g} or fewer "
                             "requests", field="rate", value=rate,
                             fix={"rate": requests / MAX_ARRIVAL_SPAN_S})
    if concurrency is not None:
        check_int(concurrency, "requests", field="concurrency")
    kind, cv = parse_arrivals(arrivals)
    rng = random.Random(seed)
    t = 0.0
    out = []
    for _ in range(requests):
        out.append(Request(t, input.draw(rng), output.draw(rng)))
        if rate is not None:
            t += _gap(rng, rate, kind, cv)
    if rate is None:
        out = [Request(0.0, r.input_tokens, r.output_tokens) for r in out]
    return Workload(requests=tuple(out), rate=rate, concurrency=concurrency, arrivals=arrivals,
                    source=f"{input.text()} in, {output.text()} out")


def _gap(rng: random.Random, rate: float, kind: str, cv: float) -> float:
    if kind == "constant":
        return 1.0 / rate
    if kind == "poisson":
        return rng.expovariate(rate)
    shape = 1.0 / (cv * cv)
    return rng.gammavariate(shape, 1.0 / (rate * shape))


def read_workload(path: str | os.PathLike) -> Workload:
    """A JSONL trace: one request a line with ``arrival_s``, ``input_tokens``,
    ``output_tokens`` and optionally ``prefix_id``, ``prefix_tokens``."""
    data = read_bounded(path, MAX_WORKLOAD_BYTES, what="workload file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"workload {shown(str(path))}: not UTF-8 text (byte {e.start})",
                         field="workload") from None
    if text and not text.endswith("\n") and text.count("\n") > 0 and \
            not text.rstrip().endswith("}"):
        raise InputError(f"workload {shown(str(path))}: its last line is truncated",
                         field="workload")
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(out) >= MAX_REQUESTS:
            raise InputError(f"workload {shown(str(path))}: more than {MAX_REQUESTS} requests, "
                             "the most one simulation serves; split it", field="workload")
        out.append(_request(line, i, path))
    if not out:
        raise InputError(f"workload {shown(str(path))}: no requests", field="workload")
    out.sort(key=lambda r: r.arrival_s)
    return Workload(requests=tuple(out), rate=None, arrivals="trace", source=str(path))


def _request(line: str, i: int, path) -> Request:
    where = f"workload {shown(str(path))} line {i}"
    try:
        d = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise InputError(f"{where}: not JSON ({json_problem(e, lines=False)})",
                         field="workload") from None
    if not isinstance(d, dict):
        raise InputError(f"{where}: expected an object with arrival_s, input_tokens, "
                         "output_tokens", field="workload")
    for key in ("arrival_s", "input_tokens", "output_tokens"):
        if key not in d:
            raise InputError(f"{where}: no {key}", field="workload")
    arrival = check_number(d["arrival_s"], "duration", what=f"{where} arrival_s")
    n_in = check_int(d["input_tokens"], "seq", what=f"{where} input_tokens")
    n_out = check_int(d["output_tokens"], "seq", what=f"{where} output_tokens")
    pid = d.get("prefix_id")
    if pid is not None and not isinstance(pid, (str, int)):
        raise InputError(f"{where}: prefix_id must be a string or a number", field="workload")
    ptok = d.get("prefix_tokens", 0)
    ptok = 0 if ptok == 0 else check_int(ptok, "seq", what=f"{where} prefix_tokens")
    return Request(arrival, n_in, n_out, None if pid is None else str(pid), min(ptok, n_in))
