"""explain on a multi-GPU node and on SGLang (issues 34 and 25): GPU peer access, NCCL, kernel-log
Xid lines, SGLang's start-up failures. Every text here is a real one from a public thread (the
corpus, tests/explain_corpus/node_sglang.jsonl, has them with their links), except where a test
says it builds Xid lines from NVIDIA's table to cover each code of a group.
"""

import json
from pathlib import Path

import pytest

from gpudoctor import explain, registry
from gpudoctor.knowledge import signatures_fabric as fabric
from gpudoctor.knowledge import xid
from gpudoctor.snapshot import Snapshot

SNAPSHOTS = Path(__file__).resolve().parent / "fixtures" / "snapshots"
CORPUS = Path(__file__).resolve().parent / "explain_corpus" / "node_sglang.jsonl"
RECORDS = [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


def diagnose(text):
    return explain.diagnose(explain.clean(text))


def corpus_text(record_id):
    return next(r["text"] for r in RECORDS if r["id"] == record_id)


def snapshot(name="h200x2.json", **facts):
    data = json.loads((SNAPSHOTS / name).read_text(encoding="utf-8"))
    for path, value in facts.items():
        data["facts"][path.replace("__", ".")] = {"value": value, "status": "ok", "source": "test"}
    return Snapshot.from_json(data)


# --- each signature answers its real texts ---------------------------------------------------
@pytest.mark.parametrize(
    "record_id, signature_id",
    [
        ("p2p-sglang-552", "SIG-gpu-peer-access-unsupported"),
        ("p2p-sglang-4814", "SIG-gpu-peer-access-unsupported"),
        ("p2p-easyr1-579", "SIG-gpu-peer-access-unsupported"),  # under NCCL's ncclUnhandledCudaError
        ("p2p-nemo-rl-1683", "SIG-gpu-peer-access-unsupported"),
        ("xid79-nvsentinel-155", "SIG-xid-fell-off-bus"),
        ("xid79-words-nvsentinel-155", "SIG-xid-fell-off-bus"),
        ("xid48-64-gpu-operator-1146", "SIG-xid-memory-error"),
        ("xid94-akash-244", "SIG-xid-memory-error"),
        ("xid119-open-gpu-446", "SIG-xid-gsp-error"),
        ("xid119-gpud-500", "SIG-xid-gsp-error"),
        ("xid13-gpud-46", "SIG-xid-application-fault"),
        ("xid31-open-gpu-363", "SIG-xid-application-fault"),
        ("xid43-31-akash-244", "SIG-xid-application-fault"),
        ("tp-sglang-gpustack-4769", "SIG-tensor-parallel-ensure-divisibility"),
        ("greenctx-sgl-kernel-8701", "SIG-driver-api-symbol-missing"),
        ("greenctx-sgl-kernel-8131", "SIG-driver-api-symbol-missing"),
        ("abi-sgl-kernel-13948", "SIG-torch-extension-undefined-symbol"),  # _ZNK3c10…: a const member
        ("nvrtc-sgl-kernel-29646", "SIG-cuda-runtime-library-missing"),
        ("kv-sglang-36260", "SIG-kv-cache-no-room"),
        ("nccl-sym-returnn-1802", "SIG-nccl-symbol-missing"),
        ("nccl-sym-vllm-4195", "SIG-nccl-symbol-missing"),  # the title's lowercase ncclcommregister
        ("nccl-sym-pytorch-186591", "SIG-nccl-symbol-missing"),  # no colon after "symbol"
        ("nccl-sym-nccl-1784", "SIG-nccl-symbol-missing"),  # the symbol in quotes
    ],
)
def test_real_texts_are_answered_by_their_signature(record_id, signature_id):
    diagnosis = diagnose(corpus_text(record_id))
    assert diagnosis.root is not None and diagnosis.root.signature.id == signature_id, [m.signature.id for m in diagnosis.matches]


def test_nccl_symbol_mismatch_is_confirmed_by_a_second_nccl_wheel():
    sig = explain.find_signature("SIG-nccl-symbol-missing")
    specs = {meta.id for meta in explain.resolve_confirm_rules(sig.confirm_rules, registry.load_rules())[0]}
    assert specs == {"GD503", "GD504", "GD207"}
    assert explain.finding_filters(sig.confirm_rules)["GD504"].search("nvidia-nccl-cu11 and nvidia-nccl-cu12 are both installed")


def test_the_details_carry_the_numbers_of_the_text():
    assert diagnose(corpus_text("xid79-nvsentinel-155")).root.details["xid"] == "79"
    assert diagnose(corpus_text("xid48-64-gpu-operator-1146")).root.details["xid"] == "48"
    tp = diagnose(corpus_text("tp-sglang-gpustack-4769")).root
    assert (tp.details["heads"], tp.details["tp"]) == ("16", "6")
    assert diagnose(corpus_text("greenctx-sgl-kernel-8131")).root.details["symbol"] == "cuGreenCtxStreamCreate"


@pytest.mark.parametrize(
    "record_id, symptom_id",
    [
        ("sym-nccl-unhandled-cuda-pytorch-130113", "SIG-nccl-unhandled-cuda-error"),
        ("sym-sgl-kernel-18203", "SIG-sgl-kernel-common-ops-unloadable"),
        ("sym-sglang-cuda-graph-4489", "SIG-sglang-cuda-graph-capture-failed"),
    ],
)
def test_where_the_cause_is_elsewhere_the_symptom_says_where_to_look(record_id, symptom_id):
    diagnosis = diagnose(corpus_text(record_id))
    assert diagnosis.root is None and diagnosis.incomplete
    assert [m.signature.id for m in diagnosis.symptoms] == [symptom_id]


def test_a_symptom_gives_way_to_the_cause_printed_with_it():
    # sgl-kernel's CRITICAL message lists why each attempt failed: the undefined c10 symbol is the answer
    diagnosis = diagnose(corpus_text("abi-sgl-kernel-13948"))
    assert diagnosis.root.signature.key == "torch_abi_undefined_symbol"
    assert "SIG-sgl-kernel-common-ops-unloadable" in [m.signature.id for m in diagnosis.symptoms]
    # NCCL's "unhandled cuda error" over its "Cuda failure 217" line: the peer access is the answer
    diagnosis = diagnose(corpus_text("p2p-easyr1-579"))
    assert diagnosis.root.signature.key == "gpu_peer_access_unsupported"
    assert "SIG-nccl-unhandled-cuda-error" in [m.signature.id for m in diagnosis.symptoms]


# --- near misses: a text that looks alike is not given these causes ---------------------------
@pytest.mark.parametrize(
    "text, not_this",
    [
        # NCCL INFO lines of healthy runs (NVIDIA/nccl, ray-project/ray_lightning#24, pytorch/pytorch#130113)
        ("(pid=909608) z-pc:909608:910337 [0] NCCL INFO Channel 00 : 0[2d000] -> 1[2e000] via P2P/IPC", "gpu_peer_access_unsupported"),
        ("node155:3052669:3052713 [1] NCCL INFO P2P is disabled between connected GPUs 2 and 1. You can repress this message "
         "with NCCL_IGNORE_DISABLED_P2P=1.", "gpu_peer_access_unsupported"),
        # a torch C++ symbol is the torch ABI, not the driver (agentica-project/rllm#8)
        ("ImportError: common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEa", "driver_too_old"),
        # a CUDA runtime symbol (cuda…) is not a driver API symbol (cu + a capital), whatever the case of the pattern
        ("ImportError: libtorch_cuda.so: undefined symbol: cudaGetDriverEntryPointByVersion, version libcudart.so.12", "driver_too_old"),
        # NCCL's version banner of a healthy start (sgl-project/sglang#1509)
        ("[19:01:01 TP0] Init nccl begin.\nNCCL version 2.20.5+cuda12.4", "nccl_version_mismatch"),
        # ColossalAI's own divide(): not the ensure_divisibility of SGLang/vLLM (hpcaitech/ColossalAI#3043)
        ("    assert numerator % denominator == 0, \\\nAssertionError: 96 is not divisible by 64", "tp_size_not_divisible"),
        # SGLang's healthy start-up (sgl-project/sglang#1751)
        ("[2024-10-22 06:31:49 TP0] Capture cuda graph begin. This can take up to several minutes.", "failure_without_cause"),
    ],
)
def test_look_alike_lines_are_not_misattributed(text, not_this):
    diagnosis = diagnose(text)
    assert not_this not in [m.signature.key for m in diagnosis.matches], [m.signature.id for m in diagnosis.matches]


def test_the_torch_abi_signature_still_answers_its_own_symbol():
    diagnosis = diagnose("ImportError: common_ops.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEa")
    assert diagnosis.root.signature.key == "torch_abi_undefined_symbol"


# --- Xid: one table (gpudoctor/knowledge/xid.py), codes answered by their group ---------------
GROUPS = {
    "gpu_fell_off_bus": fabric.FELL_OFF_BUS,
    "gpu_memory_ecc_error": fabric.MEMORY,
    "gpu_gsp_error": fabric.GSP,
    "gpu_application_fault": fabric.APPLICATION,
}


def test_xid_groups_come_from_the_one_table_and_do_not_overlap():
    codes = [code for group in GROUPS.values() for code in group]
    assert len(codes) == len(set(codes))
    assert set(codes) <= set(xid.XIDS)
    assert {13, 31, 43} <= set(fabric.APPLICATION) and 94 not in fabric.APPLICATION
    memory = explain.find_signature("SIG-xid-memory-error")
    assert xid.describe(48)[0] in memory.cause and xid.describe(94)[0] in memory.cause


def _xid_line(code):
    # The shape of a real line (NVIDIA/gpu-operator#1146), with each code of NVIDIA's table.
    return f"[  219.470994] NVRM: Xid (PCI:0000:07:00): {code}, pid='<unknown>', name=<unknown>, {xid.describe(code)[0]}"


@pytest.mark.parametrize("key, code", [(key, code) for key, codes in GROUPS.items() for code in codes])
def test_every_code_of_a_group_is_answered_by_it(key, code):
    assert diagnose(_xid_line(code)).root.signature.key == key


@pytest.mark.parametrize("code", [45, 92, 130, 310, 1190])
def test_informational_and_unlisted_codes_are_not_given_a_cause(code):
    # 45 follows a kill, 92 is a high corrected-error rate (IGNORE); 130/310/1190 only start like 13/31/119
    line = f"NVRM: Xid (PCI:0000:07:00): {code}, pid=1, name=python3, Ch 00000008"
    assert diagnose(line).root is None


def test_the_xid_line_regex_is_the_probe_s_regex():
    assert xid.LINE.pattern.startswith(r"NVRM: Xid \((?:PCI:)?(" + xid.PCI + ")")
    line = corpus_text("xid79-nvsentinel-155")
    assert xid.parse_line(line)["code"] == 79


# --- confirming on this machine -----------------------------------------------------------
def _events(*codes):
    return [{"pci": "0000:00:06", "code": code, "text": xid.describe(code)[0], "seconds": 12.5} for code in codes]


def test_xid_79_is_confirmed_by_gd312_only_when_this_machine_logged_it():
    sig = explain.find_signature("SIG-xid-fell-off-bus")
    conf = explain.confirm(sig, snapshot(node__xid=_events(79)))
    assert [c.rule for c in conf.of_kind("confirmed")] == ["GD312"]
    assert "Xid 79" in conf.of_kind("confirmed")[0].text
    other = explain.confirm(sig, snapshot(node__xid=_events(13)))  # this machine logged an application fault only
    assert other.of_kind("confirmed") == []
    assert any(c.rule == "GD312" and "other problem" in c.text for c in other.of_kind("not_confirmed"))
    app = explain.confirm(explain.find_signature("SIG-xid-application-fault"), snapshot(node__xid=_events(13)))
    assert [c.rule for c in app.of_kind("confirmed")] == ["GD312"]


def test_xid_where_the_kernel_log_is_refused_could_not_be_checked():
    data = json.loads((SNAPSHOTS / "h200x2.json").read_text(encoding="utf-8"))
    data["facts"]["node.xid"] = {"value": None, "status": "no_permission", "source": "/dev/kmsg",
                                 "detail": "/dev/kmsg: permission denied (kernel.dmesg_restrict=1)"}
    conf = explain.confirm(explain.find_signature("SIG-xid-gsp-error"), Snapshot.from_json(data))
    assert conf.verdict == "could_not_check"
    assert [c.rule for c in conf.of_kind("could_not_check")] == ["GD312"]


def test_peer_access_is_confirmed_by_gd310_when_nvml_says_no_p2p():
    sig = explain.find_signature("SIG-gpu-peer-access-unsupported")
    no_p2p = {"0-1": {"connection": "SYS", "p2p": {"read": "CNS", "write": "CNS"}}}
    conf = explain.confirm(sig, snapshot(gpu__pairs=no_p2p))
    assert [c.rule for c in conf.of_kind("confirmed")] == ["GD310"]
    with_p2p = {"0-1": {"connection": "NV18", "p2p": {"read": "OK", "write": "OK"}}}
    assert explain.confirm(sig, snapshot(gpu__pairs=with_p2p)).verdict == "not_confirmed"


# Recorded on the H200 (scripts/device/stack.sh step 5): sglang-kernel 0.4.10's real files loaded with
# ctypes over the machine's torch 2.11.0+cu130. The first symbol is an lvalue-ref-qualified member
# (_ZNR…): explain answered "no known error signature" until the pattern took the Itanium ABI's
# member qualifiers (r V K, then R or O) after the N.
H200_SGLANG_KERNEL = ("/tmp/stack.giWT/ext-sglang_kernel/lib/python3.12/site-packages/sgl_kernel/spatial_ops.abi3.so: undefined symbol: "
                      "_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorINS_10headeronly3TagESaIS8_EENS_17_RegisterOrVerifyE")
H200_SGLANG_KERNEL_SM90 = ("/tmp/stack.giWT/ext-sglang_kernel/lib/python3.12/site-packages/sgl_kernel/sm90/common_ops.abi3.so: "
                           "undefined symbol: _ZN3c104cuda19CUDAErrorLogCaptureC1Ev")


@pytest.mark.parametrize("text", [H200_SGLANG_KERNEL, H200_SGLANG_KERNEL_SM90])
def test_a_torch_symbol_the_loader_could_not_find_on_the_h200(text):
    diagnosis = diagnose(text)
    assert diagnosis.root is not None and diagnosis.root.signature.id == "SIG-torch-extension-undefined-symbol", \
        [m.signature.id for m in diagnosis.matches]


def test_several_filters_for_one_rule_are_each_enough():
    """SIG-torch-cuda-library-missing names GD508 twice (the loader's words; the one-cause statement of an
    engine installed without its requirements): the second had replaced the first, so torchaudio over CPU
    torch was 'not confirmed' although GD508 quoted 'libc10_cuda.so: cannot open shared object file'."""
    wanted = explain.finding_filters(["GD508:cannot open shared object", r"GD508:\+cpu is installed where \S+ requires torch"])
    assert wanted["GD508"].search('_torchaudio.so needs libc10_cuda.so: "libc10_cuda.so: cannot open shared object file"')
    assert wanted["GD508"].search("torch 2.13.0+cpu is installed where vllm requires torch==2.14.0")


def test_gdr_disabled_by_distance_is_confirmed_where_a_gpu_has_no_near_nic(tmp_path):
    """NCCL's "GPU Direct RDMA Disabled for GPU … (distance N > M)" line, confirmed by GD324 on four GPUs with
    one NIC on the first socket's switch (the sysfs tree of tests/cases/fabric_pcie.py), not on a machine with a
    NIC next to every GPU."""
    from cases.fabric_pcie import rdma

    text = corpus_text("gdr-distance-nccl-1151")
    [match] = [m for m in diagnose(text).matches if m.signature.role == explain.CAUSE]
    assert match.signature.id == "SIG-nccl-gdr-disabled-distance" and match.details["distance"] == "7"
    far = Snapshot.from_json(rdma({"mlx5_0": "0"})(tmp_path / "far"))
    result = explain.confirm(match.signature, far, details=match.details, line=match.text)
    assert result.verdict == explain.CONFIRMED and [c.rule for c in result.checks if c.kind == explain.CONFIRMED] == ["GD324"]
    near = Snapshot.from_json(rdma({"mlx5_0": "0", "mlx5_1": "1"})(tmp_path / "near"))
    assert explain.confirm(match.signature, near, details=match.details, line=match.text).verdict == explain.NOT_CONFIRMED
