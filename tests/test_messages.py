"""Error messages speak of values, not of numpy's reprs (``np.int64(0)``)."""

from __future__ import annotations

import numpy as np
import pytest

from hpcmm.errors import InputError


@pytest.mark.parametrize("iterations, shown", [([0, 1, 2], "0 to 2"), ([0, 2, 5], "0, 2, 5")])
def test_a_missing_iteration_names_the_ones_the_file_holds(tmp_path, iterations, shown):
    pytest.importorskip("matplotlib")
    from hpcmm.cli.report import plot_timeline

    events = np.array([[0, it, 0, 0, 0, 0.0, 1.0] for it in iterations], dtype=np.float64)
    with pytest.raises(InputError) as info:
        plot_timeline(events, str(tmp_path / "t.png"), iteration=7)
    assert str(info.value) == f"--iteration=7: the file holds iterations {shown}"
    assert "np." not in str(info.value)
