"""The examples in hpcmm's docstrings run as written: a docstring that shows a call's answer stays true."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest
from launcher import REPO

import hpcmm

# In mutmut's copy of the tree (mutants/) each function's docstring is held several times over (the
# original, the mutants); docstrings judge no mutant there (docs/mutation.md).
pytestmark = pytest.mark.skipif(REPO.name == "mutants", reason="mutmut's rewritten copy of the source")

MODULES = sorted(info.name for info in pkgutil.walk_packages(hpcmm.__path__, "hpcmm.")
                 if not info.name.endswith("__main__"))


@pytest.mark.parametrize("name", MODULES)
def test_the_docstring_examples_of_each_module_hold(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False,
                             report=True)
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} docstring examples failed (above)"


def test_the_examples_are_found():
    """Some modules hold examples: a finder that sees none would pass every module above."""
    counts = [doctest.testmod(importlib.import_module(name), report=False).attempted for name in MODULES]
    assert sum(counts) > 50 and len(MODULES) > 40
