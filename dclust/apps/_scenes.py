"""Synthetic point-cloud scenes with ground truth: moving boxes, spheres and planes sampled as surface points.

The stand-in for the LiDAR sequences of [DM] 8.6 (docs/algorithms.md 10.2), whose data is not available: objects of
three shapes move across a square arena (smooth headings, bouncing off the walls, steering apart when they come
close), each frame samples ``n_points`` points on their surfaces (with colour and surface normals), and every
point carries the id of its object. With ``replace_prob > 0`` objects leave and new ones (new ids) enter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import numpy as np

from ..errors import InvalidParameterError, message

__all__ = ["SceneFrame", "MovingObjectsScene", "moving_objects_scene"]

_KINDS = ("box", "sphere", "plane")
_PALETTE = np.array([
    [0.90, 0.10, 0.10], [0.10, 0.60, 0.90], [0.20, 0.80, 0.20], [0.95, 0.75, 0.10], [0.60, 0.20, 0.80],
    [0.95, 0.45, 0.10], [0.10, 0.80, 0.75], [0.85, 0.30, 0.60], [0.45, 0.35, 0.20], [0.50, 0.50, 0.50],
])


@dataclass
class SceneFrame:
    """One frame: ``xyz``, ``rgb`` (in [0, 1]) and ``normals`` of shape (n, 3), and the object ``ids`` (n,)."""

    xyz: np.ndarray
    rgb: np.ndarray
    normals: np.ndarray
    ids: np.ndarray

    def __len__(self) -> int:
        return int(self.xyz.shape[0])


class _Object:
    def __init__(self, oid: int, kind: str, rng: np.random.Generator, pos: np.ndarray, speed: float,
                 plane_width: float) -> None:
        self.id, self.kind = oid, kind
        self.pos = pos.astype(np.float64)
        heading = rng.uniform(0, 2 * np.pi)
        self.vel = speed * np.array([np.cos(heading), np.sin(heading)])
        self.yaw = rng.uniform(0, np.pi)
        self.color = _PALETTE[oid % len(_PALETTE)]
        if kind == "box":
            self.size = rng.uniform(0.6, 1.1, 3)
        elif kind == "sphere":
            self.size = np.full(3, rng.uniform(0.35, 0.55))
        else:  # a vertical panel: width, thickness 0, height
            self.size = np.array([plane_width * rng.uniform(0.85, 1.15), 0.0, rng.uniform(0.8, 1.2)])

    @property
    def height(self) -> float:
        return float(self.size[0] if self.kind == "sphere" else self.size[2] / 2)

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(points, normals) of n points on the surface, in world coordinates."""
        if self.kind == "sphere":
            u = rng.standard_normal((n, 3))
            u /= np.linalg.norm(u, axis=1, keepdims=True)
            return self.size[0] * u, u
        if self.kind == "plane":
            w, _, h = self.size
            local = np.stack([rng.uniform(-w / 2, w / 2, n), np.zeros(n), rng.uniform(-h / 2, h / 2, n)], axis=1)
            nrm = np.tile([0.0, 1.0, 0.0], (n, 1)) * np.where(rng.random(n) < 0.5, 1.0, -1.0)[:, None]
        else:  # box: a face chosen by area, a uniform point on it
            a, b, c = self.size
            areas = np.array([b * c, b * c, a * c, a * c, a * b, a * b])
            face = rng.choice(6, size=n, p=areas / areas.sum())
            local = (rng.random((n, 3)) - 0.5) * self.size
            axis, sign = face // 2, np.where(face % 2 == 0, 1.0, -1.0)
            local[np.arange(n), axis] = sign * self.size[axis] / 2
            nrm = np.zeros((n, 3))
            nrm[np.arange(n), axis] = sign
        cz, sz = np.cos(self.yaw), np.sin(self.yaw)
        rot = np.array([[cz, -sz, 0.0], [sz, cz, 0.0], [0.0, 0.0, 1.0]])
        return local @ rot.T, nrm @ rot.T


class MovingObjectsScene:
    """Iterable over the frames of :func:`moving_objects_scene` (deterministic: the same seed gives the same
    frames every time it is iterated)."""

    def __init__(self, n_frames: int, n_points: int, n_objects: int, arena: float, speed: float,
                 replace_prob: float, noise: float, color_noise: float, separation: float, plane_width: float,
                 random_state: int) -> None:
        self.n_frames, self.n_points, self.n_objects = n_frames, n_points, n_objects
        self.separation, self.plane_width = separation, plane_width
        self.arena, self.speed, self.replace_prob = arena, speed, replace_prob
        self.noise, self.color_noise, self.random_state = noise, color_noise, random_state

    def __len__(self) -> int:
        return self.n_frames

    def _place(self, rng: np.random.Generator, others: list[_Object]) -> np.ndarray:
        best, best_d = None, -1.0
        for _ in range(50):  # a spot far from the others
            p = rng.uniform(1.0, self.arena - 1.0, 2)
            d = min((float(np.linalg.norm(p - o.pos)) for o in others), default=np.inf)
            if d > best_d:
                best, best_d = p, d
            if d > 1.2 * self.separation:
                break
        return best

    def __iter__(self) -> Iterator[SceneFrame]:
        rng = np.random.default_rng(self.random_state)
        objects: list[_Object] = []
        next_id = 0
        for i in range(self.n_objects):
            objects.append(_Object(next_id, _KINDS[i % 3], rng, self._place(rng, objects), self.speed,
                                   self.plane_width))
            next_id += 1
        for _ in range(self.n_frames):
            yield self._frame(objects, rng)
            # leave / enter
            for i, o in enumerate(objects):
                if rng.random() < self.replace_prob:
                    # elsewhere: away from every object, the leaving one included
                    objects[i] = _Object(next_id, o.kind, rng, self._place(rng, objects), self.speed,
                                         self.plane_width)
                    next_id += 1
            self._move(objects, rng)

    def _move(self, objects: list[_Object], rng: np.random.Generator) -> None:
        for o in objects:
            turn = rng.normal(0, 0.15)
            c, s = np.cos(turn), np.sin(turn)
            o.vel = np.array([c * o.vel[0] - s * o.vel[1], s * o.vel[0] + c * o.vel[1]])
        for i, a in enumerate(objects):  # steer apart: reflect the approaching part of the relative velocity
            for b in objects[i + 1:]:
                d = b.pos - a.pos
                dist = float(np.linalg.norm(d))
                if 0 < dist < self.separation:
                    u = d / dist
                    closing = float(np.dot(a.vel - b.vel, u))
                    if closing > 0:
                        a.vel = a.vel - closing * u
                        b.vel = b.vel + closing * u
        for o in objects:
            o.pos = o.pos + o.vel
            for ax in range(2):
                if o.pos[ax] < 0.5 or o.pos[ax] > self.arena - 0.5:
                    o.vel[ax] = -o.vel[ax]
                    o.pos[ax] = np.clip(o.pos[ax], 0.5, self.arena - 0.5)
            speed = float(np.linalg.norm(o.vel))
            if speed > 0:
                o.vel *= self.speed / speed
            o.yaw += rng.normal(0, 0.03)

    def _frame(self, objects: list[_Object], rng: np.random.Generator) -> SceneFrame:
        k = len(objects)
        counts = np.full(k, self.n_points // k)
        counts[: self.n_points - counts.sum()] += 1
        xyz, nrm, rgb, ids = [], [], [], []
        for o, n in zip(objects, counts):
            p, q = o.sample(int(n), rng)
            p = p + np.array([o.pos[0], o.pos[1], o.height])
            xyz.append(p)
            nrm.append(q)
            rgb.append(np.clip(o.color + rng.normal(0, self.color_noise, (int(n), 3)), 0, 1))
            ids.append(np.full(int(n), o.id, np.int64))
        xyz_a = np.concatenate(xyz)
        xyz_a += rng.normal(0, self.noise, xyz_a.shape)
        order = rng.permutation(xyz_a.shape[0])  # scanners do not emit points grouped by object
        return SceneFrame(xyz_a[order], np.concatenate(rgb)[order], np.concatenate(nrm)[order],
                          np.concatenate(ids)[order])


def _check(name: str, ok: bool, expected: str, value: object) -> None:
    if not ok:
        raise InvalidParameterError(message(f"moving_objects_scene({name}=...)", expected, repr(value),
                                            f"Pass a valid {name}."))


def moving_objects_scene(n_frames: int = 60, n_points: int = 30_000, n_objects: int = 6, *, arena: float = 12.0,
                         speed: float = 0.08, replace_prob: float = 0.01, noise: float = 0.01,
                         color_noise: float = 0.03, separation: float = 2.5, plane_width: float = 1.4,
                         random_state: int = 0) -> MovingObjectsScene:
    """A sequence of point-cloud frames of moving boxes, spheres and planes, with ground-truth object ids.

    Parameters
    ----------
    n_frames : int
        Number of frames.
    n_points : int
        Points per frame, split evenly over the objects.
    n_objects : int
        Objects present at any time (shapes cycle box, sphere, plane).
    arena : float
        Side of the square floor the objects move on.
    speed : float
        Distance an object moves per frame.
    replace_prob : float
        Per frame and object, the probability that it leaves and a new object (new id) enters elsewhere.
    noise, color_noise : float
        Standard deviation of the position noise and of the colour noise.
    separation : float
        Centre distance below which two approaching objects steer apart (smaller: objects pass closer).
    plane_width : float
        Mean width of the vertical panels (wide panels are elongated, non-convex-looking clusters for k-means-like
        costs).
    random_state : int
        Seed; the scene is the same on every iteration.

    Returns
    -------
    MovingObjectsScene
        Iterate it for :class:`SceneFrame` objects.

    Examples
    --------
    >>> frames = list(moving_objects_scene(n_frames=2, n_points=600, n_objects=3, random_state=0))
    >>> frames[0].xyz.shape, sorted(set(frames[0].ids.tolist()))
    ((600, 3), [0, 1, 2])
    """
    _check("n_frames", isinstance(n_frames, (int, np.integer)) and n_frames >= 1, "an int >= 1", n_frames)
    _check("n_objects", isinstance(n_objects, (int, np.integer)) and n_objects >= 1, "an int >= 1", n_objects)
    _check("n_points", isinstance(n_points, (int, np.integer)) and n_points >= n_objects,
           "an int >= n_objects", n_points)
    _check("arena", arena > 2.0, "a float > 2", arena)
    _check("speed", speed >= 0, "a float >= 0", speed)
    _check("replace_prob", 0 <= replace_prob <= 1, "a probability in [0, 1]", replace_prob)
    _check("noise", noise >= 0, "a float >= 0", noise)
    _check("color_noise", color_noise >= 0, "a float >= 0", color_noise)
    _check("separation", separation >= 0, "a float >= 0", separation)
    _check("plane_width", plane_width > 0, "a float > 0", plane_width)
    return MovingObjectsScene(int(n_frames), int(n_points), int(n_objects), float(arena), float(speed),
                              float(replace_prob), float(noise), float(color_noise), float(separation),
                              float(plane_width), int(random_state))
