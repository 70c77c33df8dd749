"""Worker functions that tests and benches spawn (real processes over gloo); nothing in the lab imports them."""
