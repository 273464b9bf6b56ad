"""`grpolens ui` (dagster dev on workspace.yaml) loads the code location, and a refresh launched the way the UI
launches one (GraphQL launchRun) materializes everything."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request

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
        return json.load(response)["data"]


def wait_for(check, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            result = check()
            if result:
                return result
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


LOCATION = """{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus locationOrLoadError {
  __typename ... on PythonError { message } ... on RepositoryLocation { repositories { name jobs { name } } } } } } } }"""
LAUNCH = """mutation($params: ExecutionParams!) { launchRun(executionParams: $params) {
  __typename ... on LaunchRunSuccess { run { runId } } ... on PythonError { message } } }"""
STATUS = """query($id: ID!) { runOrError(runId: $id) { ... on Run { status } } }"""


def test_ui_loads_and_materializes_everything(tmp_path):
    port = free_port()
    env = {**os.environ, "GRPOLENS_HOME": str(tmp_path / "home"), "GRPOLENS_WANDB_DIRS": str(LENGTH_COLLAPSE),
           "DAGSTER_HOME": str(tmp_path / "dagster"), "PATH": "/usr/bin:/bin"}  # no venv on PATH, as for a user
    (tmp_path / "dagster").mkdir()
    ui = subprocess.Popen([str(BIN / "grpolens"), "ui", "--port", str(port)], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def loaded():
            entries = graphql(port, LOCATION)["workspaceOrError"]["locationEntries"]
            return entries if entries and entries[0]["loadStatus"] == "LOADED" else None

        (entry,) = wait_for(loaded, 120, "the code location to load")
        location = entry["locationOrLoadError"]
        assert location["__typename"] == "RepositoryLocation", location.get("message")
        (repository,) = location["repositories"]
        assert "refresh" in {job["name"] for job in repository["jobs"]}
        params = {"selector": {"repositoryLocationName": entry["name"], "repositoryName": repository["name"],
                               "jobName": "refresh"}, "runConfigData": {}}
        launched = graphql(port, LAUNCH, {"params": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]

        def finished():
            status = graphql(port, STATUS, {"id": run_id})["runOrError"]["status"]
            return status if status in {"SUCCESS", "FAILURE", "CANCELED"} else None

        assert wait_for(finished, 240, "the refresh run to finish") == "SUCCESS"
    finally:
        os.killpg(ui.pid, signal.SIGTERM)
        try:
            ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(ui.pid, signal.SIGKILL)
    con = warehouse.connect_readonly(Settings(home=tmp_path / "home"))
    try:
        assert con.sql("select count(*) from history").fetchone()[0] == 5650
        assert con.sql("select count(*) from learning_dynamics").fetchone()[0] > 50
    finally:
        con.close()
