"""Shared test fixtures: paths to the shared spec files."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"


def shared_file(*parts: str) -> Path:
    """A file under ../shared (CI lays a copy of shared/ beside the clone)."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.fail(f"missing shared spec file {p} (shared/ must sit beside the repository)")
    return p


@pytest.fixture(scope="session")
def encoding_vectors():
    import json

    return json.loads(shared_file("spec", "encoding_vectors.json").read_text())


@pytest.fixture(scope="session")
def reference_toml() -> Path:
    return shared_file("reference", "plena_settings.toml")
