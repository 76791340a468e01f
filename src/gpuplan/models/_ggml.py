"""GGML tensor types: bytes per block and elements per block, as a .gguf file stores them.

Facts from ggml's type_traits (ggml/src/ggml.c), the same numbers gguf-py publishes as
GGML_QUANT_SIZES (a test holds the two equal). Standard library only: planning a GGUF model's
memory never needs the gguf package, only reading the file does.
"""

from __future__ import annotations

import math

from ..errors import InputError

__all__ = ["GGML_TYPES", "ggml_tensor_bytes"]

#: Every GGML type a .gguf file stores: (bytes per block, elements per block). From ggml's
#: type_traits (ggml/src/ggml.c), as gguf-py lists them in GGML_QUANT_SIZES (a test holds the two
#: equal). Q8_1 and Q8_K are left out: they are runtime-only, never written to a file.
GGML_TYPES: dict[str, tuple[int, int]] = {
    "F32": (4, 1), "F16": (2, 1), "BF16": (2, 1), "F64": (8, 1),
    "I8": (1, 1), "I16": (2, 1), "I32": (4, 1), "I64": (8, 1),
    "Q4_0": (18, 32), "Q4_1": (20, 32), "Q5_0": (22, 32), "Q5_1": (24, 32), "Q8_0": (34, 32),
    "Q2_K": (84, 256), "Q3_K": (110, 256), "Q4_K": (144, 256), "Q5_K": (176, 256),
    "Q6_K": (210, 256),
    "IQ1_S": (50, 256), "IQ1_M": (56, 256), "IQ2_XXS": (66, 256), "IQ2_XS": (74, 256),
    "IQ2_S": (82, 256), "IQ3_XXS": (98, 256), "IQ3_S": (110, 256), "IQ4_NL": (18, 32),
    "IQ4_XS": (136, 256), "TQ1_0": (54, 256), "TQ2_0": (66, 256), "MXFP4": (17, 32),
}


def ggml_tensor_bytes(gtype: str, shape: tuple[int, ...]) -> int:
    """Bytes of one tensor stored as GGML type ``gtype`` (``shape`` in PyTorch order: the last
    dimension is the row, which the type's blocks tile). Raises InputError for an unknown type or
    a row the blocks do not tile."""
    if gtype not in GGML_TYPES:
        raise InputError(f"GGML type {gtype!r} is unknown to gpuplan (known: "
                         f"{', '.join(GGML_TYPES)})")
    block_bytes, block = GGML_TYPES[gtype]
    row = shape[-1] if shape else 1
    if row % block:
        raise InputError(f"a {gtype} tensor of shape {list(shape)}: its rows of {row} are not "
                         f"whole blocks of {block}")
    return math.prod(shape) // block * block_bytes
