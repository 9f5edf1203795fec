"""``hpcmm model`` in this process: each option reaches the prediction, each bad input its one line.

The subprocess tables of tests/test_reliability_inputs.py check the exit status and the files a
refused command leaves; these call :func:`~hpcmm.model.cost.model_main` directly, so that a change to
how an option is read (or to the message that names it) fails here, where a mutation run sees it.
Each option's case first checks that the option changes the library's prediction, so that a command
that dropped it could not pass.
"""

from __future__ import annotations

import json

import pytest
from mpi4py import MPI

from hpcmm.cli import main as cli
from hpcmm.errors import InputError
from hpcmm.model import cost as model
from hpcmm.model.cost import Problem, builtin, predict
from test_model import _results_file, _staged_transport

BASE = ["--machine", "h200x2", "--m", "6000", "--n", "5000", "--k", "4000", "--ranks", "4"]
PROBLEM = Problem(6000, 5000, 4000)

#: (flags beside BASE, the keywords of predict() they stand for, the first keyword's option being the one
#: tested and the others its setting)
OPTIONS = [
    (["--ranks-per-node", "1"], dict(ranks_per_node=1)),
    (["--ranks-per-host", "1", "--machine", "h200x8-ndr"], dict(ranks_per_host=1, machine="h200x8-ndr")),
    (["--grid", "1x4"], dict(grid=(1, 4))),
    (["--panel", "128"], dict(panel=128)),
    (["--prefetch", "0", "--ranks-per-node", "1"], dict(prefetch=0, ranks_per_node=1)),
    (["--algo", "split-relay", "--ranks-per-node", "1", "--ranks-per-host", "1", "--machine", "h200x8-ndr"],
     dict(algo="split-relay", ranks_per_node=1, ranks_per_host=1, machine="h200x8-ndr")),
    (["--cuda-aware", "yes", "--ranks-per-node", "1"], dict(cuda_aware=True, ranks_per_node=1)),  # h200x2: no
    (["--cuda-aware", "no", "--ranks-per-node", "1", "--ranks-per-host", "1", "--machine", "h200x8-ndr"],
     dict(cuda_aware=False, ranks_per_node=1, ranks_per_host=1, machine="h200x8-ndr")),  # h200x8-ndr: yes
    (["--balance", "none", "--ranks", "3"], dict(balance="none", ranks=3)),
    (["--mps", "yes"], dict(mps=True)),
    (["--step-order", "common"], dict(step_order="common")),
]


def _predict(ranks=4, machine="h200x2", **kw):
    return predict(PROBLEM, ranks, builtin(machine), **kw)


def _printed(argv, capsys, comm=MPI.COMM_SELF) -> str:
    assert model.model_main(cli.parse(["model", *argv]), comm) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("flags, kw", OPTIONS, ids=[" ".join(f) for f, _ in OPTIONS])
def test_each_option_reaches_the_prediction(flags, kw, capsys):
    """Text and JSON: what the library predicts with the option's keyword, not what it predicts without."""
    want = _predict(**kw)
    without = dict(list(kw.items())[1:])
    assert want.as_dict() != _predict(**without).as_dict(), "the option must change the prediction here"
    machine = builtin(kw.get("machine", "h200x2"))
    args = BASE + flags
    assert _printed(args, capsys) == model.describe(PROBLEM, want, machine) + "\n"
    assert _printed(args + ["--json"], capsys) == json.dumps(want.as_dict(), indent=2) + "\n"


def test_n_and_k_default_to_m_and_the_type_is_taken(capsys):
    out = json.loads(_printed(["--m", "3000", "--ranks", "2", "--dtype", "float32", "--json"], capsys))
    want = predict(Problem(3000, 3000, 3000, "float32"), 2, builtin("h200x2"))
    assert out == json.loads(json.dumps(want.as_dict()))
    assert out != json.loads(json.dumps(predict(Problem(3000, 3000, 3000), 2, builtin("h200x2")).as_dict()))


def test_show_prints_the_description(tmp_path, capsys):
    assert _printed(["show"], capsys) == builtin("h200x2").to_json() + "\n"
    path = tmp_path / "m.json"
    path.write_text(builtin("daint-p100").to_json())
    assert _printed(["show", "--machine", str(path)], capsys) == builtin("daint-p100").to_json() + "\n"


def test_scaling_prints_the_tables_of_its_nodes_sizes_and_type(capsys):
    got = _printed(["scaling", "--machine", "h200x8-ndr", "--nodes", "1,2", "--sizes", "8192,16384",
                    "--dtype", "float32"], capsys)
    assert got == model.scaling_tables(builtin("h200x8-ndr"), "float32", [1, 2], [8192, 16384]) + "\n"
    assert "| 2 nodes |" in got and "| 16384 |" in got


def test_check_takes_several_descriptions_and_every_file(tmp_path, capsys):
    """``--machine a,b``: each description loaded (the table says which links predicted which run)."""
    early = tmp_path / "early.json"
    late = tmp_path / "late.json"
    base = builtin("h200x2")
    early.write_text(base.replace(links_measured="2026-11-30T16:44:00+00:00").to_json())
    late.write_text(base.replace(links_measured="2026-11-30T16:47:00+00:00", staged_gbps=1.0).to_json())
    files = [_results_file(tmp_path / f"r{i}.h5", 4096, 4096, 4096, 4, 0.05, rpn=1, created=t)
             for i, t in enumerate(["2026-11-30T16:45:00+00:00", "2026-11-30T16:48:00+00:00"])]
    got = _printed(["check", *files, "--machine", f"{early},{late}"], capsys)
    machines = [model.load_machine(str(early)), model.load_machine(str(late))]
    assert got == model.check_table(files, machines) + "\n"
    assert "2026-11-30T16:44:00+00:00: 1 run(s), 2026-11-30T16:47:00+00:00: 1 run(s)" in got
    assert got != model.check_table(files[:1], machines) + "\n"


class _SecondRank:
    """A one-process communicator that says it is rank 1: what the other ranks of a job print."""

    def __init__(self):
        self.comm = MPI.COMM_SELF

    def Get_rank(self):
        return 1

    def __getattr__(self, name):
        return getattr(self.comm, name)


@pytest.mark.parametrize("argv", [[], ["show"], ["scaling", "--nodes", "1", "--sizes", "4096"]])
def test_only_rank_0_prints(argv, capsys):
    assert model.model_main(cli.parse(["model", *argv]), _SecondRank()) == 0
    assert capsys.readouterr().out == ""


def test_links_writes_the_description_on_rank_0_only(tmp_path, capsys):
    links = _staged_transport(tmp_path / "t.h5", 3.0, "2026-11-30T16:47:00+00:00")
    save = tmp_path / "rank1.json"
    assert model.model_main(cli.parse(["model", "links", "--transport", links, "--save", str(save)]),
                            _SecondRank()) == 0
    assert not save.exists() and capsys.readouterr().out == ""


# -- refused before any work: (argv, the one line's words); {d} is the test's folder ---------------------
REFUSED = [
    (["predict", "{d}/extra.h5"], "model predict: takes no files (given {d}/extra.h5); model check reads results"),
    (["show", "{d}/extra.h5", "{d}/more.h5"], "model show: takes no files (given {d}/extra.h5)"),
    (["links", "--transport", ",", "--save", "{d}/m.json"], "--transport=',': name a `bench transport` file"),
    (["links", "--transport", "{d}/none.h5", "--save", "{d}/m.json"], "--transport={d}/none.h5"),
    (["links", "--transport", "{d}/t.h5,{d}/none.h5", "--save", "{d}/m.json"], "--transport={d}/none.h5"),
    (["links", "--transport", "{d}/t.h5", "--save", "{d}/t.h5"], "is the input file --transport={d}/t.h5"),
    (["measure", "--transport", "{d}/t.h5", "--save", "{d}/t.h5"], "is the input file --transport={d}/t.h5"),
    (["links", "--machine", "{d}/base.json", "--transport", "{d}/t.h5", "--save", "{d}/base.json"],
     "is the input file --machine={d}/base.json"),
    (["measure", "--save", "{d}/note.txt"], "--save={d}/note.txt: exists and is not a machine description"),
    (["measure", "--save", "{d}/m.json", "--sweep-seconds", "0"], "--sweep-seconds=0.0: expected a positive"),
    (["measure", "--save", "{d}/m.json", "--sweep-seconds", "-1"], "--sweep-seconds=-1.0: expected a positive"),
    (["measure", "--save", "{d}/m.json", "--sweep-seconds", "inf"], "--sweep-seconds=inf: expected a positive"),
    (["scaling", "--nodes", "1,x"], "--nodes='x': expected an integer >= 1"),
    (["scaling", "--nodes", ","], "--nodes=',': expected comma-separated integers >= 1"),
    (["scaling", "--sizes", "0"], "--sizes=0: expected an integer >= 1"),
    (["scaling", "--sizes", "16384", "--nodes", "3000000000000000000"], "--ranks=6000000000000000000: more than"),
    (["scaling", "--sizes", "20000000", "--nodes", "1"], "--nodes=1 --sizes: --m=20000000"),
    (["scaling", "--machine", "h200x8-ndr", "--sizes", "2000000", "--nodes", "1,400"],
     "--nodes=400 --sizes: --m=40000000 --n=40000000 --k=40000000"),
    (["predict", "--m", "20000000"], "--m=20000000 --n=20000000 --k=20000000: the model would simulate"),
    (["predict", "--m", "2000", "--n", "7", "--k", "20000000", "--panel", "64"], "a panel of 64"),
    (["predict", "--m", "200000", "--k", "200000", "--n", "8", "--dtype", "float16", "--ranks", "20000",
      "--grid", "20000x1"], "--m=200000 --n=8 --k=200000 --ranks=20000"),
    (["predict", "--ranks", "100000"], "--ranks=100000: the model would simulate at least"),
    (["show", "--machine", "h200x2,daint-p100"], "--machine=h200x2,daint-p100: no such built-in machine"),
    # the type reaches the bound: float16 operands of this size fit the model's integers, float64 ones not
    (["predict", "--dtype", "float16", "--m", "1073741824"], "--k=1073741824: the model would simulate at least"),
    (["scaling", "--dtype", "float16", "--sizes", "1073741824", "--nodes", "1"],
     "--nodes=1 --sizes: --m=1073741824 --n=1073741824 --k=1073741824: the model would simulate at least"),
    (["predict", "--m", "64", "--n", "64", "--k", "40000", "--ranks", "40000", "--grid", "1x40000"],
     "at least 40000 steps (one per block of k on the grid), more than 32768"),
    # 16 ranks on one host of 8 GPUs: the operands (1491 GiB) exceed those 8 GPUs, so the narrowest panel
    (["predict", "--machine", "h200x8-ndr", "--ranks", "16", "--ranks-per-host", "16", "--m", "10000", "--n",
      "10000", "--k", "10000000"], "the narrowest: the operands' 1491 GiB exceed the 1114 GiB of 8 device(s)"),
]


@pytest.fixture
def folder(tmp_path):
    _staged_transport(tmp_path / "t.h5", 3.0, "2026-11-30T16:47:00+00:00")
    (tmp_path / "base.json").write_text(builtin("h200x2").to_json())
    (tmp_path / "note.txt").write_text("a note\n")
    (tmp_path / "extra.h5").write_text("")
    return tmp_path


@pytest.mark.parametrize("argv, words", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_refused_with_its_line_and_nothing_written(argv, words, folder, capsys):
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    argv = [a.replace("{d}", str(folder)) for a in argv]
    with pytest.raises(InputError) as caught:
        model.model_main(cli.parse(["model", *argv]), MPI.COMM_SELF)
    assert words.replace("{d}", str(folder)) in str(caught.value)
    assert "\n" not in str(caught.value)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("seconds", ["0.5", "1", "2.5"])
def test_a_positive_sweep_time_is_taken(seconds, folder):
    """Every positive finite --sweep-seconds passes the check (measure's own run is timed elsewhere)."""
    model.check_options(cli.parse(["model", "measure", "--save", str(folder / "m.json"), "--sweep-seconds", seconds]))


def test_save_may_replace_a_description_but_not_what_it_reads(folder):
    """``--save`` onto a description that is not an input is allowed; checks pass, nothing written yet."""
    model.check_options(cli.parse(["model", "links", "--transport", str(folder / "t.h5"),
                                   "--save", str(folder / "base.json")]))
    assert model.load_machine(str(folder / "base.json")) == builtin("h200x2")


def test_check_reads_its_files_and_machines_before_anything(folder, capsys):
    """A ``check`` with a good file and a missing description: the description's line, nothing printed."""
    good = _results_file(folder / "good.h5", 4096, 4096, 4096, 4, 0.05, rpn=1)
    with pytest.raises(InputError, match="missing.json"):
        model.model_main(cli.parse(["model", "check", good, "--machine", f"h200x2,{folder}/missing.json"]),
                         MPI.COMM_SELF)
    assert capsys.readouterr().out == ""
    model.check_options(cli.parse(["model", "check", good, "--machine", "h200x2,daint-p100"]))


# -- model measure: the sweep, what it prints, the description it fits ---------------------------------
SWEEP = [(1024, 1024, 64), (512, 768, 256), (768, 512, 128)]


def _fake_sweep(monkeypatch, calls):
    """A GEMM clock of known rates (float64 2 TFLOP/s, float32 4; accumulating 10 % slower) and a copy
    rate of 2000 GB/s, in place of the device's: the command's bookkeeping is then exact.  The shapes take
    tens of microseconds, so that the printed milliseconds and TFLOP/s show every digit they are given."""
    def time_gemm(backend, comm, m, n, w, dtype, acc, seconds):
        calls.append((m, n, w, dtype, acc, seconds))
        rate = {"float64": 2e12, "float32": 4e12, "complex128": 8e12}[dtype] / (1.1 if acc else 1.0)
        return (8.0 if dtype == "complex128" else 2.0) * m * n * w / rate

    monkeypatch.setattr(model, "_time_gemm", time_gemm)
    monkeypatch.setattr(model, "_time_copy", lambda backend, comm: 2000.0)
    monkeypatch.setattr(model, "_sweep_shapes", lambda on_gpu: SWEEP)
    monkeypatch.setattr(model, "_meminfo", lambda: 16 * 2**30)  # the host's free memory moves between reads
    monkeypatch.setattr(model, "_cores", lambda: 2)
    return time_gemm


@pytest.mark.parametrize("dtypes, sweep", [(None, None), ("float32", "0.004"), ("float64,float32", "1000"),
                                           ("complex128", None)])
def test_measure_times_every_shape_type_and_mode_and_fits_what_it_timed(dtypes, sweep, tmp_path, monkeypatch,
                                                                        capsys):
    calls = []
    clock = _fake_sweep(monkeypatch, calls)
    save = tmp_path / "cpu.json"
    argv = ["model", "measure", "--save", str(save), "--shapes", "400x1200x160"]
    argv += ["--dtypes", dtypes] if dtypes else []
    argv += ["--sweep-seconds", sweep] if sweep else []
    assert model.model_main(cli.parse(argv), MPI.COMM_SELF) == 0
    types = (dtypes or "float64,float32").split(",")
    # each type: every shape without and with accumulation, then the --shapes block accumulating
    per = min(float(sweep) if sweep else model.SWEEP_SECONDS["cpu"], model.SWEEP_BUDGET_SECONDS / (2 * 3 * len(types)))
    want_calls = [(m, n, w, t, acc, per) for t in types for call in
                  [[(m, n, w, acc) for m, n, w in SWEEP for acc in (False, True)] + [(400, 1200, 160, True)]]
                  for m, n, w, acc in call]
    assert calls == want_calls
    printed = capsys.readouterr().out.splitlines()
    flops = {t: (8.0 if t == "complex128" else 2.0) for t in types}  # a complex multiply-add is 8
    samples = {t: [(m, n, w, acc, clock(None, None, m, n, w, t, acc, per)) for m, n, w in SWEEP
                   for acc in (False, True)] for t in types}
    exact = {t: [(400, 1200, 160, clock(None, None, 400, 1200, 160, t, True, per))] for t in types}
    sweep_lines = [f"sweep {t} m={m} n={n} w={w} beta={int(acc)} {sec * 1e3:.4f} ms "
                   f"{flops[t] * m * n * w / sec / 1e12:.1f} TFLOP/s" for t, rows in samples.items()
                   for m, n, w, acc, sec in rows]
    shape_lines = [f"shape {t} m=400 n=1200 w=160 beta=1 {sec * 1e3:.4f} ms {flops[t] * 400 * 1200 * 160 / sec / 1e12:.1f} "
                   "TFLOP/s"
                   for t, rows in exact.items() for *_, sec in rows]
    assert printed[:len(sweep_lines) + len(shape_lines)] == sweep_lines + shape_lines
    assert printed[len(sweep_lines) + len(shape_lines)] == f"hpcmm model: machine description written to {save}"
    desc = model.load_machine(str(save))
    assert "\n".join(printed[len(sweep_lines) + len(shape_lines) + 1:]) == desc.to_json()
    assert desc == model._describe_measured(None, False, samples, 2000.0, 1, None, 1, exact)
    if types == ["float32"]:  # one line by hand, beside the lines the test builds
        assert printed[0] == "sweep float32 m=1024 n=1024 w=64 beta=0 0.0336 ms 4.0 TFLOP/s"


def test_measure_starts_from_the_machine_it_names(tmp_path, monkeypatch, capsys):
    """``--machine``: the measured types replace its curves, the others and its links stay."""
    _fake_sweep(monkeypatch, [])
    save = tmp_path / "cpu.json"
    assert model.model_main(cli.parse(["model", "measure", "--machine", "h200x8-ndr", "--dtypes", "float64",
                                       "--save", str(save)]), MPI.COMM_SELF) == 0
    desc, base = model.load_machine(str(save)), builtin("h200x8-ndr")
    assert desc.gemm["float32"] == base.gemm["float32"] and desc.gemm["float64"] != base.gemm["float64"]
    assert desc.net_gbps == base.net_gbps and desc.gemm["float64"].unaligned == base.gemm["float64"].unaligned
    assert desc.source == "GEMM sweep here; links from h200x8-ndr"


@pytest.mark.parametrize("argv, words", [
    (["--dtypes", "bfloat16"], "--dtypes: 'bfloat16' cannot be measured here (have float64, float32, "),
    (["--dtypes", "float64,int8"], "--dtypes: 'int8' cannot be measured here"),
    (["--shapes", "96x48"], "--shapes: '96x48' is not MxNxW"),
])
def test_measure_refuses_before_it_times_anything(argv, words, tmp_path, monkeypatch):
    calls = []
    _fake_sweep(monkeypatch, calls)
    save = tmp_path / "never.json"
    with pytest.raises(InputError) as caught:
        model.model_main(cli.parse(["model", "measure", "--save", str(save), *argv]), MPI.COMM_SELF)
    assert words in str(caught.value) and calls == [] and not save.exists()


def test_measure_needs_save(monkeypatch):
    with pytest.raises(InputError, match=r"^model measure: --save FILE\.json is required$"):
        model.model_main(cli.parse(["model", "measure"]), MPI.COMM_SELF)


# -- the description a sweep makes ------------------------------------------------------------------
def _samples(rate, gbps=30.0, passes=4.0):
    """A sweep on the model's own curve: launch, GEMM and the passes over C at ``gbps`` (GB/s)."""
    return [(m, n, w, acc, 2e-6 + 2.0 * m * n * w / rate + (passes if acc else 1.0) * m * n * 8 / (gbps * 1e9))
            for m in (256, 1024) for n in (256, 1024) for w in (64, 256) for acc in (False, True)]


@pytest.mark.parametrize("sharers", [1, 2, 3])
def test_a_cpu_description_from_its_sweep(sharers, monkeypatch):
    monkeypatch.setattr(model, "_cores", lambda: 6)
    monkeypatch.setattr(model, "_meminfo", lambda: 12 * 2**30)
    samples = {"float64": _samples(1e12)}
    exact = {"float64": [(96, 48, 32, 2.0 * 96 * 48 * 32 / 0.5e12)]}
    desc = model._describe_measured(None, False, samples, 30.0 * sharers, sharers, None, 4, exact)
    curve = model.fit_gemm_curve(samples["float64"], "float64", 30.0, 4.0)  # each rank's share of the copy rate
    assert curve.tflops == pytest.approx(1.0, rel=0.01)  # the curve the samples were made on
    for gbps, passes in ((30.0, 2.0), (90.0, 4.0)):  # the passes and the share of the copy rate matter here
        assert model.fit_gemm_curve(samples["float64"], "float64", gbps, passes).tflops < 0.9
    assert desc.name == "measured-cpu" and desc.device == "cpu"
    assert desc.description == f"measured by `model measure` at 4 rank(s), {sharers} per device"
    assert desc.source == "GEMM sweep here; links from defaults"
    assert desc.gemm["float64"].tflops == pytest.approx(curve.tflops * sharers)
    assert desc.gemm["float64"].half_k == curve.half_k and desc.gemm["float64"].unaligned == 1.0
    (m, n, w, share), = desc.gemm["float64"].shapes
    assert (m, n, w) == (96, 48, 32) and share == pytest.approx(0.5 / curve.tflops)
    assert desc.memory_gbps == 30.0 * sharers and desc.accumulate_passes == 4.0
    assert desc.shared_device_efficiency == (1.0 if sharers > 1 else 0.85)
    assert (desc.devices_per_node, desc.nics_per_node, desc.hosts, desc.cuda_aware) == (6, 1, 1, True)
    assert desc.memory_gib == 12


def test_a_gpu_description_keeps_its_bases_links_and_odd_shape_penalty():
    base = builtin("h200x2")
    desc = model._describe_measured(base, True, {"float64": _samples(50e12, 3000.0, 2.0)}, 3000.0, 1, None, 2)
    assert desc.name == "measured-gpu" and desc.accumulate_passes == 2.0
    assert desc.source == "GEMM sweep here; links from h200x2"
    assert desc.gemm["float64"].unaligned == base.gemm["float64"].unaligned
    assert desc.gemm["float32"] == base.gemm["float32"]
    assert (desc.devices_per_node, desc.hosts, desc.memory_gib, desc.cuda_aware) == \
        (base.devices_per_node, base.hosts, base.memory_gib, base.cuda_aware)
    assert desc.shared_device_efficiency == base.shared_device_efficiency


@pytest.mark.parametrize("argv", [
    ["predict", "--m", "2000", "--n", "2000", "--k", "8388608", "--algo", "2.5d", "--panel", "64"],  # 8 layers
    ["predict", "--machine", "h200x8-ndr", "--ranks", "16", "--m", "10000", "--n", "10000", "--k", "10000000"],
    ["predict", "--m", "64", "--n", "64", "--k", "40000", "--ranks", "4096", "--grid", "64x64"],
])
def test_what_fits_the_models_bound_is_taken(argv):
    """The other side of the refusals above: the layers, the hosts' GPUs and the grid count."""
    model.check_options(cli.parse(["model", *argv]))


def test_check_loads_each_description_it_names():
    with pytest.raises(InputError, match="--machine=/nonexistent/m.json"):
        model.check_options(cli.parse(["model", "check", "--machine", "/nonexistent/m.json"]))


def test_without_a_communicator_it_prints_as_rank_0(capsys):
    assert model.model_main(cli.parse(["model", "show"])) == 0
    assert capsys.readouterr().out == builtin("h200x2").to_json() + "\n"


def test_links_names_both_options_it_needs(tmp_path):
    with pytest.raises(InputError, match=r"^model links: --transport FILE\.h5 and --save FILE\.json are required$"):
        model.model_main(cli.parse(["model", "links", "--save", str(tmp_path / "m.json")]), MPI.COMM_SELF)


def test_a_cpu_description_is_of_its_cores_whatever_it_starts_from(monkeypatch):
    """From a GPU cluster's description, a CPU sweep describes one host of cores with one NIC; where the
    host's memory cannot be read, 8 GiB."""
    monkeypatch.setattr(model, "_cores", lambda: 2)
    monkeypatch.setattr(model, "_meminfo", lambda: None)
    base = builtin("h200x8-ndr")
    assert base.nics_per_node != 1 and base.hosts != 1
    desc = model._describe_measured(base, False, {"float64": _samples(1e12)}, 30.0, 1, None, 2)
    assert (desc.devices_per_node, desc.nics_per_node, desc.hosts, desc.memory_gib) == (2, 1, 1, 8.0)


def test_a_complex_blocks_share_counts_its_eight_flops():
    """``--shapes`` of complex128: the block's share of the curve's rate, a multiply-add being 8 flops."""
    samples = {"complex128": [(m, n, w, acc, 4 * t) for m, n, w, acc, t in _samples(1e12)]}
    exact = {"complex128": [(96, 48, 32, 8.0 * 96 * 48 * 32 / 0.5e12)]}
    desc = model._describe_measured(builtin("h200x2"), True, samples, 3000.0, 1, None, 2, exact)
    (_, _, _, share), = desc.gemm["complex128"].shapes
    assert share == pytest.approx(0.5 / desc.gemm["complex128"].tflops)


def test_a_cpu_takes_host_buffers_whatever_its_base_says(monkeypatch):
    """A CPU rank's MPI always takes its (host) buffers: cuda_aware, even from a base that says no."""
    monkeypatch.setattr(model, "_meminfo", lambda: 4 * 2**30)
    base = builtin("h200x2")
    assert base.cuda_aware is False
    assert model._describe_measured(base, False, {"float64": _samples(1e12)}, 30.0, 1, None, 2).cuda_aware is True
