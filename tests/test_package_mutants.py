"""What ``import hpcmm`` promises: the names of its ``__all__``, the heavy ones loaded on first use.

Written against the mutants that mutation testing of hpcmm/__init__.py left alive (docs/mutation.md).
"""

from __future__ import annotations

import importlib

import pytest

import hpcmm

LAZY = {"run": "hpcmm.cli.run", "RunResult": "hpcmm.cli.run", "Matmul": "hpcmm.matmul", "matmul": "hpcmm.matmul",
        "ExecuteTimes": "hpcmm.matmul", "gather": "hpcmm.io.gathering", "write_hdf5": "hpcmm.io.gathering"}


@pytest.mark.parametrize("name", sorted(LAZY))
def test_each_lazy_name_is_its_modules_own(name):
    assert getattr(hpcmm, name) is getattr(importlib.import_module(LAZY[name]), name)


def test_every_name_of_all_is_there():
    assert all(getattr(hpcmm, name) is not None for name in hpcmm.__all__)
    assert hpcmm.__version__ == "0.1.0"


def test_an_unknown_name_says_which():
    with pytest.raises(AttributeError) as caught:
        hpcmm.no_such_name  # noqa: B018
    assert str(caught.value) == "module 'hpcmm' has no attribute 'no_such_name'"
    assert not hasattr(hpcmm, "Run")


def test_run_and_matmul_stay_the_functions_after_their_modules_are_imported():
    """Importing hpcmm.matmul (a module) binds it on the package: the package keeps the function."""
    importlib.import_module("hpcmm.matmul")
    importlib.import_module("hpcmm.cli.run")
    assert callable(hpcmm.matmul) and hpcmm.matmul is importlib.import_module("hpcmm.matmul").matmul
    assert callable(hpcmm.run) and hpcmm.run is importlib.import_module("hpcmm.cli.run").run


def test_other_submodules_and_values_are_bound_as_they_are(monkeypatch):
    io = importlib.import_module("hpcmm.io")
    monkeypatch.setattr(hpcmm, "io", io)
    assert hpcmm.io is io
    monkeypatch.setattr(hpcmm, "run", io)  # a module without a 'run' of its own stays itself
    assert hpcmm.run is io
    value = object()
    monkeypatch.setattr(hpcmm, "matmul", value)  # not a module: bound as it is
    assert hpcmm.matmul is value
