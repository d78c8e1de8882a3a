"""Compile-time arithmetic: the numbers of shapes, attributes, loop bounds and scalar operands.

Integers stay exact Python ints (bounded by ±(2**63 - 1) so no expression can grow without
limit); ``/`` is true division, except that an exact quotient of two integers stays an integer
(``768 / 12`` is ``64``, ``7 / 2`` is ``3.5``). ``sqrt exp log rsqrt`` give floats. Every
failure (division by zero, overflow, a domain error) is a :class:`ConstError`, which the checker
turns into a located error.
"""

from __future__ import annotations

import math

from rtgraph.frontend.parser import INT_LIMIT

Number = int | float

#: Functions folded when every argument is a compile-time number.
SCALAR_FUNCTIONS = ("min", "max", "sqrt", "exp", "log", "rsqrt")


class ConstError(Exception):
    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def _checked(value: Number) -> Number:
    if isinstance(value, int):
        if abs(value) > INT_LIMIT:
            raise ConstError(
                "compile-time integer overflow: the result exceeds 2**63 - 1",
                hint="shapes and attributes must stay below 2**63",
            )
        return value
    if not math.isfinite(value):
        raise ConstError("compile-time arithmetic overflows to infinity")
    return value


def binary(op: str, a: Number, b: Number) -> Number:
    """``a op b`` for ``+ - * / %`` on compile-time numbers."""
    try:
        if op == "+":
            return _checked(a + b)
        if op == "-":
            return _checked(a - b)
        if op == "*":
            return _checked(a * b)
        if op == "/":
            if b == 0:
                raise ConstError("division by zero in a compile-time expression")
            if isinstance(a, int) and isinstance(b, int) and a % b == 0:
                return _checked(a // b)
            return _checked(a / b)
        if op == "%":
            if b == 0:
                raise ConstError("modulo by zero in a compile-time expression")
            return _checked(a % b)
    except OverflowError:
        raise ConstError("compile-time arithmetic overflows") from None
    raise ConstError(
        f"'{op}' needs tensors; both operands are compile-time numbers",
        hint="'@' is the matrix product of two tensors",
    )


def negate(a: Number) -> Number:
    return _checked(-a)


def call(name: str, args: list[Number]) -> Number:
    """One of :data:`SCALAR_FUNCTIONS` applied to compile-time numbers."""
    if name in ("min", "max"):
        if len(args) < 2:
            raise ConstError(f"{name} takes at least 2 arguments, got {len(args)}")
        return min(args) if name == "min" else max(args)
    if len(args) != 1:
        raise ConstError(f"{name} takes 1 argument, got {len(args)}")
    (x,) = args
    try:
        if name == "sqrt":
            if x < 0:
                raise ConstError(f"sqrt of a negative number ({x})")
            return math.sqrt(x)
        if name == "rsqrt":
            if x <= 0:
                raise ConstError(f"rsqrt needs a positive number, got {x}")
            return 1.0 / math.sqrt(x)
        if name == "log":
            if x <= 0:
                raise ConstError(f"log needs a positive number, got {x}")
            return math.log(x)
        if name == "exp":
            return _checked(math.exp(x))
    except OverflowError:
        raise ConstError(f"{name}({x}) overflows") from None
    raise ConstError(f"unknown compile-time function '{name}'")


def as_int(value: object) -> int | None:
    """``value`` as an int when it is an integral number (``64.0`` counts), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
