"""The heterogeneous distributed training lab: the library behind the Streamlit pages.

Nothing in this package imports streamlit, so it works the same from a notebook, the CLI
and the tests.
"""

__all__ = ["LabError"]

from lab.errors import LabError
