"""The capacity panel, as a person uses it: Debian's chromium driven headless by Playwright over
``gpuplan serve``; fill the form, simulate, and read every number off the page against what
``POST /api/capacity`` answers for the same body (the same JSON as ``gpuplan capacity --json``)."""

from __future__ import annotations

import json
import urllib.request

import pytest

from test_web_browser import ARGS, CHROMIUM, sync_api  # noqa: F401 (skips as that module does)
from _browser import browser_fixture, page_fixture


browser = browser_fixture(sync_api, CHROMIUM, ARGS)
page = page_fixture(1400)


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url + "/api/capacity", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def seconds(s: float) -> str:
    """The page's formatting of a duration (app.js seconds())."""
    if s < 1e-3:
        return f"{s * 1e6:.1f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def simulate(page) -> None:
    page.click("#cap-run")
    page.wait_for_function("document.getElementById('cap-results').getAttribute('aria-busy') "
                           "=== 'false' && document.getElementById('cap-status').dataset.ms "
                           "!== undefined", timeout=120_000)


def shown(page, field: str) -> tuple[float, str]:
    e = page.locator(f"#cap-results [data-field='{field}']")
    assert e.count() == 1, field
    return float(e.get_attribute("data-value")), e.inner_text()


def test_panel_shows_the_api_numbers_and_the_sweep(page, live_server):
    page.goto(live_server + "/")
    page.wait_for_function("document.body.dataset.ready === '1'")
    page.fill("#cap-model", "llama-3.1-8b")
    page.select_option("#cap-gpu", "H100-SXM-80GB")
    page.fill("#cap-tp", "1")
    page.fill("#cap-concurrency", "4")
    page.fill("#cap-requests", "20")
    page.fill("#cap-input", "500")
    page.fill("#cap-output", "32")
    page.fill("#cap-max-model-len", "4096")
    page.fill("#cap-slo-ttft", "0.05")
    page.fill("#cap-slo-tpot", "0.01")
    page.fill("#cap-price", "2")
    simulate(page)
    assert page.locator("#cap-error").is_hidden()
    table = page.locator("table[aria-label='latency percentiles']").bounding_box()
    assert table and table["height"] > 100 and table["width"] > 200  # drawn, not just present
    body = {"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB", "engine": "vllm", "tp": 1,
            "concurrency": 4, "requests": 20, "input": 500, "output": 32, "max_model_len": 4096,
            "slo_ttft": 0.05, "slo_tpot": 0.01, "price": 2, "sweep": True}
    want = post(live_server, body)
    # the command line the panel shows is the same simulation
    cli = page.locator("#cap-cli").inner_text()
    assert cli.startswith("gpuplan capacity llama-3.1-8b --gpu H100-SXM-80GB") and "--concurrency 4" in cli
    n = 0
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        for q in ("mean", "p50", "p90", "p99"):
            v, text = shown(page, f"{key}.{q}")
            assert v == want[key][q] and text == seconds(want[key][q]), (key, q)
            n += 1
    v, text = shown(page, "throughput.requests_per_s")
    assert v == want["throughput"]["requests_per_s"]
    v, _ = shown(page, "goodput_requests_per_s")
    assert v == want["goodput_requests_per_s"]
    v, _ = shown(page, "cost_per_m_output_tokens")
    assert v == want["cost_per_m_output_tokens"]
    assert page.locator("[data-field='meets_slo']").get_attribute("data-value") == \
        str(want["meets_slo"]).lower()
    assert n == 16
    # the chart: one point per sweep load and percentile, at the API's values; the SLO line
    sw = want["sweep"]
    for key, target in (("ttft_s", 0.05), ("tpot_s", 0.01)):
        chart = page.locator(f"svg[data-chart='{key}']")
        for q in ("p50", "p90", "p99"):
            dots = chart.locator(f"circle[data-q='{q}']")
            assert dots.count() == len(sw["points"]) == 7
            got = [(float(dots.nth(i).get_attribute("data-rate")),
                    float(dots.nth(i).get_attribute("data-value"))) for i in range(dots.count())]
            assert got == [(p["requests_per_s"], p[key][q]) for p in sw["points"]]
        assert float(chart.locator("line.slo").get_attribute("data-value")) == target
        knee = chart.locator("line.knee")
        if sw["knee"] is None:
            assert knee.count() == 0
        else:
            assert float(knee.get_attribute("data-value")) == sw["knee_requests_per_s"]


def test_a_search_lists_the_layouts_and_a_bad_value_is_one_line(page, live_server):
    page.goto(live_server + "/")
    page.wait_for_function("document.body.dataset.ready === '1'")
    page.select_option("#cap-gpu", "H100-SXM-80GB")
    page.select_option("#cap-layout", "search")
    page.fill("#cap-max-gpus", "4")
    page.fill("#cap-concurrency", "")
    page.fill("#cap-rate", "4")
    page.fill("#cap-requests", "40")
    page.fill("#cap-input", "500")
    page.fill("#cap-output", "32")
    page.fill("#cap-max-model-len", "4096")
    page.fill("#cap-slo-ttft", "1")
    page.fill("#cap-slo-tpot", "0.1")
    simulate(page)
    want = post(live_server, {"model": "llama-3.1-8b", "gpu": "H100-SXM-80GB", "engine": "vllm",
                              "max_gpus": 4, "rate": 4, "requests": 40, "input": 500,
                              "output": 32, "max_model_len": 4096, "slo_ttft": 1,
                              "slo_tpot": 0.1, "sweep": True})
    v, _ = shown(page, "layout.replicas")
    assert v == want["layout"]["replicas"]
    rows = page.locator("table[aria-label='layouts tried'] tbody tr")
    assert rows.count() == len(want["searched"])
    assert shown(page, "ttft_s.p99")[0] == want["ttft_s"]["p99"]
    page.fill("#cap-requests", "100000")
    simulate(page)
    err = page.locator("#cap-error")
    assert err.is_visible() and "requests" in err.inner_text() and "\n" not in err.inner_text()
    # the browser logs the refused request itself; that one is expected
    assert page.problems == ["Failed to load resource: the server responded with a status of "
                             "422 (Unprocessable Entity)"]
    page.problems.clear()
