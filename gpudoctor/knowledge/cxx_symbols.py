"""Readable names for the mangled C++ symbols a loader says are undefined.

c++filt is not on every user's machine (a slim image has no binutils), so the qualified name
is demangled here, after the Itanium C++ ABI's "Mangling" chapter
(https://itanium-cxx-abi.github.io/cxx-abi/abi.html#mangling): the nested name
(``_ZN3c106detail23torchInternalAssertFailE…`` -> ``c10::detail::torchInternalAssertFail``),
constructors, destructors, template arguments shown as ``<…>``, special names (vtable,
typeinfo). Parameter lists are shown as ``(…)``; what matters in them for an undefined
symbol — which ``std::string`` it takes — is said in words by ``abi_hint``.
"""

from __future__ import annotations

import re
from typing import List, Optional, Tuple

_SPECIAL = {"TV": "vtable for ", "TI": "typeinfo for ", "TS": "typeinfo name for ", "TT": "VTT for "}
_OPERATOR_CTOR = {"C1": "ctor", "C2": "ctor", "C3": "ctor", "D0": "dtor", "D1": "dtor", "D2": "dtor"}


def _skip_template_args(text: str, i: int) -> Optional[int]:
    """Index after the ``I…E`` starting at ``i`` (nested ones too), or None if unbalanced."""
    depth = 0
    while i < len(text):
        c = text[i]
        if c == "I":
            depth += 1
        elif c == "E":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c.isdigit():  # a <source-name> inside: skip its identifier (it may hold I or E)
            match = re.match(r"\d+", text[i:])
            assert match is not None
            i += len(match.group()) + int(match.group())
            continue
        i += 1
    return None


def _components(text: str, i: int, nested: bool) -> Tuple[List[str], int]:
    parts: List[str] = []
    while i < len(text):
        if nested and text[i] == "E":
            return parts, i + 1
        if text.startswith("St", i) and not parts:
            parts.append("std")
            i += 2
            continue
        match = re.match(r"\d+", text[i:])
        if match:
            length = int(match.group())
            start = i + len(match.group())
            name = text[start:start + length]
            if len(name) != length:
                break
            parts.append(name)
            i = start + length
        elif text[i:i + 2] in _OPERATOR_CTOR and parts:
            parts.append(("~" if text[i] == "D" else "") + parts[-1].split("<")[0])
            i += 2
        elif text[i] == "I" and parts:
            end = _skip_template_args(text, i)
            if end is None:
                break
            parts[-1] += "<…>"
            i = end
        else:
            break
        if not nested:
            return parts, i
    return parts, i


def demangle(symbol: str) -> Optional[str]:
    """``c10::detail::torchInternalAssertFail(…)``, ``vtable for c10::Error``; None when not understood."""
    if not symbol.startswith("_Z"):
        return None
    text = symbol[2:]
    prefix = ""
    if text[:2] in _SPECIAL:
        prefix, text = _SPECIAL[text[:2]], text[2:]
    nested = text.startswith("N")
    i = 1 if nested else 0
    while nested and i < len(text) and text[i] in "rVKRO":
        i += 1
    parts, end = _components(text, i, nested)
    if not parts:
        return None
    name = "::".join(parts)
    if prefix:
        return prefix + name
    return name + ("(…)" if end < len(text) else "")


def abi_hint(symbol: str, torch_cxx11_abi: Optional[bool]) -> Optional[str]:
    """Why a std::string-taking torch symbol is missing, in words, when the symbol says so."""
    old_string = re.search(r"Ss(?=[A-Z_]|$)", symbol) is not None and "__cxx11" not in symbol
    if old_string and torch_cxx11_abi is not False:
        return ("_GLIBCXX_USE_CXX11_ABI mismatch: it takes std::string without __cxx11 (built with "
                "_GLIBCXX_USE_CXX11_ABI=0); this torch uses the CXX11 ABI")
    if "__cxx11" in symbol and torch_cxx11_abi is False:
        return ("_GLIBCXX_USE_CXX11_ABI mismatch: it takes std::__cxx11::basic_string (built with "
                "_GLIBCXX_USE_CXX11_ABI=1); this torch uses the pre-CXX11 ABI")
    return None


def readable(symbol: str) -> str:
    """``c10::detail::torchInternalAssertFail(…) (_ZN3c10…)``: the readable name, then the mangled one."""
    name = demangle(symbol)
    return f"{name} ({symbol})" if name else symbol
