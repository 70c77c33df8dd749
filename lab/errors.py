"""The lab's one error family.

Every problem with what a person supplied (a scenario file, a table edit, a hyper-parameter)
is raised as a :class:`LabError`. Its message is written to be shown in a page as it is: what
was wrong, where, and what is allowed.
"""


class LabError(ValueError):
    """A problem with user input or settings; the message is fit to show to the user."""

    def __init__(self, message: str, *, where: str | None = None):
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)
