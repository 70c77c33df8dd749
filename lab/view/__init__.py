"""What the pages share that is not a figure: the table of view state and its link form, and the lessons."""
