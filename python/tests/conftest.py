"""Shared fixtures of the freight module's tests (run by ctest as Python.Pytest, with PYTHONPATH
at the build tree's python/ and FREIGHT_BUILD_DIR at the build tree)."""
import os

import pytest


@pytest.fixture(scope="session")
def freight_command():
    """The `freight` program of the build tree the module came from."""
    build = os.environ.get("FREIGHT_BUILD_DIR")
    if not build:
        import freight
        build = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(freight.__file__))))
    path = os.path.join(build, "freight")
    if not os.access(path, os.X_OK):
        pytest.skip("no freight program beside the module (%s)" % path)
    return path
