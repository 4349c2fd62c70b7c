"""Fixtures of the mlflow tests: MLflow's own client writing a file store, and one real tracking server.

The server takes several seconds to start, so it is started (not waited for) at the first test of this
folder, boots while the file-store tests run, and is stopped at the end of the session.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from mlflow_kit import MlflowServer


@pytest.fixture(scope="session")
def _server_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session", autouse=True)
def _boot_server_early(request: pytest.FixtureRequest) -> None:
    """Start the server at the first test here when any selected test needs it."""
    if any("mlflow_server" in getattr(item, "fixturenames", ()) for item in request.session.items):
        request.getfixturevalue("_server_process")


@pytest.fixture(scope="session")
def mlflow_server(_server_process: MlflowServer) -> MlflowServer:
    """The running tracking server (waited for)."""
    _server_process.wait()
    return _server_process


@pytest.fixture(scope="session")
def server_client(mlflow_server: MlflowServer) -> Any:
    """MLflow's own client, writing to the tracking server."""
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=mlflow_server.url)


@pytest.fixture
def mlruns(tmp_path: Path) -> Path:
    """Where a file store is written (not created yet)."""
    return tmp_path / "mlruns"


@pytest.fixture
def file_client(mlruns: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """MLflow's own client writing the file store `mlruns` (MLflow 3 needs MLFLOW_ALLOW_FILE_STORE for that)."""
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri="file:" + str(mlruns))
