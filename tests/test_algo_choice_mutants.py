"""What the choice of algorithm promises, one behaviour a test.

Written against the mutants that mutation testing of hpcmm/planning/algo_choice.py left alive
(docs/mutation.md): the :class:`~hpcmm.planning.algo_choice.Choice` of ``summa`` and of a given
``2.5d:C`` (what ran, what was asked, the layers, nothing predicted) and its ``/summary``
attributes; the refusals, each naming where the value came from (``--algo`` or ``HPCMM_ALGO``);
and that ``auto`` and ``2.5d`` weigh each candidate by the very figure the cost model gives for
this placement, type, TF32, panel and prefetch, falling back to ``summa`` when nothing fits.
"""

from __future__ import annotations

import math

import pytest

from hpcmm.errors import InputError
from hpcmm.model.cost import DEFAULT_MACHINE, Problem, load_machine, predict
from hpcmm.planning.algo_choice import Choice, Placed, choose

FOUR = Placed(4, (2, 2), 4, True)  # two (virtual) nodes of two ranks on one host


def _model(name, placed, shape, dtype="float64", machine=DEFAULT_MACHINE, **kwargs):
    """The cost model's seconds for candidate ``name``, asked directly."""
    return predict(Problem(*shape, dtype), placed.ranks, load_machine(machine), ranks_per_node=placed.node_sizes[0],
                   ranks_per_host=placed.ranks_per_host, algo=name, cuda_aware=placed.cuda_aware, **kwargs).seconds


# -- what was asked runs --------------------------------------------------------------------


@pytest.mark.parametrize("asked", ["summa", " SUMMA "])
def test_summa_runs_as_asked_with_nothing_predicted(asked):
    choice = choose(asked, FOUR, (64, 64, 64), "float64")
    assert choice == Choice("summa", "summa", None, ())
    assert choice.summary() == {"algo": "summa", "algo_asked": "summa"}


@pytest.mark.parametrize("asked", ["2.5d:2", "2.5D: 2"])
def test_a_given_layer_count_runs_as_asked_with_nothing_predicted(asked):
    choice = choose(asked, FOUR, (64, 64, 64), "float64")
    assert choice == Choice("2.5d:2", "2.5d:2", 2, ())
    assert choice.summary() == {"algo": "2.5d:2", "algo_asked": "2.5d:2"}


# -- the refusals, each naming its origin ---------------------------------------------------


@pytest.mark.parametrize("asked, placed, k, line", [
    ("2.5d:3", FOUR, 64, "=2.5d:3: 3 layers must divide the 2 ranks of each node"),
    ("2.5d:2", Placed(6, (2, 4), 6, True), 64, "=2.5d:2: every node must hold the same number of ranks, not 2, 4"),
    ("2.5d:4", Placed(8, (4, 4), 8, True), 3, "=2.5d:4: k=3 is less than 4 layers (each layer needs k columns of its own)"),
    ("2.5d", Placed(6, (2, 4), 6, True), 64, "=2.5d: no layer count above 1 divides the ranks of each node (2, 4) and fits k=64"),
    ("fast", FOUR, 64, "='fast': expected summa, 2.5d, 2.5d:C (C an integer >= 1) or auto"),
])
@pytest.mark.parametrize("origin", [None, "HPCMM_ALGO"])
def test_refusals_name_the_value_and_where_it_came_from(asked, placed, k, line, origin):
    """``--algo`` unless the caller names another origin (the environment variable that set it)."""
    with pytest.raises(InputError) as caught:
        if origin is None:
            choose(asked, placed, (64, 64, k), "float64")
        else:
            choose(asked, placed, (64, 64, k), "float64", origin=origin)
    assert str(caught.value) == (origin or "--algo") + line


@pytest.mark.parametrize("origin", ["--algo", "HPCMM_ALGO"])
def test_a_machine_the_model_cannot_use_is_refused_naming_the_algo(origin):
    with pytest.raises(InputError) as caught:
        choose("auto", FOUR, (64, 64, 64), "float64", machine="nonesuch", origin=origin)
    assert str(caught.value) == (f"{origin}=auto: the cost model cannot predict this run: --machine=nonesuch: "
                                 "no such built-in machine (have daint-p100, h200x2, h200x8-ndr, phoenix-cpu) "
                                 "and no such file")


# -- the model's figures --------------------------------------------------------------------


@pytest.mark.parametrize("dtype, tf32, kind", [("float32", False, "float32"), ("float32", True, "tf32"),
                                                ("float64", False, "float64")])
def test_auto_weighs_the_runs_type_and_tf32(dtype, tf32, kind):
    """float32, TF32 and float64 run at different rates: each is predicted as itself."""
    shape = (4096, 4096, 4096)
    choice = choose("auto", FOUR, shape, dtype, tf32=tf32)
    assert dict(choice.predicted) == {name: _model(name, FOUR, shape, kind) for name in ("summa", "2.5d:2")}
    others = {"float32", "tf32", "float64"} - {kind}
    assert all(choice.predicted[0][1] != _model("summa", FOUR, shape, other) for other in others)


def test_auto_weighs_the_panel_and_prefetch_asked():
    shape = (4096, 4096, 4096)
    choice = choose("auto", FOUR, shape, "float64", panel=256, prefetch=3)
    assert dict(choice.predicted) == {name: _model(name, FOUR, shape, panel=256, prefetch=3)
                                      for name in ("summa", "2.5d:2")}
    assert choice.predicted[0][1] != _model("summa", FOUR, shape)
    assert choice.predicted[0][1] != _model("summa", FOUR, shape, panel=256)
    assert choice.predicted[0][1] != _model("summa", FOUR, shape, prefetch=3)


def test_auto_weighs_the_ranks_of_each_host():
    """16 ranks on one host of the 8-GPU machine (two a GPU): one host, not the two the model assumes unasked."""
    placed, shape = Placed(16, (16,), 16, True), (8192, 8192, 8192)
    choice = choose("auto", placed, shape, "float64", machine="h200x8-ndr")
    names = [name for name, _ in choice.predicted]
    assert dict(choice.predicted) == {name: _model(name, placed, shape, machine="h200x8-ndr") for name in names}
    unasked = predict(Problem(*shape), 16, load_machine("h200x8-ndr"), ranks_per_node=16, algo="summa",
                      cuda_aware=True).seconds
    assert names[0] == "summa" and choice.predicted[0][1] != unasked


def test_auto_on_one_node_weighs_its_ranks():
    """One node of four ranks: summa and every layer count of it."""
    placed, shape = Placed(4, (4,), 4, True), (4096, 4096, 4096)
    choice = choose("auto", placed, shape, "float64")
    assert dict(choice.predicted) == {name: _model(name, placed, shape) for name in ("summa", "2.5d:2", "2.5d:4")}


def test_where_nothing_fits_auto_names_summa_and_shows_every_candidate():
    """No candidate fits the GPUs' memory (an eighth of a 400000² float64 C is 160 GB, every prediction
    infinite): summa, the first, and all three shown."""
    choice = choose("auto", Placed(8, (4, 4), 8, True), (400000, 400000, 64), "float64")
    assert choice.ran == "summa" and choice.layers is None and choice.asked == "auto"
    assert [name for name, _ in choice.predicted] == ["summa", "2.5d:2", "2.5d:4"]
    assert all(math.isinf(seconds) for _, seconds in choice.predicted)
    summary = choice.summary()
    assert summary["predicted_algos"] == ["summa", "2.5d:2", "2.5d:4"]
    assert summary["predicted_seconds"] == [seconds for _, seconds in choice.predicted]


def test_the_summary_lists_each_candidates_seconds():
    choice = choose("2.5d", Placed(8, (4, 4), 8, False), (4096, 4096, 4096), "float64")
    summary = choice.summary()
    assert summary == {"algo": choice.ran, "algo_asked": "2.5d", "predicted_algos": ["2.5d:2", "2.5d:4"],
                       "predicted_seconds": [seconds for _, seconds in choice.predicted]}
    assert all(seconds > 0 and math.isfinite(seconds) for seconds in summary["predicted_seconds"])
