"""The calibrated machine model: profile, measurement, fit, prediction, fidelity and trace export."""
