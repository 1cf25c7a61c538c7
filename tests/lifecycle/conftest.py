"""Lifecycle fixtures: every scenario on each backend and in each hooks mode."""

from __future__ import annotations

import pytest

from tests.lifecycle.harness import HOOK_MODES


@pytest.fixture(params=HOOK_MODES)
def hooks_mode(request: pytest.FixtureRequest) -> str:
    """Where the hooks live (in-process; remote plugins join with the adapter)."""
    return str(request.param)
