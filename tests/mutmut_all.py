"""The full mutation run: every module of hpcmm/ judged by mutmut against its own tests, one group after another.

mutmut's own full run (``mutmut run`` with the configuration in pyproject.toml) gives every mutant every test that
reaches its function, the slow end-to-end ones included: about 8 hours at two workers on a two-core machine,
estimated from samples (docs/mutation.md).  Here each group of modules is one quick run
(``tests/mutmut_quick.py``) with the tests that were chosen to judge it, so the whole fits a night at one
worker, and a group can be run again alone after a change::

    python tests/mutmut_all.py run                          # every group, one after another
    python tests/mutmut_all.py run --only hpcmm/verify.py   # the group that holds this module
    python tests/mutmut_all.py summary                      # the table again, from the kept results
    python tests/mutmut_all.py check                        # every module is in one group, every test exists
    python tests/mutmut_all.py survivors --only hpcmm/verify.py   # each survivor kept, as a diff of the tree

Each group starts from a fresh ``mutants/``; its mutmut results (``mutants/**/*.meta``) and its wall time are
kept under ``--keep`` (default ``mutmut-all/``, git-ignored), from which the summary by module is written:
mutants, killed (timeouts), survived, no tests, crashed test processes, not run.  Which survivors are
equivalent, and why, docs/mutation.md records.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

#: Added to every group's tests: the CPU suite (no GPU, no SLURM), the MPI suite at one rank in mutmut's process.
COMMON = ' -m "not gpu and not multi_gpu and not slurm" --with-mpi'

#: Modules that hold no mutant: package markers, ``python -m hpcmm``'s two lines, and modules whose functions
#: are all decorated (mutmut 3 leaves decorated functions alone, other than static and class methods).
NO_MUTANTS = (
    "hpcmm/__main__.py",
    "hpcmm/bench/__init__.py",
    "hpcmm/cli/__init__.py",
    "hpcmm/execution/__init__.py",
    "hpcmm/execution/placement.py",
    "hpcmm/execution/transport/__init__.py",
    "hpcmm/geometry/__init__.py",
    "hpcmm/io/__init__.py",
    "hpcmm/model/__init__.py",
    "hpcmm/planning/__init__.py",
    "hpcmm/planning/algorithms/__init__.py",
)


@dataclass(frozen=True)
class Group:
    """Modules mutated together and the pytest arguments of the tests that judge them."""

    modules: tuple[str, ...]
    tests: str

    @property
    def name(self) -> str:
        return self.modules[0] + (f" (+{len(self.modules) - 1})" if len(self.modules) > 1 else "")


def _g(modules, tests: str) -> Group:
    return Group(tuple(modules.split()), " ".join(tests.split()))


#: One quick run each, in the order of docs/mutation.md's results table.
GROUPS = (
    _g("hpcmm/planning/plan.py hpcmm/geometry/distribution.py hpcmm/io/redistribute.py",
       'tests/test_matmul.py tests/test_plan_mutants.py tests/test_redistribute_ranks.py tests/test_layout_overlap.py'
       ' -k "not four_ranks and not another_setting"'),
    _g("hpcmm/geometry/layout.py", "tests/test_layout.py tests/test_balance.py tests/test_layout_mutants.py"),
    _g("hpcmm/planning/algorithms/summa.py hpcmm/planning/algorithms/layers.py",
       "tests/test_summa_plan.py tests/test_twofive.py tests/test_summa_mutants.py tests/test_layers_mutants.py"
       ' -k "not bad_algo_exits and not products_at_8_ranks"'),
    _g("hpcmm/config.py", "tests/test_config.py tests/test_config_mutants.py tests/test_output_names.py"
       ' -k "not two_runs_started_together and not bench_transport_twice and not bench_twice"'),
    _g("hpcmm/io/inputs.py", "tests/test_inputs.py tests/test_inputs_mutants.py"
       " tests/test_dtypes.py::test_input_file_of_raw_bits_is_bfloat16"),
    _g("hpcmm/execution/transport/detect.py hpcmm/execution/transport/mpi.py",
       "tests/test_detect.py tests/test_detect_mutants.py tests/test_mpi_mutants.py"),
    _g("hpcmm/execution/transport/channel.py hpcmm/execution/transport/reduce.py hpcmm/execution/transport/ipc.py",
       "tests/test_channel_mutants.py tests/test_reduce_mutants.py tests/test_ipc_mutants.py"),
    _g("hpcmm/verify.py", "tests/test_verify.py tests/test_verify_power.py tests/test_summary_output.py"
       " tests/test_verify_mutants.py"),
    _g("hpcmm/cli/summary.py hpcmm/errors.py", "tests/test_summary_output.py tests/test_timing.py"
       " tests/test_summary_mutants.py tests/test_errors_mutants.py"),
    _g("hpcmm/io/status.py", "tests/test_exit_status.py tests/test_status_mutants.py"
       ' -k "not says_why_the_run_ended and not twice_writes_two_files"'),
    _g("hpcmm/io/h5io.py", 'tests/test_output_names.py tests/test_h5io_mutants.py'
       ' -k "not started_together and not transport_twice"'),
    _g("hpcmm/matmul.py hpcmm/options.py", "tests/test_matmul.py tests/test_matmul_mutants.py"
       ' tests/mpi/test_matmul_mpi.py tests/test_timing.py -k "not four_ranks and not another_setting"'),
    _g("hpcmm/planning/balance.py", "tests/test_balance.py tests/test_balance_mutants.py tests/mpi/test_balance_mpi.py"),
    _g("hpcmm/planning/gemm_orders.py", "tests/test_gemm_orders.py tests/test_gemm_orders_mutants.py"),
    _g("hpcmm/planning/grid_orientation.py", "tests/test_grid_orientation.py tests/test_grid_orientation_mutants.py"),
    _g("hpcmm/planning/algo_choice.py", "tests/test_twofive.py tests/test_unlisted_areas.py"
       ' tests/test_algo_choice_mutants.py -k "not bad_algo_exits and not products_at_8_ranks"'),
    _g("hpcmm/planning/mps.py", "tests/test_mps.py tests/test_mps_mutants.py"),
    _g("hpcmm/planning/threads.py", 'tests/test_threads.py tests/test_threads_mutants.py -k "not two_ranks_record"'),
    _g("hpcmm/planning/handoff.py", "tests/test_handoff.py"),
    _g("hpcmm/cli/info.py", "tests/test_info_mutants.py tests/test_info_ranks_mutants.py tests/test_choices.py"
       " tests/test_grid_orientation.py"),
    _g("hpcmm/execution/host_blas.py", "tests/test_host_blas.py"),
    _g("hpcmm/planning/arrangement.py", "tests/test_arrangement.py tests/test_arrangement_mutants.py"
       " tests/test_grid_orientation.py tests/test_model.py tests/mpi/test_run_balance_mpi.py -k \"not needs_no_mpi\""),
    _g("hpcmm/planning/choices.py",
       "tests/test_choices.py tests/test_dynamic_spans.py tests/test_summa_plan.py tests/test_gemm_orders.py"
       " tests/test_arrangement.py tests/test_twofive.py tests/test_model.py::test_memory_rule_is_the_engines"
       " tests/mpi/test_choices_mpi.py tests/mpi/test_memory_count_mpi.py tests/mpi/test_dynamic_mpi.py"
       " tests/mpi/test_twofive_mpi.py tests/test_choices_mutants.py"
       " tests/test_dynamic_mutants.py::test_over_two_nodes_each_copies_in_the_other_nodes_blocks_once"
       " --deselect-listed tests/mutmut_launch_only.txt"
       ' -k "not largest_problems_script and not bad_algo_exits and not products_at_8_ranks"'),
    _g("hpcmm/execution/topology.py",
       "tests/test_topology_mutants.py tests/test_choices.py tests/mpi/test_balance_mpi.py tests/mpi/test_channel_mpi.py"
       " tests/mpi/test_unlisted_areas_mpi.py tests/mpi/test_run_balance_mpi.py"),
    _g("hpcmm/planning/assemble.py",
       "tests/test_assemble_mutants.py tests/test_matmul.py tests/test_matmul_mutants.py tests/test_timing.py"
       " tests/test_choices.py tests/mpi/test_run_balance_mpi.py tests/mpi/test_balance_mpi.py"
       " tests/mpi/test_memory_count_mpi.py tests/mpi/test_unlisted_areas_mpi.py tests/mpi/test_choices_mpi.py"
       " tests/mpi/test_matmul_mpi.py --deselect-listed tests/mutmut_launch_only.txt"
       ' -k "not four_ranks and not another_setting"'),
    _g("hpcmm/execution/layered.py",
       "tests/test_layered_mutants.py tests/mpi/test_twofive_mpi.py tests/test_assemble_mutants.py tests/test_matmul.py"
       ' -k "not four_ranks and not another_setting"'),
    _g("hpcmm/execution/clock.py", "tests/test_clock_mutants.py tests/test_timing.py tests/mpi/test_timing_mpi.py"),
    _g("hpcmm/cli/startup.py",
       "tests/test_startup_mutants.py tests/test_reliability_budget.py tests/test_unlisted_areas.py tests/test_edges.py"
       " --deselect-listed tests/mutmut_launch_only.txt"),
    _g("hpcmm/io/results.py", "tests/test_results.py tests/test_results_mutants.py"),
    _g("hpcmm/io/gathering.py", "tests/test_write_hdf5.py tests/test_gathering_mutants.py tests/test_h5io_mutants.py"
       " tests/mpi/test_matmul_mpi.py"),
    _g("hpcmm/dtypes.py",
       "tests/test_dtypes.py tests/test_dtypes_mutants.py tests/test_h5io_mutants.py tests/test_timing.py"
       " tests/test_gemm_orders.py tests/test_choices.py tests/test_choices_mutants.py tests/mpi/test_matmul_mpi.py"
       " tests/mpi/test_run_mpi.py"),
    _g("hpcmm/cli/progress.py", "tests/test_progress.py tests/test_progress_mutants.py"),
    _g("hpcmm/io/operands.py",
       "tests/test_matmul.py tests/test_matmul_mutants.py tests/test_operands_mutants.py tests/test_write_hdf5.py"
       ' tests/test_gathering_mutants.py -k "not four_ranks and not another_setting"'),
    _g("hpcmm/io/metadata.py",
       "tests/test_info_mutants.py tests/test_info_ranks_mutants.py tests/test_results.py tests/test_summary_mutants.py"
       " tests/test_h5io_mutants.py tests/test_metadata_mutants.py"),
    _g("hpcmm/cli/report.py", "tests/test_unlisted_areas.py tests/test_bench.py tests/test_messages.py"
       ' tests/test_report_mutants.py -k "report or iteration"'),
    _g("hpcmm/bench/reference.py",
       "tests/test_bench.py tests/test_output_names.py::test_bench_twice_in_a_row_writes_two_files"
       " tests/test_reference_mutants.py --deselect-listed tests/mutmut_launch_only.txt"),
    _g("hpcmm/bench/transport.py", "tests/test_bench.py tests/test_transport_mutants.py"),
    _g("hpcmm/bench/peers.py", "tests/test_bench.py tests/test_peers_mutants.py"),
    _g("hpcmm/execution/engine.py",
       "tests/test_engine_mutants.py tests/test_choices.py tests/test_gemm_orders.py tests/test_timing.py"
       " tests/test_gemm_library.py tests/test_verify.py tests/test_matmul.py tests/mpi/test_timing_mpi.py"
       ' -k "not four_ranks and not another_setting"'),
    _g("hpcmm/execution/dynamic.py",
       "tests/test_dynamic_mutants.py tests/test_dynamic_spans.py tests/test_timing.py tests/mpi/test_dynamic_mpi.py"),
    _g("hpcmm/bench/command.py", "tests/test_bench_command_mutants.py tests/test_bench.py tests/test_summary_output.py"
       " tests/test_output_names.py"),
    _g("hpcmm/execution/backend.py", "tests/test_backend_mutants.py tests/test_backend_streams.py tests/test_gemm_orders.py"
       " tests/test_host_blas.py tests/test_dtypes.py tests/test_gemm_library.py"),
    _g("hpcmm/execution/gemm_library.py", "tests/test_gemm_library_mutants.py tests/test_gemm_library.py"),
    _g("hpcmm/__init__.py", "tests/test_package_mutants.py"),
    _g("hpcmm/cli/run.py",
       "tests/test_run_mutants.py tests/mpi/test_run_mpi.py tests/test_results.py tests/test_verify.py tests/test_timing.py"
       ' -k "not prefetch_and_panel_widths and not uneven_shapes and not every_gemm_order'
       ' and not blocks_with_and_without_padding"'),
    _g("hpcmm/cli/main.py", "tests/test_main_mutants.py tests/test_help.py tests/test_config.py"),
    _g("hpcmm/model/cost.py",
       "tests/test_model.py tests/test_model_machine.py tests/test_model_outputs.py tests/test_model_command.py"
       " tests/test_twofive.py tests/test_grid_orientation.py tests/test_algo_choice_mutants.py"
       " tests/test_timing.py::test_the_prefetch_rule_in_the_run_and_the_model tests/test_cost_model_mutants.py"
       " tests/test_cost_fit_mutants.py --deselect-listed tests/mutmut_launch_only.txt"),
)

#: mutmut's exit codes as the summary counts them (mutmut.stats.status_by_exit_code names the rest).
KILLED, TIMEOUT, SURVIVED, NO_TESTS = 1, -24, 0, 33


def group_of(module: str) -> Group:
    """The group that mutates ``module`` (a path under hpcmm/)."""
    for group in GROUPS:
        if module in group.modules:
            return group
    raise KeyError(f"{module}: in no group of tests/mutmut_all.py")


def test_paths(tests: str) -> list[str]:
    """The files and test ids that ``tests`` names: its pytest arguments that are paths, and the file of
    ``--deselect-listed``; the values of ``-k`` and ``-m`` are not paths."""
    paths, words = [], iter(shlex.split(tests))
    for word in words:
        if word in ("-k", "-m"):
            next(words, None)
        elif word == "--deselect-listed":
            paths.append(next(words, ""))
        elif not word.startswith("-"):
            paths.append(word)
    return [p for p in paths if p]


def problems(root: Path = REPO) -> list[str]:
    """What is wrong with :data:`GROUPS` against the tree at ``root``: a module in no group or in two, a module
    or a test path that does not exist.  Empty when all is well."""
    found = []
    modules = {str(p.relative_to(root)) for p in (root / "hpcmm").rglob("*.py")}
    listed = [m for group in GROUPS for m in group.modules]
    for module in sorted(modules - set(listed) - set(NO_MUTANTS)):
        found.append(f"{module}: in no group and not in NO_MUTANTS")
    for module in sorted({m for m in listed if listed.count(m) > 1}):
        found.append(f"{module}: in more than one group")
    for module in sorted((set(listed) | set(NO_MUTANTS)) - modules):
        found.append(f"{module}: no such module")
    for group in GROUPS:
        for path in test_paths(group.tests):
            if not (root / path.split("::", 1)[0]).is_file():
                found.append(f"{group.name}: no test file {path}")
    return found


def counts(exit_codes) -> dict[str, int]:
    """A module's mutants by verdict, from mutmut's exit codes (None: not run)."""
    codes = list(exit_codes)
    return {
        "mutants": len(codes),
        "killed": sum(c in (KILLED, TIMEOUT) for c in codes),
        "timeouts": sum(c == TIMEOUT for c in codes),
        "survived": sum(c == SURVIVED for c in codes),
        "no tests": sum(c == NO_TESTS for c in codes),
        "not run": sum(c is None for c in codes),
        "crashed": sum(c not in (KILLED, TIMEOUT, SURVIVED, NO_TESTS, None) for c in codes),
    }


def read_module_results(kept: Path) -> dict[str, dict[str, int]]:
    """Per module (its path, ``hpcmm/...``): its verdict counts, from the ``.meta`` files kept under ``kept``."""
    results = {}
    for meta in sorted(kept.rglob("*.py.meta")):
        module = meta.relative_to(kept).as_posix().removesuffix(".meta")
        results[module] = counts(json.loads(meta.read_text()).get("exit_code_by_key", {}).values())
    return results


def summary_table(results: dict[str, dict[str, int]], seconds: dict[str, float]) -> str:
    """The results by module as a markdown table, each group's wall time on its first module's row, and the totals."""
    keys = ("mutants", "killed", "timeouts", "survived", "no tests", "crashed", "not run")
    first = {group.modules[0]: group.name for group in GROUPS}
    lines = ["| module | mutants | killed (timeouts) | survived | no tests | crashed | not run | group's minutes |",
             "|---|---|---|---|---|---|---|---|"]
    total = dict.fromkeys(keys, 0)
    for module in sorted(results):
        row = results[module]
        for key in keys:
            total[key] += row[key]
        minutes = f"{seconds[first[module]] / 60:.1f}" if first.get(module) in seconds else ""
        lines.append(f"| {module} | {row['mutants']} | {row['killed']} ({row['timeouts']}) | {row['survived']} | "
                     f"{row['no tests']} | {row['crashed']} | {row['not run']} | {minutes} |")
    lines.append(f"| total | {total['mutants']} | {total['killed']} ({total['timeouts']}) | {total['survived']} | "
                 f"{total['no tests']} | {total['crashed']} | {total['not run']} | {sum(seconds.values()) / 60:.1f} |")
    judged = total["killed"] + total["survived"]
    if judged:
        lines.append(f"\nKilled: {total['killed']} of the {judged} mutants that tests reach and judge "
                     f"({100 * total['killed'] / judged:.1f} %), equivalent ones not taken out.")
    return "\n".join(lines)


def survivor_diffs(kept: Path, modules=None, root: Path = REPO) -> str:
    """Each survivor kept under ``kept`` (of ``modules``, or all) as mutmut shows it: a diff of the function,
    made again from the module as the tree at ``root`` holds it (so a module changed since its run shows
    the mutants of its new code under the old names: run the group again first)."""
    import difflib

    import libcst
    from mutmut.mutation.diff_apply import read_mutant_function, read_original_function
    from mutmut.mutation.file_mutation import mutate_file_contents

    shown = []
    for meta in sorted(kept.rglob("*.py.meta")):
        module = meta.relative_to(kept).as_posix().removesuffix(".meta")
        if modules and module not in modules:
            continue
        codes = json.loads(meta.read_text()).get("exit_code_by_key", {})
        names = [name for name, code in codes.items() if code == SURVIVED]
        if not names:
            continue
        # Parsed once: mutmut's get_diff_for_mutant parses the whole mutated module again for every mutant.
        mutated = libcst.parse_module(mutate_file_contents(module, (root / module).read_text()).code)
        for name in sorted(names, key=lambda n: (n.rpartition("__mutmut_")[0], int(n.rpartition("_")[2]))):
            before, after = (libcst.Module([read(mutated, name)]).code.strip().split("\n")
                             for read in (read_original_function, read_mutant_function))
            diff = difflib.unified_diff(before, after, fromfile=module, tofile=module, lineterm="")
            shown.append(f"# {name}: survived\n" + "\n".join(diff))
    return "\n\n".join(shown)


def _keep(group: Group, kept: Path, seconds: float | None) -> None:
    for meta in (REPO / "mutants").rglob("*.py.meta"):
        module = meta.relative_to(REPO / "mutants").as_posix().removesuffix(".meta")
        if module in group.modules:
            target = kept / "meta" / (module + ".meta")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(meta, target)
    times = kept / "seconds.json"
    known = json.loads(times.read_text()) if times.is_file() else {}
    known.pop(group.name, None)
    if seconds is not None:
        known[group.name] = seconds
    times.write_text(json.dumps(known, indent=1, sort_keys=True) + "\n")


def run(groups, kept: Path, children: int) -> int:
    """Run each group's quick mode from a fresh ``mutants/`` and keep its results; mutmut's exit status.

    A group whose mutmut is ended by a signal keeps the verdicts it reached (the rest count as not run) but no
    wall time, and the run stops there: a partial group's minutes would pass for a whole one's.
    """
    status = 0
    for group in groups:
        shutil.rmtree(REPO / "mutants", ignore_errors=True)
        command = [sys.executable, str(REPO / "tests" / "mutmut_quick.py")]
        for module in group.modules:
            command += ["--mutate", module]
        command += ["--tests", group.tests + COMMON, "run", "--max-children", str(children)]
        print(f"== {group.name}: {shlex.join(command[1:])}", flush=True)
        start = time.monotonic()
        code = subprocess.run(command, cwd=REPO, check=False).returncode
        if code < 0:
            _keep(group, kept, None)
            print(f"== {group.name}: mutmut ended by signal {-code}; the run stops here", flush=True)
            return 128 - code
        _keep(group, kept, time.monotonic() - start)
        status = code or status
    return status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("run", "summary", "check", "survivors"))
    parser.add_argument("--only", action="append", metavar="MODULE",
                        help="run only the group that holds this module (a path under hpcmm/), or show only its survivors; "
                             "repeat for more")
    parser.add_argument("--keep", type=Path, default=REPO / "mutmut-all", metavar="DIR",
                        help="where each group's results and wall time are kept (default mutmut-all/)")
    parser.add_argument("--max-children", type=int, default=1, metavar="N", help="mutmut's workers (default 1)")
    options = parser.parse_args(argv)
    if options.command == "survivors":
        print(survivor_diffs(options.keep / "meta", options.only))
        return 0
    found = problems()
    if options.command == "check" or found:
        print("\n".join(found) or "every module of hpcmm/ is in one group; every test path exists")
        return 1 if found else 0
    if options.command == "run":
        groups = GROUPS if not options.only else tuple(dict.fromkeys(group_of(m) for m in options.only))
        status = run(groups, options.keep, options.max_children)
    else:
        status = 0
    times = options.keep / "seconds.json"
    seconds = json.loads(times.read_text()) if times.is_file() else {}
    print(summary_table(read_module_results(options.keep / "meta"), seconds))
    return status


if __name__ == "__main__":
    sys.exit(main())
