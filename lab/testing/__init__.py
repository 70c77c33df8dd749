"""Worker functions that tests and benches spawn (real processes over gloo), and the topologies at the
size caps they measure pages with (:mod:`.caps`); nothing in the lab imports them."""
