"""GD716-GD720: speculative decoding (method, drafter, target layers, known fixes, token count)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from gpudoctor.knowledge import advisories
from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Unknown, rule
from .common import _applies, _applies_server, _args, _command_with, _config, _int, _spec, _vllm_version

SPEC_WITH_AUX_LAYERS = {"dflash", "eagle3", "dspark", "extract_hidden_states"}

@rule("GD716", "speculative-method-unknown", severity=ERROR, area="launch", applies=_applies)
def speculative_method_unknown(snap):
    """The speculative decoding method is not one the installed vLLM knows.

    ## Why
    `--speculative-config` `method` is checked against vLLM's `SpeculativeMethod` literal
    (pydantic validation at startup). Methods arrive release by release — `eagle3`, the MTP
    variants, `dflash` (2026), `dspark` — so a config copied from a newer model card fails on
    an older vLLM with a validation error. Without `method` and without `model` vLLM cannot
    tell what to run.

    ## Fix
    Use a method this vLLM lists (shown), or upgrade vLLM to a version with the method.

    ## References
    - vllm/config/speculative.py `SpeculativeMethod`.
    - https://github.com/vllm-project/vllm/blob/main/docs/features/speculative_decoding/README.md
    """
    spec = _spec(snap)
    if not spec:
        return NotApplicable("no speculative decoding")
    method = spec.get("method")
    if not method and not isinstance(_args(snap).get("--speculative-config"), dict):
        return NotApplicable("no --speculative-config (a lone --spec-method/--spec-tokens names nothing to check)")
    if not method:
        if spec.get("model"):
            return None  # vLLM detects the method from the drafter's config
        return Fail("--speculative-config has neither `method` nor `model`: vLLM cannot tell what to run",
                    [("launch.args.--speculative-config", spec)], Fix("Set `method` (and `model` for a drafter)."))
    methods = snap.get("launch.vllm.spec_methods")
    if not methods.ok:
        return Unknown(f"cannot check the method: {methods.detail}")
    if method in (methods.value or []):
        return None
    return Fail(
        f"{_vllm_version(snap)} has no speculative method {method!r} (it has: {', '.join(methods.value or [])}); startup fails "
        "validating --speculative-config",
        [("launch.args.--speculative-config.method", method), "launch.vllm.spec_methods", "launch.vllm"],
        Fix(f"Install a vLLM that has {method!r}, or use a method this one has."),
    )


@rule("GD717", "speculative-drafter-unreadable", severity=ERROR, area="launch", applies=_applies_server)
def speculative_drafter_unreadable(snap):
    """The speculative drafter named in `--speculative-config` is missing or its config.json is unreadable.

    ## Why
    The drafter is loaded after the target model: a wrong path or a broken config.json fails
    only after the target's weights are loaded and compiled — minutes into startup. DFlash and
    EAGLE-3 drafters also carry the target layer ids in that config; without it nothing can
    be checked.

    ## Fix
    Point `model` in `--speculative-config` at the drafter's directory (or a repo id that is
    cached / downloadable) and repair its config.json.

    SGLang names its drafter with `--speculative-draft-model-path` (alias
    `--speculative-draft-model`) and loads it the same way, after the target.

    ## References
    - https://github.com/vllm-project/vllm/blob/main/docs/features/speculative_decoding/README.md
    - https://docs.sglang.ai/advanced_features/speculative_decoding.html
    """
    sglang = snap.value("launch.kind") == "sglang-serve"
    where = "--speculative-draft-model-path" if sglang else "--speculative-config model"
    if sglang and not (snap.value("launch.sglang_model") or {}).get("speculative_draft_model_path"):
        return NotApplicable("no --speculative-draft-model-path in the command")
    if not sglang and not _spec(snap).get("model"):
        return NotApplicable("no drafter model in the speculative config")
    source = snap.get("drafter.source")
    if not source.ok:
        return Unknown(source.detail or "drafter not inspected")
    info = source.value or {}
    if info.get("kind") == "missing_local":
        return Fail(f"the drafter {info.get('given')!r} does not exist ({info.get('detail')})", ["drafter.source"],
                    Fix(f"Give the drafter's directory or repo id in {where}."))
    config = snap.get("drafter.config")
    if config.status == "error":
        return Fail(f"the drafter {info.get('given')!r}: {config.detail} ({config.source})", ["drafter.config", "drafter.source"],
                    Fix("Restore the drafter's config.json (re-download it)."))
    weights = snap.get("drafter.weights")
    data = weights.value if isinstance(weights.value, dict) else {}
    problems = ([f"missing shard(s): {', '.join(data['missing'][:4])}"] if data.get("missing") else []) + list(data.get("problems") or [])
    if problems and info.get("kind") in ("local", "hf_cache"):
        return Fail(f"the drafter {info.get('given')!r}: weights unusable: {'; '.join(problems[:4])}", ["drafter.weights"],
                    Fix("Re-download the drafter."))
    return None


def _layer_ids(dcfg: Dict[str, Any], method: str) -> Tuple[Optional[List[Any]], str]:
    dflash = dcfg.get("dflash_config") if isinstance(dcfg.get("dflash_config"), dict) else {}
    if method in ("dflash", "dspark") or dflash:
        for key, where in ((dflash.get("target_layer_ids"), "dflash_config.target_layer_ids"),
                           (dcfg.get("dspark_target_layer_ids"), "dspark_target_layer_ids"),
                           (dcfg.get("target_layer_ids"), "target_layer_ids")):
            if key is not None:
                return key, where
    if dcfg.get("eagle_aux_hidden_state_layer_ids") is not None:
        return dcfg["eagle_aux_hidden_state_layer_ids"], "eagle_aux_hidden_state_layer_ids"
    return None, ""


@rule("GD718", "speculative-target-layers-invalid", severity=ERROR, area="launch", applies=_applies)
def speculative_target_layers_invalid(snap):
    """The drafter's target layer ids do not fit the target model (DFlash / EAGLE-3).

    ## Why
    DFlash and EAGLE-3 drafters read hidden states of chosen target layers
    (`dflash_config.target_layer_ids`, `eagle_aux_hidden_state_layer_ids`) and concatenate
    them into the drafter's first projection, whose width is fixed by how many there are. For
    DFlash the ids are 0-based indices of the decoder layer whose *output* is used (vLLM adds
    1 to turn them into its aux-layer ids, PR #40727), so each must be in 0 … layers−1 of the
    target. An id past the last layer is never captured (shape mismatch or a crash); a
    duplicate or an unsorted list does not match the order vLLM collects them in (layer
    order), so the drafter sees its features shuffled and acceptance collapses without any
    error (sglang#37475). A drafter trained for another target (`num_target_layers`,
    `target_hidden_size` that differ from the target) is the same problem.

    ## Fix
    Use the drafter made for this target model; fix the ids to the target's layer range,
    unique and ascending.

    ## References
    - vllm-project/vllm PR #40727; https://github.com/sgl-project/sglang/issues/37475,
      https://github.com/sgl-project/sglang/issues/37476.
    """
    spec = _spec(snap)
    method = str(spec.get("method") or "")
    if not spec:
        return NotApplicable("no speculative decoding")
    dcfg = _config(snap, "drafter")
    if dcfg is None:
        if method and method not in SPEC_WITH_AUX_LAYERS:
            return NotApplicable(f"method {method!r} has no target layer ids")
        return Unknown(f"drafter config unknown ({snap.get('drafter.config').describe()})")
    ids, where = _layer_ids(dcfg, method)
    if ids is None:
        if method in ("dflash", "dspark"):
            return Fail(f"the {method} drafter's config.json has no target layer ids (dflash_config.target_layer_ids)",
                        ["drafter.config"], Fix("Use a DFlash drafter checkpoint (its config carries dflash_config)."))
        return NotApplicable("the drafter names no target layers")
    cfg = _config(snap)
    layers = _int((cfg or {}).get("num_hidden_layers"))
    fails = []
    evidence = [("drafter.config." + where, ids), ("model.config.num_hidden_layers", layers)]
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids) or not ids:
        return Fail(f"{where} = {ids!r} is not a list of layer numbers", evidence, Fix("Fix the drafter's config.json."))
    if layers is None:
        return Unknown(f"the target's layer count is unknown ({snap.get('model.config').describe()})")
    eagle = where == "eagle_aux_hidden_state_layer_ids"
    top = layers if eagle else layers - 1  # EAGLE-3 aux ids name layer boundaries (0 … layers)
    outside = [i for i in ids if i < 0 or i > top]
    if outside:
        fails.append(Fail(f"{where} {ids} has {outside} outside the target's layers 0…{top} ({layers} layers): "
                          "those hidden states are never captured", evidence,
                          Fix("Use the drafter trained for this target model."), subject="range"))
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        fails.append(Fail(f"{where} {ids} repeats {dupes}: vLLM captures each layer once, so the drafter gets fewer features than it "
                          "expects", evidence, Fix("List each layer once."), subject="duplicates"))
    if ids != sorted(ids) and not dupes:
        fails.append(Fail(f"{where} {ids} is not ascending: vLLM collects the hidden states in layer order, so the drafter would see "
                          "its features in a different order than it lists them (acceptance collapses silently)", evidence,
                          Fix("Check the drafter card; list the ids in ascending order."), subject="order", severity=WARNING))
    trained_for = _int(dcfg.get("num_target_layers") or (dcfg.get("dflash_config") or {}).get("num_target_layers"))
    if trained_for and trained_for != layers:
        fails.append(Fail(f"the drafter was made for a target with {trained_for} layers; this target has {layers}",
                          [("drafter.config.num_target_layers", trained_for), ("model.config.num_hidden_layers", layers)],
                          Fix("Use the drafter made for this target model."), subject="target"))
    hidden = _int(dcfg.get("target_hidden_size"))
    if hidden and _int((cfg or {}).get("hidden_size")) and hidden != cfg["hidden_size"]:
        fails.append(Fail(f"the drafter expects target hidden size {hidden}; the target's is {cfg['hidden_size']} (a shape mismatch at load)",
                          [("drafter.config.target_hidden_size", hidden), ("model.config.hidden_size", cfg["hidden_size"])],
                          Fix("Use the drafter made for this target model."), subject="hidden size"))
    return fails


def advisories_for(feature: str, snap) -> List[advisories.AdvisoryResult]:
    """gpudoctor/knowledge/advisories.py's evaluation of ``feature`` for the vLLM the command runs.

    The launch probe records that vLLM's build and code markers as ``launch.vllm.build`` /
    ``.code_markers`` / ``.fix_commits``; they stand in for the ``vllm.*`` facts of
    gpudoctor's own environment, which may be another vLLM.
    """
    facts = dict(snap.facts)
    if snap.get("launch.vllm").ok:  # the command's vLLM was found: judge that one, not gpudoctor's own
        for key in ("build", "code_markers", "fix_commits"):
            facts.pop(f"vllm.{key}", None)
            if snap.get(f"launch.vllm.{key}").ok:
                facts[f"vllm.{key}"] = snap.facts[f"launch.vllm.{key}"]
    return list(advisories.advisories_for(feature, facts) or [])


@rule("GD719", "speculative-method-needs-fixes", severity=ERROR, area="launch", applies=_applies)
def speculative_method_needs_fixes(snap):
    """The installed vLLM lacks fixes the chosen speculative method needs.

    ## Why
    Young speculative methods ship with bugs fixed later, often silently wrong rather than
    crashing: DFlash's target-layer ids were read one layer early until PR #40727 (acceptance
    length well below the drafter card's numbers), and sliding-window DFlash drafters need
    PR #46104 (and the V2 model runner for mixed layers). A vLLM development branch or an old
    wheel may lack them. The advisories (which PR, how to recognise it in the source) and
    their evaluation live in gpudoctor/knowledge/advisories.py; this rule asks it about the launch's
    method, for the vLLM the command runs.

    ## Fix
    Install a vLLM release that includes the fixes listed, or apply them to the branch.

    ## References
    - gpudoctor/knowledge/advisories.py.
    - https://github.com/vllm-project/vllm/blob/main/vllm/engine/arg_utils.py
    """
    method = str(_spec(snap).get("method") or "")
    if not method:
        return NotApplicable("no speculative method")
    try:
        results = advisories_for(method, snap)
    except Exception as exc:  # the evaluator belongs to another module: never let it crash this rule
        return Unknown(f"the advisory check failed: {type(exc).__name__}: {exc}")
    if not results:
        return NotApplicable(f"no known fixes recorded for {method!r}")
    fails, unknown = [], []
    for result in results:
        adv = result.advisory
        pr = adv.pr
        if result.status == "missing":
            evidence = [(k, v) for k, v in result.evidence][:4]
            fails.append(Fail(
                f"{_vllm_version(snap)} lacks PR #{pr} ({adv.title}): {adv.symptom}. {result.reason}",
                evidence + [("launch.args.--speculative-config.method", method)],
                Fix(f"Install a vLLM that includes {advisories.describe_pr(adv)}, or apply the PR to this branch."),
                subject=f"PR #{pr}",
            ))
        elif result.status == "unknown":
            unknown.append(str(result.reason or f"PR #{pr}: cannot tell"))
    if fails:
        return fails
    if unknown:
        return Unknown("; ".join(unknown))
    return None


@rule("GD720", "num-speculative-tokens-invalid", severity=ERROR, area="launch", applies=_applies)
def num_speculative_tokens_invalid(snap):
    """`num_speculative_tokens` is missing, not a positive integer, or beyond what the drafter predicts.

    ## Why
    vLLM requires `num_speculative_tokens` > 0 (pydantic `gt=0`), an integer. A DFlash drafter
    predicts one block of `block_size` positions, the first being the bonus token: asking for
    more than `block_size − 1` drafts positions the drafter was never trained for, which are
    (almost) never accepted and cost a wider verification step each time. Very long drafts
    (> 16) waste target compute on every step for any method.

    ## Fix
    For DFlash use `block_size − 1` (15 for the b16 drafters); for EAGLE/MTP 1–5 is typical.

    ## References
    - vllm/v1/spec_decode/dflash.py (query tokens per request = 1 + num_speculative_tokens).
    - https://github.com/vllm-project/vllm/blob/main/docs/features/speculative_decoding/README.md
    """
    spec = _spec(snap)
    if not spec:
        return NotApplicable("no speculative decoding")
    count = spec.get("num_speculative_tokens")
    evidence: List[Any] = [("launch.args.--speculative-config.num_speculative_tokens", count)]
    if count is None:
        return None  # taken from the drafter's config where it has one; vLLM says so otherwise
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return Fail(f"num_speculative_tokens = {count!r}: vLLM requires a positive integer", evidence,
                    Fix("Give a positive integer.", [_command_with(snap, "--speculative-config.num_speculative_tokens", 3)]))
    method = str(spec.get("method") or "")
    dcfg = _config(snap, "drafter") or {}
    block = _int(dcfg.get("block_size") or (dcfg.get("dflash_config") or {}).get("block_size"))
    if method == "dflash" and block and count > block - 1:
        return Fail(f"num_speculative_tokens {count} > block_size − 1 = {block - 1} of the DFlash drafter: positions past its block are "
                    "never trained, so they are rejected and only cost verification work",
                    evidence + [("drafter.config.block_size", block)],
                    Fix(f"Use {block - 1}.", [_command_with(snap, "--speculative-config.num_speculative_tokens", block - 1)]), severity=WARNING)
    if count > 16 and method != "dflash":
        return Fail(f"num_speculative_tokens {count} is unusually long for {method or 'this method'}: acceptance falls with every "
                    "position, and each step verifies all of them", evidence, Fix("Try 1–5 and measure acceptance (gpudoctor smoke)."),
                    severity=WARNING)
    return None
