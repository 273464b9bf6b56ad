"""The checks on 24 real public runs nobody here wrote (tests/fixtures/real, labelled by reading their numbers):
every labelled problem but at most two is caught at warn/error, and at most one false alarm per 10 runs. A rule
change that trades the real runs for the demo's shapes fails here."""

from __future__ import annotations

import pytest

from pipeline import check_eval


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    return check_eval.evaluate_real(tmp_path_factory.mktemp("real-eval"))


def test_every_fixture_run_is_ingested_and_every_check_runs(scored):
    assert scored["unmatched"] == [] and scored["errors"] == []
    assert scored["runs"] >= 20 and scored["problems"] >= 40


def test_real_problems_are_caught_with_few_false_alarms(scored):
    report = check_eval.format_real(scored)
    assert scored["caught"] >= scored["problems"] - 2, report
    assert len(scored["false_alarms"]) * 10 <= scored["runs"], report


def test_labels_name_real_checks_and_their_files_exist():
    names = {path.stem for path in check_eval.REAL_FIXTURES.parent.parent.parent.joinpath("sql", "checks").glob("*.sql")}
    for run in check_eval.load_real_labels():
        assert {p["check"] for p in run["problems"]} | {a["check"] for a in run["acceptable"]} <= names, run["name"]
        assert all((run["folder"] / f).is_file() for f in run["files"]), run["name"]
        assert (run["folder"] / "SOURCE.txt").is_file(), run["name"]
