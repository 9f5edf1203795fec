"""The command line's progress: the messages as lines, and in a terminal the phase under way."""

from __future__ import annotations

import io

from hpcmm.config import RunConfig
from hpcmm.cli.progress import RunProgress

GRID = "grid 1x1 | summa | 64x64 @ 64x64 float64 | numpy | panel 64 | balance share"


def test_off_a_terminal_the_lines_are_as_they_were():
    out = io.StringIO()
    with RunProgress(RunConfig(), stream=out) as shown:
        assert shown.progress is None
        shown(GRID)
        shown("iteration 1/3: 0.1000 s (first start to last end)")
    assert out.getvalue() == f"hpcmm: {GRID}\nhpcmm: iteration 1/3: 0.1000 s (first start to last end)\n"


def test_in_a_terminal_each_phase_is_named():
    out = io.StringIO()
    config = RunConfig(warmup=2, iters=3, save_c=True)
    phases = []
    with RunProgress(config, stream=out, live=True) as shown:
        def phase():
            (task,) = shown.progress.tasks
            phases.append((task.description, task.completed, task.total))

        phase()
        for message in (GRID, "warm-up 1/2: 1 s", "warm-up 2/2: 1 s", "iteration 1/3: 1 s", "iteration 2/3: 1 s",
                        "iteration 3/3: 1 s"):
            shown(message)
            phase()
    assert [p[0] for p in phases] == ["setting up (placement, plan, buffers)",
                                      "generating the inputs, then the first warm-up product", "warm-up products",
                                      "timed products", "timed products", "timed products",
                                      "checking C, writing the results file and C"]
    assert phases[2][1:] == (1, 2) and phases[4][1:] == (1, 3)
    assert f"hpcmm: {GRID}" in out.getvalue()  # the messages are still printed, whole
