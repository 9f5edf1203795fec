"""What ``run`` shows while it works: its progress messages, and in a terminal a live line (rich).

:func:`hpcmm.run` reports through one callback (``progress``): the placement line (``grid RxC | ...``)
once the run is set up, then ``warm-up i/W: ...`` and ``iteration i/I: ...`` after each product.
:class:`RunProgress` is that callback for the command line.  Every message is printed on standard
error as before (job scripts wait for the ``grid`` line); where standard error is a terminal, a
live line below them names the phase under way (setting up; generating or reading the inputs; the
warm-up and the timed products, with a bar; checking C and writing the results file) and its
elapsed time, so that a slow run is told from a hung one.  It is used on rank 0 only, and not at
all with ``--quiet``.
"""

from __future__ import annotations

import re
import sys

__all__ = ["RunProgress"]

_PRODUCT = re.compile(r"(warm-up|iteration) (\d+)/(\d+):")


class RunProgress:
    """The progress callback of ``run`` on the command line; a context manager around the run.

    Parameters
    ----------
    config : RunConfig
        What runs (the inputs' source, ``--warmup``, ``--iters``, ``--save-c``).
    stream : file, optional
        Where it writes (standard error).
    live : bool, optional
        Draw the live line; default: where ``stream`` is a terminal.
    """

    def __init__(self, config, stream=None, live: bool | None = None) -> None:
        self.config = config
        self.stream = stream or sys.stderr
        if live is None:
            try:
                live = self.stream.isatty()
            except (AttributeError, ValueError, OSError):
                live = False
        self.progress = self.task = None
        if live:
            try:
                from rich.console import Console  # noqa: PLC0415
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn  # noqa: PLC0415
                from rich.progress import TextColumn, TimeElapsedColumn  # noqa: PLC0415
            except ImportError:
                return
            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(),
                                     console=Console(file=self.stream), transient=True, refresh_per_second=4)

    def __enter__(self) -> RunProgress:
        if self.progress is not None:
            self.progress.start()
            self._phase("setting up (placement, plan, buffers)")
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()

    def _phase(self, text: str, total: int | None = None, done: int = 0) -> None:
        if self.task is not None:
            self.progress.remove_task(self.task)
        self.task = self.progress.add_task(text, total=total, completed=done)

    def __call__(self, message: str) -> None:
        line = f"hpcmm: {message}"
        if self.progress is None:
            self.stream.write(line + "\n")
            self.stream.flush()
            return
        self.progress.console.print(line, markup=False, highlight=False, soft_wrap=True)
        config = self.config
        if message.startswith("grid "):
            inputs = "reading the inputs" if config.a is not None else "generating the inputs"
            first = "warm-up" if config.warmup else "timed"
            self._phase(f"{inputs}, then the first {first} product")
            return
        match = _PRODUCT.match(message)
        if match is None:
            return
        kind, done, total = match.group(1), int(match.group(2)), int(match.group(3))
        if done < total:
            self._phase("warm-up products" if kind == "warm-up" else "timed products", total, done)
        elif kind == "warm-up":
            self._phase("timed products", config.iters, 0)
        else:
            self._phase("checking C, writing the results file" + (" and C" if config.save_c else ""))
