"""The browser fixtures both browser test modules use: Debian's chromium (never a downloaded one)
driven headless by Playwright, and a page that fails its test on any page error, console error
or request off the live server (the page must work with the network unplugged).

Import after ``pytest.importorskip("playwright.sync_api")`` and the chromium check, so a machine
without them skips the module."""

from __future__ import annotations

import pytest


def browser_fixture(sync_api, chromium: str, args: list[str]):
    """A module-scoped ``browser`` fixture over ``chromium`` launched with ``args``."""

    @pytest.fixture(scope="module")
    def browser():
        with sync_api.sync_playwright() as pw:
            b = pw.chromium.launch(executable_path=chromium, args=args)
            yield b
            b.close()

    return browser


def page_fixture(height: int):
    """A ``page`` fixture: a fresh context of 1280 x ``height`` whose problems fail the test.
    bypass_csp: Playwright's wait_for_function evaluates strings, which the page's policy forbids
    (test_web_browser.py's test_page_runs_under_its_content_security_policy runs the page with
    its policy enforced)."""

    @pytest.fixture
    def page(browser, live_server):
        ctx = browser.new_context(viewport={"width": 1280, "height": height}, bypass_csp=True)
        p = ctx.new_page()
        problems: list[str] = []
        p.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        p.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        p.route("**/*", lambda route: route.continue_()
                if route.request.url.startswith(live_server)
                or route.request.url.startswith("data:")
                else (problems.append(route.request.url), route.abort()))
        p.problems = problems
        yield p
        ctx.close()
        assert not problems, problems

    return page
