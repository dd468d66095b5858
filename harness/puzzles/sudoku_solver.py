"""Sudoku grids of size 4 (boxes 2 x 2) or 9 (3 x 3): a solution counter and a generator of
puzzles with exactly one solution. A grid is a flat list, row by row, 0 for an empty cell."""

from __future__ import annotations

import math
import random
from functools import lru_cache

Cells = tuple[tuple[int, ...], ...]


@lru_cache(maxsize=4)
def geometry(n: int) -> tuple[Cells, Cells, Cells]:
    """(units, peers, units_of): the 3n units (rows, columns, boxes) as cell lists; for each
    cell the other cells that share a unit with it, and the indices of its three units."""
    side = math.isqrt(n)
    rows = [tuple(r * n + c for c in range(n)) for r in range(n)]
    cols = [tuple(r * n + c for r in range(n)) for c in range(n)]
    boxes = [
        tuple((band * side + r) * n + stack * side + c for r in range(side) for c in range(side))
        for band in range(side)
        for stack in range(side)
    ]
    units = tuple(rows + cols + boxes)
    peers = tuple(
        tuple(sorted({other for unit in units if cell in unit for other in unit} - {cell}))
        for cell in range(n * n)
    )
    units_of = tuple(
        tuple(index for index, unit in enumerate(units) if cell in unit) for cell in range(n * n)
    )
    return units, peers, units_of


def candidates(grid: list[int], cell: int, peers: tuple[tuple[int, ...], ...], n: int) -> int:
    """The values 1..n that no peer of `cell` holds, as a bit mask (bit v-1 for value v)."""
    used = 0
    for peer in peers[cell]:
        if grid[peer]:
            used |= 1 << (grid[peer] - 1)
    return ((1 << n) - 1) & ~used


def count_solutions(grid: list[int], n: int, limit: int = 2) -> int:
    """How many ways the empty cells can be filled (stops counting at `limit`). `grid` is
    restored before returning."""
    _, peers, _ = geometry(n)
    empty = [cell for cell, value in enumerate(grid) if value == 0]
    for cell, value in enumerate(grid):  # a clash among the givens: no solution at all
        if value and any(grid[peer] == value for peer in peers[cell]):
            return 0
    return _count(grid, empty, peers, n, limit)


def _count(grid: list[int], empty: list[int], peers: tuple, n: int, limit: int) -> int:
    if not empty:
        return 1
    # The most constrained empty cell first: a dead end shows up at once.
    best_cell, best_mask, best_count = -1, 0, n + 1
    for cell in empty:
        mask = candidates(grid, cell, peers, n)
        count = mask.bit_count()
        if count < best_count:
            best_cell, best_mask, best_count = cell, mask, count
            if count <= 1:
                break
    if best_count == 0:
        return 0
    rest = [cell for cell in empty if cell != best_cell]
    found = 0
    for value in range(1, n + 1):
        if best_mask & (1 << (value - 1)):
            grid[best_cell] = value
            found += _count(grid, rest, peers, n, limit - found)
            grid[best_cell] = 0
            if found >= limit:
                break
    return found


def random_full_grid(rng: random.Random, n: int) -> list[int]:
    """A complete valid grid, by backtracking over the cells in order with values shuffled."""
    _, peers, _ = geometry(n)
    grid = [0] * (n * n)

    def fill(cell: int) -> bool:
        if cell == n * n:
            return True
        mask = candidates(grid, cell, peers, n)
        values = [value for value in range(1, n + 1) if mask & (1 << (value - 1))]
        rng.shuffle(values)
        for value in values:
            grid[cell] = value
            if fill(cell + 1):
                return True
        grid[cell] = 0
        return False

    fill(0)
    return grid


def make_puzzle(rng: random.Random, n: int, blanks: int) -> tuple[list[int], list[int]] | None:
    """(clues, solution): a random solution with `blanks` cells emptied in a random order, each
    only while the puzzle keeps exactly one solution; None when no more cell can be emptied
    before `blanks` is reached."""
    solution = random_full_grid(rng, n)
    clues = list(solution)
    order = list(range(n * n))
    rng.shuffle(order)
    emptied = 0
    for cell in order:
        if emptied == blanks:
            break
        value, clues[cell] = clues[cell], 0
        if count_solutions(clues, n) == 1:
            emptied += 1
        else:
            clues[cell] = value
    return (clues, solution) if emptied == blanks else None
