"""The episode viewer (src/view.py) in a real headless Chromium: the page of a real short run and
of an archived study, checked through the DOM: every episode reachable, the filters change what is
shown, a turn shows its response and reward, two validations compare game by game, the validation
curves hold the files' values and mark the validation of the episode on screen."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from arl.analysis.games import game_pairs
from arl.analysis.viewer import find_chromium, page_data, write_viewer
from arl_testing import ROOT, compose

CHROMIUM = find_chromium()
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (scripts/system_deps.sh installs it)")
ARCHIVE = ROOT / "docs" / "results" / "alfworld_calibration"
WEBSHOP_ARCHIVE = ROOT / "docs" / "results" / "webshop_rl_study" / "runs"


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium (scripts/system_deps.sh installs it)")
    playwright = pytest.importorskip("playwright.sync_api", reason="the viewer extra: pip install -e '.[viewer]'")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


def open_page(browser, html: Path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    page.goto(html.resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']")
    page.errors = errors
    return page


def file_rows(root: Path) -> dict[str, dict]:
    """Every episode of the viewed folder's files, by the key the page gives its row."""
    out = {}
    for v in page_data(root)["validations"]:
        for line in (root / v["file"]).read_text().splitlines():
            row = json.loads(line)
            out[f"{v['key']}|{row['seed']}"] = row
    return out


def marked(page) -> list[str]:
    """The iterations of the curve points ringed as the validation of the episode on screen."""
    return page.eval_on_selector_all("#curves circle.pt.current", "c => c.map(x => x.dataset.iteration)")


def shown_keys(page) -> list[str]:
    """The row keys of every page of the list, paging with the next button."""
    keys = []
    while True:
        keys += page.eval_on_selector_all("#list tbody tr", "rows => rows.map(r => r.dataset.key)")
        if page.is_disabled("#next"):
            return keys
        page.click("#next")


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    from arl.run.pipeline import train

    out = tmp_path_factory.mktemp("viewer_run")
    cfg = compose(["debug=smoke", "bc.enabled=false", "rl.iterations=1", "rl.val_every=1", "rollout.val_episodes=4",
                   "rollout.max_new_tokens=12", "algo.filter.name=none"], output_dir=str(out))
    train(cfg)
    return out


@needs_browser
def test_the_page_of_a_run_shows_every_episode_filters_and_turns(browser, short_run):
    html = write_viewer(short_run)
    rows = file_rows(short_run)
    assert len(rows) == 8  # 4 held-out games at iterations 0 and 1
    page = open_page(browser, html)
    page.select_option("#page-size", "25")
    assert sorted(shown_keys(page)) == sorted(rows)  # every episode reachable
    assert page.inner_text("#count").startswith("8 of 8 episodes shown")
    # a filter changes what is shown
    page.select_option("#f-iter", "1")
    assert page.inner_text("#count").startswith("4 of 8 episodes shown")
    assert set(page.eval_on_selector_all("#list tbody tr td:nth-child(2)", "c => c.map(x => x.textContent)")) == {"1"}
    page.select_option("#f-outcome", "won")
    won = sum(r["won"] for k, r in rows.items() if "@1|" in k)
    assert page.inner_text("#count").startswith(f"{won} of 8 episodes shown")
    page.select_option("#f-outcome", "")
    # an episode turn by turn: the response and reward of its first turn, as the file has them
    page.click("#list tbody tr >> nth=0")
    key = page.get_attribute("#list tbody tr >> nth=0", "data-key")
    turn = rows[key]["turn_log"][0]
    first = page.locator("#detail-body .turn[data-turn='1']")
    assert first.locator("pre.response").text_content() == turn["response"]
    assert first.locator("pre.observation").text_content() == turn["observation"] != ""
    assert first.locator(".reward").text_content() == f"{turn['reward']:+.2f}"
    assert page.locator("#detail-body .turn").count() == rows[key]["turns"]
    # the validation curve (sokoban: one task type, not graded: one success chart, no score chart): a point per
    # validation at the success its file gives, the validation of the episode on screen (iteration 1) ringed
    won_at = {k: sum(r["won"] for key_, r in rows.items() if f"@{k}|" in key_) for k in (0, 1)}
    assert page.is_visible("#curves") and page.locator("#curves svg.curve").count() == 1
    points = page.locator("#curves circle.pt")
    assert points.count() == 2 and page.locator("#curves circle.pt[data-series='all']").count() == 2
    for k in (0, 1):
        point = page.locator(f"#curves circle.pt[data-iteration='{k}']")
        assert float(point.get_attribute("data-value")) == won_at[k] / 4
        assert point.locator("title").text_content().endswith(
            f"@ iter {k}, all task types: {won_at[k]} of 4 won (success {won_at[k] / 4:.3f})")
    cy = {k: float(page.get_attribute(f"#curves circle.pt[data-iteration='{k}']", "cy")) for k in (0, 1)}
    assert (cy[0] < cy[1]) == (won_at[0] > won_at[1]) and (cy[0] == cy[1]) == (won_at[0] == won_at[1])
    assert marked(page) == ["1"]
    assert page.get_attribute("#curves line.here", "visibility") == "visible"
    assert page.get_attribute("#curves line.here", "x1") == page.get_attribute("#curves circle.pt.current", "cx")
    page.select_option("#f-iter", "0")
    page.click("#list tbody tr >> nth=0")  # an episode of validation 0: the marker moves there
    assert marked(page) == ["0"]
    assert page.get_attribute("#curves line.here", "x1") == page.get_attribute("#curves circle.pt.current", "cx")
    page.click("#curves circle.pt[data-iteration='1']")  # a point lists its validation's episodes
    assert page.input_value("#f-iter") == "1" and page.inner_text("#count").startswith("4 of 8 episodes shown")
    # two validations on the same games: the counts game_pairs gives, and both episodes side by side
    before = {r["seed"]: r["won"] for k, r in rows.items() if "@0|" in k}
    after = {r["seed"]: r["won"] for k, r in rows.items() if "@1|" in k}
    n, won_before, won_after, gained, lost = game_pairs(before, after)
    summary = page.inner_text("#cmp-summary")
    assert f"{n} games in both: won before {won_before}, after {won_after}; {gained} gained, {lost} lost" in summary
    page.select_option("#cmp-show", "all")
    page.click("#cmp-games tbody tr >> nth=0")
    assert page.is_visible("#side-a [data-episode]") and page.is_visible("#side-b [data-episode]")
    assert page.errors == []


@needs_browser
def test_the_page_of_an_archived_study_reaches_every_episode_and_says_what_is_missing(browser, tmp_path):
    if not ARCHIVE.is_dir():
        pytest.skip("the ALFWorld calibration archive is not in this checkout")
    html = write_viewer(ARCHIVE, tmp_path / "archive.html")
    rows = file_rows(ARCHIVE)
    page = open_page(browser, html)
    page.select_option("#page-size", "1000")
    assert sorted(shown_keys(page)) == sorted(rows) and len(rows) == 8 * 2 * 96
    assert "summaries only" in page.inner_text("#notes")
    page.select_option("#f-seed", "2")
    assert page.inner_text("#count").startswith(f"{len(rows) // 2} of {len(rows)} episodes shown")
    page.click("#list tbody tr >> nth=0")
    assert "Turns not recorded" in page.inner_text("#detail-body")
    assert page.errors == []


@needs_browser
def test_the_curves_of_an_archived_graded_study(browser, tmp_path):
    """WebShop's eight archived runs: per run a success and a score chart, the overall curve and the
    five task types' at iterations 0 and 20, the values the runs logged; the marker follows the episode."""
    if not WEBSHOP_ARCHIVE.is_dir():
        pytest.skip("the WebShop RL study archive is not in this checkout")
    page = open_page(browser, write_viewer(WEBSHOP_ARCHIVE, tmp_path / "webshop.html"))
    runs = sorted(p.name for p in WEBSHOP_ARCHIVE.iterdir())
    charts = page.locator("#curves .chart")
    assert charts.count() == 8 and [charts.nth(i).locator("h3").text_content() for i in range(8)] == runs
    assert page.locator("#curves svg.curve[data-measure='success']").count() == 8
    assert page.locator("#curves svg.curve[data-measure='score']").count() == 8
    types = ["beauty", "electronics", "fashion", "food", "furniture"]
    assert page.inner_text("#curves-legend").split() == ["all", "task", "types", *types]
    first = charts.nth(0)
    logged = json.loads((WEBSHOP_ARCHIVE / runs[0] / "rl_results.json").read_text())
    for measure, tag in (("success", "val/success_rate"), ("score", "val/score")):
        svg = first.locator(f"svg[data-measure='{measure}']")
        assert svg.locator("circle.pt[data-series='all']").count() == 2
        assert svg.locator("polyline").count() == 6
        for t in types:
            assert svg.locator(f"circle.pt[data-type='{t}']").count() == 2
        for k, key in ((0, "val_before_rl"), (20, "val_after_rl")):
            value = float(svg.locator(f"circle.pt[data-series='all'][data-iteration='{k}']").get_attribute("data-value"))
            assert value == pytest.approx(logged[key][tag], abs=1e-3)
    food = first.locator("svg[data-measure='success'] circle.pt[data-type='food'][data-iteration='20']")
    assert float(food.get_attribute("data-value")) == logged["val_after_rl"]["val/success_rate/food"]
    page.click("#list tbody tr >> nth=0")  # the first run's start validation
    assert page.locator("#curves .chart.current").count() == 1 and "current" in first.get_attribute("class")
    assert marked(page) == ["0"] * 12  # six series, two charts
    page.select_option("#f-run", runs[1])
    page.select_option("#f-iter", "20")
    page.click("#list tbody tr >> nth=0")
    assert marked(page) == ["20"] * 12 and "current" in charts.nth(1).get_attribute("class")
    assert "current" not in first.get_attribute("class")
    assert page.errors == []


@needs_browser
def test_text_that_looks_like_html_stays_text(browser, tmp_path):
    """A response holding ``</script>``, ``<!--<script>`` or tags is shown as written, a NaN reward
    as n/a, and the page still loads."""
    row = {"seed": 3, "task_type": "t", "won": True, "return": 1.0, "turns": 1, "valid_turns": 1,
           "turn_log": [{"observation": "<b>x</b> <!--<script>", "response": "<think>a</script><img src=x></think> go",
                         "action": "go", "valid": True, "reason": "", "reward": float("nan"), "truncated": False,
                         "anchor": "00"}]}
    (tmp_path / "val_episodes.jsonl").write_text(json.dumps(row) + "\n")
    page = open_page(browser, write_viewer(tmp_path))
    page.click("#list tbody tr >> nth=0")
    assert page.locator("pre.response").text_content() == row["turn_log"][0]["response"]
    assert page.locator("pre.observation").text_content() == row["turn_log"][0]["observation"]
    assert page.locator("pre.response .think").count() == 1 and page.locator("#detail-body img").count() == 0
    assert page.locator(".reward").text_content() == "n/a"
    assert page.errors == []


def test_the_command_line(tmp_path):
    bad = subprocess.run([sys.executable, str(ROOT / "src" / "view.py"), str(tmp_path / "nothing")],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "does not exist" in bad.stderr
    (tmp_path / "run" / "val_episodes").mkdir(parents=True)
    (tmp_path / "run" / "val_episodes" / "iter4.jsonl").write_text(json.dumps({"seed": 1, "won": False}) + "\n")
    ok = subprocess.run([sys.executable, str(ROOT / "src" / "view.py"), str(tmp_path / "run")], capture_output=True, text=True)
    assert ok.returncode == 0 and (tmp_path / "run" / "episodes.html").exists()


@needs_browser
def test_two_eval_runs_side_by_side(browser, tmp_path):
    """``src/view.py start rl``: two eval folders on the same games, compared as compare.py counts."""
    won = {"start": [True, False, False, True], "rl": [True, True, True, False]}
    for name, outcomes in won.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "val_episodes.jsonl").write_text("".join(
            json.dumps({"seed": 10 + i, "task_type": "t", "won": w, "return": float(w), "turns": 1, "valid_turns": 1,
                        "turn_log": [{"observation": f"{name} {i}", "response": "r", "action": "a", "valid": True,
                                      "reason": "", "reward": float(w)}]}) + "\n"
            for i, w in enumerate(outcomes)))
    out = tmp_path / "cmp.html"
    proc = subprocess.run([sys.executable, str(ROOT / "src" / "view.py"), str(tmp_path / "start"), str(tmp_path / "rl"),
                           "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    page = open_page(browser, out)
    assert page.inner_text("#cmp-summary").startswith("4 games in both: won before 2, after 3; 2 gained, 1 lost")
    assert page.is_hidden("#curves")  # eval runs: no iteration axis, no curve
    page.click("#cmp-games tbody tr >> nth=0")  # game 11: lost at the start, won after
    assert page.locator("#side-a pre.observation").text_content() == "start 1"
    assert page.locator("#side-b pre.observation").text_content() == "rl 1"
    assert page.errors == []
