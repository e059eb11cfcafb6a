"""Searching a design space: the space itself, the chunked engine that evaluates it on the
devices, catalog grids, and gradient search over a continuous relaxation."""

from .engine import Engine, build
from .reduce import reduce_rows
from .space import Space, build_space

__all__ = ["Engine", "Space", "build", "build_space", "reduce_rows"]
