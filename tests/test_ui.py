"""`grpolens ui` (`dg dev` on workspace.yaml) opens on what `grpolens demo` materialized: both use the instance in
<GRPOLENS_HOME>/dagster, which gets a dagster.yaml. Nothing in the graph needs a partition picked (the UI's
"Materialize all" works), nothing upstream of the refresh would make the UI ask "Are you sure?", and a refresh
launched the way the UI launches one (GraphQL launchRun) succeeds. tests/test_ui_browser.py clicks through the same
in Chromium."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pipeline import warehouse
from pipeline.settings import Settings
from tests.conftest import BIN, LENGTH_COLLAPSE


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/graphql", body, {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.load(response)
    assert not answer.get("errors"), answer["errors"]
    return answer["data"]


def wait_for(check, seconds: float, what: str, alive=lambda: None):
    """Poll ``check`` until it returns something true; ``alive`` raises when the thing waited on has died."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive()
        try:
            result = check()
            if result:
                return result
        except OSError:  # the server is not listening yet
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


LOCATION = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus locationOrLoadError {
  __typename ... on PythonError { message }
  ... on RepositoryLocation { repositories { name jobs { name } } } } } } } }"""
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""
LATEST_RUN = """{ runsOrError(limit: 1) { ... on Runs { results { runId status jobName } } } }"""
ASSETS = """{ assetNodes { assetKey { path } groupName isExecutable isMaterializable isPartitioned jobNames
  dependencyKeys { path } assetMaterializations(limit: 1) { runId } } }"""


@contextlib.contextmanager
def running_ui(home: Path, log: Path, **env: str) -> Iterator[tuple[int, dict]]:
    """`grpolens ui` on a free port, as a user starts it (no venv on PATH, no DAGSTER_HOME: the default one);
    yields the port and the loaded code location once it has loaded."""
    port = free_port()
    base = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env = {**base, "GRPOLENS_HOME": str(home), "PATH": "/usr/bin:/bin", **env}
    with open(log, "w") as out:
        # SIGINT as a terminal has it: Dagster maps SIGTERM to SIGINT's handler, so a SIGINT ignored by whatever
        # started pytest in the background would make the server deaf to terminate() below.
        ui = subprocess.Popen(
            [str(BIN / "grpolens"), "ui", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:

        def alive():
            if ui.poll() is not None:
                raise AssertionError(f"grpolens ui exited ({ui.returncode}):\n{log.read_text()[-3000:]}")

        def loaded():
            entries = graphql(port, LOCATION)["workspaceOrError"]["locationEntries"]
            return entries if entries and entries[0]["loadStatus"] == "LOADED" else None

        (entry,) = wait_for(loaded, 120, "the code location to load", alive)
        location = entry["locationOrLoadError"]
        assert location["__typename"] == "RepositoryLocation", location.get("message")
        yield port, {"name": entry["name"], "repository": location["repositories"][0]}
    finally:
        # The dev command stops its webserver, daemon and code servers itself; a signal to the whole group would
        # leave it waiting on children that are already gone.
        ui.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            ui.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(ui.pid, signal.SIGKILL)  # whatever is left of the group


def wait_for_run(port: int, run_id: str, seconds: float = 240) -> str:
    def finished():
        status = graphql(port, STATUS, {"id": run_id})["runOrError"]["status"]
        return status if status in {"SUCCESS", "FAILURE", "CANCELED"} else None

    return wait_for(finished, seconds, f"run {run_id} to finish")


@pytest.mark.slow
def test_ui_opens_on_the_demo_materializations_and_launches_a_refresh(tmp_path, monkeypatch):
    from pipeline.demo.run import materialize

    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    home = tmp_path / "home"
    settings = Settings(home=home, wandb_dirs=(LENGTH_COLLAPSE,))
    said: list[str] = []
    demo = materialize(settings, said.append)  # what `grpolens demo` runs after writing its sample data
    assert demo["anomalies"]["flags"] >= 4 and "qwen2_3b_opd" in demo["anomalies"]["flagged"]
    assert any(line.startswith("Dagster run ") for line in said)
    instance_home = home / "dagster"
    assert yaml.safe_load((instance_home / "dagster.yaml").read_text())["telemetry"] == {"enabled": False}

    log = tmp_path / "ui.log"
    with running_ui(home, log, GRPOLENS_WANDB_DIRS=str(LENGTH_COLLAPSE)) as (port, location):
        nodes = {"/".join(n["assetKey"]["path"]): n for n in graphql(port, ASSETS)["assetNodes"]}
        executable = {key for key, n in nodes.items() if n["isExecutable"]}
        # the demo's run is in the instance the UI shows: nothing says "Never materialized"
        assert executable and all(nodes[key]["assetMaterializations"] for key in executable)
        # "Materialize all" takes every executable asset: none may need a partition picked
        assert not [key for key in executable if nodes[key]["isPartitioned"]]
        assert (
            nodes["lake/wandb_cloud_history"]["isPartitioned"] and not nodes["lake/wandb_cloud_history"]["isExecutable"]
        )
        # the UI asks "Are you sure?" when an upstream asset outside the selection is materializable and never
        # materialized: upstream of the refresh there is nothing materializable at all
        refresh = {key for key, n in nodes.items() if "refresh" in n["jobNames"]}
        assert refresh == executable
        upstream = {"/".join(d["path"]) for key in refresh for d in nodes[key]["dependencyKeys"]} - refresh
        assert upstream and not [key for key in upstream if nodes[key]["isMaterializable"]]
        assert {n["groupName"] for n in nodes.values()} == {
            "lake",
            "staging",
            "core",
            "elo",
            "training",
            "pipeline",
            "health",
            "reports",
        }

        assert "refresh" in {job["name"] for job in location["repository"]["jobs"]}
        params = {
            "selector": {
                "repositoryLocationName": location["name"],
                "repositoryName": location["repository"]["name"],
                "jobName": "refresh",
            },
            "runConfigData": {},
        }
        launched = graphql(port, LAUNCH, {"params": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        assert wait_for_run(port, launched["run"]["runId"]) == "SUCCESS"
    text = log.read_text()
    assert "No dagster instance configuration file" not in text and "superseded" not in text, text[-2000:]
    con = warehouse.connect_readonly(Settings(home=home))
    try:
        assert con.sql("select count(*) from history").fetchone()[0] == 5650
        assert con.sql("select count(*) from learning_dynamics").fetchone()[0] > 50
    finally:
        con.close()
