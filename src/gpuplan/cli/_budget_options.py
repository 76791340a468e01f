"""The serving engines' memory knobs (``fit``; ``capacity`` has the same options): vLLM's
``--gpu-memory-utilization``, SGLang's ``--mem-fraction-static``, ``--max-model-len`` and
``--engine-version``, the batch budgets ``--max-num-seqs`` and ``--max-num-batched-tokens``,
passed to :func:`gpuplan.memory.kv_budget` as keywords. The values are
range-checked there (:mod:`gpuplan.bounds`), so the CLI only parses numbers."""

from __future__ import annotations

import argparse

from ..errors import InputError, shown
from ..units import parse_positive_int

__all__ = ["add_budget_options", "budget_kwargs", "positive_int"]


def add_budget_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("serving engine memory budget (--engine vllm, sglang, trt-llm)")
    g.add_argument("--gpu-memory-utilization", metavar="U",
                   help="vLLM's share of the card for weights, activations and the KV cache "
                        "(TensorRT-LLM: its free_gpu_memory_fraction); default: the engine "
                        "version's (vLLM 0.21+: 0.92, earlier 0.90; TRT-LLM 0.9)")
    g.add_argument("--mem-fraction-static", metavar="F",
                   help="SGLang's share of the free memory for the weights and the KV pool; "
                        "default: computed per card and TP size as SGLang does")
    g.add_argument("--max-model-len", metavar="L",
                   help="the longest request the engine admits (default: the model's context); "
                        "the 'maximum concurrency for L tokens per request' is quoted at it")
    g.add_argument("--max-num-seqs", metavar="N",
                   help="the engine's running-request budget (as capacity takes it); its "
                        "profile run samples this many sequences")
    g.add_argument("--max-num-batched-tokens", metavar="T",
                   help="the engine's tokens-per-step budget (as capacity takes it); its "
                        "profile run's activations are this many tokens")
    g.add_argument("--engine-version", metavar="V",
                   help="the engine release whose budget rule applies, e.g. 0.10.2 (default: "
                        "vLLM 0.21, SGLang 0.5, TensorRT-LLM 1.0; docs/engine_budget.md)")


def _number(text: str | None, flag: str, kind=float):
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError:
        what = "a number, e.g. 0.9" if kind is float else "a whole number of tokens, e.g. 8192"
        raise InputError(f"{flag} {shown(text)}: expected {what}") from None


def positive_int(text: str | None, what: str, maximum: int = 10**6) -> int | None:
    """A whole-number option of at least 1 and at most ``maximum`` (None when not given): the
    rule ``fit``'s engine-budget options and ``capacity``'s share."""
    return None if text is None else parse_positive_int(text, what=what, maximum=maximum)


def budget_kwargs(args: argparse.Namespace) -> dict:
    """The keywords of :func:`gpuplan.memory.kv_budget` the options set (unset ones left out)."""
    out = {"gpu_memory_utilization": _number(args.gpu_memory_utilization,
                                             "--gpu-memory-utilization"),
           "mem_fraction_static": _number(args.mem_fraction_static, "--mem-fraction-static"),
           "max_model_len": _number(args.max_model_len, "--max-model-len", int),
           "engine_version": args.engine_version,
           # the bounds capacity's options take (cli/capacity.py)
           "max_num_seqs": positive_int(args.max_num_seqs, "--max-num-seqs", 10**6),
           "max_num_batched_tokens": positive_int(args.max_num_batched_tokens,
                                                  "--max-num-batched-tokens", 2**31)}
    return {k: v for k, v in out.items() if v is not None}
