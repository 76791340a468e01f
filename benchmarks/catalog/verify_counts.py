"""Check issue 28's catalog entries against transformers on the meta device.

For every ``*.json`` next to this script: drop the ``_gpuplan`` block, build the config with
``AutoConfig.for_model(model_type, **rest)``, instantiate ``_gpuplan.hf_class`` under
``torch.device("meta")`` (no memory is allocated), and count

* total parameters: the sum of ``numel`` over ``model.parameters()`` (tied weights once, as
  PyTorch yields a shared Parameter once);
* active parameters per token: the total minus, for every MoE layer, the routed experts a token
  does not reach, i.e. ``(experts - top_k) * per_expert`` where ``per_expert`` is the layer's
  routed-expert parameters divided by its expert count. Shared experts, routers and dense layers
  stay active. Routed experts are the modules named ``...experts`` (not ``shared_expert(s)``):
  either a fused module whose own parameters all lead with the expert dimension, or a
  ``ModuleList`` of per-expert MLPs.

It also checks what the gpuplan loader will check (name unique, aliases colliding with neither
the shipped catalog nor each other, hf_class listed in ``architectures``) and compares each count
with the model card's figure (``CARD`` below, in billions) at the card's own precision.

Run: ``python benchmarks/catalog/verify_counts.py [--markdown]`` (torch and transformers needed).
Exit 1 on a mismatch. (Written for the staged files; they now live in the catalog folder.)
"""

from __future__ import annotations

import glob
import json
import os
import sys

import torch
import transformers
from transformers import AutoConfig

HERE = os.path.dirname(os.path.abspath(__file__))
SHIPPED = os.path.join(HERE, os.pardir, os.pardir, "src", "gpuplan", "models", "catalog")

#: Model-card figures in billions: (total, active, decimals the card states, where it is stated).
#: Dense models are held to their names (``NAME_TOLERANCE``), as a name is a rounded size.
CARD: dict[str, tuple[float, float | None, int, str]] = {
    "llama-3.2-3b": (3, None, 0, "name"),
    "llama-3.3-70b": (70, None, 0, "name"),
    "qwen3-0.6b": (0.6, None, 1, "name"),
    "qwen3-1.7b": (1.7, None, 1, "name"),
    "qwen3-4b": (4, None, 0, "name"),
    "qwen3-8b": (8, None, 0, "name"),
    "qwen3-14b": (14, None, 0, "name"),
    "qwen3-32b": (32, None, 0, "name"),
    "qwen3-30b-a3b": (30.5, 3.3, 1, "Qwen3-30B-A3B card"),
    "qwen3-235b-a22b": (235, 22, 0, "Qwen3-235B-A22B card"),
    "deepseek-v3": (671, 37, 0, "DeepSeek-V3 card (685B incl. the 14B MTP module)"),
    "deepseek-r1": (671, 37, 0, "DeepSeek-R1 card"),
    "kimi-k2": (1000, 32, -2, "Kimi-K2 card: 1T / 32B"),
    "gpt-oss-20b": (20.9, 3.6, 1, "gpt-oss model card"),
    "gpt-oss-120b": (116.8, 5.1, 1, "gpt-oss model card"),
    "gemma-3-1b": (1, None, 0, "name"),
    "gemma-3-4b": (4, None, 0, "name (text part only)"),
    "gemma-3-12b": (12, None, 0, "name (text part only)"),
    "gemma-3-27b": (27, None, 0, "name (text part only)"),
    "llama-4-scout": (109, 17, 0, "Llama 4 card, vision included"),
    "llama-4-maverick": (400, 17, 0, "Llama 4 card, vision included"),
    "glm-4.5-air": (106, 12, 0, "GLM-4.5 card"),
    # catalog43 (December 2026). glm-4.5 is not here: its 355B is the report's accounting (no
    # embedding or head, the MTP layer included), checked by hand in
    # tests/unit/test_models_catalog43.py; transformers builds 352.8B.
    "mixtral-8x22b": (141, 39, 0, "Mixtral 8x22B announcement (mistral.ai)"),
    "qwen3-coder-480b-a35b": (480, 35, 0, "Qwen3-Coder-480B-A35B card"),
    "deepseek-v2-lite": (15.7, 2.4, 1, "DeepSeek-V2 report, appendix B"),
    "gemma-2-2b": (2.6, None, 1, "Gemma 2 report (2.6B)"),
    "gemma-2-27b": (27.2, None, 1, "Gemma 2 report (27.2B)"),
    "phi-4": (14, None, 0, "name (phi-4 report: 14B)"),
    "mistral-nemo-12b": (12, None, 0, "name"),
    "mistral-small-3.1-24b": (24, None, 0, "name (text part only; the card's 24B has the vision tower)"),
    # the Qwen2.5 cards state 14.7B and 32.5B; the counts are 14.77B and 32.76B
    "qwen2.5-14b": (14, None, 0, "name (card 14.7B: the count 14.77B truncated)"),
    "qwen2.5-32b": (32, None, 0, "name (card 32.5B: 0.8% below the count 32.76B)"),
    "qwen2.5-coder-32b": (32, None, 0, "name (card 32.5B, as Qwen2.5-32B's)"),
    # families43: the OLMo 2 card's table names them 7B and 13B
    "olmo-2-1124-7b": (7, None, 0, "OLMo 2 card (7B)"),
    "olmo-2-1124-13b": (13, None, 0, "OLMo 2 card (13B)"),
}


def load(path: str) -> tuple[dict, dict]:
    with open(path, encoding="utf-8") as f:
        raw = json.load(f)
    return raw.pop("_gpuplan"), raw


def build(meta: dict, raw: dict) -> tuple[torch.nn.Module, object]:
    rest = dict(raw)
    cfg = AutoConfig.for_model(rest.pop("model_type"), **rest)
    with torch.device("meta"):
        model = getattr(transformers, meta["hf_class"])(cfg)
    return model, cfg


def top_k(cfg: object) -> int:
    for key in ("num_experts_per_tok", "experts_per_token", "moe_topk"):
        if getattr(cfg, key, None):
            return int(getattr(cfg, key))
    raise ValueError("no top-k key in the config")


def routed_experts(model: torch.nn.Module) -> list[tuple[str, int, int]]:
    """(module name, expert count, parameters per expert) for each routed-expert module."""
    found = []
    for name, mod in model.named_modules():
        leaf = name.rsplit(".", 1)[-1]
        if leaf != "experts":
            continue
        if isinstance(mod, torch.nn.ModuleList):
            n = len(mod)
            per = sum(p.numel() for p in mod[0].parameters())
        else:
            params = list(mod.parameters(recurse=False))
            n = params[0].shape[0] if params else 0
            nested = any(True for c in mod.children() for _ in c.parameters())  # act_fn has none
            if not params or any(p.shape[0] != n for p in params) or nested:
                raise ValueError(f"{name}: expert parameters do not all lead with the expert dimension")
            per = sum(p.numel() for p in params) // n
        found.append((name, n, per))
    return found


def count(meta: dict, raw: dict) -> dict[str, int]:
    """total; active under three conventions; MoE layer count.

    ``active`` is every parameter a token's forward pass reads; ``active_no_embed`` leaves out the
    input embedding table (a row lookup, not a matmul) unless it is tied to the output head;
    ``active_no_embed_head`` also leaves out the output head. Model cards differ in which they
    quote, so all three are reported and the README says which one a card matches."""
    model, cfg = build(meta, raw)
    total = sum(p.numel() for p in model.parameters())
    moe = routed_experts(model)
    inactive = sum((n - top_k(cfg)) * per for _, n, per in moe) if moe else 0
    emb = model.get_input_embeddings().weight
    head = model.get_output_embeddings().weight
    tied = emb is head
    active = total - inactive
    no_embed = active - (0 if tied else emb.numel())
    return {"total": total, "active": active, "active_no_embed": no_embed,
            "active_no_embed_head": active - emb.numel() - (0 if tied else head.numel()),
            "moe_layers": len(moe)}


#: Llama 4's vision_config, for the with-vision total only (the catalog counts the text part). From
#: a printed Llama4Config of meta-llama/Llama-4-Scout-17B-16E (code index file id 41112263523; the
#: published config.json's vision block); Maverick is assumed to share it (same vision tower size
#: in Meta's cards), so its with-vision figure is indicative.
LLAMA4_VISION = {
    "attention_dropout": 0.0, "hidden_act": "gelu", "hidden_size": 1408, "image_size": 336,
    "initializer_range": 0.02, "intermediate_size": 5632, "model_type": "llama4_vision_model",
    "multi_modal_projector_bias": False, "norm_eps": 1e-05, "num_attention_heads": 16,
    "num_channels": 3, "num_hidden_layers": 34, "patch_size": 14, "pixel_shuffle_ratio": 0.5,
    "projector_dropout": 0.0, "projector_input_dim": 4096, "projector_output_dim": 4096,
    "rope_theta": 10000, "vision_feature_layer": -1, "vision_feature_select_strategy": "default",
    "vision_output_dim": 4096}


def with_vision_total(raw: dict) -> int:
    """Llama4ForConditionalGeneration's parameters: the staged text part plus LLAMA4_VISION."""
    text = {k: v for k, v in raw.items() if k not in ("architectures", "transformers_version")}
    cfg = transformers.Llama4Config(text_config=text, vision_config=LLAMA4_VISION)
    with torch.device("meta"):
        model = transformers.Llama4ForConditionalGeneration(cfg)
    return sum(p.numel() for p in model.parameters())


def check_names(entries: list[tuple[str, dict, dict]]) -> list[str]:
    problems = []
    seen: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(SHIPPED, "*.json"))):
        meta, _ = load(path)
        if meta["name"] in CARD:
            continue
        for key in (meta["name"], *meta.get("aliases", ())):
            seen[key.lower()] = f"shipped {meta['name']}"
    for fname, meta, raw in entries:
        if meta["name"] + ".json" != fname:
            problems.append(f"{fname}: name {meta['name']} does not match the file name")
        for key in (meta["name"], *meta["aliases"]):
            if key.lower() in seen:
                problems.append(f"{fname}: {key!r} already used by {seen[key.lower()]}")
            seen[key.lower()] = meta["name"]
        if meta["hf_class"] not in raw.get("architectures", ()):
            problems.append(f"{fname}: hf_class {meta['hf_class']} not in architectures")
        if not meta["source"].startswith("https://huggingface.co/"):
            problems.append(f"{fname}: source is not a Hub URL")
    return problems


NAME_TOLERANCE = 0.10
CONVENTIONS = ("active", "active_no_embed", "active_no_embed_head")


def agrees(value: int, card: float, decimals: int) -> str:
    """'rounds' or 'truncates' when ``value`` gives the card's figure at the card's precision
    (billions) by rounding half up or by truncation (cards do both), else ''."""
    scale = 10.0 ** decimals
    b = value / 1e9 * scale
    target = round(card * scale)
    if int(b + 0.5) == target:
        return "rounds"
    return "truncates" if int(b) == target else ""


def judge(name: str, c: dict[str, int]) -> tuple[bool, str]:
    card_total, card_active, dec, where = CARD[name]
    if where.startswith("name"):  # a name is a rounded size: held to NAME_TOLERANCE
        ok = abs(c["total"] / 1e9 - card_total) <= NAME_TOLERANCE * card_total
        return ok, f"total within {NAME_TOLERANCE:.0%} of the name" if ok else "total off the name"
    # Llama 4 cards count the vision tower; either total is reported, the first that agrees named.
    keys = [k for k in ("total_with_vision", "total") if k in c]
    found = [(k, agrees(c[k], card_total, dec)) for k in keys]
    found = [(k, h) for k, h in found if h]
    how_total = found[0][1] if found else ""
    how = [f"{found[0][0]} {how_total}" if found else "total differs"]
    ok = bool(how_total)
    if card_active is not None:
        hits = [(k, agrees(c[k], card_active, dec)) for k in CONVENTIONS]
        hits = [(k, h) for k, h in hits if h]
        ok = ok and bool(hits)
        how.append(f"active: {hits[0][0]} {hits[0][1]}" if hits else "active differs")
    return ok, "; ".join(how)


def main(argv: list[str]) -> int:
    entries = []
    for path in sorted(glob.glob(os.path.join(SHIPPED, "*.json"))):
        if os.path.basename(path)[:-5] in CARD:  # the entries of issue 28
            meta, raw = load(path)
            entries.append((os.path.basename(path), meta, raw))
    problems = check_names(entries)
    md = "--markdown" in argv
    if md:
        print("| name | total (exact) | total | active | active excl. input embedding"
              " | excl. embedding and head | card (total / active) | verdict |")
        print("|---|---:|---:|---:|---:|---:|---|---|")
    all_ok = not problems
    for _fname, meta, raw in entries:
        c = count(meta, raw)
        if raw["model_type"] == "llama4_text":
            c["total_with_vision"] = with_vision_total(raw)
        ok, how = judge(meta["name"], c)
        all_ok = all_ok and ok
        ct, ca, _dec, where = CARD[meta["name"]]
        card = f"{ct:g}B" + (f" / {ca:g}B" if ca is not None else "") + f" ({where})"
        cols = [f"{c[k] / 1e9:.3f}B" for k in ("total", *CONVENTIONS)]
        if "total_with_vision" in c:
            cols[0] += f" ({c['total_with_vision'] / 1e9:.3f}B with vision)"
        if md:
            print(f"| {meta['name']} | {c['total']:,} | " + " | ".join(cols) + f" | {card} | {'ok' if ok else 'NO'}: {how} |")
        else:
            print(f"{meta['name']:17s} " + " ".join(f"{x:>10s}" for x in cols)
                  + f"  card {card}  {'ok' if ok else 'MISMATCH'} ({how})")
    for p in problems:
        print("PROBLEM:", p)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
