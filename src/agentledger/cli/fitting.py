"""Fitting columns to a terminal's width: numbers keep theirs, text gives way, then columns are left out
and named. Shared by the query tables and ``watch``, so a number is shown whole or not at all in both."""

from __future__ import annotations

from dataclasses import dataclass

# The narrowest a text column is squeezed to (with an ellipsis) before columns are left out whole.
TEXT_FLOOR = 10
# The narrowest the first column, when it wraps, gives way to before a number's column is left out: at 5
# a session key is still legible as a few lines.
WRAP_FLOOR = 5


@dataclass(frozen=True)
class Fit:
    kept: list[int]  # the columns shown, by index
    widths: list[int]  # of each kept column
    boxed: bool  # with borders
    gap: int  # between columns without borders
    over: int  # how far the lines still run past the width (the first column left with too little)

    def left_out(self, headers: list[str]) -> list[str]:
        """Of the columns ``headers`` name, those not shown."""
        return [header for i, header in enumerate(headers) if i not in self.kept]


def fit(natural: list[int], numbers: list[bool], width: int, *, boxable: bool, first_floor: int) -> Fit:
    """Columns that want ``natural`` widths within ``width``. Text squeezed too narrow, the borders go;
    still too wide, text columns other than the first are left out from the right; then the first narrows
    to ``first_floor``, the columns close up to a space apart, and numbers' columns are left out from the
    right."""
    kept = list(range(len(natural)))
    gap = 2

    def room(boxed: bool) -> int:
        """What the kept text columns have between the borders and the numbers."""
        borders = 3 * len(kept) + 1 if boxed else gap * (len(kept) - 1)
        return width - borders - sum(natural[i] for i in kept if numbers[i])

    def fits(boxed: bool, floor: int = TEXT_FLOOR) -> bool:
        floors = (min(natural[i], floor if i == 0 else TEXT_FLOOR) for i in kept if not numbers[i])
        return sum(floors) <= room(boxed)

    def leave_out(numeric: bool, floor: int) -> None:
        droppable = [i for i in kept[1:] if numbers[i] == numeric]
        while not fits(False, floor) and droppable:
            kept.remove(droppable.pop())

    boxed = boxable and fits(True)
    if not boxed:
        leave_out(False, TEXT_FLOOR)
        if not fits(False, first_floor):
            gap = 1  # numbers are right-aligned under their headers: a space still tells them apart
        leave_out(True, first_floor)
    text = iter(_share([natural[i] for i in kept if not numbers[i]], room(boxed)))
    widths = [natural[i] if numbers[i] else next(text) for i in kept]
    return Fit(kept, widths, boxed, gap, max(0, sum(w for i, w in zip(kept, widths) if not numbers[i]) - room(boxed)))


def _share(wanted: list[int], room: int) -> list[int]:
    """Widths for columns that want ``wanted`` within ``room``: the widest are cut to one level, as
    high as fits, so a short column keeps all of its text; what is left over goes to the first."""
    level = max(wanted, default=0)
    while level > 1 and sum(min(w, level) for w in wanted) > room:
        level -= 1
    widths = [min(w, level) for w in wanted]
    if widths and widths[0] < wanted[0]:
        widths[0] += max(0, room - sum(widths))
    return widths


def too_narrow(headers: list[str], elsewhere: str) -> str:
    """The line under a table that left out the columns ``headers``, saying where they are shown."""
    return f"(too narrow for {', '.join(headers)}: {elsewhere} shows them)"
