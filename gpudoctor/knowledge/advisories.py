"""Known-fix advisories: "feature X needs fix Y (PR #N, merged as commit C, first release V)".

This module is data plus a small evaluator; rules and the launch-command checks use it:

    from gpudoctor.knowledge.advisories import advisories_for
    for result in advisories_for("dflash", snapshot):   # a Snapshot, or {fact path: value}
        result.status   # "fixed" | "missing" | "unknown" | "not_applicable"
        result.reason   # one sentence, with the evidence it rests on

How an advisory is evaluated against the installed vLLM, strongest evidence first:

1. **Code markers** — the probe (probes/vllm_build.py) looks in the installed vLLM source
   (site-packages, or the editable checkout: the code that actually runs) for the fixed form
   and the old form of the code the PR changed. Found fixed → "fixed"; found old → "missing";
   the feature's files absent → "not_applicable" (this vLLM has no such feature).
2. **First release** — only where the first release containing the PR is verified (none of
   the seeds is); a release version is compared with it.
3. **Merge commit** — for an editable checkout with its ``.git``, the probe walks the history
   from HEAD for the PR's merge commit (verified short ids below).
4. Otherwise **"unknown"**, saying what could not be told. A release number is never guessed.

An entry is a plain ``Advisory``. ``probe_options()`` is what probes.python_stack hands the stdlib
collectors so that they know which markers and commits to look for; it is the only place
that knowledge lives.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

FIXED = "fixed"
MISSING = "missing"
UNKNOWN = "unknown"
NOT_APPLICABLE = "not_applicable"


class Marker:
    """How to recognise the change in vLLM's source (paths relative to the ``vllm`` package).

    Plain classes rather than dataclasses: this module is imported on every `check` that finds
    vLLM, and generating dataclass methods costs more than the evaluation.
    """

    __slots__ = ("files", "fixed", "unfixed", "feature")

    def __init__(self, files: Tuple[str, ...], fixed: str, unfixed: Optional[str] = None, feature: Tuple[str, ...] = ()):
        self.files = tuple(files)
        self.fixed = fixed  # regex found only once the fix is in
        self.unfixed = unfixed  # regex of the code before the fix
        self.feature = tuple(feature)  # files whose presence means the feature exists at all


class Advisory:
    """One known fix. ``first_release`` None: not verified, never guessed."""

    __slots__ = ("id", "feature", "title", "needs", "symptom", "pr", "merged", "merged_commit", "first_release",
                 "supersedes", "related", "marker", "aliases", "reported_by", "sources")

    def __init__(self, id: str, feature: str, title: str, needs: str, symptom: str, pr: int, merged: Optional[str] = None,
                 merged_commit: Optional[str] = None, first_release: Optional[str] = None, supersedes: Tuple[int, ...] = (),
                 related: Tuple[int, ...] = (), marker: Optional[Marker] = None, aliases: Tuple[str, ...] = (),
                 reported_by: Optional[str] = None, sources: Tuple[str, ...] = ()):
        self.id = id
        self.feature = feature  # "dflash": what the user turns on (a --speculative-config method, a package)
        self.title = title
        self.needs = needs  # what the fix does, one sentence
        self.symptom = symptom  # what happens without it
        self.pr = pr
        self.merged = merged  # merge date, ISO (verified)
        self.merged_commit = merged_commit  # short id of the merge commit on main (verified)
        self.first_release = first_release
        self.supersedes = tuple(supersedes)
        self.related = tuple(related)
        self.marker = marker
        self.aliases = tuple(aliases)
        self.reported_by = reported_by  # a rule that already reports it in `check` (GD514 skips it)
        self.sources = tuple(sources)

    def __repr__(self) -> str:
        return f"Advisory({self.id!r}, PR #{self.pr})"


ADVISORIES: Tuple[Advisory, ...] = (
    Advisory(
        id="ADV-dflash-aux-layer-offset",
        feature="dflash",
        title="DFlash auxiliary hidden-state layers are taken one layer early",
        needs=(
            "vLLM must add 1 to the drafter's dflash_config.target_layer_ids (DFlash ids name the decoder layer "
            "whose output is used; vLLM's aux-layer ids name the residual stream entering a layer)"
        ),
        symptom=(
            "every DFlash feature tap is one layer early: the server runs and answers, but acceptance length "
            "drops (mt-bench 3.92-4.03 before vs 4.11-4.16 after the fix, per the PR)"
        ),
        pr=40727,
        merged="2026-05-20",
        merged_commit="c628a93a64",
        related=(42704,),
        marker=Marker(
            files=("v1/worker/gpu_model_runner.py", "v1/worker/gpu/spec_decode/eagle/eagle3_utils.py"),
            fixed=r"i\s*\+\s*1\s+for\s+i\s+in\s+\(?\s*dflash_config\.get\(\s*[\"']target_layer_ids",
            unfixed=r"layer_ids\s*=\s*dflash_config\.get\(\s*[\"']target_layer_ids[\"']\s*\)",
            feature=("model_executor/models/qwen3_dflash.py",),
        ),
        sources=(
            "vllm-project/vllm#40727 '[Perf][Bugfix] Update dflash aux layer indexing' (merged; #42704 closed as its duplicate)",
            "merge commit c628a93a64 on 2026-05-20, files gpu_model_runner.py, speculators/algos.py, test_spec_decode.py (vLLM commit digests in the code index)",
            "https://github.com/vllm-project/vllm/pull/40727; fixed form '# Add 1 to convert DFlash's aux layer id semantics' in gpu_model_runner.py / eagle3_utils.py",
        ),
    ),
    Advisory(
        id="ADV-dflash-drafter-swa",
        feature="dflash",
        title="DFlash drafters with sliding-window attention",
        needs=(
            "the DFlash drafter must honour sliding-window layers (dflash_config.use_swa / swa_window_size, "
            "all-causal or all-non-causal SWA) and load mask_embedding.pt; mixed SWA/full drafters also need "
            "the V2 model runner (#47914, #48113)"
        ),
        symptom=(
            "a sliding-window DFlash drafter (e.g. XiaomiMiMo/MiMo-V2.5-Pro-FP4-DFlash) runs its layers as full "
            "attention or does not load, and acceptance collapses"
        ),
        pr=46104,
        merged="2026-06-30",
        merged_commit="9969466a5978",
        supersedes=(40898,),
        related=(46105, 47914, 48113, 54374),
        marker=Marker(
            files=("model_executor/models/qwen3_dflash.py",),
            fixed=r"[\"']use_swa[\"']",
            unfixed=r"class\s+DFlash",
            feature=("model_executor/models/qwen3_dflash.py",),
        ),
        sources=(
            "vllm-project/vllm#46104 '[Spec Decode] Support SWA + DFlash for MiMo' (merged; qwen3_dflash.py +193/-4)",
            "vllm-project/vllm#40898 (closed, not merged; maintainer: tracked in #46105)",
            "merge commit 9969466a5978 (2026-06-30/07-01 in the vLLM commit digests of the code index)",
            "https://github.com/vllm-project/vllm/pull/46104; qwen3_dflash.py @036a00d1 reads dflash_config.use_swa",
        ),
    ),
    Advisory(
        id="ADV-fa4-rotary-import",
        feature="flash-attn-4",
        aliases=("fa4",),
        title="vLLM's rotary embedding imports flash_attn.ops whenever flash_attn exists",
        needs="vLLM must import flash_attn.ops.triton.rotary inside try/except ModuleNotFoundError",
        symptom="with flash-attn-4 alone, vLLM fails with \"No module named 'flash_attn.ops'\" while building the model",
        pr=42679,
        related=(42675, 36900),
        marker=Marker(
            files=("model_executor/layers/rotary_embedding/common.py",),
            fixed=r"try:\s*\n\s*from\s+flash_attn\.ops\.triton\.rotary\s+import",
            unfixed=r"find_spec\(\s*[\"']flash_attn[\"']\s*\)\s+is\s+not\s+None\s*:\s*\n\s*from\s+flash_attn\.ops\.triton\.rotary\s+import",
            feature=("model_executor/layers/rotary_embedding/common.py",),
        ),
        reported_by="GD403",
        sources=(
            "vllm-project/vllm#42675 (issue), #42679 'fix: guard flash-attn rotary import' (merged), #36900 (earlier attempt)",
            "https://github.com/vllm-project/vllm/issues/42675 (\"No module named 'flash_attn.ops'\" with flash-attn-4 alone)",
        ),
    ),
)


class AdvisoryResult:
    """``status``: fixed | missing | unknown | not_applicable; ``how``: "code", "release", "commit" or ""."""

    __slots__ = ("advisory", "status", "reason", "evidence", "how")

    def __init__(self, advisory: Advisory, status: str, reason: str, evidence: Optional[List[Tuple[str, Any]]] = None, how: str = ""):
        self.advisory = advisory
        self.status = status
        self.reason = reason
        self.evidence = list(evidence or [])
        self.how = how

    def __repr__(self) -> str:
        return f"AdvisoryResult({self.advisory.id!r}, {self.status!r}, {self.reason!r})"

    def to_json(self) -> Dict[str, Any]:
        return {"id": self.advisory.id, "feature": self.advisory.feature, "pr": self.advisory.pr, "status": self.status,
                "reason": self.reason, "how": self.how, "evidence": [[k, v] for k, v in self.evidence]}


# --- what the probe needs ------------------------------------------------------------------------
def _epoch(day: Optional[str]) -> Optional[int]:
    """``2026-05-20`` -> seconds since the epoch at 00:00 UTC (no datetime import: it costs ms)."""
    match = re.match(r"^(\d{4})-(\d{2})-(\d{2})", day or "")
    if not match:
        return None
    year, month, day_ = (int(g) for g in match.groups())
    year -= month <= 2  # days-from-civil (proleptic Gregorian)
    era = year // 400
    yoe = year - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day_ - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return (era * 146097 + doe - 719468) * 86400


def probe_options(advisories: Sequence[Advisory] = ADVISORIES) -> Dict[str, Any]:
    """The markers and merge commits for probes.vllm_build (JSON-able)."""
    markers = []
    commits = []
    for adv in advisories:
        if adv.marker is not None:
            markers.append({"id": adv.id, "files": list(adv.marker.files), "fixed": adv.marker.fixed,
                            "unfixed": adv.marker.unfixed, "feature": list(adv.marker.feature)})
        if adv.merged_commit:
            commits.append({"id": adv.id, "commit": adv.merged_commit, "merged_epoch": _epoch(adv.merged)})
    return {"markers": markers, "commits": commits}


# --- evaluation -------------------------------------------------------------------------------
def _value(facts: Any, path: str) -> Any:
    """A fact's value from a Snapshot, a {path: Fact}, a {path: {"value", "status"}} or a {path: value}."""
    if hasattr(facts, "value") and callable(getattr(facts, "value")):
        return facts.value(path)
    if isinstance(facts, Mapping):
        item = facts.get(path)
        if hasattr(item, "ok") and hasattr(item, "value"):
            return item.value if item.ok else None
        if isinstance(item, Mapping) and "status" in item and "value" in item and set(item) <= {"value", "status", "source", "detail"}:
            return item["value"] if item["status"] == "ok" else None
        return item
    return None


def _detail(facts: Any, path: str) -> str:
    """Why a fact is missing, when the caller gave Facts (a Snapshot or {path: Fact})."""
    if hasattr(facts, "get") and not isinstance(facts, Mapping):
        return str(getattr(facts.get(path), "detail", "") or "")
    item = facts.get(path) if isinstance(facts, Mapping) else None
    if isinstance(item, Mapping):
        return str(item.get("detail") or "")
    return str(getattr(item, "detail", "") or "")


def _release_tuple(version: str) -> Optional[Tuple[int, ...]]:
    match = re.match(r"^(\d+(?:\.\d+)*)$", version or "")
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


def describe_pr(adv: Advisory) -> str:
    text = f"PR #{adv.pr}"
    if adv.merged_commit:
        text += f", merged as {adv.merged_commit}" + (f" on {adv.merged}" if adv.merged else "")
    text += f", first release {adv.first_release}" if adv.first_release else ", first release: not verified"
    return text


def evaluate(adv: Advisory, facts: Any) -> AdvisoryResult:
    build = _value(facts, "vllm.build")
    if not isinstance(build, Mapping):
        return AdvisoryResult(adv, UNKNOWN, "vLLM's build was not read (is vLLM installed in this environment?)")
    version = str(build.get("version") or "?")
    evidence: List[Tuple[str, Any]] = [("vllm.build.version", version), ("vllm.build.origin", build.get("origin"))]
    markers = _value(facts, "vllm.code_markers")
    mark = markers.get(adv.id) if isinstance(markers, Mapping) else None
    if isinstance(mark, Mapping):
        state = mark.get("state")
        where = mark.get("file")
        evidence.append((f"vllm.code_markers.{adv.id}", dict(mark)))
        if state == "fixed":
            return AdvisoryResult(adv, FIXED, f"vLLM {version} has the fix of #{adv.pr} (vllm/{where} carries it)", evidence, "code")
        if state == "unfixed":
            return AdvisoryResult(adv, MISSING, f"vLLM {version} lacks #{adv.pr}: vllm/{where} still has the code before the fix",
                                  evidence, "code")
        if state == "absent":
            return AdvisoryResult(adv, NOT_APPLICABLE, f"vLLM {version} has no {adv.feature} at all ({mark.get('detail', 'feature files absent')})",
                                  evidence, "code")
    parts = build.get("version_parts") if isinstance(build.get("version_parts"), Mapping) else {}
    installed = _release_tuple(str(parts.get("base") or "")) if parts.get("release") else None
    first = _release_tuple(adv.first_release or "")
    if installed is not None and first is not None:
        status = FIXED if installed >= first else MISSING
        return AdvisoryResult(adv, status, f"vLLM {version} {'includes' if status == FIXED else 'predates'} release {adv.first_release}, "
                                           f"the first with #{adv.pr}", evidence, "release")
    commits = _value(facts, "vllm.fix_commits")
    walk = commits.get(adv.id) if isinstance(commits, Mapping) else None
    if isinstance(walk, Mapping) and walk.get("state") in ("yes", "no"):
        evidence.append((f"vllm.fix_commits.{adv.id}", dict(walk)))
        head = ((build.get("checkout") or {}).get("commit") or "?")[:12] if isinstance(build.get("checkout"), Mapping) else "?"
        if walk["state"] == "yes":
            return AdvisoryResult(adv, FIXED, f"the checkout's HEAD {head} contains {adv.merged_commit} (#{adv.pr})", evidence, "commit")
        return AdvisoryResult(adv, MISSING, f"the checkout's HEAD {head} does not contain {adv.merged_commit} (#{adv.pr}): "
                                            f"{walk.get('detail', 'not in its history')}", evidence, "commit")
    why = []
    if isinstance(mark, Mapping):
        why.append(f"the source markers were inconclusive ({mark.get('detail', mark.get('state'))})")
    elif markers is None:
        why.append("the installed source was not checked for it")
    if not adv.first_release:
        why.append("the first release with it is not verified")
    elif installed is None:
        why.append(f"{version} is not a release version")
    if isinstance(walk, Mapping):
        why.append(f"history: {walk.get('detail', walk.get('state'))}")
    elif build.get("origin") in ("git", "editable", "local"):
        detail = _detail(facts, "vllm.fix_commits")
        why.append("the checkout's history is not available" + (f" ({detail})" if detail else ""))
    return AdvisoryResult(adv, UNKNOWN, f"cannot tell whether vLLM {version} has #{adv.pr}: " + "; ".join(why), evidence)


def advisories_for(feature: str, vllm_facts: Any, advisories: Sequence[Advisory] = ADVISORIES) -> List[AdvisoryResult]:
    """Every advisory about ``feature`` ("dflash", "eagle3", "flash-attn-4" …), evaluated.

    ``vllm_facts``: a gpudoctor Snapshot, or a mapping of fact path to value (or to Fact /
    plain fact dict) holding at least ``vllm.build`` and, when collected, ``vllm.code_markers``
    and ``vllm.fix_commits``. Unknown features give an empty list.
    """
    key = re.sub(r"[-_ ]+", "-", str(feature or "").strip().lower())
    return [evaluate(adv, vllm_facts) for adv in advisories
            if key == adv.feature or key in adv.aliases]
