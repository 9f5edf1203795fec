"""The ``slurm`` marker and a log section that lists every batch job's end state.

The job lines go to the terminal summary so that a CI log shows which jobs
COMPLETED even when every test passed and pytest captured the output.
"""

from __future__ import annotations

import pytest

#: Lines ``SLURM job <id> <script> <state> ExitCode=<code> ...``, one per job.
JOB_LINES = pytest.StashKey[list]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "slurm: submits the batch scripts in jobs/ to a one-node SLURM cluster that the "
        "test starts itself (needs root and Debian's slurm-wlm and munge, or apt-get)",
    )
    config.stash[JOB_LINES] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    lines = config.stash.get(JOB_LINES, [])
    if lines:
        terminalreporter.section("SLURM jobs")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def slurm_job_log(pytestconfig: pytest.Config) -> list:
    """The list that :func:`pytest_terminal_summary` prints at the end of the run."""
    return pytestconfig.stash[JOB_LINES]
