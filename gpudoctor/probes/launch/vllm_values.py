"""One value of a vLLM flag, checked the way vLLM's parser and its config classes check it.

The flag definitions come from vllm_args (read from vLLM's source); this module takes one value
given on a command line and says what vLLM makes of it (``convert``) and what it refuses
(``problems``). Stdlib only, no vLLM import.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional

from gpudoctor.probes.launch.vllm_args import Arg

def human_readable_int(text: str) -> int:
    """vLLM's human_readable_int: '32k' = 32000, '32K' = 32768; 'auto' / '-1' = -1 (max-model-len)."""
    text = text.strip()
    if text.lower() == "auto":
        return -1
    if len(text) > 40:  # no real size has 40 digits; float('9' * 400) is inf and int(inf) raises OverflowError
        raise ValueError(f"{len(text)} characters; not a usable number")
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text)
    if match:
        number, suffix = match.groups()
        if suffix.islower():
            return int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix])
        if "." in number:
            raise ValueError(f"decimals are not allowed with the binary suffix {suffix}")
        return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    return int(text)


def human_int(text: str) -> int:
    """A flag of type human_readable_int: as above, but 'auto' only where the flag takes it."""
    if text.strip().lower() == "auto":
        raise ValueError("'auto' is not a number here")
    return human_readable_int(text)


def convert(arg: Arg, text: str) -> Any:
    """The value argparse (and vLLM's type function) makes of ``text``; ValueError when refused."""
    import json

    if arg.optional and text in ("", "None"):
        return None
    kind = arg.type
    if kind == "int":
        return int(text)
    if kind == "float":
        number = float(text)
        return number
    if kind == "human_int":
        return human_int(text)
    if kind == "lower_snake":  # `type=lambda s: s.lower().replace("-", "_")`, then the choices
        return text.lower().replace("-", "_")
    if kind == "human_int_or_auto":
        return -1 if text.strip().lower() == "auto" else human_int(text)
    if kind in ("json", "config"):
        try:
            return json.loads(text)
        except RecursionError:
            raise ValueError("not valid JSON (nested too deeply)") from None
        except ValueError as exc:
            raise ValueError(f"not valid JSON ({getattr(exc, 'msg', exc)})") from None
    if kind == "dict_or_str":
        if re.match(r"(?s)^\s*{.*}\s*$", text):
            try:
                return json.loads(text)
            except ValueError as exc:
                raise ValueError(f"not valid JSON ({getattr(exc, 'msg', exc)})") from None
        return text
    return text


# `Literal[...] | str` fields whose other strings vLLM refuses when it builds the config:
# ModelConfig._verify_quantization ("Unknown quantization method: … Must be one of
# QUANTIZATION_METHODS", the Literal plus registered plugins) and CacheConfig._validate_cache_dtype
# ("Invalid kv_cache_dtype", the CacheDType Literal plus register_kv_cache_dtype names), 0.33.
# Other `Literal | str` fields (tokenizer modes, backends …) take names registered at run time.
STRICT_OPEN_FIELDS = {"quantization", "cache_dtype"}


def _shown(bound: float) -> str:
    """4294967295 as written, not 4.29497e+09; 0.5 as 0.5."""
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 1e18 else f"{bound:g}"


def out_of_range(arg: Arg, value: Any) -> Optional[str]:
    """The numeric range of the flag's config field (pydantic ``Field(ge=…, lt=…)``) the value breaks."""
    if not (isinstance(value, (int, float)) and not isinstance(value, bool) and arg.bounds):
        return None
    b = arg.bounds
    if "gt" in b and not value > b["gt"] or "ge" in b and not value >= b["ge"] or "lt" in b and not value < b["lt"] \
            or "le" in b and not value <= b["le"]:
        low = f"> {_shown(b['gt'])}" if "gt" in b else f">= {_shown(b['ge'])}" if "ge" in b else ""
        high = f"< {_shown(b['lt'])}" if "lt" in b else f"<= {_shown(b['le'])}" if "le" in b else ""
        return f"out of range: must be {' and '.join(x for x in (low, high) if x)}"
    return None


def problems(arg: Arg, value: Any, with_range: bool = True) -> List[str]:
    """What vLLM refuses about an already converted value (choices, range, JSON keys); the range
    only ``with_range`` (the caller decides it apart when vLLM checks it only under a condition)."""
    out: List[str] = []
    if arg.known_values and arg.dest in STRICT_OPEN_FIELDS and isinstance(value, str) and value not in arg.known_values:
        shown = ", ".join(str(c) for c in arg.known_values)
        out.append(f"{value!r} is not one of this vLLM's values ({shown}; a plugin may register more)")
    if arg.choices is not None and value not in arg.choices and not (value is None and arg.optional):
        shown = ", ".join(str(c) for c in arg.choices if c is not None)
        out.append(f"invalid choice {value!r} (choose from {shown})")
    range_problem = out_of_range(arg, value) if with_range else None
    if range_problem:
        out.append(range_problem)
    if arg.type == "config" and value is not None and not isinstance(value, dict):
        out.append(f"must be a JSON object ({{...}}) for {arg.config_class}, got {type(value).__name__}")
    if arg.keys is not None and isinstance(value, dict):
        unknown = sorted(k for k in value if k not in arg.keys)
        if unknown:
            out.append(f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))} "
                       f"({arg.config_class} refuses extra keys)")
    return out


