"""A settings form of the Scenario, as data: which fields of a section's field table
(:data:`lab.scenario.document.TRAINING_FIELDS`, ``COMPRESSION_FIELDS``) a page shows, in which rows, under which
widget keys, and when a field is drawn or greyed out. ``ui.settings_form`` draws it; each field's label, bounds,
choices, help and whether lesson mode hides it are its :class:`lab.scenario.document.Setting`'s, so a field is
named once, here, and the new section is the old one with the form's values."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from lab.scenario.document import Setting

Values = Mapping[str, Any]  # the form's values so far, by field name


@dataclass(frozen=True)
class Field:
    """One field of a form: its name in the section's table and its widget's key; ``when``, a test of the values
    above it, says whether it is drawn at all (else it keeps the section's value and leaves no gap), ``disabled``
    whether it is greyed out; ``names`` are its choices' labels where the page says them its own way (else its
    Setting's)."""

    name: str
    key: str
    when: Callable[[Values], bool] | None = None
    disabled: Callable[[Values], bool] | None = None
    names: Mapping[Any, str] | None = None

    def drawn(self, values: Values) -> bool:
        return self.when is None or bool(self.when(values))

    def greyed(self, values: Values) -> bool:
        return self.disabled is not None and bool(self.disabled(values))


@dataclass(frozen=True)
class Row:
    """Fields side by side in columns of these relative ``widths`` (one equal column per field by default), aligned
    at the top or the bottom (a box beside a select box with a label). The fields drawn fill the columns in order,
    so fields that are never drawn together (``when``) can share columns; a field lesson mode hides leaves its
    column empty, and a row whose fields are all hidden is not drawn."""

    fields: tuple[Field, ...]
    widths: tuple[int, ...] = ()
    align: str = "top"

    def columns(self) -> list[int]:
        return list(self.widths or [1] * len(self.fields))


@dataclass(frozen=True)
class SettingsForm:
    """A section's form: its field table and its rows, drawn in order."""

    table: Mapping[str, Setting]
    rows: tuple[Row, ...]

    def __post_init__(self) -> None:
        names = self.names()
        if len(names) != len(set(names)) or not set(names) <= set(self.table):
            raise ValueError(f"a form names each field of its table once: {names}")

    def names(self) -> list[str]:
        return [f.name for row in self.rows for f in row.fields]

    def setting(self, field: Field) -> Setting:
        return self.table[field.name]


__all__ = ["Field", "Row", "SettingsForm", "Values"]
