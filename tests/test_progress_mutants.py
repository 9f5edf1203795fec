"""The live line on a terminal, as a terminal would show it, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/cli/progress.py left alive
(docs/mutation.md), the live line's look: what the stream receives is played onto a small screen
(carriage return, erase line, cursor up, colours dropped), and the screen is read.  The line shows a
spinner, the phase, a bar, the count done of the total and the elapsed time; it is gone once the run
ends, leaving the messages; a message is printed as it is, without rich's colours; and the line is
redrawn four times a second.
"""

from __future__ import annotations

import io
import re

import pytest

from hpcmm.cli.progress import RunProgress
from hpcmm.config import RunConfig

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"  # rich's default spinner, "dots"
_CONTROL = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\r|\n|[^\x1b\r\n]+")


@pytest.fixture(autouse=True)
def _a_plain_terminal(monkeypatch):
    """A terminal of 120 columns that draws, whatever the environment the tests run in says."""
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.setenv("LINES", "40")
    monkeypatch.setenv("TERM", "xterm-256color")
    for name in ("TTY_INTERACTIVE", "TTY_COMPATIBLE", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def screen(text: str) -> list[str]:
    """The lines a terminal shows after ``text``: ``\\r``, ``\\n``, erase line (``ESC[2K``), cursor up (``ESC[nA``)."""
    lines, row, col = [""], 0, 0
    for match in _CONTROL.finditer(text):
        token, (args, command) = match.group(0), match.groups()
        if token == "\r":
            col = 0
        elif token == "\n":
            row, col = row + 1, 0
            lines += [""] * (row + 1 - len(lines))
        elif command == "K":
            lines[row] = ""
        elif command == "A":
            row = max(0, row - int(args or 1))
        elif command is None:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + len(token):]
            col += len(token)
    return lines


def _live_line(lines: list[str]) -> str:
    (line,) = [line for line in lines if line and not line.startswith("hpcmm: ")]
    return line


def test_the_live_line_shows_the_phase_its_bar_the_count_and_the_time():
    out = _Terminal()
    with RunProgress(RunConfig(warmup=2, iters=3), stream=out) as shown:
        shown("grid 1x1 | summa | 12 ranks")
        shown("warm-up 1/2: 1 s")
        shown.progress.refresh()
        line = _live_line(screen(out.getvalue()))
    assert re.fullmatch(rf"[{SPINNER}] warm-up products [━╸╺]+ 1/2 \d+:\d\d:\d\d", line), line


def test_the_live_line_is_gone_when_the_run_ends_and_the_messages_stay():
    out = _Terminal()
    messages = ["grid 1x1 | summa | 12 ranks", "iteration 1/2: 1 s", "iteration 2/2: 1 s"]
    with RunProgress(RunConfig(warmup=0, iters=2), stream=out) as shown:
        for message in messages:
            shown(message)
        shown.progress.refresh()
        line = _live_line(screen(out.getvalue()))
        assert re.fullmatch(rf"[{SPINNER}] checking C, writing the results file [━╸╺]+ 0/\? \d+:\d\d:\d\d", line), line
    assert [line for line in screen(out.getvalue()) if line] == [f"hpcmm: {m}" for m in messages]


def test_a_message_on_a_terminal_comes_out_without_colours():
    """rich would colour the numbers, the brackets and the words True and None: the message is left as it is."""
    out = _Terminal()
    message = "grid 1x1 | summa | 12 ranks [x] 3.5 s 'a' True None"
    with RunProgress(RunConfig(), stream=out) as shown:
        shown(message)
    assert f"\x1b[2Khpcmm: {message}\n" in out.getvalue()


def test_the_live_line_is_redrawn_four_times_a_second():
    """Read from rich's live display: watching the redraws would need a clock."""
    with RunProgress(RunConfig(), stream=_Terminal()) as shown:
        assert shown.progress.live.refresh_per_second == 4
