"""A new user's first minute in the UI, in headless Chromium: open the lineage, click "Materialize all" (no partition
to pick, no "Are you sure?"), wait for the run, then read the flags of the `anomalies` asset and of an asset check
as Markdown tables by run name. Uses Debian's `chromium` (Playwright drives it; no browser download); without it the
test is skipped. Screenshots land in the test's tmp_path."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import LENGTH_COLLAPSE
from tests.test_ui import LATEST_RUN, graphql, running_ui, wait_for, wait_for_run

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # the dev extras are not installed
    expect = sync_playwright = None

CHROMIUM = shutil.which("chromium")


@pytest.fixture
def browser():
    if CHROMIUM is None:
        pytest.skip("needs Debian's chromium package: apt-get install chromium")
    if sync_playwright is None:
        pytest.skip("needs playwright: pip install -e '.[dev]'")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.mark.slow
def test_materialize_all_from_the_lineage_and_read_the_flags(tmp_path, browser, monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = tmp_path / "home"
    with running_ui(home, tmp_path / "ui.log", GRPOLENS_WANDB_DIRS=str(LENGTH_COLLAPSE)) as (port, _):
        url = f"http://127.0.0.1:{port}"
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.set_default_timeout(30_000)

        page.goto(f"{url}/asset-groups")
        button = page.get_by_role("button", name="Materialize all")
        button.wait_for()
        assert "…" not in button.inner_text()  # an ellipsis means a partition dialog would open first
        button.click()
        wait_for(lambda: graphql(port, LATEST_RUN)["runsOrError"]["results"], 30, "the run to be launched")
        assert page.get_by_text("Are you sure?").count() == 0
        (run,) = graphql(port, LATEST_RUN)["runsOrError"]["results"]
        page.screenshot(path=tmp_path / "lineage.png")
        assert wait_for_run(port, run["runId"], 150) == "SUCCESS"

        page.goto(f"{url}/assets/anomalies")
        flags = rendered_markdown(page, "flagged")
        for text in ("qwen2_3b_opd", "response_length_collapse", "grad_norm_spike"):
            expect(flags.locator("td", has_text=text).first).to_be_visible()
        expect(flags.locator("td", has_text="wandb:")).to_have_count(0)  # run names, not run_keys
        page.screenshot(path=tmp_path / "anomalies.png")

        page.goto(f"{url}/assets/metrics?view=checks")
        page.get_by_text("response_length_collapse", exact=True).first.click()
        expect(page.locator("tr", has=page.locator("td").get_by_text("thresholds", exact=True)).first).to_contain_text(
            "drop_ratio=0.3"
        )
        check = rendered_markdown(page, "flagged")
        expect(check.locator("td", has_text="qwen2_3b_opd")).to_have_count(1)
        expect(check.locator("td", has_text="mean response length collapsed")).to_have_count(1)
        page.screenshot(path=tmp_path / "check.png")


def rendered_markdown(page, key: str):
    """A metadata entry as the UI shows it: a short Markdown value inline in its row, a long one behind
    "[Show Markdown]", in a dialog."""
    row = page.locator("tr", has=page.locator("td").get_by_text(key, exact=True)).first
    link = row.get_by_text("[Show Markdown]")
    link.or_(row.locator("table")).first.wait_for()  # the Markdown renderer loads after the row
    if link.count():
        link.click()
        dialog = page.get_by_role("dialog")
        dialog.get_by_role("button", name="Close").wait_for()
        page.wait_for_timeout(300)  # the dialog fades in: let a screenshot show it whole
        return dialog
    return row
