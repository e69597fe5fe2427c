"""Kernel names in text tables: short enough to read, never cut, each full name listed once.

A demangled C++ kernel name runs to thousands of characters (a CUTLASS kernel's template arguments alone), and a
table drawn with it whole pads every row to that width. So a text table shows a long name as its **base name** and
lists the full name once, keyed, below the table (``--names full`` keeps names whole in the table instead).

The base name of a demangled signature (:func:`base_name`), in this order:

1. runs of whitespace collapse to one space;
2. the parameter list, the balanced ``(...)`` that ends the name, is dropped (with any ``const``/``&`` after it);
3. every template argument list, a balanced ``<...>``, is dropped, nested ones included;
4. the return type and other leading words (``void``, ``static``, ``__global__``) are dropped: what is left is the last
   word outside brackets (more than four words there is prose, not a signature: kept whole);
5. namespaces and classes stay (``cutlass::Kernel``, ``at::native::(anonymous namespace)::reduce_kernel``), as does
   ``operator()``.

``void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4>(Params)`` becomes ``cutlass::Kernel``.
A name that does not parse as a signature (unbalanced brackets, nothing left, parentheses left over) is kept whole.
A name of up to :data:`NAME_WIDTH` characters is shown whole: it costs a table nothing.
"""

from __future__ import annotations

__all__ = ["NAMES", "NAME_WIDTH", "NameKeys", "base_name", "whole"]

#: Names up to this many characters are shown whole in a table; longer ones as their base name and a key.
NAME_WIDTH = 60
#: How kernel names are shown (``--names``): short (base name and key when long) or full.
NAMES = ("short", "full")

#: Words a signature has outside its brackets: the name and a return type and qualifiers ("static unsigned int").
_MAX_WORDS = 4


def whole(name: object) -> str:
    """``name`` with its runs of whitespace collapsed, as every renderer prints a trace name."""
    return " ".join(str(name).split())


def _strip_parameters(name: str) -> str | None:
    """``name`` without the balanced ``(...)`` that ends it (and a ``const``/``&`` qualifier after it); None when the
    parentheses do not balance."""
    text = name.rstrip()
    for qualifier in (" const", " volatile", " &&", " &"):
        if text.endswith(")" + qualifier):
            text = text[: -len(qualifier)]
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            before = text[:i].rstrip()
            # "operator()" ends in "()" that is the name, not its parameters.
            return text if before.endswith("operator") else before
    return None


def _strip_templates(name: str) -> str | None:
    """``name`` without its ``<...>`` lists at any depth; None when they do not balance."""
    out, depth = [], 0
    i = 0
    while i < len(name):
        char = name[i]
        if name.startswith("operator<", i) or name.startswith("operator>", i):  # operator<, operator<<, operator>=
            end = i + len("operator")
            while end < len(name) and name[end] in "<>=":
                end += 1
            if depth == 0:
                out.append(name[i:end])
            i = end
            continue
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
            if depth < 0:
                return None
        elif depth == 0:
            out.append(char)
        i += 1
    return "".join(out) if depth == 0 else None


def _words(name: str) -> list[str]:
    """The space-separated words outside parentheses (``(anonymous namespace)`` is one word)."""
    depth, start, words = 0, 0, []
    for i, char in enumerate(name):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == " " and depth == 0:
            words.append(name[start:i])
            start = i + 1
    return [w for w in (*words, name[start:]) if w]


def base_name(name: object) -> str:
    """The function's base name of a demangled kernel name (the rule is in the module docstring); ``name`` whole
    (whitespace collapsed) when it does not parse as a signature."""
    text = whole(name)
    stripped = _strip_parameters(text)
    stripped = None if stripped is None else _strip_templates(stripped)
    if not stripped:
        return text
    words = _words(stripped)
    if not words or len(words) > _MAX_WORDS:  # prose, not a signature
        return text
    base = words[-1]
    # What is left must read as a qualified name: parentheses only in "(anonymous namespace)" and "operator()".
    if not base or "(" in base.replace("(anonymous namespace)", "").replace("operator()", ""):
        return text
    return base


class NameKeys:
    """The kernel names of one rendering: :meth:`cell` gives what a table shows (whole, or the base name and a key
    such as ``[2]``); :meth:`take` the full names keyed since the last call, to list below the table. A name keeps
    its key for the whole rendering, so it is listed once however many tables show it. ``full``: every name whole
    (``--names full``)."""

    @classmethod
    def of(cls, names: str | NameKeys | None) -> NameKeys:
        """The keys of a rendering: ``names`` itself when a rendering shares its keys, else new ones for ``short``
        (also None) or ``full`` (:data:`NAMES`)."""
        if isinstance(names, NameKeys):
            return names
        if names is not None and names not in NAMES:
            raise ValueError(f"names={names!r} is not one of {NAMES}")
        return cls(full=names == "full")

    def __init__(self, full: bool = False) -> None:
        self.full = full
        self._keys: dict[str, int] = {}
        self._pending: list[tuple[int, str]] = []

    def cell(self, name: object) -> str:
        text = whole(name)
        if self.full or len(text) <= NAME_WIDTH:
            return text
        base = base_name(text)
        if base == text:
            return text
        key = self._keys.get(text)
        if key is None:
            key = self._keys[text] = len(self._keys) + 1
            self._pending.append((key, text))
        return f"{base} [{key}]"

    def take(self) -> list[tuple[int, str]]:
        """The (key, full name) pairs keyed since the last call, in key order."""
        pending, self._pending = self._pending, []
        return pending
