"""Write the committed corpus of hostile config.json and safetensors files (``python
tests/fuzz/corpus/make_corpus.py``). Each file is one reproducer of issue 14 or one shape of attack the
readers must refuse with one line (or read correctly); ``tests/test_hostile_readers.py`` runs
every file, and the fuzzers start from them. Large inputs (a 100 MB header) are built in the tests,
not committed."""

from __future__ import annotations

import json
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
         "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
         "num_hidden_layers": 2, "vocab_size": 100, "max_position_embeddings": 128,
         "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def _nested(depth: int) -> object:
    v: object = 1
    for _ in range(depth):
        v = [v]
    return v


CONFIGS: dict[str, bytes | str] = {
    "config_nested_500.json": json.dumps({**LLAMA, "extra": _nested(500)}),
    "config_nested_dict_300.json": "{" + '"a":{' * 300 + "}" * 300 + ', "model_type": "llama"}',
    "config_layers_int32.json": json.dumps({**LLAMA, "num_hidden_layers": 2147483647}),
    "config_layers_1e7.json": json.dumps({**LLAMA, "num_hidden_layers": 10_000_000}),
    "config_hidden_huge.json": json.dumps({**LLAMA, "hidden_size": 10**300}),
    "config_digits_4300.json": '{"model_type": "llama", "hidden_size": ' + "9" * 4300 + "}",
    "config_digits_5000.json": '{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}",
    "config_nan.json": '{"model_type": "llama", "rms_norm_eps": NaN}',
    "config_float_huge.json": json.dumps({**LLAMA, "rope_theta": 1e308, "rms_norm_eps": 1e-320}),
    "config_bool_dims.json": json.dumps({**LLAMA, "hidden_size": True}),
    "config_list.json": "[1, 2, 3]",
    "config_not_utf8.json": b'{"model_type": "\xff\xfe"}',
    "config_ansi_name.json": json.dumps({**LLAMA, "model_type": "\x1b[31mllama\n"}),
    "config_many_keys.json": json.dumps({f"k{i}": i for i in range(50_000)}),
    "config_empty.json": b"",
    "config_zero_heads.json": json.dumps({**LLAMA, "num_attention_heads": 0}),
    "config_kv_not_divisor.json": json.dumps({**LLAMA, "num_key_value_heads": 3}),
}


def safetensors(header: object, data: bytes = b"", *, raw: bytes | None = None) -> bytes:
    h = raw if raw is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


SAFETENSORS: dict[str, bytes] = {
    "st_no_tensors.safetensors": safetensors({}),
    "st_only_metadata.safetensors": safetensors({"__metadata__": {"format": "pt"}}),
    "st_zero_elements.safetensors": safetensors(
        {"w": {"dtype": "F32", "shape": [0, 4], "data_offsets": [0, 0]}}),
    "st_scalar.safetensors": safetensors(
        {"s": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]}}, b"\0" * 4),
    "st_huge_length.safetensors": struct.pack("<Q", 2**63) + b"{}",
    "st_length_past_file.safetensors": struct.pack("<Q", 1000) + b"{}",
    "st_short.safetensors": b"\x01\x02",
    "st_not_json.safetensors": safetensors(None, raw=b"{not json"),
    "st_nested.safetensors": safetensors(None, raw=b"[" * 100_000 + b"]" * 100_000),
    "st_dup_keys.safetensors": safetensors(None, raw=b'{"a": 1, "a": 2}'),
    "st_ansi_name.safetensors": safetensors(
        {"\x1b[2J\x1b[31mevil\nname": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}},
        b"\0" * 4),
    "st_huge_shape.safetensors": safetensors(
        {"w": {"dtype": "F32", "shape": [2**62, 2**62], "data_offsets": [0, 4]}}, b"\0" * 4),
    "st_bad_dtype.safetensors": safetensors(
        {"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, b"\0" * 16),
    "st_overlap.safetensors": safetensors(
        {"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
         "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
    "st_metadata_not_str.safetensors": safetensors({"__metadata__": {"a": 1}}),
    "st_many_metadata.safetensors": safetensors(
        {"__metadata__": {f"k{i}": "" for i in range(20_000)}}),
}


def main() -> None:
    for name, data in {**CONFIGS, **SAFETENSORS}.items():
        (HERE / name).write_bytes(data.encode() if isinstance(data, str) else data)
    print(f"{len(CONFIGS) + len(SAFETENSORS)} files in {HERE}")


if __name__ == "__main__":
    main()
