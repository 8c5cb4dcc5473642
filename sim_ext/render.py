"""``render_mode="rgb_array"`` frames of the sim_ext environments, drawn with NumPy alone.

Each picture follows Gymnasium's own drawing of the same environment (sizes, scales, colours:
the cart and pole, the two links, the hill and the car, the pendulum's rod), so a video of a
sim_ext policy looks like one of Gymnasium's. Shapes are anti-aliased by their signed
distance to each pixel centre; no pygame is needed.

:func:`frame` draws one environment's state (a row of ``get_state()``); :data:`RENDER_FPS` is
the frame rate each environment declares in ``metadata["render_fps"]``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

Color = tuple[int, int, int]
Point = tuple[float, float]
Frame = npt.NDArray[np.uint8]

BLACK: Color = (0, 0, 0)
WHITE: Color = (255, 255, 255)


class Canvas:
    """An RGB picture in Gymnasium's drawing coordinates: x to the right, y up, in pixels.

    Pixel (column c, row r) is centred on (c, height - 1 - r), as pygame's pixel (c, y) is
    once Gymnasium flips its surface: a one-pixel line at an integer y is one crisp row."""

    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = np.empty((height, width, 3), dtype=np.uint8)
        self.pixels[...] = np.asarray(background, dtype=np.uint8)

    def copy(self) -> Canvas:
        """A canvas with a copy of these pixels (static scenery is drawn once and copied)."""
        other = Canvas.__new__(Canvas)
        other.width, other.height, other.pixels = self.width, self.height, self.pixels.copy()
        return other

    def _window(
        self, x0: float, y0: float, x1: float, y1: float
    ) -> tuple[slice, slice, np.ndarray, np.ndarray] | None:
        """The pixels whose centres may lie in [x0, x1] x [y0, y1] (plus a pixel of margin),
        and their centres' coordinates."""
        c0, c1 = max(math.floor(x0) - 1, 0), min(math.ceil(x1) + 2, self.width)
        top = self.height - 1  # row r holds y = top - r
        r0 = max(math.floor(top - y1) - 1, 0)
        r1 = min(math.ceil(top - y0) + 2, self.height)
        if c0 >= c1 or r0 >= r1:
            return None
        xs = np.arange(c0, c1, dtype=np.float32)
        ys = top - np.arange(r0, r1, dtype=np.float32)
        return slice(r0, r1), slice(c0, c1), xs[None, :], ys[:, None]

    def _paint(self, rows: slice, cols: slice, distance: np.ndarray, color: Color) -> None:
        """Blends ``color`` where the signed distance is negative (inside), with a one-pixel
        soft edge."""
        coverage = np.clip(0.5 - distance, 0.0, 1.0)[..., None]
        region = self.pixels[rows, cols].astype(np.float32)
        region += coverage * (np.asarray(color, dtype=np.float32) - region)
        self.pixels[rows, cols] = np.rint(region)

    def polygon(self, points: Sequence[Point], color: Color) -> None:
        """A filled convex polygon (vertices in either order)."""
        pts = np.asarray(points, dtype=np.float64)
        window = self._window(*pts.min(axis=0), *pts.max(axis=0))
        if window is None:
            return
        rows, cols, xs, ys = window
        nxt = np.roll(pts, -1, axis=0)
        twice_area = float(np.sum(pts[:, 0] * nxt[:, 1] - nxt[:, 0] * pts[:, 1]))
        orientation = 1.0 if twice_area >= 0 else -1.0
        distance = np.full(np.broadcast_shapes(xs.shape, ys.shape), -np.inf, dtype=np.float32)
        for (ax, ay), (bx, by) in zip(pts, nxt, strict=True):
            ex, ey = bx - ax, by - ay
            length = math.hypot(ex, ey)
            if length == 0.0:
                continue
            # Outward normal of a counter-clockwise edge: (ey, -ex) / length.
            nx, ny = orientation * ey / length, -orientation * ex / length
            np.maximum(distance, (xs - ax) * nx + (ys - ay) * ny, out=distance)
        self._paint(rows, cols, distance, color)

    def circle(self, center: Point, radius: float, color: Color) -> None:
        cx, cy = center
        window = self._window(cx - radius, cy - radius, cx + radius, cy + radius)
        if window is None:
            return
        rows, cols, xs, ys = window
        self._paint(rows, cols, np.hypot(xs - cx, ys - cy) - radius, color)

    def segment(self, a: Point, b: Point, width: float, color: Color) -> None:
        """A straight line of the given width with round ends."""
        (ax, ay), (bx, by) = a, b
        half = width / 2
        window = self._window(
            min(ax, bx) - half, min(ay, by) - half, max(ax, bx) + half, max(ay, by) + half
        )
        if window is None:
            return
        rows, cols, xs, ys = window
        ex, ey = bx - ax, by - ay
        length2 = ex * ex + ey * ey
        t = 0.0 if length2 == 0 else np.clip(((xs - ax) * ex + (ys - ay) * ey) / length2, 0, 1)
        self._paint(rows, cols, np.hypot(xs - ax - t * ex, ys - ay - t * ey) - half, color)

    def curve(self, height: Callable[[np.ndarray], np.ndarray], width: float, color: Color) -> None:
        """The graph y = height(x) across the whole picture, as a line of the given width."""
        xs = np.arange(self.width, dtype=np.float64)
        h = height(xs)
        slope = np.gradient(h, xs)
        window = self._window(0, float(h.min()) - width, self.width, float(h.max()) + width)
        if window is None:
            return
        rows, cols, _, ys = window
        # Vertical distance times cos(slope): the distance to the curve's tangent line.
        distance = np.abs(ys - h[None, cols]) / np.sqrt(1 + slope[None, cols] ** 2) - width / 2
        self._paint(rows, cols, distance, color)

    def frame(self) -> Frame:
        return self.pixels


@functools.cache
def _blank(width: int, height: int) -> Canvas:
    return Canvas(width, height)


def _rotate(points: Sequence[Point], angle: float, shift: Point) -> list[Point]:
    c, s = math.cos(angle), math.sin(angle)
    return [(x * c - y * s + shift[0], x * s + y * c + shift[1]) for x, y in points]


def _box(left: float, right: float, top: float, bottom: float) -> list[Point]:
    return [(left, bottom), (left, top), (right, top), (right, bottom)]


_CART_Y = 100.0


@functools.cache
def _cartpole_scene() -> Canvas:
    canvas = Canvas(600, 400)
    canvas.segment((0, _CART_Y), (600, _CART_Y), 1.0, BLACK)  # the track
    return canvas


def cartpole(state: np.ndarray) -> Frame:
    """Gymnasium's CartPole picture: 600 x 400, the cart on its track, the pole on its axle."""
    x, _, theta, _ = (float(v) for v in state)
    canvas = _cartpole_scene().copy()
    scale = 600 / (2.4 * 2)
    pole_width, pole_length = 10.0, scale * (2 * 0.5)
    cart_width, cart_height = 50.0, 30.0
    cart_x, cart_y = x * scale + 600 / 2, _CART_Y
    axle = (cart_x, cart_y + cart_height / 4)
    cart = _box(-cart_width / 2, cart_width / 2, cart_height / 2, -cart_height / 2)
    canvas.polygon([(px + cart_x, py + cart_y) for px, py in cart], BLACK)
    half = pole_width / 2
    pole = _box(-half, half, pole_length - half, -half)
    canvas.polygon(_rotate(pole, -theta, axle), (202, 152, 101))
    canvas.circle(axle, half, (129, 132, 203))
    return canvas.frame()


_ACROBOT_BOUND = 1.0 + 1.0 + 0.2  # both links and a margin
_ACROBOT_SCALE = 500 / (_ACROBOT_BOUND * 2)


@functools.cache
def _acrobot_scene() -> Canvas:
    canvas = Canvas(500, 500)
    left, right = -_ACROBOT_BOUND * _ACROBOT_SCALE + 250, _ACROBOT_BOUND * _ACROBOT_SCALE + 250
    goal = _ACROBOT_SCALE + 250  # the height the tip must pass
    canvas.segment((left, goal), (right, goal), 1.0, BLACK)
    return canvas


def acrobot(state: np.ndarray) -> Frame:
    """Gymnasium's Acrobot picture: 500 x 500, the two links hanging from the centre and the
    line the tip must rise above."""
    theta1, theta2 = float(state[0]), float(state[1])
    canvas = _acrobot_scene().copy()
    scale, offset = _ACROBOT_SCALE, 500 / 2
    joints = [
        (0.0, 0.0),
        (math.sin(theta1) * scale, -math.cos(theta1) * scale),
    ]
    joints.append(
        (
            joints[1][0] + math.sin(theta1 + theta2) * scale,
            joints[1][1] - math.cos(theta1 + theta2) * scale,
        )
    )
    for (jx, jy), angle in zip(
        joints[:2], (theta1 - math.pi / 2, theta1 + theta2 - math.pi / 2), strict=True
    ):
        link = _box(0, scale, 0.1 * scale, -0.1 * scale)
        canvas.polygon(_rotate(link, angle, (jx + offset, jy + offset)), (0, 204, 204))
        canvas.circle((jx + offset, jy + offset), 0.1 * scale, (204, 204, 0))
    return canvas.frame()


def _car_height(xs: Any) -> Any:
    return np.sin(3 * xs) * 0.45 + 0.55


_CAR_MIN_POSITION = -1.2
_CAR_SCALE = 600 / (0.6 - _CAR_MIN_POSITION)


@functools.cache
def _mountain_car_scene(goal_position: float) -> Canvas:
    """The hill and the flag at the goal."""
    canvas = Canvas(600, 400)
    scale = _CAR_SCALE
    canvas.curve(lambda px: _car_height(px / scale + _CAR_MIN_POSITION) * scale, 1.0, BLACK)
    flag_x = (goal_position - _CAR_MIN_POSITION) * scale
    flag_y1 = _car_height(goal_position) * scale
    flag_y2 = flag_y1 + 50
    canvas.segment((flag_x, flag_y1), (flag_x, flag_y2), 1.0, BLACK)
    canvas.polygon(
        [(flag_x, flag_y2), (flag_x, flag_y2 - 10), (flag_x + 25, flag_y2 - 5)], (204, 204, 0)
    )
    return canvas


def _mountain_car(state: np.ndarray, goal_position: float) -> Frame:
    """Gymnasium's MountainCar picture: 600 x 400, the hill, the car on it and the flag."""
    position = float(state[0])
    canvas = _mountain_car_scene(goal_position).copy()
    clearance, car_width, car_height = 10.0, 40.0, 20.0
    angle = math.cos(3 * position)
    base = (
        (position - _CAR_MIN_POSITION) * _CAR_SCALE,
        clearance + _car_height(position) * _CAR_SCALE,
    )
    canvas.polygon(_rotate(_box(-car_width / 2, car_width / 2, car_height, 0), angle, base), BLACK)
    for wheel in _rotate([(car_width / 4, 0), (-car_width / 4, 0)], angle, base):
        canvas.circle(wheel, car_height / 2.5, (128, 128, 128))
    return canvas.frame()


def mountain_car(state: np.ndarray) -> Frame:
    return _mountain_car(state, goal_position=0.5)


def mountain_car_continuous(state: np.ndarray) -> Frame:
    return _mountain_car(state, goal_position=0.45)


def pendulum(state: np.ndarray) -> Frame:
    """Gymnasium's Pendulum picture: 500 x 500, the rod swinging about its axle (angle 0 is up)."""
    theta = float(state[0])
    canvas = _blank(500, 500).copy()
    scale = 500 / (2.2 * 2)
    offset = 500 / 2
    rod_length, rod_width = 1 * scale, 0.2 * scale
    rod = _box(0, rod_length, rod_width / 2, -rod_width / 2)
    angle = theta + math.pi / 2
    canvas.polygon(_rotate(rod, angle, (offset, offset)), (204, 77, 77))
    canvas.circle((offset, offset), rod_width / 2, (204, 77, 77))
    end = _rotate([(rod_length, 0)], angle, (offset, offset))[0]
    canvas.circle(end, rod_width / 2, (204, 77, 77))
    canvas.circle((offset, offset), 0.05 * scale, BLACK)
    return canvas.frame()


def gridmaze(state: np.ndarray) -> Frame:
    """The maze from above: walls dark, the goal green, the agent a blue disc; row 0 on top."""
    size = math.isqrt(len(state) - 2)
    row, col = int(state[0]), int(state[1])
    cell = max(4, 512 // size)
    walls = np.asarray(state[2:], dtype=np.float64).reshape(size, size) > 0.5
    colors = np.where(walls[..., None], np.uint8(64), np.uint8(255))
    colors = np.broadcast_to(colors, (size, size, 3)).copy()
    colors[size - 1, size - 1] = (102, 204, 102)
    canvas = Canvas(size * cell, size * cell)
    canvas.pixels[...] = np.repeat(np.repeat(colors, cell, axis=0), cell, axis=1)
    lines = np.minimum(np.arange(size + 1) * cell, size * cell - 1)
    canvas.pixels[lines, :] = 200  # grid lines
    canvas.pixels[:, lines] = 200
    centre = ((col + 0.5) * cell - 0.5, (size - row - 0.5) * cell - 0.5)
    canvas.circle(centre, cell * 0.35, (51, 102, 204))
    return canvas.frame()


# Drawing and frame rate per environment (Gymnasium's render_fps where it has a twin).
RENDERERS: dict[str, tuple[Callable[[np.ndarray], Frame], int]] = {
    "CartPole-v1": (cartpole, 50),
    "Acrobot-v1": (acrobot, 15),
    "MountainCar-v0": (mountain_car, 30),
    "MountainCarContinuous-v0": (mountain_car_continuous, 30),
    "Pendulum-v1": (pendulum, 30),
    "GridMaze-v0": (gridmaze, 10),
}

RENDER_FPS = {name: fps for name, (_, fps) in RENDERERS.items()}


def frame(env_name: str, state: np.ndarray) -> Frame:
    """The picture of one state (a row of ``get_state()``) of the environment ``env_name``."""
    draw, _ = RENDERERS[env_name]
    return draw(np.asarray(state, dtype=np.float64))
