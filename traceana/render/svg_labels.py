"""Where the roofline chart's labels go: each label takes the first free place around its circle
(Placer), roof lines are kept clear of labels (reserve_line), and the roof labels in the right margin
are spread at least a line apart (spread). Geometry only: no SVG is written here."""

from __future__ import annotations

import math

CHAR_W, LABEL_H = 6.0, 12.0  # estimated width of a character and height of a label at 11 px

Box = tuple[float, float, float, float]  # x0, y0, x1, y1


def overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


#: Circles are kept in square cells this wide, so a label looks only at the circles near it.
CELL = 48.0


def hits_circle(box: Box, cx: float, cy: float, r: float) -> bool:
    """The box and the circle share area (the point of the box nearest the centre is inside the circle)."""
    nx, ny = min(max(cx, box[0]), box[2]), min(max(cy, box[1]), box[3])
    return (nx - cx) ** 2 + (ny - cy) ** 2 < r * r


class Placer:
    """Labels placed one by one where they overlap nothing placed before (boxes in `taken`) and no circle
    (add_circle: every point of the chart, so no label covers a point), inside `area`."""

    def __init__(self, area: Box) -> None:
        self.area = area
        self.taken: list[Box] = []
        self._cells: dict[tuple[int, int], list[tuple[float, float, float]]] = {}

    def add_circle(self, cx: float, cy: float, r: float) -> None:
        for gx in range(int((cx - r) // CELL), int((cx + r) // CELL) + 1):
            for gy in range(int((cy - r) // CELL), int((cy + r) // CELL) + 1):
                self._cells.setdefault((gx, gy), []).append((cx, cy, r))

    def _circles(self, box: Box):
        seen = set()
        for gx in range(int(box[0] // CELL), int(box[2] // CELL) + 1):
            for gy in range(int(box[1] // CELL), int(box[3] // CELL) + 1):
                for c in self._cells.get((gx, gy), ()):
                    if c not in seen:
                        seen.add(c)
                        yield c

    def free(self, box: Box) -> bool:
        x0, y0, x1, y1 = self.area
        if box[0] < x0 or box[2] > x1 or box[1] < y0 or box[3] > y1:
            return False
        if any(overlaps(box, t) for t in self.taken):
            return False
        return not any(hits_circle(box, cx, cy, r) for cx, cy, r in self._circles(box))

    def place(self, cx: float, cy: float, r: float, width: float) -> tuple[float, float, str, Box, bool] | None:
        """(text x, baseline y, anchor, box, leader?) of a label for the circle at (cx, cy)."""
        h = LABEL_H
        for step, gap in enumerate((3.0, 16.0, 30.0, 46.0)):
            d = r + gap
            cands = [(cx + d, cy + 4, "start"), (cx - d, cy + 4, "end"), (cx, cy - d, "middle"),
                     (cx, cy + d + h - 2, "middle"), (cx + d * 0.75, cy - d * 0.75, "start"),
                     (cx + d * 0.75, cy + d * 0.75 + h - 2, "start"), (cx - d * 0.75, cy - d * 0.75, "end"),
                     (cx - d * 0.75, cy + d * 0.75 + h - 2, "end")]
            for tx, ty, anchor in cands:
                left = tx if anchor == "start" else tx - width if anchor == "end" else tx - width / 2
                box = (left - 1, ty - h + 2, left + width + 1, ty + 3)
                if self.free(box):
                    self.taken.append(box)
                    return tx, ty, anchor, box, step > 0
        return None


def reserve_line(placer: Placer, ax: float, ay: float, bx: float, by: float) -> None:
    """Keep labels off a roof line: small boxes along it."""
    n = max(int(math.hypot(bx - ax, by - ay) / 6), 1)
    for k in range(n + 1):
        x, y = ax + (bx - ax) * k / n, ay + (by - ay) * k / n
        placer.taken.append((x - 3, y - 2, x + 3, y + 2))


def spread(labels: list[tuple[float, str, str]], lo: float, hi: float, gap: float = 13.0) -> list:
    """Baselines for labels wanted at their line's y + 4: sorted, at least `gap` apart, within lo..hi."""
    items = sorted(labels, key=lambda x: x[0])
    ys = []
    last = -math.inf
    for y, _, _ in items:
        v = max(y + 4, last + gap, lo + 8)
        ys.append(v)
        last = v
    if ys and ys[-1] > hi:  # pushed past the bottom: push back up from there
        nxt = math.inf
        for i in range(len(ys) - 1, -1, -1):
            ys[i] = min(ys[i], hi, nxt - gap)
            nxt = ys[i]
    return [(y, label, cls) for y, (_, label, cls) in zip(ys, items)]
