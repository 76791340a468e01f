"""Arguments several commands share."""

from __future__ import annotations

import argparse

__all__ = ["add_download_argument"]


def add_download_argument(p: argparse.ArgumentParser) -> None:
    """``--download``: a hub id that is not in the local cache may be fetched (config.json and
    safetensors headers only). Never on by default."""
    p.add_argument("--download", action="store_true",
                   help="a hub id not in the local Hugging Face cache: fetch its config.json and "
                        "safetensors headers (byte ranges, never the weights); needs a network "
                        "and gpuplan[hub]")
