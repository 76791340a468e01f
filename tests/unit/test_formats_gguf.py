"""GGUF weight bytes against published file sizes.

A .gguf file is a header (metadata, tokenizer, tensor descriptions: well under 1 MB for these
models) followed by the tensors in llama.cpp's types. So the planner's weight bytes for a format
must come in just below the published size of the real file: above it, or more than 1 MB below,
means a tensor got the wrong type. File sizes: TheBloke's Llama-2-7B-GGUF and
Mistral-7B-Instruct-v0.1-GGUF repositories (sizeBytes as listed by the Hugging Face hub).
"""

from __future__ import annotations

import pytest

from gpuplan.job import Job
from gpuplan.memory import infer_memory
from gpuplan.models import load_model

HEADER_MAX = 1_000_000


@pytest.mark.parametrize("model,fmt,file_bytes", [
    ("llama-2-7b", "q4_k_m", 4_081_004_224),   # llama-2-7b.Q4_K_M.gguf
    ("llama-2-7b", "q8_0", 7_161_089_728),     # llama-2-7b.Q8_0.gguf
    ("mistral-7b", "q4_k_m", 4_368_438_944),   # mistral-7b-instruct-v0.1.Q4_K_M.gguf (same shapes)
])
def test_gguf_weights_match_published_file_sizes(model, fmt, file_bytes):
    m = load_model(model)
    weights = infer_memory(m, Job(model=m, infer_precision=fmt)).weights_bytes
    assert 0 < file_bytes - weights < HEADER_MAX, (weights, file_bytes)
