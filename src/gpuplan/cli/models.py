"""``gpuplan models [MODEL]``: the model catalog, or one model's parameters in detail."""

from __future__ import annotations

import argparse
import sys

from .._io import json_text
from ..models import SUPPORTED_FAMILIES, catalog_entry, catalog_names, load_model
from ..report import models as report
from ..report._console import console_for

from ._common import add_download_argument

HELP = "list the model catalog, or show one model's exact parameters by component and tensor"


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "models", help=HELP,
        description="The model catalog: popular open architectures stored as their published "
                    "config.json numbers, with exact parameter counts (checked against "
                    "transformers). Name one -- a catalog name, a config.json, or a model "
                    "directory with *.safetensors -- to see its split by component and its "
                    "parameter tensors.",
    )
    p.add_argument("model", nargs="?", metavar="MODEL",
                   help="a catalog name (any case; aliases such as gpt2-small), a config.json, "
                        "a model directory, a .safetensors or .gguf file, or a hub id (org/name) "
                        "from the local Hugging Face cache")
    add_download_argument(p)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--sources", action="store_true",
                   help="add the source (config.json URL) column to the catalog table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:


    if args.model is not None:
        model = load_model(args.model, download=args.download)
        if args.json:
            print(json_text(report.model_json(model), indent=2))
            return 0
        console = console_for(sys.stdout, width=160)
        for part in report.model_detail(model):
            console.print(part)
        return 0

    models = [load_model(n) for n in catalog_names()]
    order = {f: i for i, f in enumerate(SUPPORTED_FAMILIES)}
    models.sort(key=lambda m: (order[m.architecture.family], m.params.total))  # type: ignore[union-attr]
    if args.json:
        aliases = {m.name: catalog_entry(m.name).aliases for m in models}
        print(json_text(report.catalog_json(models, aliases), indent=2))
        return 0
    table = report.catalog_table(models, sources=args.sources)
    console_for(sys.stdout, width=320 if args.sources else 160).print(table)  # NeMo yaml URLs
    return 0


