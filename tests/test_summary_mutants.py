"""What the run's figures and its printed summary promise, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/cli/summary.py left alive
(docs/mutation.md).  Pinned here: how the ranks' reports are joined (:func:`gathered_figures`),
the figures' edge cases (no GEMM time, no host gaps, no GPU, no check), every row of the summary
and its wording, the unit a rate is shown in, and the plain-text table where rich is not installed;
the busiest device's memory (:func:`busiest_device`) and ``--balance dynamic``'s figures
(:func:`dynamic_figures`) with their rows.
"""

from __future__ import annotations

import builtins
import dataclasses
import io
import math
import re

import numpy as np
import pytest

from hpcmm.cli.summary import (busiest_device, dynamic_figures, format_rate, gathered_figures, print_summary, rate_unit,
                               summary_figures, summary_rows)
from hpcmm.verify import Check


def _full(**changes) -> dict:
    """A summary with every optional row present."""
    s = dict(ranks=4, gpus=2, seconds=1.23456, seconds_min=1.0, seconds_max=2.5, tflops=0.5, tflops_per_rank=0.125,
             load_imbalance=0.0312, exposed_comm_fraction=0.25, exposed_comm_seconds=0.3086, ranks_per_gpu=2, mps=True,
             algo="summa", algo_asked="auto", balance="share", predicted_imbalance=0.125,
             host_overhead_seconds=0.0123, host_overhead_fraction=0.25, panel=256, prefetch=2, gemm_order="A:F B:C",
             gemm_library_used="cublaslt", paths=["ipc", "shm"], verify="freivalds", verified=True,
             residual=1.5e-17, tolerance=2.5e-14, verify_detectable=0.004)
    s.update(changes)
    return s


def _minimal(**changes) -> dict:
    """A summary as an old results file holds it: none of the optional keys."""
    s = dict(ranks=1, seconds=2.0, seconds_min=2.0, seconds_max=2.0, tflops=2.0, tflops_per_rank=2.0,
             load_imbalance=0.0, exposed_comm_fraction=0.0, exposed_comm_seconds=0.0, paths=[], verify="none",
             verified=False, residual=float("nan"), tolerance=float("nan"))
    s.update(changes)
    return s


def _verification(s: dict) -> str:
    return dict(summary_rows(s))["verification"]


# -- the rows ----------------------------------------------------------------------------


def test_every_row_in_its_place_and_words():
    assert summary_rows(_full()) == [
        ("algorithm", "summa (auto: the cost model's choice)"),
        ("ranks / GPUs", "4 / 2"),
        ("MPS", "yes, 2 rank(s) per GPU at most"),
        ("seconds (median, min, max)", "1.2346  1.0000  2.5000"),
        ("rate", "500.000 GFLOP/s"),
        ("rate per rank", "125.000 GFLOP/s"),
        ("load imbalance", "3.1 % measured, 12.5 % predicted (balance share)"),
        ("exposed communication", "25.0 % (0.3086 s)"),
        ("host overhead", "25.0 % (0.0123 s)"),
        ("panel / prefetch", "256 / 2"),
        ("GEMM operand order", "A:F B:C"),
        ("GEMM library", "cublaslt"),
        ("paths", "ipc, shm"),
        ("verification", "freivalds: PASSED, residual 1.50e-17 (tolerance 2.50e-14); an element off by more "
                         "than 0.4 % of its row's scale fails"),
    ]


def test_an_old_file_has_only_the_rows_it_can_fill():
    assert summary_rows(_minimal()) == [
        ("ranks / GPUs", "1 / 0"),
        ("seconds (median, min, max)", "2.0000  2.0000  2.0000"),
        ("rate", "2.000 TFLOP/s"),
        ("rate per rank", "2.000 TFLOP/s"),
        ("load imbalance", "0.0 %"),
        ("exposed communication", "0.0 % (0.0000 s)"),
        ("panel / prefetch", "None / None"),
        ("paths", "(none: one rank)"),
        ("verification", "none: skipped, residual nan (tolerance nan)"),
    ]


def test_the_algorithm_asked_for_is_shown_alone():
    assert dict(summary_rows(_full(algo="twofive", algo_asked="twofive")))["algorithm"] == "twofive"
    assert dict(summary_rows(_full(algo="twofive", algo_asked=None)))["algorithm"] == (
        "twofive (None: the cost model's choice)")
    s = _full(algo="summa")
    del s["algo_asked"]
    assert dict(summary_rows(s))["algorithm"] == "summa"


def test_mps_without_a_gpu_and_switched_off():
    assert dict(summary_rows(_full(ranks_per_gpu=0, mps=True)))["MPS"] == "- (no GPU)"
    assert dict(summary_rows(_full(ranks_per_gpu=1.0, mps=False)))["MPS"] == "no, 1 rank(s) per GPU at most"


def test_numpy_gemms_are_not_a_row():
    assert "GEMM library" not in dict(summary_rows(_full(gemm_library_used="numpy")))
    s = _full()
    del s["gemm_library_used"]
    assert "GEMM library" not in dict(summary_rows(s))


# -- the verification's line ---------------------------------------------------------------


def test_a_failed_check_says_failed():
    text = _verification(_full(verified=False, residual=3e-3, tolerance=1e-14))
    assert text.startswith("freivalds: FAILED, residual 3.00e-03 (tolerance 1.00e-14); ")


def test_a_weak_check_says_what_hides_and_what_is_stronger():
    weak = _verification(_full(verify_detectable=0.0123456))
    assert weak.endswith("; an element off by less than 1.23 % of its row's scale would not show "
                         "(--verify full is stronger)")
    full = _verification(_full(verify="full", verify_detectable=0.0123456))
    assert full.endswith("; an element off by less than 1.23 % of its row's scale would not show")


def test_a_strong_check_says_what_fails_to_two_digits():
    assert _verification(_full(verify_detectable=0.0095)).endswith(
        "; an element off by more than 0.95 % of its row's scale fails")


def test_the_goal_itself_counts_as_strong_enough():
    assert _verification(_full(verify_detectable=0.01)).endswith(
        "; an element off by more than 1 % of its row's scale fails")


def test_no_sentence_on_power_without_a_figure_or_a_check():
    assert _verification(_full(verify_detectable=float("nan"))) == (
        "freivalds: PASSED, residual 1.50e-17 (tolerance 2.50e-14)")
    s = _full()
    del s["verify_detectable"]
    assert _verification(s) == "freivalds: PASSED, residual 1.50e-17 (tolerance 2.50e-14)"
    assert _verification(_full(verify="none", verified=False, verify_detectable=0.5)) == (
        "none: skipped, residual 1.50e-17 (tolerance 2.50e-14)")


# -- rates -------------------------------------------------------------------------------


def test_rates_keep_their_sign_and_digits():
    assert format_rate(-2.5) == "-2.500 TFLOP/s"
    assert format_rate(-0.0025) == "-2.500 GFLOP/s"
    assert format_rate(0.001) == "1.000 GFLOP/s"
    assert format_rate(12.3456, digits=1) == "12.3 TFLOP/s"
    assert format_rate(float("nan")) == "— FLOP/s"


def test_a_column_takes_the_unit_of_its_largest_rate():
    assert rate_unit([]) == (1.0, "TFLOP/s")
    assert rate_unit([float("nan")]) == (1.0, "TFLOP/s")
    assert rate_unit([1.0, 0.5]) == (1.0, "TFLOP/s")
    assert rate_unit([-3.0, 0.5]) == (1.0, "TFLOP/s")
    assert rate_unit([0.001]) == (1e3, "GFLOP/s")
    assert rate_unit([0.0009, 0.0001]) == (1e6, "MFLOP/s")


# -- the figures ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Report:
    topology: dict
    iteration_seconds: np.ndarray
    step_seconds: np.ndarray
    host_seconds: np.ndarray
    starts: np.ndarray
    transfers: list


def _reports(rng):
    rows = [dict(rank=0, host="a", gpu_index=0, gpu_uuid="GPU-1"), dict(rank=1, host="a", gpu_index=1, gpu_uuid="GPU-1"),
            dict(rank=2, host="a", gpu_index=1, gpu_uuid=""), dict(rank=3, host="b", gpu_index=1, gpu_uuid=""),
            dict(rank=4, host="b", gpu_index=-1, gpu_uuid=""), dict(rank=5, host="c", gpu_index=0, gpu_uuid="")]
    transfers = [[(0, 1, "ipc", 64)], [(1, 0, "mpi", 32), (1, 2, "local", 8)], [], [(3, 4, "shm", 16)], [], []]
    return [_Report(row, rng.random(3), rng.random((3, 2, 3)), rng.random((3, 2)), 10.0 + rng.random(3), t)
            for row, t in zip(rows, transfers)]


def test_the_reports_are_joined_rank_by_rank():
    rng = np.random.default_rng(11)
    reports = _reports(rng)
    windows = [(10.0, 12.5), (10.25, 11.0), (9.5, 13.0)]
    g = gathered_figures(reports, windows, {"ipc", "shm", "mpi", "staged"})
    assert g.topology == [r.topology for r in reports]
    np.testing.assert_array_equal(g.iteration_seconds, [r.iteration_seconds for r in reports])
    np.testing.assert_array_equal(g.step_seconds, [r.step_seconds for r in reports])
    np.testing.assert_array_equal(g.host_seconds, [r.host_seconds for r in reports])
    np.testing.assert_array_equal(g.product_seconds, [2.5, 0.75, 3.5])
    np.testing.assert_allclose(g.start_seconds, [r.starts - [10.0, 10.25, 9.5] for r in reports], rtol=0, atol=0)
    assert g.transfers == [dict(src=0, dst=1, path="ipc", bytes=64), dict(src=1, dst=0, path="mpi", bytes=32),
                           dict(src=1, dst=2, path="local", bytes=8), dict(src=3, dst=4, path="shm", bytes=16)]
    assert g.paths == {"ipc", "mpi", "shm"}
    # GPU-1 twice on host a (one GPU seen by two ranks), index 1 on host a and on host b, index 0 on
    # host c; rank 4 has none.
    assert g.gpus == 4


def _figures(**changes):
    rng = np.random.default_rng(3)
    args = dict(m=64, n=32, k=16, dtype="float64", ranks=2, gpus=0, product_seconds=[0.5, 0.25, 1.0],
                step_seconds=rng.random((2, 3, 4, 3)), host_seconds=rng.random((2, 3, 4)),
                check=Check("full", 1e-16, 1e-14, 0.002), paths={"shm", "ipc"})
    args.update(changes)
    return summary_figures(**args)


def test_figures_of_a_run_without_gpu_or_check():
    s = _figures(check=None)
    assert s["gpus"] == 0 and s["tflops_per_gpu"] == 0.0
    assert s["tflops"] == 2 * 64 * 32 * 16 / 0.5 / 1e12 and s["tflops_per_rank"] == s["tflops"] / 2
    assert s["verify"] == "none" and s["verified"] is False
    assert all(math.isnan(s[key]) for key in ("residual", "tolerance", "verify_detectable"))
    assert s["paths"] == ["ipc", "shm"] and s["ranks"] == 2
    assert s["exposed_comm_fraction"] == s["exposed_comm_seconds"] / 0.5 > 0
    assert s["host_overhead_fraction"] == s["host_overhead_seconds"] / 0.5 > 0


def test_short_gemms_still_show_their_imbalance():
    steps = np.zeros((2, 1, 2, 3))
    steps[0, 0, :, 0] = [0.1, 0.1]  # rank 0: 0.2 s of GEMM, rank 1: 0.1 s
    steps[1, 0, :, 0] = [0.05, 0.05]
    s = _figures(product_seconds=[0.3], step_seconds=steps, host_seconds=np.zeros((2, 1, 2)))
    assert s["load_imbalance"] == pytest.approx(0.2 / 0.15 - 1.0, rel=1e-12, abs=0) and s["gemm_seconds_max"] == 0.2


def test_host_overhead_is_the_median_over_products_of_the_worst_rank():
    host = np.zeros((2, 3, 1))
    host[0, :, 0] = [0.1, 0.2, 0.3]  # rank 1 has no host gaps at all
    s = _figures(product_seconds=[1.0, 1.0, 1.0], step_seconds=np.zeros((2, 3, 1, 3)), host_seconds=host)
    assert s["host_overhead_seconds"] == 0.2


def test_a_failed_check_is_recorded_as_failed():
    s = _figures(check=Check("full", 1e-3, 1e-14, 0.002), gpus=4)
    assert s["verified"] is False and s["verify"] == "full" and s["residual"] == 1e-3
    assert s["tflops_per_gpu"] == s["tflops"] / 4


def test_products_that_took_no_time_have_no_rate_and_no_fractions():
    steps = np.zeros((2, 1, 3, 3))
    s = _figures(product_seconds=[0.0], step_seconds=steps, host_seconds=np.zeros((2, 1, 3)))
    assert s["tflops"] == 0.0 and s["tflops_per_rank"] == 0.0
    assert s["exposed_comm_fraction"] == 0.0 and s["host_overhead_fraction"] == 0.0
    assert s["load_imbalance"] == 0.0 and s["gemm_seconds_max"] == 0.0


def test_no_host_gaps_count_as_none():
    s = _figures(step_seconds=np.random.default_rng(5).random((2, 3, 0, 3)), host_seconds=np.zeros((2, 3, 0)))
    assert s["host_overhead_seconds"] == 0.0 and s["host_overhead_fraction"] == 0.0
    assert s["exposed_comm_seconds"] == 0.0


def test_figures_are_floats_from_lists():
    s = _figures(product_seconds=[1, 3, 2], step_seconds=[[[[1, 0, 1]]] * 3] * 2, host_seconds=[[[1]] * 3] * 2)
    assert s["seconds"] == 2.0 and s["seconds_min"] == 1.0 and s["seconds_max"] == 3.0
    assert s["exposed_comm_seconds"] == 1.0 and s["host_overhead_seconds"] == 1.0


# -- the printed table ---------------------------------------------------------------------


@pytest.fixture
def without_rich(monkeypatch):
    """An interpreter on which ``import rich...`` fails."""
    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "rich" or name.startswith("rich."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)


def test_without_rich_a_plain_table_with_values_wrapped_in_their_column(without_rich):
    s = _full(paths=["path-%d" % i for i in range(30)])
    out = io.StringIO()
    print_summary(s, "/tmp/r.h5", file=out, width=72)
    lines = out.getvalue().splitlines()
    keys = max(len(k) for k, _ in summary_rows(s))
    assert lines[0] == "algorithm".ljust(keys) + "  summa (auto: the cost model's choice)"
    assert lines[-1] == "results: /tmp/r.h5"
    assert all(len(line) <= 72 for line in lines)
    paths = [i for i, line in enumerate(lines) if line.startswith("paths ")][0]
    assert lines[paths + 1].startswith(" " * (keys + 2) + "path-") and lines[paths + 1][keys + 2] != " "
    end = [i for i, line in enumerate(lines) if line.startswith("verification")][0]
    assert " ".join(line[keys + 2:] for line in lines[paths:end]) == ", ".join(s["paths"])


def test_without_rich_an_empty_value_keeps_its_key(without_rich):
    out = io.StringIO()
    print_summary(_full(gemm_order=""), None, file=out, width=100)
    keys = max(len(k) for k, _ in summary_rows(_full()))
    assert "GEMM operand order".ljust(keys) + "  " in out.getvalue().splitlines()
    assert "results:" not in out.getvalue()


def test_without_rich_a_value_fills_its_column(without_rich):
    s = _full(gemm_order=" ".join(["x"] * 100))
    out = io.StringIO()
    print_summary(s, None, file=out, width=73)  # 73 - 26 - 2 = 45 columns: 23 words of one letter
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) == 73
    assert "GEMM operand order".ljust(26) + "  " + " ".join(["x"] * 23) in lines


def test_without_rich_a_narrow_width_still_leaves_twenty_columns(without_rich):
    out = io.StringIO()
    print_summary(_full(), None, file=out, width=10)
    keys = max(len(k) for k, _ in summary_rows(_full()))
    assert max(len(line) for line in out.getvalue().splitlines()) == keys + 2 + 20


def test_rich_table_is_as_wide_as_its_longest_row():
    s = _minimal(panel=1, prefetch=1)
    out = io.StringIO()
    print_summary(s, None, file=out, width=200)
    rows = summary_rows(s)
    needed = max(len(k) for k, _ in rows) + max(len(v) for _, v in rows) + 7
    assert max(len(line) for line in out.getvalue().splitlines()) == needed
    lines = out.getvalue().splitlines()
    assert lines[0].strip() == "hpcmm"
    assert len(lines) == len(rows) + 3  # title, top border, one line a row (no header), bottom border


def test_rich_table_keeps_keys_whole_and_folds_a_long_value():
    s = _full(gemm_order="Q" * 150)
    out = io.StringIO()
    print_summary(s, None, file=out, width=40)
    text = out.getvalue()
    assert text.count("Q") == 150 and "…" not in text
    for key, _ in summary_rows(s):
        assert key in text


def test_keys_are_bold_on_a_terminal(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = _Terminal()
    print_summary(_full(), None, file=out)
    assert "\x1b[1mranks / GPUs" in out.getvalue()


def test_rich_table_is_never_narrower_than_forty_columns():
    out = io.StringIO()
    print_summary(_full(), None, file=out, width=20)
    assert max(len(line) for line in out.getvalue().splitlines()) == 40


class _Broken(io.StringIO):
    def isatty(self):
        raise ValueError("I/O operation on closed file")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_file_that_cannot_say_whether_it_is_a_terminal_gets_100_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "60")
    out = _Broken()
    print_summary(_full(paths=["p%02d" % i for i in range(60)]), None, file=out)
    assert max(len(line) for line in out.getvalue().splitlines()) == 100


def test_a_narrow_terminal_still_gets_forty_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "12")
    out = _Terminal()
    print_summary(_full(paths=["p%02d" % i for i in range(60)]), None, file=out)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())  # rich colours a terminal
    assert max(map(len, plain.splitlines())) == 40


def test_the_summary_goes_to_stdout_by_default(capsys):
    print_summary(_minimal(), "r.h5")
    assert capsys.readouterr().out.endswith("results: r.h5\n")


def test_timings_of_a_narrower_type_are_summed_in_float64():
    tenth = float(np.float32(0.1))
    steps = np.zeros((1, 2, 3, 3), dtype=np.float32)
    steps[..., 0] = steps[..., 2] = np.float32(0.1)
    s = _figures(product_seconds=np.array([0.1, 0.2], dtype=np.float32), step_seconds=steps,
                 host_seconds=np.full((1, 2, 3), 0.1, dtype=np.float32), ranks=1)
    assert s["seconds"] == (tenth + float(np.float32(0.2))) / 2
    assert s["gemm_seconds_max"] == s["exposed_comm_seconds"] == s["host_overhead_seconds"] == tenth + tenth + tenth


# -- the balance mode ----------------------------------------------------------------------


def test_a_balance_the_planner_chose_names_what_was_asked():
    """``--balance auto`` that the planner made ``share``: the row says both."""
    assert dict(summary_rows(_full(balance="share", balance_asked="auto")))["load imbalance"] == (
        "3.1 % measured, 12.5 % predicted (balance share, the planner's for auto)")
    assert dict(summary_rows(_full(balance="even", balance_asked="even")))["load imbalance"] == (
        "3.1 % measured, 12.5 % predicted (balance even)")


# -- the busiest device's memory -----------------------------------------------------------


def _memory_rows(rng, ranks):
    """Each rank's ``/memory`` row: random byte counts, the needed bytes above the operands'."""
    rows = []
    for _ in range(ranks):
        operand = int(rng.integers(1, 2**34))
        needed = operand + int(rng.integers(1, 2**30))
        rows.append(dict(operand_bytes=operand, needed_bytes=needed, free_bytes=int(rng.integers(needed, 2**36)),
                         peak_bytes=needed + int(rng.integers(0, 2**20))))
    return rows


def _device(rows):
    """What the summary takes for one device's ranks, worked out by hand."""
    return {"memory_ranks": len(rows), "memory_operand_bytes": sum(r["operand_bytes"] for r in rows),
            "memory_buffer_bytes": sum(r["needed_bytes"] - r["operand_bytes"] for r in rows),
            "memory_free_bytes": min(r["free_bytes"] for r in rows),
            "memory_peak_bytes": sum(r["peak_bytes"] for r in rows)}


def test_the_busiest_device_adds_up_its_ranks_and_leaves_the_others_out():
    """Two ranks of one GPU (by UUID) and one of another: the pair, summed, where it needs the larger share."""
    rng = np.random.default_rng(17)
    topology = [dict(host="a", gpu_index=0, gpu_uuid="GPU-0"), dict(host="a", gpu_index=1, gpu_uuid="GPU-1"),
                dict(host="a", gpu_index=0, gpu_uuid="GPU-0")]
    memory = _memory_rows(rng, 3)
    memory[1]["free_bytes"] = 4 * memory[1]["needed_bytes"]  # GPU 1: a quarter of its free bytes
    memory[0]["free_bytes"] = memory[2]["free_bytes"] = memory[0]["needed_bytes"] + memory[2]["needed_bytes"]
    memory[2]["free_bytes"] += 1  # GPU 0: all of the smaller of its ranks' free bytes
    assert busiest_device(topology, memory) == _device([memory[0], memory[2]])
    memory[1]["free_bytes"] = memory[1]["needed_bytes"] // 2  # GPU 1 now needs twice what it has
    assert busiest_device(topology, memory) == _device([memory[1]])


def test_the_busiest_device_is_the_largest_share_not_the_most_bytes():
    """A small device nearly full outranks a large one half full that needs more bytes."""
    topology = [dict(host="a", gpu_index=-1, gpu_uuid=""), dict(host="b", gpu_index=-1, gpu_uuid="")]
    memory = [dict(operand_bytes=60, needed_bytes=100, free_bytes=200, peak_bytes=101),
              dict(operand_bytes=8, needed_bytes=9, free_bytes=10, peak_bytes=9)]
    assert busiest_device(topology, memory) == _device([memory[1]])
    memory[1]["free_bytes"] = 19  # now under half full: host a's half is the larger share
    assert busiest_device(topology, memory) == _device([memory[0]])


def test_gpus_that_each_rank_sees_as_its_gpu_0_are_told_apart_by_uuid():
    """``CUDA_VISIBLE_DEVICES`` set per rank: every rank's GPU is index 0 of the host, a GPU of its own."""
    topology = [dict(host="a", gpu_index=0, gpu_uuid="GPU-%d" % i) for i in range(2)]
    memory = [dict(operand_bytes=40, needed_bytes=60, free_bytes=100, peak_bytes=61),
              dict(operand_bytes=30, needed_bytes=50, free_bytes=70, peak_bytes=52)]
    assert busiest_device(topology, memory) == _device([memory[1]])


def test_a_device_with_nothing_free_counts_one_byte_free():
    """A device that had no free bytes when the plan was made needs ``needed_bytes`` times what it has."""
    topology = [dict(host="a", gpu_index=0, gpu_uuid=""), dict(host="a", gpu_index=1, gpu_uuid="")]
    memory = [dict(operand_bytes=1, needed_bytes=2, free_bytes=0, peak_bytes=2),
              dict(operand_bytes=10, needed_bytes=15, free_bytes=10, peak_bytes=15)]
    assert busiest_device(topology, memory) == _device([memory[0]])  # 2 of 1 byte over 15 of 10


def test_files_without_the_plans_memory_have_no_busiest_device():
    """No ranks' rows, or rows of a file written before the operands' bytes were recorded: nothing."""
    assert busiest_device([], []) == {}
    topology = [dict(host="a", gpu_index=0, gpu_uuid="")] * 2
    assert busiest_device(topology, [dict(needed_bytes=5, free_bytes=9, peak_bytes=5)] * 2) == {}


def test_the_memory_row_in_gib():
    """The busiest device's row: its ranks, operands, buffers, free bytes and peak, in GiB to a tenth."""
    gib = 2**30
    s = _full(memory_ranks=3, memory_operand_bytes=int(54.04 * gib), memory_buffer_bytes=int(0.46 * gib),
              memory_free_bytes=int(139.14 * gib), memory_peak_bytes=int(55.24 * gib))
    rows = summary_rows(s)
    keys = [key for key, _ in rows]
    assert ("memory (3 rank(s)/device)", "operands 54.0 + buffers 0.5 of 139.1 GiB free; peak 55.2") in rows
    assert keys.index("memory (3 rank(s)/device)") == keys.index("paths") - 1
    assert not [key for key in dict(summary_rows(_full())) if key.startswith("memory")]


# -- --balance dynamic ---------------------------------------------------------------------


def _tiles(counts):
    """``/timings/tiles`` rows: ``counts[product][(rank, owner)]`` tiles of ``owner`` computed by ``rank``."""
    return [dict(product=p, rank=rank, owner=owner) for p, pairs in enumerate(counts)
            for (rank, owner), many in pairs.items() for _ in range(many)]


def test_dynamic_figures_are_medians_over_the_products():
    """Each product's share of tiles taken from their owner, most and fewest tiles of a worker, then
    the medians; a worker that computed nothing in a product counts 0."""
    rng = np.random.default_rng(23)
    counts = [{(0, 0): 4, (1, 1): 4, (2, 2): 4, (3, 3): 4},  # no tile taken: 0 of 16
              {(0, 0): 4, (0, 1): 2, (1, 1): 2, (2, 2): 4, (3, 3): 3, (2, 3): 1},  # 3 of 16; 6 most, 2 least
              {(0, 0): 3, (0, 1): 4, (0, 2): 4, (0, 3): 4, (3, 3): 1}]  # 12 of 16; ranks 1 and 2 none
    rows = _tiles(counts)
    rng.shuffle(rows)  # the ranks' reports come in rank order, not by product
    figures = dynamic_figures(rows, (0, 1, 2, 3))
    assert figures == {"dynamic_taken_fraction": 3 / 16, "dynamic_tiles_most": 6, "dynamic_tiles_least": 2,
                       "dynamic_workers": 4, "dynamic_joined_products": 0}
    one = dynamic_figures(_tiles(counts[2:]), (0, 1, 2, 3))
    assert (one["dynamic_taken_fraction"], one["dynamic_tiles_most"], one["dynamic_tiles_least"]) == (0.75, 15, 0)


def test_no_tiles_no_dynamic_figures():
    assert dynamic_figures([], (0, 1)) == {}


def test_tiles_between_nodes_only_where_there_are_several():
    """Ranks 0, 1 on node 0 and 2, 3 on node 1: per product the tiles computed on another node than
    their owner's (a tile taken within the node does not count), their median, and the products with any."""
    counts = [{(0, 0): 4, (1, 1): 4, (2, 2): 4, (3, 3): 4},  # none moved
              {(0, 0): 4, (0, 1): 2, (1, 1): 2, (2, 3): 3, (2, 2): 4, (3, 0): 1},  # within node 0 and 1; 1 moved
              {(0, 0): 4, (0, 2): 2, (1, 1): 4, (1, 3): 1, (3, 3): 5},  # 3 moved
              {(0, 0): 4, (1, 1): 4, (2, 2): 4, (3, 3): 4}]  # none
    rows = _tiles(counts)
    figures = dynamic_figures(rows, (0, 1, 2, 3), node_of=(0, 0, 1, 1))
    assert (figures["dynamic_node_handoffs"], figures["dynamic_handoff_products"]) == (0, 2)
    figures = dynamic_figures(_tiles(counts[1:]), (0, 1, 2, 3), node_of=(0, 0, 1, 1))
    assert (figures["dynamic_node_handoffs"], figures["dynamic_handoff_products"]) == (1, 2)
    one_node = dynamic_figures(rows, (0, 1, 2, 3), node_of=(0, 0, 0, 0))
    assert one_node == dynamic_figures(rows, (0, 1, 2, 3))
    assert "tiles between nodes" not in dict(summary_rows(_full(panel=1, prefetch=1, **one_node)))


def test_the_dynamic_rows_say_what_the_figures_hold():
    """The share taken in per cent to a tenth, the range of tiles a rank computed, and between nodes
    the median moved a product with the products that moved any, right after it."""
    counts = [{(0, 0): 5, (0, 1): 1, (1, 1): 2, (2, 2): 3, (3, 3): 3},
              {(0, 0): 4, (1, 1): 4, (2, 2): 4, (2, 0): 1, (3, 3): 4, (0, 2): 2},
              {(0, 0): 4, (1, 1): 4, (2, 2): 4, (3, 3): 4, (3, 1): 1}]
    s = _full(ranks=4, **dynamic_figures(_tiles(counts), (0, 1, 2, 3), node_of=(0, 0, 1, 1)))
    rows = summary_rows(s)
    keys = [key for key, _ in rows]
    assert dict(rows)["tiles taken (dynamic)"] == (
        "7.1 % of the tiles computed by a rank not their owner; 4–6 per rank")
    assert keys.index("tiles between nodes") == keys.index("tiles taken (dynamic)") + 1
    assert dict(rows)["tiles between nodes"] == "1 a product (median); 2 timed product(s) moved any"


def test_every_rank_a_worker_says_nothing_of_workers():
    """Every rank computed, or a file from before the workers were recorded: the row ends at ``per rank``."""
    tiles = dict(dynamic_taken_fraction=0.25, dynamic_tiles_most=5, dynamic_tiles_least=3)
    row = "25.0 % of the tiles computed by a rank not their owner; 3–5 per rank"
    assert dict(summary_rows(_full(dynamic_workers=4, dynamic_joined_products=0, **tiles)))[
        "tiles taken (dynamic)"] == row
    assert dict(summary_rows(_full(**tiles)))["tiles taken (dynamic)"] == row


def test_a_file_without_joined_products_says_none_joined():
    """Workers recorded but not the products the other ranks joined (an older file): none is said."""
    s = _full(dynamic_taken_fraction=0.25, dynamic_tiles_most=5, dynamic_tiles_least=3, dynamic_workers=2)
    assert dict(summary_rows(s))["tiles taken (dynamic)"].endswith(
        "; 2 of 4 ranks computed (the others time-slice a GPU with one of them)")
