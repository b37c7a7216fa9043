"""Fixtures for the scale-out tests: three `tessera serve` replicas for the whole session.

Started by tests/scale/run.sh, which sets TESSERA_BIN and SMG_BIN.
"""

import json
import os
import shutil
from pathlib import Path

import pytest

from fleet import Replica, http


@pytest.fixture(scope="session")
def smg():
    path = os.environ.get("SMG_BIN") or shutil.which("smg")
    if not path:
        pytest.fail("smg is not installed: run tests/scale/run.sh (pip install smg==1.13.0)")
    return path


@pytest.fixture(scope="session")
def log_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("scale")


@pytest.fixture(scope="session")
def replicas(log_dir):
    binary = os.environ.get("TESSERA_BIN")
    if not binary:
        pytest.fail("TESSERA_BIN is not set: run tests/scale/run.sh")
    fleet = [Replica(binary, Path(log_dir), i).start() for i in range(3)]
    try:
        for r in fleet:
            r.wait_healthy()
        yield fleet
    finally:
        for r in fleet:
            r.stop()


@pytest.fixture(scope="session")
def model(replicas):
    """The served model's id (smg requires `model` in every request)."""
    return json.loads(http("GET", f"{replicas[0].url}/v1/models")[1])["data"][0]["id"]
