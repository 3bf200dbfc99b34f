"""Example server-side Python tools (`python: my_tools:NAME` in tools.yaml).

A tool is a plain function, sync or async; its signature and docstring become the
JSON schema and description the model sees. It returns text or anything JSON can
hold; an exception answers the model with the error, never the server.
"""

from __future__ import annotations

import ast
import operator
from datetime import UTC, datetime

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ValueError(f"not arithmetic: {ast.dump(node)[:60]}")


def calculator(expression: str) -> float:
    """Evaluate an arithmetic expression such as '(2 + 3) * 4'."""
    return _eval(ast.parse(expression, mode="eval").body)


def get_weather(city: str, unit: str = "C") -> dict:
    """The current weather in a city (canned data: this is an example)."""
    temp = {"paris": 18, "tokyo": 22, "lima": 16}.get(city.lower(), 20)
    if unit.upper() == "F":
        temp = temp * 9 / 5 + 32
    return {"city": city, "temperature": temp, "unit": unit.upper(), "sky": "clear"}


async def utc_now() -> str:
    """The current date and time in UTC (ISO 8601)."""
    return datetime.now(UTC).isoformat(timespec="seconds")
