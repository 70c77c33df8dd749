"""lab.view.allreduce: the All-reduce page's model, computed from the controls' values (the alpha-beta model on
the scenario's topology), its tables checked against the schedule and timing they come from, and the
measurement's sections from measured rows (no processes)."""

import pandas as pd
import pytest

from lab.comm.measure import fit_rows
from lab.errors import LabError
from lab.modelled import collectives
from lab.processes import LOADED_SHARE
from lab.scenario.catalogue import preset
from lab.scenario.units import fmt_rate, fmt_seconds
from lab.view import allreduce as view
from lab.view.state import ALLREDUCE_SIZES, VIEW
from tests.view.sections import by_key, figure_json

KEYS = ("ar_source", "ar_devices", "ar_n", "ar_bw", "ar_lat", "ar_alg", "ar_size", "ar_order")
CXL = preset("cxl")
DEFAULTS = {k: VIEW[k].setting.default for k in KEYS} | {"ar_devices": tuple(collectives.default_participants(CXL))}


def model(topo=CXL, **v):
    return view.prepare(DEFAULTS | v, topo)


def frame(section) -> pd.DataFrame:
    return pd.DataFrame(section.table)


def test_the_default_is_the_cxl_ring_with_modelled_numbers():
    m = model()
    assert m.names == ("gpu", "fpga", "asic", "dpu")
    est = collectives.schedule_time(collectives.build_schedule("ring", list(m.names), 4 << 20), CXL)
    s = by_key(view.timing(m))
    assert list(s) == ["ar_time", "ar_slowest", "ar_formula", "ar_step_times", "ar_compare", "ar_vs_size", "ar_vs_n",
                       "ar_sweeps", "ar_uniform"]
    assert {label: value for label, value, *_ in s["ar_time"].metrics} == {
        "Modelled time": fmt_seconds(est.seconds), "algbw": fmt_rate(est.algbw), "busbw": fmt_rate(est.busbw)}
    assert [about for _, _, *about in s["ar_time"].metrics][1:] == [[view.model.ALGBW_HELP], [view.model.BUSBW_HELP]]
    assert s["ar_slowest"].intro.startswith("**Slowest link: {link}**") and s["ar_slowest"].values["link"]
    assert "busbw" in s["ar_formula"].text and s["ar_formula"].text.startswith("$$")
    assert all(x.kind == "modelled" for k, x in s.items() if k != "ar_time" and k != "ar_slowest")
    algs = frame(s["ar_compare"])
    assert len(algs) == 4 and algs["time (µs)"].iloc[0] == pytest.approx(est.seconds * 1e6)
    assert (s["ar_vs_size"].side, s["ar_vs_n"].side) == ("left", "right")
    assert "log" == figure_json(s["ar_uniform"])["layout"]["xaxis"]["type"]
    bytes_table = frame(view.bytes_moved(m))
    assert list(bytes_table["sent / S"]) == pytest.approx([1.5] * 4)  # 2(N-1)/N of the buffer
    ring = view.ring(m, "BADGE")
    assert ring.intro.startswith("BADGE Ring: {ring}") and ring.values["ring"] == "gpu → fpga → asic → dpu → gpu"


def test_lesson_mode_leaves_out_the_advanced_tables_and_the_trigger():
    m = model()
    lesson = [x.key for x in view.timing(m, lesson=True)]
    assert "ar_step_times" not in lesson and "ar_uniform" not in lesson and "ar_compare" in lesson
    assert view.trigger_head(lesson=True) == [] and view.trigger(m, None, lesson=True) == []
    assert [x.header for x in view.trigger_head()] == ["Synchronous or asynchronous trigger"]
    advanced = {k for k, c in VIEW.items() if c.page == "allreduce" and c.advanced}
    assert advanced == {"ar_bw", "ar_lat", "ar_work", "ar_compute", "ar_top", "ar_iters"}


def test_stepping_shows_the_transfers_of_that_step():
    m = model()
    assert [x.key for x in view.step_through(m, 0)] == ["ar_steps"]
    fig, transfers = view.step_through(m, 1)
    assert fig.kind == "modelled" and "▶ plays it" in fig.caption and figure_json(fig)["data"]
    tr = frame(transfers)
    assert list(tr["from"]) == ["gpu", "fpga", "asic", "dpu"]
    assert list(tr["to"]) == ["fpga", "asic", "dpu", "gpu"]
    assert list(tr["content sent"]) == ["a0", "b1", "c2", "d3"]
    assert set(tr["operation"]) == {"add"}


def test_the_step_is_kept_within_the_schedule_and_play_starts_again_at_the_end():
    m = model()
    assert view.step_fixes(m, 3, False) == []
    assert view.step_fixes(m, 999, False) == [("ar_step", m.steps, f"This schedule has {m.steps} steps, so the "
                                                                    f"step is now {m.steps}.")]
    assert view.step_fixes(m, m.steps, True) == [("ar_step", 0, None)]
    assert view.next_step(m, None) == 1 and view.next_step(m, m.steps) is None


def test_previous_and_next_move_a_step_and_are_disabled_at_either_end():
    m = model()
    assert [(key, to, off) for _, key, _, to, off in view.step_buttons(m, 0)] == [("ar_prev", 0, True),
                                                                                 ("ar_next", 1, False)]
    assert [(to, off) for *_, to, off in view.step_buttons(m, 2)] == [(1, False), (3, False)]
    assert [(to, off) for *_, to, off in view.step_buttons(m, m.steps)] == [(m.steps - 1, False), (m.steps, True)]
    assert view.moved_step(m, 0, -1) is None and view.moved_step(m, m.steps - 1, 1) == m.steps


@pytest.mark.parametrize("algorithm", ["host", "tree", "hierarchical"])
def test_every_algorithm_and_the_lab_ring_order(algorithm):
    m = model(ar_alg=algorithm, ar_order="lab")
    tr = frame(view.step_through(m, 1)[1])
    if algorithm == "host":
        assert set(tr["to"]) == {"host"} and len(tr) == 4
    assert len(frame(by_key(view.timing(m))["ar_step_times"])) >= 2


def test_identical_devices():
    m = model(ar_source="identical", ar_n=7)
    star = collectives.uniform_star(7, 25e9, 1e-6)
    est = collectives.schedule_time(collectives.build_schedule("ring", collectives.default_names(7), 4 << 20), star)
    assert by_key(view.timing(m))["ar_time"].metrics[0] == ("Modelled time", fmt_seconds(est.seconds))
    assert len(view.bytes_moved(m).table) == 7
    table = view.compute(m, 1.0)
    idle = frame(by_key(view.trigger(m, table))["ar_trigger"])
    assert len(idle) == 7 and "sync: idle (ms)" in idle.columns


def test_too_few_devices_is_a_clear_message():
    with pytest.raises(LabError, match="at least two devices"):
        model(ar_devices=("gpu",))


def test_a_changed_topology_keeps_the_devices_that_still_exist_with_a_notice():
    edge = preset("edge")
    assert view.participant_fixes(CXL, ("gpu", "fpga")) == []
    assert view.participant_fixes(edge, None) == [("ar_devices", tuple(collectives.default_participants(edge)), None)]
    (key, value, notice), = view.participant_fixes(edge, ("gpu", "fpga"))
    assert value == tuple(collectives.default_participants(edge)) and notice.startswith("The topology changed")


def test_two_pools_scenario_names_the_fabric_and_the_groups():
    topo = preset("two-pools")
    m = model(topo, ar_alg="hierarchical", ar_devices=tuple(collectives.default_participants(topo)))
    ring = view.ring(m, "B")
    assert "brute force over all 5040 rings" in ring.intro
    assert "p0-gpu, p0-fpga, p0-asic, p0-dpu; p1-gpu" in ring.values["groups"]
    s = by_key(view.timing(m))
    link = s["ar_slowest"].values["link"]
    assert "p0-cxl→fabric" in link or "p1-cxl→fabric" in link  # the slowest link is the fabric port
    assert list(frame(s["ar_step_times"])["phase"])[:2] == ["reduce inside groups"] * 2


# ---- the tables -----------------------------------------------------------------------------------

def test_bytes_table_sums_what_the_schedule_sends_and_a_ring_sends_its_share():
    names = CXL.device_names[:4]
    nbytes = 4 << 20
    sched = collectives.build_schedule("ring", len(names), nbytes)
    t = pd.DataFrame(view.bytes_table(sched, nbytes))
    assert list(t["sent (B)"]) == list(sched.sent_bytes()) and list(t["received (B)"]) == list(sched.received_bytes())
    assert t["sent / S"].tolist() == pytest.approx([2 * (len(names) - 1) / len(names)] * len(names), rel=1e-6)
    assert "1.5 × S" in view.ring_bytes_sentence(4)


def test_each_steps_messages_and_what_the_receiver_does():
    sched = collectives.build_schedule("ring", 4, 1 << 20)
    for step in (1, len(sched.steps)):
        t = pd.DataFrame(view.transfers_table(sched, step))
        assert len(t) == len(sched.steps[step - 1].transfers)
        assert set(t["operation"]) <= {"add", "copy"}
        assert t["bytes (B)"].sum() == sum(x.nbytes for x in sched.steps[step - 1].transfers)
    assert {r["operation"] for r in view.transfers_table(sched, 1)} == {"add"}  # reduce-scatter first
    assert {r["operation"] for r in view.transfers_table(sched, len(sched.steps))} == {"copy"}  # all-gather last


def test_the_compute_table_round_trips_milliseconds_to_seconds():
    comp = {"a": 0.0015, "b": 0.25}
    t = view.compute_table(["a", "b"], comp)
    assert t["compute (ms)"].tolist() == pytest.approx([1.5, 250.0])
    assert view.compute_from_table(t) == pytest.approx(comp)


# ---- the measurement ------------------------------------------------------------------------------

def rows_of(times: dict, load=None, procs=2) -> list[dict]:
    """Measured rows as lab.comm.measure gives them: impl -> {size: seconds}."""
    return [{"procs": procs, "size": size, "count": size // 4, "impl": impl, "time": t, "time_min": t, "time_max": t,
             "iters": 3, "algbw": size / t, "busbw": size / t, "correct": True, "source": "measured", "load": load}
            for impl, by_size in times.items() for size, t in by_size.items()]


SIZES = (4096, 16384, 65536)
GOOD = {impl: {s: 50e-6 + s * 1e-9 for s in SIZES} for impl in ("ring", "gloo")}


def test_the_measured_sections_show_each_fit_in_numbers(monkeypatch):
    monkeypatch.setattr("lab.view.allreduce.measurement.load_profile", lambda: None)
    s = by_key(view.measured(rows_of(GOOD)))
    assert list(s) == ["ar_measured", "ar_measured_times", "ar_fits"] and all(x.kind == "measured" for x in s.values())
    assert not s["ar_measured"].notices and not s["ar_fits"].notices
    assert "**ring**: α = " in s["ar_fits"].intro and "geometric-mean error" in s["ar_fits"].intro
    assert "geometric-mean error" in s["ar_fits"].caption
    table = frame(s["ar_measured_times"])
    assert list(table["size (B)"]) == [4096, 16384, 65536] * 2 and table["modelled time (µs)"].notna().all()
    names = [t["name"] for t in figure_json(s["ar_measured"])["data"]]
    assert names[0] == "ring: measured" and names[1].startswith("ring: model (α=")


def test_a_fit_that_cannot_be_right_and_a_measurement_under_load_are_notices_not_numbers(monkeypatch):
    """Times that do not grow with the size (what a busy machine gave: α = 2,390 µs, β = 0) fit no bandwidth:
    the fit is a notice saying why, not "bandwidth ≈ ∞"; and the load the measurement ran under is a warning,
    the one every measured run carries."""
    monkeypatch.setattr("lab.view.allreduce.measurement.load_profile", lambda: None)
    busy = {"others_share": LOADED_SHARE + 0.25, "pressure": 0.3}
    flat = {"ring": {s: 2390e-6 * 2 for s in SIZES}, "gloo": GOOD["gloo"]}
    rows = rows_of(flat, busy)
    assert view.fit_problem(fit_rows(rows, "ring")).startswith(
        "the fitted cost per byte β came out as 0")
    s = by_key(view.measured(rows))
    (fit_notice,) = s["ar_fits"].notices
    assert fit_notice.level == "warning" and fit_notice.text.startswith("ring: no α-β model is shown, because the "
                                                                        "fitted cost per byte β came out as 0")
    assert "**ring**" not in s["ar_fits"].intro and "**gloo**: α = " in s["ar_fits"].intro
    assert "∞" not in s["ar_fits"].intro
    (load_notice,) = s["ar_measured"].notices
    assert load_notice.level == "warning" and load_notice.text.startswith("Measured under load: other work took 40 %")
    table = frame(s["ar_measured_times"])
    assert table[table["implementation"].str.startswith("lab ring")]["modelled time (µs)"].isna().all()
    names = [t["name"] for t in figure_json(s["ar_measured"])["data"]]
    assert "ring: measured" in names and not any(n.startswith("ring: model") for n in names)
    assert not view.measured(rows_of(GOOD, {"others_share": 0.01}))[0].notices  # a quiet machine: no warning


def test_the_saved_machine_profile_is_drawn_beside_the_measurement(monkeypatch):
    from lab.machine.profile import CommFit

    class Profile:
        created = "2026-01-02T03:04:05"
        measured_allreduce = {"2": {"gloo": CommFit(50e-6, 1e-9, 0.0), "ring": CommFit(50e-6, 1e-9, 0.0)}}

    monkeypatch.setattr("lab.view.allreduce.measurement.load_profile", lambda: Profile())
    fig = by_key(view.measured(rows_of(GOOD)))["ar_measured"]
    assert "machine profile" in fig.caption and "calibrated 2026-01-02T03:04" in fig.caption
    assert any("machine profile" in t["name"] for t in figure_json(fig)["data"])


def test_which_fits_cannot_be_right():
    from lab.modelled.collectives import AlphaBetaFit

    def fit(alpha, beta):
        return AlphaBetaFit(2, alpha, beta, SIZES, (1.0,) * 3, (1.0,) * 3)

    assert view.fit_problem(fit(50e-6, 1e-9)) is None
    assert "unlimited bandwidth" in view.fit_problem(fit(2390e-6, 0.0))  # "bandwidth ≈ ∞"
    assert "unlimited bandwidth" in view.fit_problem(fit(2390e-6, 1e-15))  # as good as 0: no bytes term to speak of
    assert "negative" in view.fit_problem(fit(50e-6, -1e-9))
    assert "finite" in view.fit_problem(fit(float("nan"), 1e-9))


def test_sessions_on_one_cluster_share_its_orders_and_sweeps_computed_once(monkeypatch):
    import threading

    from lab.memo import SharedCache
    from lab.scenario.topology import Topology
    from lab.testing.caps import cap_topology
    from lab.view.allreduce import model as allreduce_model

    monkeypatch.setattr(allreduce_model, "_ORDERS", SharedCache(32))
    monkeypatch.setattr(allreduce_model, "_SWEEPS", SharedCache(64))
    calls = {"best": 0, "sizes": 0, "n": 0}

    def counted(name, fn):
        def wrapped(*a, **kw):
            calls[name] += 1
            return fn(*a, **kw)
        return wrapped

    monkeypatch.setattr(collectives, "best_ring_order", counted("best", collectives.best_ring_order))
    monkeypatch.setattr(collectives, "sweep_sizes", counted("sizes", collectives.sweep_sizes))
    monkeypatch.setattr(collectives, "sweep_devices", counted("n", collectives.sweep_devices))
    big = cap_topology("star")
    names = tuple(collectives.default_participants(big))
    v = {k: VIEW[k].setting.default for k in VIEW if k.startswith("ar_")} | {"ar_devices": names}
    seen = []

    def session():  # each session holds its own copy of the topology, as a link gives it
        m = view.prepare(v, Topology.from_json(big.to_json()))
        seen.append(by_key(view.timing(m)))

    threads = [threading.Thread(target=session) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == {"best": 1, "sizes": 1, "n": 1}  # four sessions at once: one computation
    assert len(seen) == 4 and all(s["ar_vs_size"].chart_input == seen[0]["ar_vs_size"].chart_input for s in seen)
    # the same sweeps as computed afresh
    fresh = collectives.sweep_sizes(big, {"ring": ("ring", view.prepare(v, big).setup)}, list(ALLREDUCE_SIZES))
    assert seen[0]["ar_vs_size"].chart_input["series"]["ring"] == fresh["ring"]
    other = view.prepare(v | {"ar_size": 4 << 10}, big)  # another buffer size: its own sweep against N
    view.timing(other)
    assert calls["n"] == 2 and calls["best"] == 1
