"""Load the rule catalogue and pick rules by ID, prefix, name or area."""

from __future__ import annotations

from typing import List, Optional, Sequence

from gpudoctor import rule as rule_module
from gpudoctor.rule import AREA_TITLES, ID_PATTERN, NAME_PATTERN, RuleMeta, SEVERITY_RANK, area_title

_CATALOGUE: Optional[List[RuleMeta]] = None
_PACK_PROBLEMS: List[str] = []  # rule packs (gpudoctor/plugins.py) left out, as notes for the output


class RegistryError(RuntimeError):
    pass


def load_rules() -> List[RuleMeta]:
    """Import the rule modules once and return every rule, sorted by ID."""
    global _CATALOGUE
    if _CATALOGUE is None:
        import gpudoctor_rules

        gpudoctor_rules.load()
        builtin = validate(list(rule_module._REGISTERED))
        from gpudoctor import plugins

        packs, problems = plugins.load(builtin)
        _PACK_PROBLEMS[:] = [problem.note() for problem in problems]
        _CATALOGUE = builtin + packs
    return list(_CATALOGUE)


def pack_notes() -> List[str]:
    """Why an installed rule pack (or one of its rules) was left out; said in every output."""
    return list(_PACK_PROBLEMS)


def validate(rules: List[RuleMeta]) -> List[RuleMeta]:
    seen_ids, seen_names = set(), set()
    for meta in rules:
        if not ID_PATTERN.match(meta.id):
            raise RegistryError(f"rule ID {meta.id!r} is not GD + three digits")
        if not NAME_PATTERN.match(meta.name):
            raise RegistryError(f"rule name {meta.name!r} is not kebab-case")
        if meta.id in seen_ids or meta.name in seen_names:
            raise RegistryError(f"duplicate rule {meta.id} {meta.name}")
        if meta.area not in AREA_TITLES:
            raise RegistryError(f"rule {meta.id} has unknown area {meta.area!r}")
        if meta.severity not in SEVERITY_RANK:
            raise RegistryError(f"rule {meta.id} has unknown severity {meta.severity!r}")
        seen_ids.add(meta.id)
        seen_names.add(meta.name)
    return sorted(rules, key=lambda meta: meta.id)


def find(key: str) -> Optional[RuleMeta]:
    key = key.strip()
    for meta in load_rules():
        if meta.id.lower() == key.lower() or meta.name == key.lower():
            return meta
    return None


def _matches(meta: RuleMeta, selector: str) -> bool:
    """An ID or ID prefix (GD1, or a rule pack's prefix), a name, an area key or its title as printed ("GPUs & host")."""
    selector = selector.strip()
    upper = selector.upper()
    lower = selector.lower()
    prefix, digits = _split_id(meta.id)
    return (
        (meta.id.startswith(upper) and len(upper) >= len(prefix) and upper.startswith(prefix))
        or meta.name == lower
        or meta.area == lower
        or area_title(meta.area).lower() == " ".join(lower.split())
    )


def _split_id(rule_id: str):
    """"GD103" -> ("GD", "103"); a rule pack's "ACME1001" -> ("ACME", "1001")."""
    head = rule_id.rstrip("0123456789")
    return head, rule_id[len(head):]


def select(rules: Sequence[RuleMeta], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> List[RuleMeta]:
    """``include`` empty means all. Selectors are IDs, ID prefixes (GD1), names or areas."""
    unknown = [s for s in list(include) + list(exclude) if not any(_matches(m, s) for m in rules)]
    if unknown:
        raise RegistryError(f"no rule matches {', '.join(unknown)} (see: gpudoctor rules)")
    chosen = [m for m in rules if not include or any(_matches(m, s) for s in include)]
    return [m for m in chosen if not any(_matches(m, s) for s in exclude)]


def split_selectors(values: Optional[Sequence[str]]) -> List[str]:
    """--select GD1,GD301 --select vllm → ["GD1", "GD301", "vllm"]."""
    out: List[str] = []
    for value in values or ():
        out.extend(part for part in value.split(",") if part.strip())
    return out
