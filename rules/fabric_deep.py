"""GD318–GD319: what ``--deep`` measured between the GPUs — the P2P write-and-verify and one NCCL all-reduce.

Area "gpu". They judge probes/deep_fabric.py's facts ``gpu.p2p_check`` and
``nccl.allreduce_check``: without --deep they are not applicable; when the child could not run
(no torch, its deadline) unknown with the reason. One cause, one finding: an all-reduce that
failed because NCCL_SOCKET_IFNAME names no interface is GD313's (its NCCL error is evidence
there), an all-reduce through host memory because NCCL_P2P_DISABLE=1 is GD315's.
"""

from __future__ import annotations

from typing import Any, Dict, List

from gpudoctor.rule import ERROR, WARNING, Fail, Fix, NotApplicable, Passed, Unknown, rule

from .fabric import nccl_p2p_disabled_on_nvlink, nccl_socket_ifname_missing

P2P = "gpu.p2p_check"
NCCL = "nccl.allreduce_check"
STALLED_S = 2.0
# What a pair that corrupts or stalls peer traffic gets: NCCL's own troubleshooting (ACS, IOMMU) and
# the serving-side workaround until the machine is fixed.
BROKEN_P2P_FIX = [
    "sudo lspci -vvv | grep -i acsctl   # 'SrcValid+' on a bridge between the GPUs: ACS redirects peer traffic",
    "cat /proc/cmdline   # an IOMMU in translation mode: add iommu=pt (or disable ACS in the BIOS) and reboot",
    "export NCCL_P2P_DISABLE=1   # until then: NCCL goes through host memory (slower, correct)",
    "vllm serve … --disable-custom-all-reduce   # vLLM's own all-reduce writes GPU to GPU directly",
]


def _deep_fact(snap, path: str):
    """The fact's value, or the NotApplicable/Unknown that says why there is none."""
    fact = snap.get(path)
    if fact.ok and isinstance(fact.value, dict):
        return fact.value
    if fact.status in ("not_supported", "absent"):
        return NotApplicable(f"{path}: {fact.detail or fact.status}")
    return Unknown(f"needs {path}: {fact.describe()}")


@rule("GD318", "p2p-write-verify-failed", severity=ERROR, area="gpu")
def p2p_write_verify_failed(snap):
    """A GPU-to-GPU copy delivered wrong data or never finished (--deep).

    ## Why
    NVML and CUDA can report peer-to-peer as supported while the PCIe fabric breaks it: with
    Access Control Services (ACS) on a bridge between the GPUs, or an IOMMU translating their
    addresses, peer writes are redirected through the root complex and arrive corrupted or not at
    all. Tensor-parallel serving then hangs at its first all-reduce or, worse, produces garbage:
    vLLM's custom all-reduce and NCCL's P2P transport both write GPU to GPU. `--deep` copies a
    32 MiB pattern between every pair with peer access and compares it on the receiving GPU.

    ## Fix
    Disable ACS on the bridges between the GPUs (BIOS, or `setpci` per bridge) or put the IOMMU
    in pass-through (`iommu=pt`) and reboot; meanwhile serve with `NCCL_P2P_DISABLE=1` and
    vLLM's `--disable-custom-all-reduce`.

    ## References
    - NCCL troubleshooting, PCI Access Control Services (ACS) and IOMMU:
      https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html#pci-access-control-services-acs
    - vLLM troubleshooting, incorrect hardware/driver (its P2P sanity check):
      https://docs.vllm.ai/en/latest/usage/troubleshooting.html
    """
    value = _deep_fact(snap, P2P)
    if not isinstance(value, dict):
        return value
    pairs: Dict[str, Dict[str, Any]] = value.get("pairs") or {}
    if not pairs:
        return NotApplicable("no GPU pair was tested")
    wrong = [f"GPU {pair}: {entry.get('wrong_words')} of the copied words differ" for pair, entry in sorted(pairs.items())
             if entry.get("peer_access") and entry.get("verified") is False]
    # A 32 MiB peer copy takes well under a millisecond (0.1 ms over the 2xH200's NVLink): one still
    # running 2 s after it started is stuck; one the deadline cut just after it started proves nothing.
    hung = [f"GPU {pair}: the copy did not finish in {entry.get('stalled_s')} s" for pair, entry in sorted(pairs.items())
            if entry.get("outcome") == "timeout" and (entry.get("stalled_s") or 0) >= STALLED_S]
    cut = [pair for pair, entry in sorted(pairs.items()) if entry.get("outcome") == "timeout" and (entry.get("stalled_s") or 0) < STALLED_S]
    failed = [f"GPU {pair}: the copy raised {value.get('error') or 'an error'}" for pair, entry in sorted(pairs.items())
              if entry.get("outcome") == "error"]
    broken = wrong + failed + hung
    if cut and not broken:
        return Unknown(f"the P2P check was stopped by its deadline just as the copy GPU {cut[0]} started; run again with a longer --timeout")
    if broken:
        return Fail(
            f"GPU-to-GPU copies are broken here ({'; '.join(broken[:4])}): tensor-parallel all-reduces will hang or return garbage",
            [P2P, "gpu.pairs"],
            Fix("Make peer-to-peer work (ACS off, IOMMU pass-through), or route around it until then.", BROKEN_P2P_FIX,
                safety="needs_root"),
        )
    denied = [pair for pair, entry in sorted(pairs.items()) if entry.get("peer_access") is False]
    speeds = [f"{pair} {entry.get('gbps')} GB/s" for pair, entry in sorted(pairs.items()) if entry.get("verified")]
    note = f"; CUDA grants no peer access for {', '.join(denied)} (GD310 judges P2P support)" if denied else ""
    return Passed(f"every pair with peer access copied and verified: {', '.join(speeds[:8]) or 'none'}{note}")


def _static_cause(snap) -> str:
    """The rule that already names the cause of what the all-reduce showed, if one fires."""
    if isinstance(nccl_socket_ifname_missing(snap), Fail):
        return "GD313"
    if isinstance(nccl_p2p_disabled_on_nvlink(snap), Fail):
        return "GD315"
    return ""


@rule("GD319", "nccl-allreduce-failed", severity=ERROR, area="gpu")
def nccl_allreduce_failed(snap):
    """NCCL's all-reduce across the planned GPUs failed, returned a wrong sum, or left the GPUs' links unused (--deep).

    ## Why
    Every tensor-parallel step is an all-reduce. `--deep` runs one the way vLLM and SGLang do (one
    process per GPU, NCCL), checks its sum, times it (bus bandwidth as nccl-tests counts it) and
    reads from NCCL_DEBUG=INFO which transport NCCL chose between the GPUs: P2P (NVLink or PCIe
    peer-to-peer), SHM (through host memory) or NET (sockets, InfiniBand). A server whose
    all-reduce fails never starts; one whose NCCL falls back to host memory on GPUs that can do
    P2P runs several times slower (measured on a 2xH200 with NVLink: 268 GB/s over P2P, 26 GB/s
    over SHM).

    ## Fix
    The NCCL error quoted here names the cause; for a wrong sum, the GPU-to-GPU path is broken
    (see GD318). For a fallback to SHM or NET, look for what forbids P2P: `NCCL_P2P_LEVEL`,
    a container without `--ipc=host`, or P2P refused by the PCIe topology.

    ## References
    - NCCL troubleshooting: https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/troubleshooting.html
    - NCCL environment variables (NCCL_DEBUG, NCCL_P2P_LEVEL):
      https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
    - nccl-tests' bus bandwidth: https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md

    ## Severity
    An error when the all-reduce fails or returns a wrong sum (multi-GPU serving fails or
    corrupts); a warning when it works but NCCL went around P2P that NVML reports (it runs
    slower than it could). One that does not finish before the check's deadline is unknown,
    never an error: the deadline may simply be too short.
    """
    value = _deep_fact(snap, NCCL)
    if not isinstance(value, dict):
        return value
    outcome = value.get("outcome")
    world = value.get("world") or 0
    gpus = ",".join(str(g) for g in value.get("gpus") or [])
    if outcome in ("error", "wrong_sum"):
        cause = _static_cause(snap)
        if cause:
            return NotApplicable(f"the all-reduce failed for the cause {cause} names (its NCCL error is evidence there)")
        if outcome == "wrong_sum":
            return Fail(f"NCCL's all-reduce over GPU {gpus} returned a wrong sum: the GPU-to-GPU path corrupts data",
                        [NCCL, "gpu.pairs"], Fix("Make peer-to-peer work, or route around it.", BROKEN_P2P_FIX, safety="needs_root"))
        warning = value.get("nccl_warning")
        words = str(value.get("error") or "").splitlines()
        said = " ".join(w.strip() for w in words[:4] if w.strip())[:400]
        return Fail(
            f"NCCL's all-reduce over GPU {gpus} failed: {said}" + (f" — NCCL: {warning.split('NCCL WARN', 1)[-1].strip()}" if warning else ""),
            [NCCL, ("env.NCCL*", {k: v for k, v in (snap.value("env", {}) or {}).items() if str(k).startswith("NCCL_")})],
            Fix("Read NCCL's own log for the cause, then re-run the check.",
                ["NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET gpudoctor check --deep -v",
                 "env | grep ^NCCL_"]),
        )
    if outcome == "timeout":
        return Unknown(f"the all-reduce over GPU {gpus} did not finish ({value.get('error')}); a hang looks like this: "
                       "run again with --timeout 60, and if it still does not finish, NCCL_DEBUG=INFO shows where it stops")
    if outcome != "ok":
        return Unknown(f"the all-reduce's outcome is {outcome!r}")
    transports: List[str] = value.get("transports") or []
    speed = f"{value.get('busbw_gbps')} GB/s bus bandwidth"
    if world < 2:
        return Passed(f"one GPU: a one-rank all-reduce ran (NCCL {value.get('nccl_version')}), no GPU-to-GPU transport to judge")
    kinds = sorted({t.split("/")[0] for t in transports})
    pairs = snap.value("gpu.pairs") or {}
    p2p_capable = isinstance(pairs, dict) and pairs and all(
        isinstance(e, dict) and (e.get("p2p") or {}).get("read") == "OK" for e in pairs.values())
    if kinds and "P2P" not in kinds and p2p_capable:
        cause = _static_cause(snap)
        if cause:
            return NotApplicable(f"NCCL went through {'/'.join(kinds)} for the cause {cause} names")
        return Fail(
            f"NCCL's all-reduce over GPU {gpus} went through {', '.join(transports)} ({speed}) although NVML reports "
            "P2P between these GPUs: it runs several times slower than it could",
            [NCCL, "gpu.pairs", ("env.NCCL*", {k: v for k, v in (snap.value("env", {}) or {}).items() if str(k).startswith("NCCL_")})],
            Fix("Find what forbids P2P (a NCCL_P2P_LEVEL setting, a container without --ipc=host) and remove it.",
                ["env | grep ^NCCL_", "nvidia-smi topo -p2p rw"]),
            severity=WARNING,
        )
    return Passed(f"all-reduce over GPU {gpus} verified, via {', '.join(transports) or 'NCCL'}: {speed}")
