"""Time on a device: the roofline of each op, small-work occupancy, host transfers, data-parallel
all-reduce, and time and cost to train.

The time of one op is ``max(FLOPs / achievable compute, bytes / achievable bandwidth)``, where the
achievable compute is the dense peak x the matmul fraction x the *occupancy* -- the share of the
device the op's independent outputs can fill (outputs / resident threads, at most 1: the source
document's "a 128 x 128 output ... roughly 16x less work than the card keeps resident"). The memory
term has no occupancy factor (a small op's latency is below the launch overhead that the step adds
for every kernel).
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal, Sequence

from .._record import record
from .device import Device, Efficiency
from .efficiency import (
    GEMM_TILE, GROUPED_TILE_MIN, attention_clock_share, attention_fraction, constant,
    fp8_attention_vs_16bit, gemv_bandwidth_fraction, grouped_gemm_s, kloop_fixed_blocks, separate_launches_s,
    single_query_attention_s,
)
from .flops import OP_CLASSES, MatmulCount, Op, positive_int
from ..bounds import BOUNDS
from ..engines.zero3 import SERIAL_GATHER_BUS_BPS
from ..errors import InputError, UnsupportedError, opt, shown
from ..hardware import GPU

__all__ = [
    "OpTime", "RooflineClass", "time_ops", "roofline_classes", "step_bound",
    "SmallWork", "small_work", "DEFAULT_TILE",
    "TransferEstimate", "estimate_transfer",
    "allreduce_time", "ScalingRow", "ScalingTable", "data_parallel_scaling", "link_bandwidth",
    "TrainingTime", "time_to_train",
    "MatmulTime", "time_matmul",
]

Bound = Literal["compute", "memory"]


def _finite(x: float) -> float | None:
    """JSON has no infinity: an unbounded ratio (no bytes, no compute) is null."""
    return None if math.isinf(x) or math.isnan(x) else x

#: Output tile of one thread block assumed for wave quantization: 128 x 128, the CUTLASS/cuBLAS
#: default tensor-op tile on Ampere and Hopper (cuBLAS also picks 64..256 per side; Hopper kernels
#: often use 128 x 256). Give ``tile=`` to change it.
DEFAULT_TILE = (128, 128)


@record
class OpTime:
    """One op of a step on one device (times per instance unless ``total``)."""

    op: Op
    compute_s: float
    """Executed FLOPs / (peak x matmul (or fused-attention) fraction x occupancy)."""
    memory_s: float
    """Bytes / (bandwidth x memory fraction)."""
    occupancy: float
    """Share of the device's resident threads the op's independent outputs can fill (<= 1)."""
    dtype: str
    """The peak used: the compute dtype for matrix ops, ``fp32`` vector units for elementwise."""

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def total_s(self) -> float:
        return self.time_s * self.op.count

    @property
    def bound(self) -> Bound:
        return "compute" if self.compute_s >= self.memory_s else "memory"

    @property
    def achieved_flops(self) -> float:
        """Executed FLOP/s while the op runs (its height on the roofline)."""
        return self.op.flops / self.time_s if self.time_s else 0.0

    def to_dict(self) -> dict:
        o = self.op
        return {"name": o.name, "class": o.op_class, "kind": o.kind, "phase": o.phase,
                "group": o.group, "count": o.count, "flops": o.flops,
                "counted_flops": o.counted_flops, "bytes": o.bytes,
                "intensity": _finite(o.intensity),
                "kernels": o.kernels, "occupancy": self.occupancy, "compute_s": self.compute_s,
                "memory_s": self.memory_s, "time_s": self.time_s, "total_s": self.total_s,
                "bound": self.bound, "dtype": self.dtype,
                **({"shape": list(o.shape)} if o.shape else {})}


def time_ops(ops: Sequence[Op], device: Device, eff: Efficiency, dtype: str, *,
             shaped: bool = True) -> tuple[OpTime, ...]:
    """The roofline time of every op; matrix ops run at ``dtype``'s peak (less tile and wave
    quantization over the SMs), fused attention at its kernel's fraction by generation, head
    dimension, sequence and direction, elementwise ops on the FP32 vector units. ``shaped=False``
    keeps the plain roofline (one fraction, thread occupancy): the seed's one-product experiment.
    Under an 8-bit ``dtype`` (fp8, int8 weights) a model step's attention, activation products,
    embedding and head run at the 16-bit peak beside it."""
    wide = _SIXTEEN_BIT.get(dtype) if shaped else None
    if wide is not None and not device.supports(wide):
        wide = "fp16" if device.supports("fp16") else None
    vec = device.vector_flops * eff.matmul_fraction("fp32" if device.supports("fp32") else dtype)
    # an inference step's FP8 attention beside 16-bit (or int8-weight) GEMMs: the serving
    # engine's FP8 kernel at the FP8 peak (compute.flops.inference_attention)
    fp8_beside = dtype not in ("fp8", "fp4") and device.supports("fp8") and any(
        o.narrow and o.kind == "attention" for o in ops)
    rates = {d: (device.peak(d), device.peak(d) * eff.matmul_fraction(d), vec)
             for d in {dtype, wide, "fp8" if fp8_beside else None} if d is not None}
    out = []
    for op in ops:
        # 8-bit weights run 8-bit GEMMs in the blocks' linear layers only: attention (its
        # products of activations), the embedding and the head stay 16-bit (the formats'
        # convention, formats.WEIGHT_FORMATS; vLLM's FP8 W8A8 and LLM.int8() alike)
        if fp8_beside and op.narrow and op.kind == "attention":
            out.append(_time_op(op, device, eff, "fp8", rates["fp8"], shaped))
            continue
        used = wide if wide is not None and _sixteen_bit_op(op) else dtype
        out.append(_time_op(op, device, eff, used, rates[used], shaped))
    return tuple(out)


#: The 16-bit dtype beside an 8-bit (or 4-bit: NVFP4/MXFP4 on Blackwell) compute dtype.
_SIXTEEN_BIT = {"fp8": "bf16", "int8": "fp16", "fp4": "bf16"}


def _sixteen_bit_op(op: Op) -> bool:
    return (op.kind == "attention" and not op.narrow) or (op.kind == "matmul" and (
        op.weight_elements == 0 or op.group in ("head", "embedding") or op.wide))


def _time_op(op: Op, device: Device, eff: Efficiency, dtype: str,
             rates: tuple[float, float, float], shaped: bool) -> OpTime:
    peak, mm, vec = rates
    slots = device.parallel_slots
    p = op.parallel_work
    # FLOPs per output x the outputs the device could have run in that time: an op with
    # fewer outputs than resident threads takes as long as one that fills them
    per_output = op.flops / p
    if op.kind == "elementwise":
        compute = per_output * max(p, slots) / vec if op.flops else 0.0
        used = "fp32"
    elif op.kind == "attention" and shaped:
        # the kernel's rate at this sequence for the work; the occupancy floor (fewer
        # outputs than resident threads) at its long-sequence rate -- the short-sequence
        # fraction already prices small work, so applying both would make a longer
        # sequence take less time
        rate = _attention_rate(op, device, eff, peak)
        floor = _attention_rate(op, device, eff, peak, long=True)
        compute = max(op.flops / rate, per_output * max(p, slots) / floor)
        used = dtype
    else:
        rate = peak * eff.attention if op.kind == "attention" else mm
        compute = per_output * max(p, slots) / rate
        if shaped and op.kind == "matmul" and op.shape and device.kind == "gpu" \
                and op.groups > 1 and op.shape[1] >= op.groups * GROUPED_TILE_MIN:
            # a grouped MoE GEMM: each expert's product at the rows it gets
            fixed = kloop_fixed_blocks(device.architecture, peak, device.peak("fp8")
                                       if device.supports("fp8") else 0.0)
            compute = max(compute, grouped_gemm_s(op.flops, op.shape, op.groups, rate,
                                                  device.sm_count, fixed_blocks=fixed,
                                                  backward=op.phase == "backward",
                                                  concurrent=op.concurrent))
        elif shaped and op.kind == "matmul" and op.shape and device.kind == "gpu" \
                and min(op.shape[1], op.shape[3]) >= GEMM_TILE[0]:
            # tiled GEMMs only: a skinny product (decode's M = 1) runs as a GEMV / split-K
            # kernel, whose share of the device is the occupancy above
            work, fixed = separate_launches_s(
                op.flops, op.shape, op.launch_shares, rate, architecture=device.architecture,
                dtype=dtype, sm_count=device.sm_count)
            compute = max(compute, work) + fixed
        used = dtype
    dram, l2 = row_rereads(op, device, eff) if shaped else (0.0, 0.0)
    bw = _bandwidth(op, device, eff, dram) if shaped else device.memory_bandwidth * eff.memory
    memory = (op.bytes + dram) / bw + (l2 / device.l2_bandwidth if l2 else 0.0)
    issued = gemv_issue_s(op, device, eff, op.bytes / bw, memory) if shaped else 0.0
    if issued > memory:  # the rows' dequantization outlasts their loads
        compute = max(compute, issued)
    if shaped and op.attention_kernel == "ft-mmha" and op.shape and device.kind == "gpu":
        memory = max(memory, _mmha_chain_s(op, device))
    return OpTime(op=op, compute_s=compute, memory_s=memory,
                  occupancy=min(1.0, p / slots), dtype=used)


def _mmha_chain_s(op: Op, device: Device) -> float:
    """FT's masked multi-head attention (a decode ``attn.core`` of shape (sequences x heads, 1,
    head dim, keys)) timed by its blocks' chain of dependent loads
    (:func:`~.efficiency.single_query_attention_s`); 0 where the device's memory latency is not
    on record."""
    blocks, _, head_dim, keys = op.shape
    per_sm = device.parallel_slots // device.sm_count if device.sm_count else 0
    return single_query_attention_s(blocks, head_dim, keys, sm_count=device.sm_count,
                                    max_threads_per_sm=per_sm,
                                    latency_s=device.memory_latency_s)


def _bandwidth(op: Op, device: Device, eff: Efficiency, rereads: float = 0.0) -> float:
    """Achievable bytes/s of ``op`` (with ``rereads`` bytes of its weights read again from DRAM,
    :func:`row_rereads`): the streaming fraction; for a weight matmul on a GPU, at any M, no more
    than lets its weight stream run at the skinny (GEMV / split-K) share of its weight width
    (:func:`~.efficiency.gemv_bandwidth_fraction`, scaled with a measured streaming fraction).
    Its time is the longer of all its bytes at the streaming share and its weights at that
    skinny share, so the share is monotone and continuous in M: the skinny one while the
    weights are the bytes (decode), rising to the streaming one only as the rows' activations
    grow to ``1 - gemv / streaming`` of them (a GEMM of 4096 x 14336 16-bit weights: 767
    rows). The step time of a weight-bound matmul therefore never falls as its rows grow, where a
    switch at one 128-row tile made a 128th decode row 1.3 ms faster on llama-3.1-8b H100 (issues
    29/31).

    Why there is no switch at the tile: the streaming share 0.85 (``memory_default``) is the
    elementwise default, not a GEMM measurement, and the published skinny-GEMM measurements do
    not rise toward it as M grows to a tile. DeepBench's cuBLAS rows (benchmarks/published/
    deepbench_gemm_fp16.json, baidu-research/DeepBench@30c5115 results/train, FP16 sheets) at a
    fixed large weight read a flat-to-falling share from 16 to 128 rows: V100 7680 x 2560 (NN)
    16/32/64/128 rows in 0.056/0.057/0.061/0.074 ms, T4 4096 x 4096 (NN) in 0.123/0.123/0.128/
    0.146 ms (tests/unit/test_skinny_bandwidth.py computes their shares). Marlin's README figure
    (IST-DASLab/marlin@2f6d7c1 assets/peak.png, A10, 72k x 18k, FP16 via PyTorch's
    CUTLASS/cuBLAS call as the baseline) measures Marlin's speedup at the ideal 3.87x from 1 to
    32 rows: over those rows the FP16 GEMM stays as near its byte floor as Marlin's 4-bit kernel
    stays to its own, with no rise of its share as the rows grow. On an H100 neither does it fall
    (benchmarks/published/hopper_small_m_gemm.json, vLLM pull requests #49363 and #23280):
    cuBLAS's bf16 GEMM takes 0.99-1.02x its one-row time at 16 rows and 1.04-1.08x at 128 rows
    over 132-462 MB of weights (1.42x on a 30 MB one that fits the L2), while the time here, at
    the end-to-end share, is the longer at every one of those rows but that 30 MB one at 128
    (benchmarks/trtllm_load_breakdown.py). The GEMV share itself (gpt-fast's batch-1 step,
    ``gemv_bw_16bit``) is an end-to-end figure: it folds each kernel's ramp and tail and the gaps
    between kernels into the weights' share, costs a step pays at every batch, as the kernels per
    step do not change with it."""
    bw = device.memory_bandwidth * eff.memory
    if device.kind != "gpu" or op.kind != "matmul" or op.weight_bytes <= 0 \
            or not op.weight_elements or not op.shape:
        return bw
    # the format's width (not bytes / elements, which the rows' activations inflate with M)
    w = op.weight_width or op.weight_bytes / op.weight_elements
    total = op.bytes + rereads
    weights = min(total, op.weight_bytes + rereads)
    skinny = bw * gemv_bandwidth_fraction(w, eff.quant_gemv) / constant("memory_default")
    return min(bw, skinny * total / weights)


def row_rereads(op: Op, device: Device, eff: Efficiency) -> tuple[float, float]:
    """Bytes a quantized decode matmul reads beyond ``op.bytes`` under a kernel that reloads its
    packed weights once per row (``eff.quant_gemv_rows``: AutoAWQ's GEMV, at batch 2 to 8), as
    (from DRAM, from the L2): (rows - 1) x its weights at ``eff.quant_weight_bytes`` each; (0, 0)
    otherwise (the 16-bit head and embedding, a grouped MoE GEMM, batch 1).

    The kernel's grid is (1, out_channels / 4, rows) with the row in ``blockIdx.z``
    (AutoAWQ_kernels@c7b0e88 awq_ext/quantization/gemv_cuda.cu), and the blocks go to the SMs
    in the order of their linear index, x fastest, z slowest (how NVIDIA hardware dispatches a
    grid; the CUDA guide promises no order, which is why CUTLASS's threadblock swizzles exist):
    row r + 1 reads a weight tile one whole matrix after row r read it. So the re-reads come
    from the L2 only where one launch's matrix fits in what the L2 was measured to keep over
    such a sweep (``device.l2_resident_bytes``), at the rate measured there
    (``device.l2_bandwidth``); a larger matrix, or a GPU without that measurement, re-reads it
    all from DRAM. One launch's matrix is the op's weights over its launches (gate and up: two)."""
    if eff.quant_gemv_rows <= 0 or device.kind != "gpu" or op.kind != "matmul" \
            or not op.weight_elements or not op.shape or op.groups != 1:
        return 0.0, 0.0
    rows = op.shape[0] * op.shape[1]
    if (op.weight_width or op.bytes / op.weight_elements) >= 1.5 \
            or not 1 < rows <= eff.quant_gemv_rows:
        return 0.0, 0.0
    extra = (rows - 1) * op.weight_elements * eff.quant_weight_bytes
    if l2_keeps(op, device, eff):
        return 0.0, extra
    return extra, 0.0


def gemv_issue_s(op: Op, device: Device, eff: Efficiency, first_s: float,
                 memory_s: float) -> float:
    """Seconds a quantized decode matmul takes under a kernel whose every row of the batch issues
    ``eff.quant_issue`` instructions per weight (AutoAWQ's GEMV: the row in ``blockIdx.z``, each
    row unpacking and dequantizing the whole matrix again), at the device's issue rate
    (``device.issue_rate``); 0 where the kernel or the rate is not counted, or the op is not
    such a matmul (the 16-bit head, a grouped MoE GEMM).

    The rows run one after another (the grid's z is its slowest index, :func:`row_rereads`),
    and within a row each SM's resident warps overlap their loads with their arithmetic. So each
    row takes the longer of its bytes and its issue, and the rows add: the first row
    max(``first_s``, issue) -- ``first_s`` its bytes from DRAM -- and each later row
    max(its share of the re-reads, issue), the re-reads being ``memory_s - first_s`` (from the L2
    or DRAM, :func:`row_rereads`). At batch 1 that is max(bytes, issue). The issue count is a
    floor: a pipe shared by the integer, fp16 and half the FP32 instructions (the GA10x/Ada
    partition) is not counted."""
    if eff.quant_issue <= 0 or device.issue_rate <= 0 or device.kind != "gpu" \
            or op.kind != "matmul" or not op.weight_elements or not op.shape or op.groups != 1:
        return 0.0
    if (op.weight_width or op.bytes / op.weight_elements) >= 1.5:
        return 0.0
    rows = op.shape[0] * op.shape[1]
    if eff.quant_gemv_rows and rows > eff.quant_gemv_rows:
        return 0.0  # above its rows another kernel runs (WQLinear_GEMV: gemmv2_forward_cuda)
    issue = op.weight_elements * eff.quant_issue / device.issue_rate
    if rows <= 1:
        return max(first_s, issue)
    reread = max(0.0, memory_s - first_s) / (rows - 1)
    return max(first_s, issue) + (rows - 1) * max(reread, issue)


def l2_keeps(op: Op, device: Device, eff: Efficiency) -> bool:
    """One launch of ``op`` reads a packed matrix no larger than the footprint ``device``'s L2
    was measured to keep (:func:`row_rereads`)."""
    per_launch = op.weight_elements * eff.quant_weight_bytes / max(1, op.kernels)
    return device.l2_bandwidth > 0 and 0 < per_launch <= device.l2_resident_bytes


def _attention_rate(op: Op, device: Device, eff: Efficiency, peak: float, *,
                    long: bool = False) -> float:
    """FLOP/s of a fused attention kernel: the stated ``eff.attention`` when it was given (or on a
    CPU); by default the kernel's fraction for this generation, head dim, sequence (``long``: at a
    long sequence) and direction (:func:`~.efficiency.attention_fraction`), of the op's kernel
    where it names one, else of the step's (``eff.attention_kernel``: a training step's)."""
    if device.kind != "gpu" or not str(eff.basis.get("attention", "")).startswith("default") \
            or not op.shape:
        return peak * eff.attention
    _, _, d, kv = op.shape
    kernel = op.attention_kernel or eff.attention_kernel
    vs16 = fp8_attention_vs_16bit(kernel, d)
    if vs16 > 0 and device.supports("bf16"):
        # an FP8 kernel measured against the 16-bit one beside it (vLLM's two-level FA3):
        # the 16-bit kernel's rate at the 16-bit peak (the engine's own where it names one:
        # eff.attention_kernel, FA3 on Hopper under vLLM), times that ratio
        peak, kernel = device.peak("bf16"), eff.attention_kernel
    else:
        vs16 = 1.0
    # a SKU that is a sibling's die at another clock (GB200: B200's) runs the sibling's kernel
    # at their measured tensor-core ratio, not their datasheet peaks' (attention_clock_share)
    return vs16 * peak * attention_clock_share(device.name) * attention_fraction(
        device.architecture, d, 1 << 40 if long else kv, backward=op.phase == "backward",
        cap=eff.matmul_fraction(op_dtype_hint(device, peak, eff)), kernel=kernel)


def op_dtype_hint(device: Device, peak: float, eff: Efficiency) -> str:
    """The dtype whose peak is ``peak`` (for the matmul fraction that caps attention)."""
    return next((d for d, v in device.peak_flops.items() if v == peak), "bf16")


@record
class RooflineClass:
    """The ops of one class summed over a step."""

    op_class: str
    flops: float
    """Executed FLOPs."""
    bytes: float
    time_s: float
    kernels: int
    bound: Bound
    """Where most of this class's time goes."""

    @property
    def intensity(self) -> float:
        return self.flops / self.bytes if self.bytes else math.inf

    def to_dict(self) -> dict:
        return {"class": self.op_class, "flops": self.flops, "bytes": self.bytes,
                "intensity": _finite(self.intensity), "time_s": self.time_s, "kernels": self.kernels,
                "bound": self.bound}


def roofline_classes(times: Sequence[OpTime]) -> tuple[RooflineClass, ...]:
    out = []
    for cls in OP_CLASSES:
        mine = [t for t in times if t.op.op_class == cls]
        if not mine:
            continue
        c = sum(t.total_s for t in mine if t.bound == "compute")
        m = sum(t.total_s for t in mine if t.bound == "memory")
        out.append(RooflineClass(
            op_class=cls, flops=sum(t.op.flops * t.op.count for t in mine),
            bytes=sum(t.op.bytes * t.op.count for t in mine), time_s=c + m,
            kernels=sum(t.op.kernels * t.op.count for t in mine),
            bound="compute" if c >= m else "memory"))
    return tuple(out)


def step_bound(times: Sequence[OpTime]) -> Bound:
    """``compute`` when compute-bound ops take at least half the (kernel) time."""
    c = sum(t.total_s for t in times if t.bound == "compute")
    m = sum(t.total_s for t in times if t.bound == "memory")
    return "compute" if c >= m else "memory"


# --------------------------------------------------------------------------------------------------
# Small work


@record
class SmallWork:
    """How much of a GPU one matmul's output can occupy."""

    output_elements: int
    """Independent dot products (batch x M x N)."""
    resident_threads: int
    """Threads the whole chip keeps resident: SMs x max threads per SM."""
    work_shortfall: float
    """resident threads / output elements: above 1, the chip has that many times more thread
    slots than the matmul has independent outputs (the seed's 128 x 128 on H100-SXM: 16.5)."""
    thread_occupancy: float
    """min(1, output elements / resident threads)."""
    tile: tuple[int, int]
    """Output tile of one thread block assumed (see :data:`DEFAULT_TILE`)."""
    tiles: int
    """Thread blocks: batch x ceil(M / tile rows) x ceil(N / tile columns)."""
    sm_count: int
    waves: int
    """ceil(tiles / SMs): rounds of thread blocks the SMs run."""
    wave_efficiency: float
    """tiles / (waves x SMs): the busy share of the SM-rounds (wave quantization)."""

    @property
    def sms_busy(self) -> int:
        return min(self.tiles, self.sm_count)

    def to_dict(self) -> dict:
        return {"output_elements": self.output_elements,
                "resident_threads": self.resident_threads, "work_shortfall": self.work_shortfall,
                "thread_occupancy": self.thread_occupancy, "tile": list(self.tile),
                "tiles": self.tiles, "sm_count": self.sm_count, "sms_busy": self.sms_busy,
                "waves": self.waves, "wave_efficiency": self.wave_efficiency}


def small_work(m: int, n: int, gpu: GPU | Device, *, batch: int = 1,
               tile: tuple[int, int] = DEFAULT_TILE) -> SmallWork:
    """Output tiles vs SMs and output elements vs resident threads for a (batch x) M x N output."""
    for v, what in ((m, "M"), (n, "N"), (batch, "batch"), (tile[0], "tile rows"),
                    (tile[1], "tile columns")):
        positive_int(v, what)
    if isinstance(gpu, GPU):
        resident, sms = gpu.resident_threads, gpu.sm_count
    else:
        resident, sms = gpu.parallel_slots, gpu.sm_count
    if not sms:
        raise InputError(f"{gpu.name}: small-work analysis needs a GPU's SM count")
    out = batch * m * n
    tiles = batch * math.ceil(m / tile[0]) * math.ceil(n / tile[1])
    waves = math.ceil(tiles / sms)
    return SmallWork(output_elements=out, resident_threads=resident,
                     work_shortfall=resident / out, thread_occupancy=min(1.0, out / resident),
                     tile=tile, tiles=tiles, sm_count=sms, waves=waves,
                     wave_efficiency=tiles / (waves * sms))


@record
class MatmulTime:
    """One matmul on one device: compute, and end to end with the copies in and out."""

    device: str
    dtype: str
    compute_s: float
    """Kernel time: max(FLOPs / (achievable peak x occupancy), bytes / achievable bandwidth)."""
    launch_s: float
    transfer_s: float
    """Host-to-device copies of both operands and the copy of the result back (0 on a CPU)."""
    occupancy: float
    bound: Bound

    @property
    def total_s(self) -> float:
        return self.compute_s + self.launch_s + self.transfer_s

    def to_dict(self) -> dict:
        return {"device": self.device, "dtype": self.dtype, "compute_s": self.compute_s,
                "launch_s": self.launch_s, "transfer_s": self.transfer_s,
                "total_s": self.total_s, "occupancy": self.occupancy, "bound": self.bound}


_ELEM = {"fp64": 8, "fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp6": 0.75,
         "fp4": 0.5}


def time_matmul(mm: MatmulCount, device: Device, eff: Efficiency, dtype: str, *,
                transfer: bool = True, pinned: bool = True) -> MatmulTime:
    """The seed's experiment as an estimate: time of ``A @ B`` on ``device`` (GPU: plus copying A
    and B over PCIe and C back, one launch overhead per copy and for the kernel)."""
    e = _ELEM.get(dtype, 4)
    op = Op(name="matmul", op_class="mlp", kind="matmul", phase="forward", count=1,
            flops=float(mm.flops), counted_flops=float(mm.flops),
            bytes=float(e * mm.batch * (mm.m * mm.k + mm.k * mm.n + mm.m * mm.n)),
            parallel_work=mm.output_elements, kernels=1, shape=(mm.batch, mm.m, mm.k, mm.n))
    # the seed's experiment keeps the plain roofline (its figures are golden): no wave quantization
    t = time_ops([op], device, eff, dtype, shaped=False)[0]
    xfer = 0.0
    launches = 1
    if transfer and device.kind == "gpu" and device.host_link_bandwidth:
        frac = eff.pcie_pinned if pinned else eff.pcie_pageable
        xfer = op.bytes / (device.host_link_bandwidth * frac)
        launches += 3
    return MatmulTime(device=device.name, dtype=dtype, compute_s=t.time_s,
                      launch_s=launches * eff.launch_s, transfer_s=xfer, occupancy=t.occupancy,
                      bound=t.bound)


# --------------------------------------------------------------------------------------------------
# Host-to-device transfers


@record
class TransferEstimate:
    """Copying each step's batch from host memory to the GPU."""

    bytes_per_step: int
    link: str
    link_bandwidth: float
    """Theoretical one-direction bandwidth of the link, bytes/s."""
    pinned: bool
    efficiency: float
    """Fraction of the link reached (pinned or pageable, default or measured)."""
    time_s: float
    """Copy time per step, one launch overhead included."""
    compute_s: float
    """The step's compute time it is compared with."""
    overlapped: bool
    """Copies run on a side stream while the previous step computes (needs pinned memory)."""
    exposed_s: float
    """Time the copy adds to the step: all of it when not overlapped; what exceeds the compute
    time when overlapped."""
    advice: tuple[str, ...]

    @property
    def achievable_bandwidth(self) -> float:
        return self.link_bandwidth * self.efficiency

    @property
    def ratio_to_compute(self) -> float:
        return self.time_s / self.compute_s if self.compute_s else math.inf

    def to_dict(self) -> dict:
        return {"bytes_per_step": self.bytes_per_step, "link": self.link,
                "link_bandwidth": self.link_bandwidth, "pinned": self.pinned,
                "efficiency": self.efficiency, "achievable_bandwidth": self.achievable_bandwidth,
                "time_s": self.time_s, "compute_s": self.compute_s,
                "ratio_to_compute": _finite(self.ratio_to_compute), "overlapped": self.overlapped,
                "exposed_s": self.exposed_s, "advice": list(self.advice)}


def estimate_transfer(bytes_per_step: int, device: Device, eff: Efficiency, *,
                      compute_s: float, pinned: bool = True,
                      overlap: bool | None = None) -> TransferEstimate:
    """H2D time of one step's inputs vs the step's compute; overlapped by default when pinned
    (``pin_memory=True`` + ``non_blocking=True``: a pageable copy blocks the host)."""
    if device.kind != "gpu" or not device.host_link_bandwidth:
        raise InputError(f"{device.name}: host-to-device transfers apply to a GPU")
    if bytes_per_step < 0:
        raise InputError(f"bytes per step {bytes_per_step!r}: expected >= 0")
    overlap = pinned if overlap is None else overlap
    if overlap and not pinned:
        raise InputError("a copy from pageable memory cannot overlap compute (the host blocks); "
                         "use pinned memory (DataLoader(pin_memory=True)) or no overlap")
    frac = eff.pcie_pinned if pinned else eff.pcie_pageable
    t = bytes_per_step / (device.host_link_bandwidth * frac) + eff.launch_s
    exposed = max(0.0, t - compute_s) if overlap else t
    advice = []
    if not pinned:
        advice.append(
            f"pin the host batch (DataLoader(pin_memory=True)) and copy with "
            f".to('cuda', non_blocking=True): pinned copies run at about "
            f"{device.host_link_bandwidth * eff.pcie_pinned / 1e9:.0f} GB/s instead of "
            f"{device.host_link_bandwidth * eff.pcie_pageable / 1e9:.0f} GB/s and can overlap "
            "the previous step's compute")
    if compute_s and t > 0.1 * compute_s:
        advice.append(
            "the copy is more than 10% of the compute: keep the data on the GPU (load the "
            "dataset or a large chunk of it once), or send less per step (uint8 images "
            "normalized on the GPU, int32 token ids)")
    advice.append("copy each batch once per step and read results back rarely (.item() and "
                  ".cpu() wait for the GPU: log the loss every N steps, not every step)")
    return TransferEstimate(bytes_per_step=int(bytes_per_step), link=device.host_link,
                            link_bandwidth=device.host_link_bandwidth, pinned=pinned,
                            efficiency=frac, time_s=t, compute_s=compute_s, overlapped=overlap,
                            exposed_s=exposed, advice=tuple(advice))


# --------------------------------------------------------------------------------------------------
# Data-parallel scaling


def allreduce_time(nbytes: float, n: int, bus_bandwidth: float) -> float:
    """Ring all-reduce: each GPU sends and receives 2(N-1)/N x the buffer (reduce-scatter, then
    all-gather), at the per-direction bus bandwidth. Zero for one GPU."""
    if n < 1:
        raise InputError(f"GPU count {n!r}: expected a whole number >= 1")
    if bus_bandwidth <= 0:
        raise InputError(f"link bandwidth {bus_bandwidth!r}: expected > 0")
    return 2 * (n - 1) / n * nbytes / bus_bandwidth


_LINK_RE = r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(GB/s|GBps|GB|Gb/s|Gbps|Gbit/s)?\s*$"  # compiled on use


def link_bandwidth(link: str | float | None, device: Device) -> tuple[str, float]:
    """(name, per-direction bytes/s) of the link gradients are all-reduced over.

    ``nvlink``: half the catalog's total GPU-to-GPU bandwidth (vendors sum both directions);
    ``pcie``: the GPU's PCIe link, one direction; a number or ``"50GB/s"``/``"400Gb/s"``: a network
    link per GPU in GB/s (Gb/s divided by 8). None: NVLink when the GPU has it, else PCIe.
    """
    if link is None:
        link = "nvlink" if device.interconnect_bandwidth else "pcie"
    if isinstance(link, (int, float)) and not isinstance(link, bool):
        gbps = float(link) if abs(link) < 1e300 else math.inf
        name = "network link"
    else:
        text = str(link).strip().lower().replace(" ", "")
        if text == "nvlink":
            if not device.interconnect_bandwidth:
                raise UnsupportedError(f"{device.name} has no NVLink/GPU-to-GPU link in the "
                                       f"catalog; use {opt('link')} pcie or a network speed in "
                                       "GB/s", field="link", value=link, fix={"link": "pcie"})
            return (device.interconnect or "NVLink"), device.interconnect_bandwidth / 2
        if text == "pcie":
            if not device.host_link_bandwidth:
                raise InputError(f"{device.name} has no PCIe link in the catalog")
            return device.host_link, device.host_link_bandwidth
        m = re.match(_LINK_RE, str(link)) if len(str(link)) <= 64 else None
        if not m:
            raise InputError(f"{opt('link')} {shown(link)}: expected nvlink, pcie, or a bandwidth "
                             "such as 50 (GB/s), 50GB/s or 400Gb/s", field="link", value=link,
                             accepted="nvlink, pcie, or a bandwidth such as 50 (GB/s), 50GB/s "
                             "or 400Gb/s") from None
        gbps = float(m.group(1)) * (1 / 8 if m.group(2) in ("Gb/s", "Gbps", "Gbit/s") else 1.0)
        name = f"network link ({str(link).strip()})"
    if not BOUNDS["bandwidth"].contains(gbps * 1e9):
        raise InputError(f"{opt('link')} {shown(link)}: expected a bandwidth > 0 and <= 10^7 "
                         "GB/s (10 PB/s)", field="link", value=link)
    return name, gbps * 1e9


@record
class ScalingRow:
    gpus: int
    step_time_s: float
    allreduce_s: float
    exposed_comm_s: float
    speedup: float
    """N x single-GPU step time / N-GPU step time (same per-GPU batch)."""
    efficiency: float
    """speedup / N."""
    tokens_per_s: float
    link: str = ""
    """The link this many GPUs reduce over (on a topology: the node's, or the network's once
    they span nodes)."""

    def to_dict(self) -> dict:
        return {"gpus": self.gpus, "step_time_s": self.step_time_s,
                "allreduce_s": self.allreduce_s, "exposed_comm_s": self.exposed_comm_s,
                "speedup": self.speedup, "efficiency": self.efficiency,
                "tokens_per_s": self.tokens_per_s, "link": self.link}


@record
class ScalingTable:
    """Data parallelism over 1..N GPUs: every GPU runs the same step, then gradients are summed."""

    link: str
    link_bandwidth: float
    """Per-direction bytes/s."""
    bus_efficiency: float
    gradient_bytes: int
    overlap: bool
    bucket_bytes: int
    rows: tuple[ScalingRow, ...]
    notes: tuple[str, ...] = ()
    topology: Any = None
    """The :class:`~gpuplan.hardware.topology.Topology` the rows were timed on (None: one
    ``link`` for every row, as ``--link`` names it)."""

    def to_dict(self) -> dict:
        return {"link": self.link, "link_bandwidth": self.link_bandwidth,
                "bus_efficiency": self.bus_efficiency, "gradient_bytes": self.gradient_bytes,
                "overlap": self.overlap, "bucket_bytes": self.bucket_bytes,
                "rows": [r.to_dict() for r in self.rows], "notes": list(self.notes),
                "topology": None if self.topology is None else self.topology.to_dict()}


def _gpu_counts(n: int) -> list[int]:
    if n <= 16:
        return list(range(1, n + 1))
    out, k = [], 1
    while k < n:
        out.append(k)
        k *= 2
    return out + [n]


def data_parallel_scaling(*, step_s: float, backward_s: float, gradient_bytes: int, gpus: int,
                          link: str, link_bandwidth: float, eff: Efficiency, overlap: bool = True,
                          tokens_per_step: float, bucket_bytes: int = 25 * 1024 * 1024,
                          topology: Any = None, serial_bytes: int = 0,
                          overlap_sm_share: float = 0.0) -> ScalingTable:
    """Speed-up and efficiency of data parallelism for 1..``gpus`` GPUs.

    Without overlap the whole all-reduce follows the backward pass. With overlap (PyTorch DDP's
    default: gradients are reduced in ``bucket_bytes`` buckets, 25 MiB, while backward continues)
    only what does not fit under the backward time is exposed, and never less than the last
    bucket's all-reduce. ``serial_bytes`` of ``gradient_bytes`` are exposed whatever the
    overlap (ZeRO-3's weight all-gathers where they are waited for, ``gather_overlap``). The
    bandwidth term only: NCCL's per-step latency is not modeled.

    ``topology`` (a :class:`~gpuplan.hardware.topology.Topology`): each row's ring runs on the
    link its GPUs span -- the node's (``link``) while they fit in one node, the network once they
    do not, on the node's NICs (one a GPU: a node's 8 GPUs reduce over 8 NICs) or the node's link
    where that is slower (``Topology.bandwidth``). ``serial_bytes`` (DeepSpeed's waited-for
    gathers, which move twice them) run no faster than
    :data:`~gpuplan.engines.zero3.SERIAL_GATHER_BUS_BPS`.
    None: every row on ``link``, as the user named it. ``overlap_sm_share``: the share of the SMs
    the overlapped collective's kernels hold while they run
    (:func:`~.efficiency.overlap_sm_share`): the backward beside them is slowed by that share of
    the hidden stretch, which the exposed time carries.
    """
    positive_int(gpus, "GPU count")
    rows = []
    base = None
    for n in _gpu_counts(gpus):
        row_link, row_bw = link, link_bandwidth
        if topology is not None and n > 1 and topology.link(n)[0] is not topology.intra:
            # across nodes, or inside one past an NVLink bridge's pair (PCIe)
            via, _, row_bw = topology.bandwidth(n)
            row_link = via.name
        bus = row_bw * eff.comm
        ar = allreduce_time(gradient_bytes, n, bus)
        if n > 1:
            ar += math.ceil(gradient_bytes / bucket_bytes) * eff.launch_s
        if n == 1:
            exposed = 0.0
        else:
            serial = (ar * min(serial_bytes, gradient_bytes) / gradient_bytes
                      if gradient_bytes > 0 else 0.0)
            if serial_bytes > 0:  # the waited-for gathers move 2 x serial_bytes, at most this fast
                slow = max(serial, 2 * (n - 1) / n * min(serial_bytes, gradient_bytes)
                           / SERIAL_GATHER_BUS_BPS)
                ar, serial = ar + slow - serial, slow
            if overlap:
                last = allreduce_time(min(bucket_bytes, gradient_bytes), n, bus) + eff.launch_s
                tail = max(ar - serial - backward_s, last)
                hidden = max(0.0, ar - serial - tail)
                exposed = serial + tail + overlap_sm_share * hidden
            else:
                exposed = ar
        t = step_s + exposed
        base = t if base is None else base
        speedup = n * base / t
        rows.append(ScalingRow(gpus=n, step_time_s=t, allreduce_s=ar, exposed_comm_s=exposed,
                               speedup=speedup, efficiency=speedup / n,
                               tokens_per_s=n * tokens_per_step / t,
                               link=row_link if n > 1 else ""))
    notes = ["bandwidth term only (NCCL's per-hop latency is ignored): small models scale worse "
             "than shown"]
    if topology is not None:
        if gpus > topology.gpus_per_node:
            notes.append(f"topology: {topology.stated}; beyond {topology.gpus_per_node} GPUs the "
                         "gradients cross the network (--gpus-per-node, --inter-node)")
        elif topology.bridge and gpus > topology.bridge:
            notes.append(f"topology: {topology.stated}; beyond {topology.bridge} GPUs the "
                         "gradients ride PCIe")
        if gpus > 1 and topology.link(gpus)[0] is not topology.intra:
            via, _, link_bandwidth = topology.bandwidth(gpus)
            link = via.name
    elif "nvlink" in link.lower() and gpus > 8:
        notes.append("NVLink joins the GPUs of one server (8 on HGX boards); beyond it gradients "
                     "cross the network: give --link the network's GB/s per GPU")
    return ScalingTable(link=link, link_bandwidth=link_bandwidth, bus_efficiency=eff.comm,
                        gradient_bytes=int(gradient_bytes), overlap=overlap,
                        bucket_bytes=bucket_bytes, rows=tuple(rows), notes=tuple(notes),
                        topology=topology)


# --------------------------------------------------------------------------------------------------
# Time and cost to train


@record
class TrainingTime:
    work: float
    """Tokens (or samples) to process."""
    unit: Literal["tokens", "samples"]
    rate_per_s: float
    """Tokens (samples) per second over all GPUs."""
    gpus: int
    seconds: float
    price_per_gpu_hour: float | None = None

    @property
    def days(self) -> float:
        return self.seconds / 86400

    @property
    def gpu_hours(self) -> float:
        return self.seconds * self.gpus / 3600

    @property
    def cost(self) -> float | None:
        return None if self.price_per_gpu_hour is None else self.gpu_hours * self.price_per_gpu_hour

    def to_dict(self) -> dict:
        return {"work": self.work, "unit": self.unit, "rate_per_s": self.rate_per_s,
                "gpus": self.gpus, "seconds": self.seconds, "days": self.days,
                "gpu_hours": self.gpu_hours, "price_per_gpu_hour": self.price_per_gpu_hour,
                "cost": self.cost}


def time_to_train(*, work: float, rate_per_s: float, gpus: int,
                  unit: Literal["tokens", "samples"] = "tokens",
                  price_per_gpu_hour: float | None = None) -> TrainingTime:
    """Wall-clock time to process ``work`` tokens (samples) at ``rate_per_s`` on ``gpus`` GPUs, and
    its cost at ``price_per_gpu_hour``."""
    if not (work > 0 and math.isfinite(work)):
        raise InputError(f"{unit} to train on {work!r}: expected a number > 0")
    if not (rate_per_s > 0 and math.isfinite(rate_per_s)):
        raise InputError(f"throughput {rate_per_s!r} {unit}/s: expected > 0")
    positive_int(gpus, "GPU count")
    if price_per_gpu_hour is not None and not (price_per_gpu_hour >= 0
                                               and math.isfinite(price_per_gpu_hour)):
        raise InputError(f"price per GPU-hour {price_per_gpu_hour!r}: expected a number >= 0")
    return TrainingTime(work=float(work), unit=unit, rate_per_s=float(rate_per_s), gpus=gpus,
                        seconds=work / rate_per_s, price_per_gpu_hour=price_per_gpu_hour)
