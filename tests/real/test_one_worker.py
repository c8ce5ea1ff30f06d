"""The real tier runs in one pytest-xdist worker, in its order (tests/conftest.py): its tests fill one
cache as they go, and a second worker building the same parser venv beside it doubles the disk peak.
pytest 9.2 moved a test's id where pytest-xdist 3.8's loadgroup cannot add the group: this fails then."""

import os

import pytest

pytestmark = pytest.mark.real


def test_the_real_tier_is_one_group(request):
    # in a worker, xdist keeps the controller's --dist as option.loadgroup (its own dist is "no")
    if not os.environ.get("PYTEST_XDIST_WORKER") or not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not under pytest-xdist with --dist loadgroup")
    assert request.node.nodeid.endswith("@real"), request.node.nodeid
