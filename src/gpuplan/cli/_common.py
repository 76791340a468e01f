"""Arguments several commands share."""

from __future__ import annotations

import argparse

__all__ = ["add_download_argument", "add_model_on_gpu"]


def add_download_argument(p: argparse.ArgumentParser) -> None:
    """``--download``: a hub id that is not in the local cache may be fetched (config.json and
    safetensors headers only). Never on by default."""
    p.add_argument("--download", action="store_true",
                   help="a hub id not in the local Hugging Face cache: fetch its config.json and "
                        "safetensors headers (byte ranges, never the weights); needs a network "
                        "and gpuplan[hub]")


class _OneGpu(argparse.Action):
    """``--gpu`` of a one-GPU command: a second one is refused rather than silently replacing
    the first (``gpuplan fit`` is the command that judges a list of GPUs)."""

    def __call__(self, parser, namespace, values, option_string=None):
        first = getattr(namespace, self.dest, None)
        if first is not None:
            parser.error(f"--gpu given twice ({first}, {values}): this command plans one GPU; "
                         "run it once per GPU, or judge several with `gpuplan fit --gpu A "
                         "--gpu B`")
        setattr(namespace, self.dest, values)


#: ``--gpu``'s help wherever one GPU is required (speed, cluster).
GPU_HELP = ("GPU SKU or alias (see `gpuplan gpus`), or a card by its numbers: "
            "custom:24GB,bw=1000GB/s,bf16=165TF,fp32=82.6TF,sms=128,threads=1536,pcie=4x16")


def add_model_on_gpu(p: argparse.ArgumentParser) -> None:
    """The arguments of a command about one model on one GPU: ``MODEL``, ``--download`` and a
    required ``--gpu`` (catalog SKU, alias or ``custom:`` card)."""
    p.add_argument("model", help="catalog name, hub id (org/name), config.json, model directory "
                   "or .gguf file")
    add_download_argument(p)
    p.add_argument("--gpu", required=True, action=_OneGpu, help=GPU_HELP)
