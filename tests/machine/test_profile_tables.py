"""The Fidelity page's tables of what a calibration measured, from a made-up profile with round numbers."""
from lab.machine.calibrate import synthetic_profile
from lab.machine.fidelity import profile_tables


def test_every_fit_of_the_profile_is_one_row_in_its_units():
    prof = synthetic_profile()
    t = profile_tables(prof)
    assert len(t["classes"]) == sum(len(prof.compute_fit(p).classes) for p in prof.procs)
    n_fits = sum(len(v) for v in prof.allreduce.values()) + sum(len(v) for v in prof.sharing.values())
    assert len(t["comm"]) == n_fits
    ring = next(r for r in t["comm"] if r["collective"] == "ring")
    fit = prof.allreduce[ring["processes"]]["ring"]
    assert ring["α or per hop (µs)"] == fit.alpha * 1e6 and ring["β or per byte (ns/B)"] == fit.beta * 1e9
    assert [r["processes"] for r in t["step_terms"]][:len(prof.procs)] == [str(p) for p in prof.procs]
    assert len(t["step_terms"]) == len(prof.procs) + len(prof.wait_slowdown)
