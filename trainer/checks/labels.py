"""Checks of YOLO label files, one text at a time (pure: no file system, no PIL).

A row is ``class cx cy w h``, a box normalised to [0, 1]: the only row our trainer reads
(``trainer.datasets.loader.read_labels``), so polygon rows are reported as a wrong field count.
Every problem is returned with its kind, the line
number and the offending text, so that the doctor can count and quote them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

#: Coordinates may overshoot [0, 1] by float rounding this much.
EPS = 1e-6

#: Problem kinds a label row can have, in the order they are checked.
ROW_KINDS = ("field_count", "not_a_number", "class_id", "bad_size", "out_of_range")


@dataclass(frozen=True)
class RowProblem:
    """One bad row: its kind (one of ``ROW_KINDS``), 1-based line number and detail."""

    kind: str
    line: int
    detail: str


@dataclass
class LabelCheck:
    """The result of checking one label file: the class id of every good row and the
    problems of the bad ones."""

    classes: list[int] = field(default_factory=list)
    problems: list[RowProblem] = field(default_factory=list)


def _number(token: str) -> float | None:
    try:
        value = float(token)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def check_row(tokens: list[str], line: int, nc: int) -> tuple[int | None, RowProblem | None]:
    """Check one split row; return its class id when good, else the first problem."""
    n = len(tokens)
    if n != 5:
        return None, RowProblem("field_count", line, f"{n} fields; expected 5 (class cx cy w h)")
    values = [_number(t) for t in tokens]
    bad = [t for t, v in zip(tokens, values) if v is None]
    if bad:
        return None, RowProblem("not_a_number", line, f"not a number: {bad[0][:20]!r}")
    cls = values[0]
    assert cls is not None
    if cls != int(cls) or not 0 <= cls < nc:
        return None, RowProblem("class_id", line, f"class {tokens[0]} not in 0..{nc - 1}")
    coords = [v for v in values[1:] if v is not None]
    if coords[2] <= 0 or coords[3] <= 0:
        return None, RowProblem("bad_size", line, f"size {coords[2]:g}x{coords[3]:g} not positive")
    outside = [v for v in coords if v < -EPS or v > 1 + EPS]
    if outside:
        return None, RowProblem("out_of_range", line, f"coordinate {outside[0]:g} outside [0, 1]")
    return int(cls), None


def check_label_text(text: str, nc: int) -> LabelCheck:
    """Check every non-blank row of a label file's text against ``nc`` classes."""
    result = LabelCheck()
    for number, raw in enumerate(text.splitlines(), start=1):
        tokens = raw.split()
        if not tokens:
            continue
        cls, problem = check_row(tokens, number, nc)
        if problem is not None:
            result.problems.append(problem)
        elif cls is not None:
            result.classes.append(cls)
    return result
