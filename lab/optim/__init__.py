"""The optimisers: functional updates, the Optimizer classes, and the 2-D playground."""
