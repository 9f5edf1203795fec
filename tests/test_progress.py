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


def test_read_inputs_and_no_warm_up_name_their_phases():
    """Inputs from files, no warm-up, C not saved: the phases say so, and the bar counts the timed products."""
    config = RunConfig(a="a.h5:A", b="b.h5:B", warmup=0, iters=2, save_c=False)
    phases = []
    with RunProgress(config, stream=io.StringIO(), live=True) as shown:
        for message in (GRID, "iteration 1/2: 1 s", "iteration 2/2: 1 s"):
            shown(message)
            (task,) = shown.progress.tasks
            phases.append((task.description, task.completed, task.total))
    assert phases == [("reading the inputs, then the first timed product", 0, None), ("timed products", 1, 2),
                      ("checking C, writing the results file", 0, None)]


def test_the_timed_products_start_from_nothing_after_the_warm_up():
    config = RunConfig(warmup=1, iters=4)
    with RunProgress(config, stream=io.StringIO(), live=True) as shown:
        shown(GRID)
        shown("warm-up 1/1: 1 s")
        (task,) = shown.progress.tasks
        assert (task.description, task.completed, task.total) == ("timed products", 0, 4)


def test_a_message_is_printed_as_it_is_in_a_terminal():
    """rich's markup and highlighting are off: a message with brackets comes out whole, without colour codes."""
    out = io.StringIO()
    with RunProgress(RunConfig(), stream=out, live=True) as shown:
        shown("grid 1x1 | [bold]x[/bold] | 12 ranks")
    assert "hpcmm: grid 1x1 | [bold]x[/bold] | 12 ranks" in out.getvalue()
    assert "\x1b[" not in out.getvalue().split("hpcmm:")[1].split("\n")[0]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Closed(io.StringIO):
    def isatty(self):
        raise ValueError("I/O operation on closed file")


def test_the_live_line_is_drawn_where_the_stream_is_a_terminal():
    assert RunProgress(RunConfig(), stream=_Terminal()).progress is not None
    assert RunProgress(RunConfig(), stream=io.StringIO()).progress is None
    assert RunProgress(RunConfig(), stream=_Closed()).progress is None
