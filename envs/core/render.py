"""The state of a grid setting as cells, and dependency-free raster helpers for ``rgb_array``.

A grid setting describes its current state once, as a :class:`CellGrid`: rows of :class:`Cell`
(a background colour name, optionally an inner square marker, a disc and a glyph) and, for
Sudoku, the shape of the boxes whose borders are drawn bold. Everything that shows the state is
drawn from that description: ``render_mode="rgb_array"`` (:func:`draw_cell_grid`, an ``(H, W, 3)``
uint8 image with a built-in 3x5 bitmap font for digits and a few letters) and the episode viewer
of :mod:`adapters.evaluation.viewer` (an HTML grid, :meth:`CellGrid.to_dict`), so the two cannot
disagree. The colour names are the keys of :data:`COLORS`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["COLORS", "CellGrid", "Cell", "draw_cell_grid", "draw_grid"]

COLORS = {
    "floor": (235, 235, 225),
    "wall": (70, 70, 80),
    "goal": (120, 200, 120),
    "box": (190, 130, 60),
    "box_on_goal": (90, 160, 60),
    "player": (60, 110, 220),
    "start": (150, 180, 240),
    "path": (250, 220, 120),
    "given": (40, 40, 40),
    "filled": (30, 90, 200),
    "line": (120, 120, 120),
    "bold_line": (20, 20, 20),
    "white": (255, 255, 255),
    "error": (220, 80, 80),
}

# 3x5 bitmap glyphs, rows top to bottom, '#' = ink.
_FONT = {
    "0": ["###", "#.#", "#.#", "#.#", "###"],
    "1": [".#.", "##.", ".#.", ".#.", "###"],
    "2": ["###", "..#", "###", "#..", "###"],
    "3": ["###", "..#", "###", "..#", "###"],
    "4": ["#.#", "#.#", "###", "..#", "..#"],
    "5": ["###", "#..", "###", "..#", "###"],
    "6": ["###", "#..", "###", "#.#", "###"],
    "7": ["###", "..#", "..#", "..#", "..#"],
    "8": ["###", "#.#", "###", "#.#", "###"],
    "9": ["###", "#.#", "###", "..#", "###"],
    "S": ["###", "#..", "###", "..#", "###"],
    "G": ["###", "#..", "#.#", "#.#", "###"],
}


@dataclass(frozen=True)
class Cell:
    background: str = "floor"
    marker: str | None = None  # colour name of an inner square
    disc: str | None = None  # colour name of an inner disc
    glyph: str | None = None  # one character of _FONT
    glyph_color: str = "given"


def _draw_glyph(
    img: np.ndarray, y0: int, x0: int, size: int, ch: str, color: tuple[int, int, int]
) -> None:
    rows = _FONT.get(ch)
    if rows is None:
        return
    scale = max(1, size // 7)
    gh, gw = 5 * scale, 3 * scale
    oy, ox = y0 + (size - gh) // 2, x0 + (size - gw) // 2
    for r, row in enumerate(rows):
        for c, bit in enumerate(row):
            if bit == "#":
                img[
                    oy + r * scale : oy + (r + 1) * scale, ox + c * scale : ox + (c + 1) * scale
                ] = color


@dataclass(frozen=True)
class CellGrid:
    """A grid setting's state: ``cells`` row by row; ``boxes`` = ``(rows, cols)`` of the
    sub-grids whose borders are bold (Sudoku), or ``None``.

    >>> g = CellGrid(((Cell("wall"), Cell("floor", disc="player")),))
    >>> g.to_dict()["cells"]
    [[{'background': 'wall'}, {'background': 'floor', 'disc': 'player'}]]
    >>> draw_cell_grid(g, cell_px=8).shape
    (9, 17, 3)
    """

    cells: tuple[tuple[Cell, ...], ...]
    boxes: tuple[int, int] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.cells), len(self.cells[0]) if self.cells else 0

    def to_dict(self) -> dict[str, Any]:
        """JSON: ``{"cells": [[{field: value, ...}, ...], ...], "boxes": [r, c] | None}`` with
        only the fields of a cell that are set (``glyph_color`` only with a glyph)."""
        rows = []
        for row in self.cells:
            out = []
            for cell in row:
                d: dict[str, Any] = {"background": cell.background}
                for key in ("marker", "disc", "glyph"):
                    if getattr(cell, key):
                        d[key] = getattr(cell, key)
                if cell.glyph:
                    d["glyph_color"] = cell.glyph_color
                out.append(d)
            rows.append(out)
        return {"cells": rows, "boxes": list(self.boxes) if self.boxes else None}


def draw_cell_grid(grid: CellGrid, cell_px: int = 32) -> np.ndarray:
    """Render a :class:`CellGrid` to an RGB ``uint8`` image; box borders are 3 pixels wide."""
    img = draw_grid(grid.cells, cell_px=cell_px)
    if grid.boxes:
        h, w = grid.shape
        br, bc = grid.boxes
        bold = COLORS["bold_line"]
        for k in range(0, h + 1, br):
            img[max(0, k * cell_px - 1) : k * cell_px + 2, :] = bold
        for k in range(0, w + 1, bc):
            img[:, max(0, k * cell_px - 1) : k * cell_px + 2] = bold
    return img


def draw_grid(cells: Sequence[Sequence[Cell]], cell_px: int = 32) -> np.ndarray:
    """Render ``cells`` (rows of :class:`Cell`) to an RGB ``uint8`` image."""
    h, w = len(cells), len(cells[0]) if cells else 0
    img = np.empty((h * cell_px + 1, w * cell_px + 1, 3), dtype=np.uint8)
    img[:] = COLORS["line"]
    yy, xx = np.mgrid[0:cell_px, 0:cell_px]
    centre = (cell_px - 1) / 2
    disc_mask = (yy - centre) ** 2 + (xx - centre) ** 2 <= (cell_px * 0.32) ** 2
    for r, row in enumerate(cells):
        for c, cell in enumerate(row):
            y0, x0 = r * cell_px + 1, c * cell_px + 1
            block = img[y0 : y0 + cell_px - 1, x0 : x0 + cell_px - 1]
            block[:] = COLORS[cell.background]
            if cell.marker:
                m = cell_px // 4
                img[y0 + m : y0 + cell_px - 1 - m, x0 + m : x0 + cell_px - 1 - m] = COLORS[
                    cell.marker
                ]
            if cell.disc:
                sub = img[y0 : y0 + cell_px - 1, x0 : x0 + cell_px - 1]
                sub[disc_mask[: cell_px - 1, : cell_px - 1]] = COLORS[cell.disc]
            if cell.glyph:
                _draw_glyph(img, y0, x0, cell_px - 1, cell.glyph, COLORS[cell.glyph_color])
    return img
