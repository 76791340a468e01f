"""The accepted range of every count, size and rate gpuplan takes, stated once.

The CLI's option parsers (``gpuplan.units.parse_*``), :class:`gpuplan.Job`, the readers of
config.json and safetensors files and the web API check values against this one table, so a
value out of range gets the same one-line :class:`~gpuplan.errors.InputError` everywhere: the
value, the range and the fix. The ranges are generous (far beyond any real job) and exist so that
no input can reach an overflow, a float infinity or an algorithm whose time grows with the value.

=================  ===========================  =================================================
name               range                        why the limit is safe
=================  ===========================  =================================================
batch, grad_accum  1 .. 2^31                    a micro-batch of 2 billion sequences
lora_rank          1 .. 2^31
seq, context       1 .. 2^31                    tokens per sequence
gpus               1 .. 2^20                    a million GPUs
layers             1 .. 10^4                    the deepest published transformer has < 200
edge_layers        0 .. 10^4                    blocks kept 16-bit at each end of the stack
dim                1 .. 2^31                    a hidden size, head count, vocabulary, matmul side
params             1 .. 10^15                   ``units.MAX_PARAMS``
count              1 .. 10^15                   tokens, samples
bytes              0 .. 2^60                    about 1.15 EB: sizes up to the petabytes
flops              > 0 .. 10^21 FLOP/s          a zettaFLOP/s per device
bandwidth          > 0 .. 10^16 B/s             10 PB/s per link or memory
price              0 .. 10^6 per GPU-hour
seconds            > 0 .. 10^7 s                measured or expected step times (~4 months)
duration           0 .. 10^7 s                  a spread (IQR) or minimum of measured times
fraction           0 .. < 1                     fragmentation, dropout
memory_fraction    > 0 .. 1                     a serving engine's share of GPU memory
grad_norm          > 0 .. 10^6                  a clipping threshold (1.0 is the usual one)
capacity_factor    > 0 .. 10^3                  an MoE expert's capacity over its balanced share
power              > 0 .. 10^5 W                a GPU's power limit (nvidia-smi -pl)
loss_chunks        1 .. 1024                    the head's graph is built once per chunk (1,024:
                                                ~1.4 s for gpt2); torchtune's default is 8
requests           1 .. 10^6                    a count of requests or sequences (clients,
                                                ``max_num_seqs``); one simulation serves at most
                                                :data:`MAX_SIM_REQUESTS` (10^5)
rate               > 0 .. 10^6 per second       requests per second into one deployment
tokens             1 .. 2^31                    a request's prompt or output length
=================  ===========================  =================================================

Ranges that join two values: a synthetic workload's ``requests / rate`` (its expected arrival
span) is at most :data:`gpuplan.capacity._workload.MAX_ARRIVAL_SPAN_S`, 10^9 s, where the
simulation's float clock still resolves a step (0.12 us); a trace's ``arrival_s`` is a
``duration`` (10^7 s).

Counts that drive work inside gpuplan, not taken from an option (the ones above bound those):

* :data:`MAX_REPLAY_PARAMS` -- freed-after-use parameters the ZeRO-3 coordinator replay names
  one by one (:mod:`gpuplan.engines.zero3`); persisted (small) ones and runs of experts with
  only those are reckoned in closed form, so 10^7 tiny experts cost no more than one; a run of
  identical experts is replayed until the coordinator's state repeats, then skipped by whole
  periods (issue 32: the fuzzer's slowest plan, 1,440,081 -> 10,675 coordinator steps, the
  same within 1% from 1,000 to 10,000 experts). A plan runs one replay per (TP, PP) stage
  shape its layout search tries, each bounded by this count; building the uses stays linear.
* :data:`MAX_SIM_REQUESTS`, :data:`MAX_SIM_STEPS` -- the requests one capacity simulation
  serves (``--requests``, a trace's lines) and the scheduler steps it may run (long outputs at
  a low rate or on a small KV cache each take one step a token: refused before simulating when
  even a full batch would need more steps, else stopped at the budget).
* :data:`MAX_FILE_ITEMS` -- keys, tensors and array items a model file may declare
  (:mod:`gpuplan.models._gguf`); every declared size is also checked against the bytes left.
"""

from __future__ import annotations

import math

from ._record import record
from .errors import InputError, opt, shown

__all__ = ["Bound", "BOUNDS", "bound", "check_int", "check_number", "MAX_DIGITS", "MAX_ARG_CHARS",
           "MAX_LOSS_CHUNKS", "MAX_REPLAY_PARAMS", "MAX_FILE_ITEMS", "CAPACITY_BATCH_TOKENS",
           "MAX_CAPACITY_VARIANTS", "MAX_SIM_REQUESTS", "MAX_SIM_STEPS"]

#: Longest decimal text parsed as a number (2^62 has 19 digits; a float with an exponent fits).
MAX_DIGITS = 40

#: Longest command-line value treated as a name or path (a file name is at most 255 bytes; a path
#: at most 4096 on Linux).
MAX_ARG_CHARS = 4096

#: Most loss chunks: the output head's graph is built and simulated once per chunk (1,024 chunks
#: of gpt2 take ~1 s; 100,000 took 36 s and 1 GB). torchtune's default is 8.
MAX_LOSS_CHUNKS = 1024

#: Most freed-after-use parameters the DeepSpeed ZeRO-3 replay follows one by one (200,000: ~3 s
#: where nothing repeats; building the uses and the setup over them ~3 us a use). Runs of
#: identical experts are skipped once the state repeats, so a plan's steps do not grow with the
#: expert count (the fuzzer's reproducer: 10,627 steps at 1,000 experts, 10,675 at 10,000, over
#: 9 replays; DeepSeek-V3 on 64 GPUs: 822,764 over 724,276 uses). A plan runs one replay per
#: (TP, PP) stage shape tried; a model with more gets the per-unit estimate, said in its note.
MAX_REPLAY_PARAMS = 200_000

#: Most keys, tensors or array items one model file may declare (a GGUF vocabulary of 2^22
#: tokens is 16 times the largest published one, 256,000).
MAX_FILE_ITEMS = 2**22


#: The token budgets per step (``max_num_batched_tokens``) ``gpuplan capacity``'s search tries
#: beside the engine's default: vLLM's two defaults (2,048 below 70 GiB or on an A100, 8,192
#: above; vllm/engine/arg_utils.py get_batch_defaults) and twice the larger. A smaller budget cuts
#: the prefill chunks decodes wait behind (TPOT), a larger one prefills faster (TTFT).
CAPACITY_BATCH_TOKENS = (2048, 8192, 16384)

#: Most (KV dtype, batch budget) settings the capacity search tries beside the defaults, each
#: only for fewer replicas than the layout needed at the defaults (a bisection per layout).
MAX_CAPACITY_VARIANTS = 8


#: Most requests one capacity simulation serves (``--requests``, a workload file's lines). Each
#: is simulated step by step and its latencies kept for exact percentiles (an SLO's p99 is a tail:
#: a streaming estimate would move the verdict); measured on this project's 2-core sandbox
#: (2026-12-07), the default 2,000-in / 256-out workload costs ~85 us and ~1.1 KB a request
#: (50,000: 4.8 s, 82 MB; 200,000: 17 s, 226 MB; 10^6 was reported at ~290 s and ~3.5 GB), and
#: a search runs tens of simulations. 10^5 requests keep one simulation near 10 s and 110 MB,
#: and leave ~1,000 samples above a p99: more requests would not move its estimate.
MAX_SIM_REQUESTS = 10**5

#: Most scheduler steps one capacity simulation runs. A step makes at least one token, so long
#: outputs on a small KV cache or at a low rate (each request decoding alone) take a step a
#: token: 2,000 requests of 130,000 tokens on one H100 needed ~8.7e7 steps (~6 minutes). Measured
#: as above, a step costs 4-17 us (more with more sequences in the batch): 2 x 10^6 steps is at
#: most ~35 s; the default workload runs ~5 steps a request (10^5 requests: ~500,000 steps).
MAX_SIM_STEPS = 2_000_000


@record(kw_only=False)
class Bound:
    """One accepted range: ``low <= value <= high`` (``low`` excluded when ``open_low``)."""

    low: float
    high: float
    what: str
    """What the value is, for the message ("a micro-batch size")."""
    open_low: bool = False
    open_high: bool = False

    def text(self) -> str:
        lo = "> " if self.open_low else ">= "
        hi = "< " if self.open_high else "<= "
        return f"{lo}{_num(self.low)} and {hi}{_num(self.high)}"

    def contains(self, v: float) -> bool:
        if not math.isfinite(v):
            return False
        above = v > self.low if self.open_low else v >= self.low
        below = v < self.high if self.open_high else v <= self.high
        return above and below


def _num(x: float) -> str:
    for base, name in ((2**31, "2^31"), (2**31 - 1, "2^31 - 1"), (2**20, "2^20"),
                       (2**60, "2^60")):
        if x == base:
            return name
    if x >= 10**5 and float(x) == 10 ** round(math.log10(x)):
        return f"10^{round(math.log10(x))}"
    if float(x).is_integer() and abs(x) < 2**53:  # a whole bound shown whole, not 1.23457e+08
        return str(int(x))
    return f"{x:g}"


BOUNDS: dict[str, Bound] = {
    "batch": Bound(1, 2**31, "a micro-batch size"),
    "grad_accum": Bound(1, 2**31, "a number of gradient-accumulation steps"),
    "lora_rank": Bound(1, 2**31, "a LoRA rank"),
    "seq": Bound(1, 2**31, "a sequence length"),
    "context": Bound(1, 2**31, "a context length"),
    "gpus": Bound(1, 2**20, "a number of GPUs"),
    "layers": Bound(1, 10**4, "a number of layers"),
    "dim": Bound(1, 2**31, "a dimension"),
    "int": Bound(1, 2**31, "a whole number"),
    "params": Bound(1, 10**15, "a parameter count"),
    "count": Bound(1, 10**15, "a count"),
    "bytes": Bound(0, 2**60, "a size in bytes"),
    "flops": Bound(0, 1e21, "a rate in FLOP/s", open_low=True),
    "bandwidth": Bound(0, 1e16, "a bandwidth in bytes/s", open_low=True),
    "price": Bound(0, 1e6, "a price per GPU-hour"),
    "seconds": Bound(0, 1e7, "a time in seconds", open_low=True),
    "duration": Bound(0, 1e7, "a time or spread in seconds"),
    "epochs": Bound(0, 1e6, "a number of epochs", open_low=True),
    "fraction": Bound(0, 1, "a fraction", open_high=True),
    "memory_fraction": Bound(0, 1, "a share of GPU memory", open_low=True),
    "grad_norm": Bound(0, 1e6, "a gradient-norm threshold", open_low=True),
    "capacity_factor": Bound(0, 1e3, "a capacity factor", open_low=True),
    "power": Bound(0, 1e5, "a power limit in watts", open_low=True),
    "loss_chunks": Bound(1, MAX_LOSS_CHUNKS, "a number of loss chunks"),
    "edge_layers": Bound(0, 10**4, "a number of layers"),
    # capacity (issue 29): requests simulated, their rate, token lengths
    "requests": Bound(1, 10**6, "a number of requests"),
    "rate": Bound(0, 10**6, "a request rate per second", open_low=True),
    "tokens": Bound(1, 2**31, "a token count"),
    # a prompt's share served by the prefix cache: 1 is a run whose every prompt is cached (a
    # published vLLM row; Deployment.run accepts [0, 1], the command line and the web the same)
    "prefix_share": Bound(0, 1, "a share of each prompt"),
}


def bound(name: str) -> Bound:
    """The range called ``name`` in :data:`BOUNDS`."""
    return BOUNDS[name]


def check_int(value: object, name: str, *, what: str | None = None, low: int | None = None,
              high: int | None = None, field: str | None = None) -> int:
    """``value`` as an int within the range ``name`` (``low``/``high`` narrow it), else an
    :class:`InputError` naming ``what`` (default: the range's name) -- or the ``field``, which
    each front end spells its own way -- the value and the range."""
    b = BOUNDS[name]
    lo = b.low if low is None else low
    hi = b.high if high is None else min(high, b.high)
    label = opt(field) if field else what or name
    accepted = f"a whole number >= {_num(lo)} and <= {_num(hi)}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{label} {shown(value)}: expected a whole number "
                         f"(got {type(value).__name__}), >= {_num(lo)} and <= {_num(hi)}",
                         field=field, value=value, accepted=accepted)
    if not lo <= value <= hi:
        raise InputError(f"{label} {shown(value)}: expected a whole number >= {_num(lo)} and "
                         f"<= {_num(hi)} ({b.what})", field=field, value=value,
                         accepted=accepted, fix={field: lo if value < lo else hi} if field
                         else None)
    return value


def check_number(value: object, name: str, *, what: str | None = None,
                 field: str | None = None) -> float:
    """``value`` as a finite float within the range ``name``, else an :class:`InputError`
    naming ``what`` or the ``field``."""
    b = BOUNDS[name]
    label = opt(field) if field else what or name
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{label} {shown(value)}: expected a number "
                         f"(got {type(value).__name__}) {b.text()}", field=field, value=value,
                         accepted=b.text())
    try:
        v = float(value)
    except OverflowError:
        v = math.inf
    if not b.contains(v):
        raise InputError(f"{label} {shown(value)}: out of range; expected {b.what} {b.text()}",
                         field=field, value=value, accepted=b.text())
    return v
