"""The public API is `due.__all__`: everything in it is there, and nothing else
that `import due` offers looks public by accident."""

from __future__ import annotations

import types

import due


def test_every_public_name_is_importable() -> None:
    for name in due.__all__:
        assert getattr(due, name) is not None, name


def test_the_package_offers_no_public_name_outside_all() -> None:
    offered = {
        name
        for name, value in vars(due).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert offered == set(due.__all__) - {"__version__"}
