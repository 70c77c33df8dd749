"""The lab's one error family.

Every problem with what a person supplied (a scenario file, a table edit, a hyper-parameter)
is raised as a :class:`LabError`. Its message is written to be shown in a page as it is: what
was wrong, where, and what is allowed.
"""

#: A message longer than this is cut (with "…"): whatever a message quotes, a page or a terminal
#: shows a few lines, never a file's worth.
MAX_MESSAGE = 500


class LabError(ValueError):
    """A problem with user input or settings; the message is fit to show to the user."""

    def __init__(self, message: str, *, where: str | None = None):
        self.where = where
        text = f"{where}: {message}" if where else str(message)
        if len(text) > MAX_MESSAGE:
            text = text[:MAX_MESSAGE - 1] + "…"
        super().__init__(text)


def first_line(text: str, limit: int = 300) -> str:
    """The first line of an error's text, its spaces collapsed and cut at ``limit``: a library's message runs on
    with its own traces and links, and its first line says what went wrong."""
    line = next((ln for ln in str(text).splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"
