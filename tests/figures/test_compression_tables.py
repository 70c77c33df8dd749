"""The Compression page's tables, built from the study's rows."""
from lab.figures import compression as figs


def test_tables_carry_their_units_and_every_row():
    rows = [{"label": "Top-K", "ratio": 0.01, "kept": 10, "density": 0.01, "rel_error": 0.5, "bytes": 104,
             "wire_format": "fp32 + int32", "t_compress": 0.002}]
    t = figs.compressor_table(rows)
    assert t == [{"compressor": "Top-K", "ratio": 0.01, "kept (entries)": 10, "density (%)": 1.0,
                  "relative error (%)": 50.0, "bytes (B)": 104, "wire format": "fp32 + int32",
                  "time": figs.fmt_seconds(0.002)}]
    a = {"shape": (3, 4), "square": False, "asymmetry": 0.1, "symmetric": False, "min_eigenvalue": -1.0,
         "positive_definite": False}
    assert figs.cholesky_applicability_table(a)[0]["shape"] == "3×4"
    m = [{"method": "L", "values": 6, "bytes": 24, "t_pack": 1e-3, "t_unpack": 2e-3, "rel_error": 0.0}]
    assert figs.cholesky_table(m)[0]["bytes (B)"] == 24 and figs.cholesky_table(m)[0]["unpack"] == figs.fmt_seconds(2e-3)
