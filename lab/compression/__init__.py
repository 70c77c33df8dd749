"""Gradient compression: payloads, compressors, error feedback, and the Cholesky study. Nothing here talks to other processes."""
