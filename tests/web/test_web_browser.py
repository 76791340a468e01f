"""End to end, as a person uses it: ``gpuplan serve`` on a free loopback port, Debian's chromium
driven headless by Playwright's Python API; pick a model and a GPU, change the batch, read the
numbers off the page and compare them with ``gpuplan fit --json`` for the same job."""

from __future__ import annotations

import shlex
import shutil

import pytest

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: "
                                                             "pip install 'gpuplan[test]'")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
if CHROMIUM is None:
    pytest.skip("no chromium on PATH (Debian: apt-get install chromium)", allow_module_level=True)

#: Chromium without a sandbox user, a GPU or any network of its own.
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--no-first-run"]

from _browser import browser_fixture, page_fixture  # noqa: E402 (after the skips above)


browser = browser_fixture(sync_api, CHROMIUM, ARGS)
page = page_fixture(1000)


def settle(page, seq_before: str | None = None) -> None:
    """Wait until the page's latest update has rendered (speed included)."""
    page.wait_for_function("document.body.dataset.ready === '1'")
    page.wait_for_function("document.getElementById('results').getAttribute('aria-busy') === "
                           "'false' && document.querySelector('#status').dataset.ms !== undefined"
                           " && !!document.querySelector('#speed .speed')", timeout=60_000)


def gb(b: int) -> str:
    return f"{b / 1e9:.2f} GB"


def check_page_against(page, cli: dict) -> int:
    """Every number shown for the first GPU equals the CLI's; returns how many were compared."""
    n = 0
    g = cli["gpus"][0]
    for mode in ("train", "infer"):
        card = page.locator(f".verdict[data-mode={mode}]")
        if mode not in cli:
            assert card.count() == 0
            continue
        mem = cli[mode]
        total = card.locator(f"[data-field='{mode}.total']")
        assert int(total.get_attribute("data-bytes")) == mem["per_gpu"]["total_bytes"]
        assert total.inner_text() == gb(mem["per_gpu"]["total_bytes"])
        head = card.locator(f"[data-field='{mode}.headroom']")
        assert int(head.get_attribute("data-bytes")) == g[f"{mode}_headroom_bytes"]
        assert card.locator("[data-verdict]").get_attribute("data-verdict") == g[f"{mode}_verdict"]
        # the legend of the stacked bar: one line per part, in the CLI's order
        section = page.locator(f"#memory section[aria-label^='{'Training' if mode == 'train' else 'Inference'}']")
        shown = [(e.get_attribute("data-key"), int(e.get_attribute("data-bytes")), e.inner_text())
                 for e in section.locator(".legend strong").all()]
        want = [(ln["key"], ln["bytes"], gb(ln["bytes"])) for ln in mem["lines"] if ln["bytes"] > 0]
        assert shown == want
        # the phase timeline and its peak
        phases = {li.get_attribute("data-phase"): int(li.locator(".ph-val").get_attribute("data-bytes"))
                  for li in page.locator(f"#timeline ol[aria-label^='{'Training' if mode == 'train' else 'Inference'}'] li").all()}
        assert phases == mem["phases"]
        peak = page.locator(f"#timeline ol[aria-label^='{'Training' if mode == 'train' else 'Inference'}'] li.peak")
        assert peak.get_attribute("data-phase") == mem["peak_phase"]
        assert "▲ peak" in peak.inner_text()
        # the speed estimate for this GPU
        row = cli["speed"]["gpus"][0]
        if "error" in row:  # this GPU cannot run the job's dtype: the page says so, in the CLI's words
            assert page.inner_text("#speed .error") == row["error"]
        else:
            tps = page.locator(f"[data-field='{mode}.tokens_per_s']")
            assert float(tps.get_attribute("data-value")) == row[mode]["tokens_per_s"]
            check_expected_range(page, mode, row[mode])
        n += 4 + len(want) + len(phases)
    return n


def check_expected_range(page, mode: str, row: dict) -> None:
    """The card shows the CLI's expected range (``gpuplan speed``'s "Expected range:" line: the
    same numbers, formatted alike, and the same basis) and, apart from it, the ceiling."""
    from gpuplan.compute.efficiency import speed_residuals
    from gpuplan.units import format_per_s

    lo, hi = row["tokens_per_s_range"]
    rb = speed_residuals()
    unit = "decode tokens/s" if mode == "infer" else "tokens/s"
    text = page.locator(f"[data-field='{mode}.tokens_per_s_range']").inner_text()
    assert text == (f"expected range: {format_per_s(lo)}-{format_per_s(hi)} {unit} (the estimate "
                    f"over the p90-p10 of predicted/measured, {rb['p10_ratio']:.2f}-"
                    f"{rb['p90_ratio']:.2f}, on {rb['runs']} published runs; docs/speed.md, "
                    "Calibration)")
    ceiling = page.locator(f"[data-field='{mode}.ceiling']")
    assert ceiling.inner_text().startswith("ceiling: ")
    assert float(ceiling.get_attribute("data-value")) >= row["tokens_per_s"]


def run_cli(cli_json, command: str) -> dict:
    argv = shlex.split(command)
    assert argv[:2] == ["gpuplan", "fit"] and argv[-1] == "--json"
    return cli_json(*argv[1:-1])


def test_pick_model_and_gpu_change_batch(page, live_server, cli_json):
    page.goto(live_server + "/")
    settle(page)
    page.fill("#model", "qwen2.5-7b")
    page.select_option("#gpu", "A100-SXM-80GB")
    page.fill("#batch", "4")
    page.wait_for_function("location.search.includes('batch=4') && "
                           "location.search.includes('qwen2.5-7b')")
    settle(page)
    page.wait_for_function("document.querySelector('#verdicts h2').textContent.includes('A100-SXM-80GB')")
    want = cli_json("fit", "qwen2.5-7b", "--batch", "4", "--gpu", "A100-SXM-80GB")
    assert check_page_against(page, want) > 10
    # the page's "copy as CLI command" prints the same numbers
    command = page.inner_text("#cli-text")
    assert command == "gpuplan fit qwen2.5-7b --batch 4 --gpu A100-SXM-80GB --json"
    assert run_cli(cli_json, command) == want
    # the state is in the URL: a fresh page from the link shows the same plan
    url = page.url
    page.goto("about:blank")
    page.goto(url)
    settle(page)
    assert check_page_against(page, want) > 10


@pytest.mark.parametrize("query,argv", [
    ("model=llama-3.1-8b&gpu=RTX-4090&mode=infer&infer_precision=int8&context=8192",
     ["llama-3.1-8b", "--mode", "infer", "--precision", "int8", "--context", "8192", "--gpu", "RTX-4090"]),
    ("model=llama-3.1-8b&gpu=H100-SXM-80GB&lora_rank=16&lora_base=nf4&checkpointing=full",
     ["llama-3.1-8b", "--lora-rank", "16", "--lora-base", "nf4", "--checkpointing", "full", "--gpu", "H100-SXM-80GB"]),
    ("model=gpt2&gpu=T4&batch=16&attention=eager&precision=amp-bf16",
     ["gpt2", "--batch", "16", "--attention", "eager", "--precision", "amp-bf16", "--gpu", "T4"]),
    ("model=llama-3.1-70b&gpu=H100-SXM-80GB&gpus=8&zero=3&mode=train",
     ["llama-3.1-70b", "--gpus", "8", "--zero", "3", "--mode", "train", "--gpu", "H100-SXM-80GB"]),
    # the parallel layout (issue 11) in the link, the page and the copied command
    ("model=llama-3.1-70b&gpu=H100-SXM-80GB&gpus=16&tp=4&pp=2&sequence_parallel=true&mode=train",
     ["llama-3.1-70b", "--gpus", "16", "--tp", "4", "--pp", "2", "--sequence-parallel", "--mode",
      "train", "--gpu", "H100-SXM-80GB"]),
    ("model=mixtral-8x7b&gpu=A100-SXM-80GB&gpus=2&tp=2&mode=infer",
     ["mixtral-8x7b", "--gpus", "2", "--tp", "2", "--mode", "infer", "--gpu", "A100-SXM-80GB"]),
    # the engine (issue 27) in the link, the page and the copied command
    ("model=llama-3.1-8b&gpu=H100-SXM-80GB&engine=megatron&mode=train&tp=2&gpus=8",
     ["llama-3.1-8b", "--engine", "megatron", "--mode", "train", "--tp", "2", "--gpus", "8",
      "--gpu", "H100-SXM-80GB"]),
    # the master's dtype and the whole-layer CUDA graphs (webmaster) in the link and the command
    ("model=llama-3.2-1b&gpu=H100-SXM-80GB&mode=train&master_weights=bf16",
     ["llama-3.2-1b", "--mode", "train", "--master-weights", "bf16", "--gpu", "H100-SXM-80GB"]),
    ("model=llama-3.2-1b&gpu=H100-SXM-80GB&engine=megatron&mode=train&cuda_graph_scope=full",
     ["llama-3.2-1b", "--engine", "megatron", "--mode", "train", "--cuda-graph-scope", "full",
      "--gpu", "H100-SXM-80GB"]),
])
def test_linked_plans_show_the_cli_numbers(page, live_server, cli_json, query, argv):
    page.goto(f"{live_server}/?{query}")
    settle(page)
    want = cli_json("fit", *argv)
    assert check_page_against(page, want) > 5
    assert run_cli(cli_json, page.inner_text("#cli-text")) == want


def test_the_engine_selector_states_auto(page, live_server):
    page.goto(f"{live_server}/?model=gpt2&gpu=T4")
    settle(page)
    assert page.locator("#engine option[value=auto]").inner_text() == "auto (transformers)"
    names = page.locator("#engine option").all_inner_texts()
    assert "megatron" in names and "vllm" in names


def test_master_and_graph_selects_offer_the_options_and_plan_as_the_cli(page, live_server,
                                                                       cli_json):
    page.goto(f"{live_server}/?model=qwen1.5-moe-a2.7b&gpu=H100-SXM-80GB&mode=train"
              "&engine=megatron&seq=2048")
    settle(page)
    values = lambda sel: page.locator(f"{sel} option").evaluate_all(  # noqa: E731
        "os => os.map(o => o.value)")
    assert values("#master_weights") == ["auto", "fp32", "bf16", "remainder", "none"]
    assert page.input_value("#master_weights") == "auto"
    assert values("#cuda_graph_scope") == ["", "attn", "moe_router", "full", "attn,moe_router",
                                           "moe_router,moe_preprocess",
                                           "attn,moe_router,moe_preprocess"]
    page.select_option("#cuda_graph_scope", "attn,moe_router")
    page.select_option("#optimizer_states", "bf16")
    page.select_option("#master_weights", "bf16")
    page.wait_for_function("location.search.includes('master_weights=bf16') && "
                           "location.search.includes('cuda_graph_scope=attn%2Cmoe_router')")
    settle(page)
    command = page.inner_text("#cli-text")
    assert "--cuda-graph-scope attn,moe_router" in command
    assert "--master-weights bf16" in command
    want = run_cli(cli_json, command)
    assert want["job"]["cuda_graph_scope"] == ["attn", "moe_router"]
    assert check_page_against(page, want) > 5
    # a refused pair is the server's one line on the page: whole-layer graphs beside recompute
    page.select_option("#cuda_graph_scope", "full")
    page.select_option("#checkpointing", "selective")
    page.wait_for_selector("#error:not([hidden])")
    assert page.inner_text("#error").startswith("cuda_graph_scope full with checkpointing "
                                                "selective: Megatron-Core graphs whole layers")
    page.problems[:] = [m for m in page.problems if "status of 422" not in m]


def test_suggestion_applies_by_keyboard(page, live_server, cli_json):
    page.goto(f"{live_server}/?model=llama-3.1-8b&gpu=RTX-4090&mode=train")
    settle(page)
    page.wait_for_selector("#suggestions button.suggestion:not([disabled])", timeout=60_000)
    first = page.locator("#suggestions button.suggestion:not([disabled])").first
    summary = first.locator("strong").inner_text()
    first.focus()
    page.keyboard.press("Enter")
    page.wait_for_function("!location.search.includes('gpu=RTX-4090') || "
                           "location.search.split('&').length > 3")
    settle(page)
    command = page.inner_text("#cli-text")
    want = run_cli(cli_json, command)
    # what the suggestion promised is what the plan now says
    g = want["gpus"][0]
    assert g["train_fits"] is True, (summary, command)
    assert check_page_against(page, want) > 5


def test_phone_width_has_no_sideways_scroll(browser, live_server):
    ctx = browser.new_context(viewport={"width": 375, "height": 800}, is_mobile=True,
                              bypass_csp=True)
    p = ctx.new_page()
    p.goto(f"{live_server}/?model=llama-3.1-8b&gpu=H100-SXM-80GB")
    settle(p)
    assert p.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    ctx.close()


def test_bad_input_shows_one_line_and_recovers(page, live_server):
    page.goto(f"{live_server}/?model=gpt2&gpu=T4")
    settle(page)
    page.fill("#model", "gtp2")
    page.wait_for_selector("#error:not([hidden])")
    assert "unknown model 'gtp2'; did you mean" in page.inner_text("#error")
    page.fill("#model", "gpt2")
    page.wait_for_selector("#error[hidden]", state="attached")
    # chromium logs the refused request itself; that one is expected
    page.problems[:] = [m for m in page.problems if "status of 422" not in m]


def test_page_runs_under_its_content_security_policy(browser, live_server):
    ctx = browser.new_context()
    p = ctx.new_page()
    problems: list[str] = []
    p.on("pageerror", lambda e: problems.append(str(e)))
    p.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    p.goto(f"{live_server}/?model=llama-3.1-8b&gpu=RTX-4090")
    p.locator("#speed .speed").first.wait_for(timeout=60_000)  # locators need no eval
    p.locator("#suggestions button.suggestion").first.wait_for(timeout=60_000)
    assert p.locator(".bar .seg").count() > 0
    ctx.close()
    assert not problems, problems
