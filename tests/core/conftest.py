"""Fixtures of the execution-core tests (helpers live in simhelpers.py)."""

import pytest
from simhelpers import BACKENDS


@pytest.fixture(params=BACKENDS)
def backend(request):
    """Each execution backend in turn ("reference", "numba")."""
    return request.param
