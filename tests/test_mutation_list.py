"""Every hand-made bug of ``tests/mutation.py`` still applies: its text occurs exactly once in its file.

A bug whose text the code no longer holds would be reported by ``mutation.py`` only when run; this
keeps the list true to the code on every change, at no cost.
"""

from __future__ import annotations

import mutation
import pytest
from launcher import REPO

# mutmut runs the suite in its copy of the tree (mutants/), whose modules hold each function several
# times over (the original, the mutants, a trampoline): the hand list is judged on the tree itself.
pytestmark = pytest.mark.skipif(REPO.name == "mutants", reason="mutmut's rewritten copy of the source")


@pytest.mark.parametrize("name", sorted(mutation.MUTATIONS))
def test_the_bug_still_applies(name):
    path, old, new, *_ = mutation.MUTATIONS[name]
    text = (REPO / path).read_text()
    assert text.count(old) == 1, f"{name}: {path} holds its text {text.count(old)} times"
    assert old != new
