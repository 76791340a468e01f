"""The job: what is being run, the one description every analysis takes (:class:`Job`), its
vocabulary (:mod:`._vocab`), its configs (:mod:`._configs`), its types checked from the
annotations (:mod:`._fields`) and the layout-vs-architecture check (:mod:`._layout`)."""

from __future__ import annotations

from ._configs import (CONFIGS, CUDA_GRAPH_SCOPES, ExecutionConfig, LoraConfig, OptimizerConfig,
                       ParallelLayout, ServingConfig, ShardingConfig, TrainingLoop,
                       cuda_graph_scope_sets)
from ._args import (MAX_CHANGES, MAX_NEW_TOKENS, MAX_TOP, choice_arg, cpu_arg, flag_arg,
                    gpu_arg, int_arg, job_arg, model_arg, number_arg)
from ._job import (FLAT_FIELDS, Job, choices_of, field_group, flat_defaults, flat_docs,
                   flat_hints, job_flags, default_job)
from ..parallel.checks import (check_layout, divisors, nearest, part_layers, pipeline_fix,
                               pp_chunks, tp_fix)
from ._vocab import (DEFAULT_INFER_PRECISION, DEFAULT_MODEL_PARAMS, DEFAULT_SEQ,
                     DEFAULT_TRAIN_PRECISION, KV_DTYPES, PP_SCHEDULES, Attention, Checkpointing,
                     ModelCode, Mode, Runtime, Sharding, check_positions, default_seq,
                     seq_limit, serving_engine)

__all__ = ["Job", "Mode", "Checkpointing", "Attention", "Runtime", "ModelCode", "Sharding",
           "PP_SCHEDULES", "pp_chunks", "part_layers", "check_layout", "pipeline_fix", "tp_fix",
           "nearest", "divisors", "KV_DTYPES", "DEFAULT_SEQ", "default_seq",
           "DEFAULT_TRAIN_PRECISION", "DEFAULT_INFER_PRECISION", "seq_limit",
           "check_positions", "serving_engine",
           "DEFAULT_MODEL_PARAMS", "FLAT_FIELDS", "flat_hints", "flat_defaults", "flat_docs", "choices_of", "job_flags", "default_job",
           "field_group", "CONFIGS",
           "ExecutionConfig", "TrainingLoop", "OptimizerConfig", "ShardingConfig", "LoraConfig",
           "ServingConfig", "ParallelLayout", "model_arg", "gpu_arg", "cpu_arg", "job_arg",
           "int_arg", "number_arg", "flag_arg", "choice_arg", "MAX_TOP", "MAX_CHANGES",
           "MAX_NEW_TOKENS", "CUDA_GRAPH_SCOPES", "cuda_graph_scope_sets"]
