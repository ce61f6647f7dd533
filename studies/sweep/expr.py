"""The spec's expressions: integer/float arithmetic, comparisons and boolean logic over named values.

``MLEN // HLEN``, ``MLEN % BLEN != 0``, ``kv_len < q_len and causal``. Parsed with :mod:`ast` and evaluated
node by node from an allow-list (numbers, names, ``+ - * / // % **``, unary ``- not``, comparisons,
``and``/``or``, ``min``/``max``): nothing else of Python is reachable, and a name that is not given is an
error naming it.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["ExprError", "check", "evaluate"]

_BIN: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMP: dict[type, Callable[[Any, Any], bool]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCS: dict[str, Callable[..., Any]] = {"min": min, "max": max}


class ExprError(ValueError):
    pass


def _parse(text: str) -> ast.expr:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise ExprError(f"{text!r} is not an expression: {exc.msg}") from None


def check(text: str, where: str) -> None:
    """Raise a ValueError naming ``where`` if ``text`` uses anything outside the allow-list."""
    try:
        _walk(_parse(text), None)
    except ExprError as exc:
        raise ValueError(f"{where}: {exc}") from None


def evaluate(text: str, names: Mapping[str, Any]) -> Any:
    """The value of ``text`` with ``names`` bound."""
    return _walk(_parse(text), names)


def _walk(node: ast.expr, names: Mapping[str, Any] | None) -> Any:
    """Evaluate ``node`` (``names`` None: only check that every node is allowed; the value is then a dummy)."""
    handler = _HANDLERS.get(type(node))
    if handler is None:
        raise ExprError(f"{ast.unparse(node)!r} is not allowed (numbers, names, arithmetic, comparisons, and/or/not)")
    return handler(node, names)


def _constant(node: Any, names: Mapping[str, Any] | None) -> Any:
    if not isinstance(node.value, (int, float, bool, str)):
        raise ExprError(f"{ast.unparse(node)!r} is not a number, bool or string")
    return node.value


def _name(node: Any, names: Mapping[str, Any] | None) -> Any:
    if names is None:
        return 1
    if node.id not in names:
        raise ExprError(f"unknown name {node.id!r}")
    return names[node.id]


def _binop(node: Any, names: Mapping[str, Any] | None) -> Any:
    fn = _BIN.get(type(node.op))
    if fn is None:
        raise ExprError(f"operator in {ast.unparse(node)!r} is not allowed")
    a, b = _walk(node.left, names), _walk(node.right, names)
    if names is None:
        return 1
    if isinstance(node.op, ast.Pow) and not (isinstance(b, (int, float)) and abs(b) <= 64):
        raise ExprError(f"{ast.unparse(node)}: an exponent must be a number of magnitude <= 64")
    try:
        return fn(a, b)
    except (ZeroDivisionError, TypeError, OverflowError) as exc:
        raise ExprError(f"{ast.unparse(node)}: {exc}") from None


def _unary(node: Any, names: Mapping[str, Any] | None) -> Any:
    if not isinstance(node.op, (ast.USub, ast.Not)):
        raise ExprError(f"operator in {ast.unparse(node)!r} is not allowed")
    v = _walk(node.operand, names)
    if names is None:
        return 1
    return -v if isinstance(node.op, ast.USub) else not v


def _boolop(node: Any, names: Mapping[str, Any] | None) -> Any:
    vals = [_walk(v, names) for v in node.values]
    return all(vals) if isinstance(node.op, ast.And) else any(vals)


def _compare(node: Any, names: Mapping[str, Any] | None) -> Any:
    if not all(type(op) in _CMP for op in node.ops):
        raise ExprError(f"comparison in {ast.unparse(node)!r} is not allowed")
    left, ok = _walk(node.left, names), True
    for op, comp in zip(node.ops, node.comparators, strict=True):
        right = _walk(comp, names)
        if names is not None:
            try:
                ok = ok and _CMP[type(op)](left, right)
            except TypeError as exc:
                raise ExprError(f"{ast.unparse(node)}: {exc}") from None
        left = right
    return ok


def _call(node: Any, names: Mapping[str, Any] | None) -> Any:
    if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCS) or node.keywords or not node.args:
        raise ExprError(f"{ast.unparse(node)!r}: only min(...) and max(...) may be called")
    args = [_walk(a, names) for a in node.args]
    return _FUNCS[node.func.id](*args) if names is not None else 1


_HANDLERS: dict[type, Callable[[Any, Mapping[str, Any] | None], Any]] = {
    ast.Constant: _constant,
    ast.Name: _name,
    ast.BinOp: _binop,
    ast.UnaryOp: _unary,
    ast.BoolOp: _boolop,
    ast.Compare: _compare,
    ast.Call: _call,
}
