"""What ``hpcmm model`` hands its user: the table of ``model check`` and the guard of ``--save``.

The table is read back as a user reads it (its columns by name, each figure against the rows
:func:`~hpcmm.model.cost.check_rows` predicted); ``--save`` replaces only a machine description and
never an input, and says which rule refused a path in one line, before anything is written.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re

import h5py
import numpy as np
import pytest
from mpi4py import MPI

import hpcmm
from hpcmm.cli import main as cli
from hpcmm.config import RunConfig
from hpcmm.errors import InputError
from hpcmm.model import cost as model
from hpcmm.model.cost import builtin
from test_model import _results_file, _staged_transport

COLUMNS = ["case", "algo", "ranks", "rpn", "paths", "measured s", "predicted s", "error", "meas. TF", "pred. TF"]


def _h200_file(path, *args, **kw) -> str:
    """:func:`test_model._results_file` made on H200s, as the description h200x2 describes them."""
    made = _results_file(path, *args, **kw)
    with h5py.File(made, "r+") as f:
        ranks = f["topology/local_size"].size
        f["topology"].create_dataset("backend", data=np.array([b"cupy"] * ranks))
        f["topology"].create_dataset("gpu_name", data=np.array([b"NVIDIA H200"] * ranks))
    return made


def _cells(line: str) -> list[str]:
    """A table row's cells: the case label is its first two words."""
    words = line.split()
    return [" ".join(words[:2]), *words[2:]]


def test_check_table_prints_each_run_as_its_columns_say(tmp_path):
    """Header, one row per file with its measured and predicted seconds, error and rates, and the worst error."""
    machine = builtin("h200x2")
    measured = [0.030, 0.012, 0.250]
    files = [_h200_file(tmp_path / "a.h5", 4096, 4096, 4096, 4, measured[0], rpn=2),
             _h200_file(tmp_path / "b.h5", 3001, 2003, 1999, 2, measured[1], rpn=2),
             _h200_file(tmp_path / "c.h5", 8192, 8192, 8192, 4, measured[2], rpn=2)]
    rows = model.check_rows(files, machine)
    lines = model.check_table(files, machine).split("\n")
    head = lines[0]
    assert head.split() == " ".join(COLUMNS).split()
    for line, row, seconds in zip(lines[1:4], rows, measured):
        case, algo, ranks, rpn, paths, meas, pred, error, meas_tf, pred_tf = _cells(line)
        p = row.problem
        assert case == f"{p.m}x{p.n}x{p.k} float64" and algo == "summa" and paths == "ipc,staged"
        assert (int(ranks), int(rpn)) == (row.ranks, 2)
        assert float(meas) == pytest.approx(seconds, rel=1e-3)
        assert float(pred) == pytest.approx(row.predicted, rel=1e-3)
        assert error.endswith("%") and float(error[:-1]) == pytest.approx(100 * (row.predicted / seconds - 1), abs=0.06)
        assert float(meas_tf) == pytest.approx(p.flops / seconds / 1e12, rel=2e-3)
        assert float(pred_tf) == pytest.approx(p.flops / row.predicted / 1e12, rel=2e-3)
    worst = max(abs(r.predicted / s - 1) for r, s in zip(rows, measured))
    assert lines[4] == f"worst error {100 * worst:.1f} % over 3 case(s), machine h200x2"
    assert not any(line.startswith("warning") for line in lines)


def test_check_table_keeps_its_rows_beside_a_machine_warning(tmp_path):
    """A CPU file checked against a GPU description: the warning comes after the table, which stays whole."""
    cpu = tmp_path / "cpu.h5"
    hpcmm.run(RunConfig(m=48, device="cpu", warmup=0, iters=1, out=str(cpu)), comm=MPI.COMM_SELF)
    gpu = _h200_file(tmp_path / "gpu.h5", 4096, 4096, 4096, 4, 0.03, rpn=2)
    lines = model.check_table([str(cpu), gpu], builtin("h200x2")).split("\n")
    assert lines[0].split()[:3] == ["case", "algo", "ranks"]
    assert lines[1].startswith("48x48x48 float64") and lines[2].startswith("4096x4096x4096 float64")
    assert lines[3].startswith("worst error ")
    assert lines[4:] == [f"warning: {cpu}: made on CPUs (numpy), but h200x2 describes GPUs: its error compares two "
                         "different machines"]


def test_check_table_names_links_of_unknown_date(tmp_path):
    """Several descriptions, one without a date for its links: the count line says "(unknown)" for it."""
    base = builtin("h200x2")
    undated = model.relink(base, _staged_transport(tmp_path / "t0.h5", 8.0, "2026-11-30T16:44:00+00:00"))
    undated = dataclasses.replace(undated, links_measured="")
    dated = model.relink(base, _staged_transport(tmp_path / "t1.h5", 4.0, "2026-11-30T16:47:00+00:00"))
    files = [_results_file(tmp_path / f"r{i}.h5", 8192, 8192, 8192, 4, 0.05, rpn=2, created=t)
             for i, t in enumerate(["2026-11-30T16:43:00+00:00", "2026-11-30T16:48:00+00:00"])]
    table = model.check_table(files, [undated, dated])
    assert "links measured at (unknown): 1 run(s), 2026-11-30T16:47:00+00:00: 1 run(s)" in table.split("\n")


# -- --save: refused in one line before anything is written ({d}: the test's folder) --------------------
SAVE_REFUSED = [
    ("{d}/dangling.json", "--save={d}/dangling.json: a symbolic link to {d}/gone.json, which does not exist"),
    ("{d}/nowhere/m.json", "--save={d}/nowhere/m.json: directory {d}/nowhere does not exist"),
    ("{d}/alias.h5", "--save={d}/alias.h5 is the input file --transport={d}/t.h5: hpcmm never replaces its inputs"),
    ("{d}/sub", "--save={d}/sub: is a directory"),
    ("{d}/list.json", "--save={d}/list.json: exists and is not a machine description (hpcmm replaces only those)"),
    ("{d}/nameless.json", "--save={d}/nameless.json: exists and is not a machine description"),
    ("{d}/numbered.json", "--save={d}/numbered.json: exists and is not a machine description"),
    ("{d}/note.txt", "--save={d}/note.txt: exists and is not a machine description"),
    ("/proc/m.json", "--save=/proc/m.json: directory /proc is not writable (No such file or directory)"),
]


@pytest.fixture
def folder(tmp_path):
    _staged_transport(tmp_path / "t.h5", 3.0, "2026-11-30T16:47:00+00:00")
    os.symlink(tmp_path / "gone.json", tmp_path / "dangling.json")
    os.symlink(tmp_path / "t.h5", tmp_path / "alias.h5")
    (tmp_path / "sub").mkdir()
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "nameless.json").write_text('{"gemm": []}')
    (tmp_path / "numbered.json").write_text('{"name": 3}')
    (tmp_path / "note.txt").write_text("a note\n")
    return tmp_path


def _snapshot(folder):
    return {p.name: (p.is_symlink(), p.read_bytes() if p.is_file() else None) for p in folder.iterdir()}


@pytest.mark.parametrize("save, words", SAVE_REFUSED, ids=[s.rsplit("/", 1)[-1] for s, _ in SAVE_REFUSED])
def test_save_is_refused_with_its_rule(save, words, folder, capsys):
    """`model links --save PATH`: the exact line for each kind of path hpcmm must not write, and nothing written."""
    if save.startswith("/proc") and not os.path.isdir("/proc"):
        pytest.skip("no /proc here")
    before = _snapshot(folder)
    argv = ["model", "links", "--transport", str(folder / "t.h5"), "--save", save.replace("{d}", str(folder))]
    with pytest.raises(InputError) as caught:
        model.model_main(cli.parse(argv), MPI.COMM_SELF)
    message = str(caught.value)
    assert message.startswith(words.replace("{d}", str(folder)))
    assert "\n" not in message
    assert _snapshot(folder) == before and capsys.readouterr().out == ""


def test_save_replaces_a_description_that_is_no_input(folder):
    """A description (a JSON object with a name) at --save is replaced, with the links of the transport file."""
    old = folder / "old.json"
    old.write_text('{"name": "before"}')
    argv = ["model", "links", "--machine", "h200x2", "--transport", str(folder / "t.h5"), "--save", str(old)]
    assert model.model_main(cli.parse(argv), MPI.COMM_SELF) == 0
    assert model.load_machine(str(old)).links_measured == "2026-11-30T16:47:00+00:00"
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


# -- model predict's text: each figure as the prediction holds it ------------------------------------------
def _figures(line: str) -> list[float]:
    return [float(x) for x in re.findall(r"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", line)]


@pytest.mark.parametrize("ranks, kw", [(6, dict(ranks_per_node=2, ranks_per_host=4)), (1, {}),
                                       (8, dict(algo="2.5d:2", ranks_per_node=8))],
                         ids=["6-ranks-2-hosts", "1-rank", "2.5d"])
def test_describe_prints_the_predictions_figures(ranks, kw):
    """Seconds, TFLOP/s per job and per rank, the shares of GEMM and exposed communication, the 2.5D
    reduction, the bytes per path and per NIC: each line's figures are the prediction's, at their digits."""
    machine, prob = builtin("h200x8-ndr"), model.Problem(20000, 16000, 12000)
    pred = model.predict(prob, ranks, machine, **kw)
    lines = model.describe(prob, pred, machine).split("\n")
    assert lines[0] == (f"hpcmm model: 20000x16000x12000 float64 on {ranks} rank(s), grid {pred.grid}, "
                        f"{pred.ranks_per_node} per node, {pred.ranks_per_host} per host, machine h200x8-ndr")
    assert lines[1] == f"  algorithm {pred.algo}, panel {pred.panel}, prefetch {pred.prefetch}, {pred.steps} steps"
    seconds, tflops, per_rank = _figures(lines[2])
    assert seconds == pytest.approx(pred.seconds, rel=1e-3) and tflops == pytest.approx(pred.tflops, abs=0.006)
    assert per_rank == pytest.approx(pred.tflops / ranks, abs=0.006)
    shares = _figures(lines[3])
    s = pred.seconds
    want = [pred.gemm_seconds, 100 * pred.gemm_seconds / s, pred.exposed_seconds, 100 * pred.exposed_seconds / s]
    want += [pred.extra_seconds] if pred.extra_seconds else []
    assert len(shares) == len(want)
    assert all(math.isclose(g, w, rel_tol=1e-3, abs_tol=0.06) for g, w in zip(shares, want))
    assert ("reduction" in lines[3]) == (pred.extra_seconds > 0)
    assert lines[3].endswith(" s" if pred.extra_seconds else " %)")
    rest = lines[4:]
    if pred.bytes_by_path:
        assert rest[0] == "  received per product: " + ", ".join(
            f"{path} {nbytes / 1e9:.3g} GB" for path, nbytes in pred.bytes_by_path.items())
        rest = rest[1:]
    if pred.nic_bytes_max:
        busiest, nic_seconds, mean = _figures(rest[0])
        assert rest[0].startswith("  busiest NIC ") and busiest == pytest.approx(pred.nic_bytes_max / 1e9, rel=1e-2)
        assert nic_seconds == pytest.approx(pred.nic_seconds_max, rel=1e-2)
        assert mean == pytest.approx(pred.nic_bytes_mean / 1e9, rel=1e-2)
        rest = rest[1:]
    assert rest == [f"  note: {note}" for note in pred.notes]
    assert (ranks == 1) == (not pred.bytes_by_path)


def test_describe_a_refused_prediction_gives_its_reasons_and_no_figures():
    machine, prob = builtin("h200x2"), model.Problem(4096, 4096, 4096)
    refused = dataclasses.replace(model.predict(prob, 2, machine), seconds=math.inf, notes=("one reason", "another"))
    lines = model.describe(prob, refused, machine).split("\n")
    assert len(lines) == 3 and lines[2] == "  refused: one reason; another"
