"""Untrusted values made safe to show: escaped message text, strict JSON, close-match suggestions.

One job for every layer (the lowest package, so all can import it):

* :func:`printable` -- text from a file or a flag, as a message shows it: every character that is not
  printable (a NUL byte, a UTF-8 byte-order mark, a control or format character) escaped repr-style
  (``\\x00``, ``\\ufeff``), and long text shortened;
* :func:`finite_json` / :func:`json_text` -- strict JSON (RFC 8259 has no NaN / Infinity): a non-finite
  float becomes the *string* ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (the value stays visible and
  distinguishable; a reader that expects a number fails loudly instead of parsing a token it does not know);
* :func:`did_you_mean` -- the close match of an unknown key among the known ones (difflib), also through
  non-ASCII look-alikes (a full-width ``ＭLEN`` is ``MLEN`` after NFKC normalisation).
"""

from __future__ import annotations

import difflib
import json
import math
import unicodedata
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["printable", "finite_json", "json_text", "did_you_mean"]


def printable(text: object, limit: int | None = None) -> str:
    """``str(text)`` with every non-printable character escaped (repr-style) and, with ``limit``, cut to at
    most ``limit`` characters (ending in ``...``)."""
    s = str(text)
    if limit is not None and len(s) > limit:
        s = s[:limit] + "..."  # cut before escaping: a long text costs nothing
    if not s.isprintable():
        s = "".join(c if c.isprintable() else repr(c)[1:-1] for c in s)
    if limit is not None and len(s) > limit:
        s = s[: max(0, limit - 3)] + "..."
    return s


def _finite_float(x: float) -> float | str:
    if math.isfinite(x):
        return x
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")


def finite_json(obj: Any, default: Callable[[Any], Any] | None = None) -> Any:
    """``obj`` with every non-finite float replaced by its string (``"NaN"``, ``"Infinity"``,
    ``"-Infinity"``); ``default`` converts the values JSON has no type for (as ``json.dumps``' default).
    Iterative: a deep document costs no Python recursion."""
    root: list[Any] = [obj]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, obj)]
    while stack:
        parent, key, value = stack.pop()
        if isinstance(value, float):
            parent[key] = _finite_float(value)
        elif isinstance(value, dict):
            copy = dict(value)
            parent[key] = copy
            stack.extend((copy, k, v) for k, v in copy.items())
        elif isinstance(value, (list, tuple)):
            items = list(value)
            parent[key] = items
            stack.extend((items, i, v) for i, v in enumerate(items))
        elif value is not None and not isinstance(value, (str, int, bool)) and default is not None:
            parent[key] = default(value)
            if not isinstance(parent[key], (str, int, bool)) and parent[key] is not None:
                stack.append((parent, key, parent[key]))
    return root[0]


def json_text(obj: Any, *, default: Callable[[Any], Any] | None = None, **kw: Any) -> str:
    """``json.dumps`` of :func:`finite_json` ``(obj)`` with ``allow_nan=False``: always strict JSON."""
    return json.dumps(finite_json(obj, default), allow_nan=False, **kw)


def _fold(name: str) -> str:
    return unicodedata.normalize("NFKC", name).casefold()


def did_you_mean(key: str, known: Iterable[str]) -> str:
    """``" (did you mean 'X'?)"`` for the known name closest to ``key`` (case and compatibility forms
    folded, so ``ＭLEN`` finds ``MLEN``), with a note when ``key`` has non-ASCII characters; ``""`` if none
    is close."""
    names = list(known)
    folded = {_fold(n): n for n in names}
    match = folded.get(_fold(key))
    if match is None:
        close = difflib.get_close_matches(_fold(key), list(folded), n=1, cutoff=0.6)
        match = folded[close[0]] if close else None
    if match is None:
        return ""
    odd = [c for c in key if not c.isascii()]
    note = ""
    if odd:
        distinct = list(dict.fromkeys(odd))
        chars = ", ".join(f"{printable(c)!r} U+{ord(c):04X}" for c in distinct[:8])
        more = f" and {len(distinct) - 8} more" if len(distinct) > 8 else ""
        note = f"; {printable(key, 120)!r} has non-ASCII characters: {chars}{more}"
    return f" (did you mean {match!r}?{note})"
