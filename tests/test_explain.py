"""gpudoctor explain: real error text from the cited issues is recognised, near misses are not,
and the cause is confirmed (or not) by running rules on a snapshot recorded on a real H200.

Each text below is copied from the issue named next to it (the error lines, with the log
prefixes users actually pasted), or from research/anchors.md §4 / facts.md §7 which quote
those issues.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpudoctor import explain, registry
from gpudoctor.rule import RuleMeta
from gpudoctor.snapshot import Snapshot

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = REPO / "tests" / "fixtures" / "snapshots"
H200 = SNAPSHOTS / "h200.json"
BUSY = SNAPSHOTS / "h200x2-busy.json"

# (signature, source, exact text)
REAL = [
    ("SIG-no-kernel-image", "vllm-project/vllm#14452",
     "ERROR 07-28 15:07:22 [core.py:632] RuntimeError: CUDA error: no kernel image is available for execution on the device"),
    ("SIG-no-kernel-image", "vllm-project/vllm#11485",
     "[rank0]: RuntimeError: CUDA error: no kernel image is available for execution on the device"),
    ("SIG-no-kernel-image", "vllm-project/vllm#4604 (title)",
     "[Bug]: RuntimeError: CUDA error: no kernel image is available for execution on the device"),
    ("SIG-flash-attn-undefined-symbol", "Dao-AILab/flash-attention#1816",
     "ImportError: /usr/local/lib/python3.11/dist-packages/flash_attn_2_cuda.cpython-311-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEab"),
    ("SIG-flash-attn-undefined-symbol", "Dao-AILab/flash-attention#723",
     "ImportError: /usr/local/lib/python3.8/dist-packages/flash_attn_2_cuda.cpython-38-x86_64-linux-gnu.so: undefined symbol: _ZN3c104cuda9SetDeviceEi"),
    ("SIG-flash-attn-undefined-symbol", "vllm-project/vllm#3912",
     "ImportError: /h2ogpt_conda/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: undefined symbol: "
     "_ZN2at4_ops15sum_IntList_out4callERKNS_6TensorEN3c1016OptionalArrayRefIlEEbSt8optionalINS5_10ScalarTypeEERS2_"),
    ("SIG-vllm-c-undefined-symbol", "vllm-project/vllm#20361",
     "ImportError: /home/pc/data/vllm/vllm/vllm/_C.abi3.so: undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSsb"),
    ("SIG-vllm-c-undefined-symbol", "vllm-project/vllm#13608",
     "ImportError: /workspace/vllm-abo/vllm/_C.abi3.so: undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSsb"),
    ("SIG-vllm-c-undefined-symbol", "vllm-project/vllm#21226 (title)",
     "ImportError: vllm/_C.abi3.so: undefined symbol _ZN3c106ivalue14ConstantString6createENSt7"),
    ("SIG-torch-extension-undefined-symbol", "Dao-AILab/flash-attention#723 (comment)",
     "same, torch2.2.0+cuda11.8:\nundefined symbol: _ZN2at4_ops9_pad_enum4callERKNS_6TensorEN3c108ArrayRefINS5_6SymIntEEElNS5_8optionalIdEE"),
    ("SIG-nvml-driver-library-mismatch", "tinygrad/open-gpu-kernel-modules#47",
     "nvidia-smi \nFailed to initialize NVML: Driver/library version mismatch\nNVML library version: 570.124"),
    ("SIG-nvml-driver-library-mismatch", "intel/llvm#17614",
     "**********CUDA Version**********\nFailed to initialize NVML: Driver/library version mismatch\nNVML library version: 550.144"),
    ("SIG-driver-insufficient", "nagadomi/nunif#702",
     "RuntimeError: CUDA error: CUDA driver version is insufficient for CUDA runtime version"),
    ("SIG-driver-insufficient", "Chia-Network/bladebit#431",
     " CUDA error: 35 (0x23) cudaErrorInsufficientDriver : CUDA driver version is insufficient for CUDA runtime version"),
    ("SIG-driver-insufficient", "mlcommons/inference#54",
     "RuntimeError: cuda runtime error (35) : CUDA driver version is insufficient for CUDA runtime version at /pytorch/torch/csrc/cuda/Module.cpp:34"),
    ("SIG-cuda-804-forward-compat", "gpustack/gpustack#1254",
     "ERROR 02-19 07:03:11 engine.py:389] Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
     "NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on non supported HW"),
    ("SIG-cuda-804-forward-compat", "rapidsai/cusignal#398",
     "**cupy_backends.cuda.api.runtime.CUDARuntimeError: cudaErrorCompatNotSupportedOnDevice: forward compatibility was attempted on non supported HW**"),
    ("SIG-cuda-803-driver-combination", "gpustack/gpustack#4678",
     "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might "
     "have already set an error? Error 803: system has unsupported display driver / cuda driver combination"),
    ("SIG-cuda-803-driver-combination", "NVIDIA/nvidia-docker#1256",
     "CUDA: Check failed: e == cudaSuccess (803 vs. 0) : system has unsupported display driver / cuda driver combination"),
    ("SIG-cuda-802-not-initialized", "microsoft/lisa#2823",
     "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling "
     "NumCudaDevices() that might have already set an error? Error 802: system not yet initialized (Triggered internally at  "
     "../c10/cuda/CUDAFunctions.cpp:112.)"),
    ("SIG-cuda-802-not-initialized", "pytorch/pytorch#35710",
     "RuntimeError: cuda runtime error (802) : system not yet initialized at /opt/conda/conda-bld/pytorch_1579022034529/work/aten/src/THC/THCGeneral.cpp:50"),
    ("SIG-cuda-802-not-initialized", "pytorch/pytorch#35710 (bandwidthTest)",
     'CUDA error at bandwidthTest.cu:256 code=802(cudaErrorSystemNotReady) "cudaSetDevice(currentDevice)"'),
    ("SIG-unsupported-ptx-toolchain", "vllm-project/vllm#31700",
     "(EngineCore_DP0 pid=15638) ERROR 01-05 12:12:01 [core.py:842] torch.AcceleratorError: CUDA error: the provided PTX was compiled with an unsupported toolchain."),
    ("SIG-unsupported-ptx-toolchain", "ztxz16/fastllm#649",
     "FastllmCudaHalfPagedAttentionBatch: FlashInfer error: the provided PTX was compiled with an unsupported toolchain."),
    ("SIG-flash-attn-ampere-only", "vllm-project/vllm#8189",
     "ERROR 01-11 13:09:40 engine.py:366] RuntimeError: Error in model execution (input dumped to /tmp/err_execute_model_input_20250111-130939.pkl): "
     "FlashAttention only supports Ampere GPUs or newer."),
    ("SIG-flash-attn-ampere-only", "vllm-project/vllm#13766 (title)",
     "Cannot use FA version 2 is not supported due to FA3 is only supported on devices with compute capability >= 8 excluding 8.6 and 8.9"),
    ("SIG-flash-attn-ampere-only", "vllm-project/vllm#52181",
     "(EngineCore pid=1673840) ERROR 08-13 16:42:32 [fa_utils.py:273] Cannot use FA version 2 is not supported due to FA2 is only supported "
     "on devices with compute capability >= 8"),
    ("SIG-flash-attn-ops-missing", "vllm-project/vllm#32974 (comment)",
     "I encountered the error `ModuleNotFoundError: No module named 'flash_attn.ops'`"),
    ("SIG-flash-attn-ops-missing", "vllm-project/vllm-ascend#6555",
     "ModuleNotFoundError: No module named 'flash_attn.ops'; 'flash_attn' is not a package"),
    ("SIG-flash-attn-cute-missing", "Dao-AILab/flash-attention#2310",
     "python -c 'from flash_attn.cute import flash_attn_func'\nTraceback (most recent call last):\n  File \"<string>\", line 1, in <module>\n"
     "ModuleNotFoundError: No module named 'flash_attn.cute'"),
    ("SIG-free-memory-below-utilization", "pytorch/pytorch#175666",
     "[2026-02-24T20:21:58Z] (EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than "
     "desired GPU memory utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."),
    ("SIG-free-memory-below-utilization", "research/facts.md §7 (vllm v1 worker log)",
     "ValueError: Free memory on device (13.91/79.33 GiB) on startup is less than desired GPU memory utilization (0.95, 75.36 GiB). "
     "Decrease GPU memory utilization or reduce GPU memory used by other processes."),
    ("SIG-kv-cache-no-room", "vllm-project/vllm#10439",
     "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try increasing "
     "`gpu_memory_utilization` when initializing the engine."),
    ("SIG-nccl-shm", "NVIDIA/nccl-tests#166",
     "ubuntu:9621:9688 [3] misc/shmutils.cc:112 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-KWfVyt (size 5967872)"),
    ("SIG-nccl-shm", "NVIDIA/nccl-tests#166",
     "ubuntu:9621:9691 [6] misc/shmutils.cc:71 NCCL WARN Error: failed to extend /dev/shm/nccl-fjwOOB to 5967876 bytes"),
    ("SIG-nccl-shm", "vllm-project/vllm#18831 (title)",
     '"NCCL WARN Error while attaching to shared memory segment /dev/shm/nccl- (size 192814336), error: No such file or directory (2)"'),
    ("SIG-address-in-use", "vllm-project/vllm#9763",
     "OSError: [Errno 98] Address already in use"),
    ("SIG-address-in-use", "vllm-project/vllm#7514 (title)",
     "[Bug]: error while attempting to bind on address ('0.0.0.0', 8000): address already in use"),
    ("SIG-address-in-use", "vllm-project/vllm#11617",
     "RuntimeError: The server socket has failed to listen on any local network address. useIpv6: 0, code: -98, name: EADDRINUSE, "
     "message: address already in use"),
    ("SIG-address-in-use", "UKGovernmentBEIS/inspect_ai#1809 (macOS)",
     "                    INFO     OSError: [Errno 48] Address already in use"),
    ("SIG-bf16-needs-cc80", "vllm-project/vllm#1157",
     "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5."),
    ("SIG-bf16-needs-cc80", "vllm-project/vllm#946",
     "ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla V100-SXM2-32GB GPU has compute capability 7.0."),
    ("SIG-failed-to-infer-device-type", "ai-dynamo/dynamo#391",
     '    raise RuntimeError("Failed to infer device type")\nRuntimeError: Failed to infer device type'),
    ("SIG-no-driver", "this VM's NVML (tests/test_live_gpu.py skip reason)",
     "no NVML here: NVML LibraryNotFound: NVML Shared Library Not Found"),
    ("SIG-no-driver", "torch/cuda/__init__.py (_check_driver)",
     "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from "
     "http://www.nvidia.com/Download/index.aspx"),
]

# Texts that look related but are another problem (or none): (text, source, ids it must NOT be).
NEAR_MISSES = [
    ("WARNING 08-03 23:03:20 _custom_ops.py:15] Failed to import from vllm._C with ImportError('libcudart.so.12: cannot open shared "
     "object file: No such file or directory')", "vllm-project/vllm#7112", {"SIG-vllm-c-undefined-symbol", "SIG-torch-extension-undefined-symbol"}),
    ("WARNING 10-10 10:22:58 _custom_ops.py:18] Failed to import from vllm._C with ImportError('libcuda.so.1: cannot open shared object "
     "file: No such file or directory')", "vllm-project/vllm#7514", {"SIG-vllm-c-undefined-symbol"}),
    ("ModuleNotFoundError: No module named 'flash_attn'", "lm-sys/FastChat#1664", {"SIG-flash-attn-ops-missing", "SIG-flash-attn-cute-missing"}),
    ("ModuleNotFoundError: No module named 'flash_attn_cuda'", "Dao-AILab/flash-attention#374", {"SIG-flash-attn-ops-missing", "SIG-flash-attn-cute-missing"}),
    ("ModuleNotFoundError: No module named 'vllm.vllm_flash_attn.fa_utils'", "vllm-project/vllm#16475", {"SIG-flash-attn-ops-missing"}),
    ("RuntimeError: FlashAttention only support fp16 and bf16 data type", "flash-attention csrc/flash_attn/flash_api.cpp", {"SIG-flash-attn-ampere-only"}),
    ('Using FlashAttention version 2', "eugr/spark-vllm-docker#100", {"SIG-flash-attn-ampere-only"}),
    ("Free memory on device (110.37/121.69 GiB) on startup.\nDesired GPU memory utilization is (0.87, 105.87 GiB).",
     "MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#47 (a start that passed)", {"SIG-free-memory-below-utilization"}),
    ("Failed to initialize NVML: Unknown Error", "a different NVML failure (containers losing /dev/nvidia*)", {"SIG-nvml-driver-library-mismatch"}),
    ("| NVIDIA-SMI 560.35.03              Driver Version: 560.35.03      CUDA Version: 12.6     |", "vllm-project/vllm#15335", None),
    ("a100-8:421780:421780 [0] NCCL INFO Channel 00/02 : 0 1 2 3", "vllm-project/vllm#18831", {"SIG-nccl-shm"}),
    ("torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, unhandled cuda error "
     "(run with NCCL_DEBUG=INFO for details), NCCL version 2.19.3", "the shm case's cousin (a CUDA error inside NCCL)", {"SIG-nccl-shm"}),
    ("DEBUG    connect_tcp.failed exception=ConnectError(ConnectionRefusedError(61, 'Connection refused'))", "UKGovernmentBEIS/inspect_ai#1809",
     {"SIG-address-in-use"}),
    ("BF16 support is primarily available on NVIDIA GPUs with the Ampere and later architectures with compute capability of 8.0 or higher.",
     "microsoft/onnxruntime#24915", {"SIG-bf16-needs-cc80"}),
    ("INFO 03-26 05:25:01 cuda.py:230] Using Flash Attention backend.", "gpustack/gpustack#1540", None),
    # a warning of a run that works (the corpus's nm-fa-rotary-fallback-v100-29)
    ("flash_attn rotary import failed; falling back to native rotary implementation. Error: No module named 'flash_attn.ops'",
     "ai-bond/flash-attention-v100#29", None),
]


def text_of(source):
    (text,) = [t for _, src, t in REAL if src == source]
    return text


def ids(text):
    return [m.signature.id for m in explain.match_text(explain.clean(text))]


@pytest.mark.parametrize("sig_id, source, text", REAL, ids=[f"{s}:{src}" for s, src, _ in REAL])
def test_real_error_text_is_recognised(sig_id, source, text):
    assert sig_id in ids(text), (source, ids(text))


def test_every_signature_of_this_file_exists():
    # every signature is exercised by a real text here or in tests/explain_corpus (test_explain_corpus.py)
    assert {s for s, _, _ in REAL} <= {sig.id for sig in explain.load_signatures()}


def test_the_brief_s_signatures_are_all_in_the_database():
    required = {
        "SIG-no-kernel-image", "SIG-flash-attn-undefined-symbol", "SIG-vllm-c-undefined-symbol", "SIG-nvml-driver-library-mismatch",
        "SIG-driver-insufficient", "SIG-cuda-804-forward-compat", "SIG-cuda-803-driver-combination", "SIG-cuda-802-not-initialized",
        "SIG-unsupported-ptx-toolchain", "SIG-flash-attn-ampere-only", "SIG-flash-attn-ops-missing", "SIG-flash-attn-cute-missing",
        "SIG-free-memory-below-utilization", "SIG-nccl-shm", "SIG-address-in-use", "SIG-bf16-needs-cc80",
    }
    assert required <= {sig.id for sig in explain.load_signatures()}


@pytest.mark.parametrize("sig_id, source, text", REAL, ids=[f"{s}:{src}" for s, src, _ in REAL])
def test_real_text_is_not_misclassified(sig_id, source, text):
    """One signature per error: no other signature claims the same text."""
    assert ids(text) == [sig_id], source


@pytest.mark.parametrize("text, source, wrong", NEAR_MISSES, ids=[src for _, src, _ in NEAR_MISSES])
def test_near_miss_is_not_misclassified(text, source, wrong):
    found = set(ids(text))
    if wrong is None:
        assert found == set(), source
    else:
        assert not (found & wrong), (source, found)


def test_generic_undefined_symbol_gives_way_to_the_specific_one():
    flash = text_of("Dao-AILab/flash-attention#1816")
    assert ids(flash) == ["SIG-flash-attn-undefined-symbol"]  # not also SIG-torch-extension-undefined-symbol
    assert explain.scan_lines([flash]) == {0: ["SIG-flash-attn-undefined-symbol"]}


def test_details_are_extracted():
    nvml = explain.match_text(text_of("tinygrad/open-gpu-kernel-modules#47"))[0]
    assert nvml.details == {"library_version": "570.124"} and nvml.line == 2
    bf16 = explain.match_text(text_of("vllm-project/vllm#946"))[0]
    assert bf16.details == {"gpu": "Tesla V100-SXM2-32GB", "compute_capability": "7.0"}
    mem = explain.match_text(text_of("pytorch/pytorch#175666"))[0]
    assert mem.details == {"free_gib": "19.77", "total_gib": "22.05", "utilization": "0.9", "wanted_gib": "19.84"}
    port = [m for m in explain.match_text(text_of("vllm-project/vllm#7514 (title)"))][0]
    assert port.details["port"] == "8000"


def test_wrapped_paste_is_recognised():
    # A terminal wrapped the line mid-word, and the user pasted what they saw.
    text = "RuntimeError: CUDA error: no kernel ima\nge is available for execution on the device"
    found = explain.match_text(text)
    assert [m.signature.id for m in found] == ["SIG-no-kernel-image"] and found[0].line == 1


def test_colours_and_carriage_returns_are_cleaned():
    text = "\x1b[31mERROR\x1b[0m progress 10%\rRuntimeError: CUDA error: no kernel image is available for execution on the device\x00"
    assert ids(text) == ["SIG-no-kernel-image"]


# --- the database itself -------------------------------------------------------------------
def test_database_is_valid():
    sigs = explain.load_signatures()
    assert len({s.id for s in sigs}) == len(sigs) >= 40
    for sig in sigs:
        assert sig.sources and sig.cause and sig.fix and sig.commands and sig.key, sig.id
        assert all(url.startswith("https://") for url in sig.source_urls()), (sig.id, sig.source_urls())
        assert all(item["url"].startswith("https://github.com/") for item in sig.thread_fixes), sig.id
        if sig.role == "cause":
            assert sig.confirm_rules or sig.cannot_check, sig.id
        else:
            assert sig.hint and not sig.confirm_rules, sig.id


@pytest.mark.parametrize(
    "entry, problem",
    [
        ({"id": "SIG-x", "key": "k", "title": "t", "patterns": ["("], "cause": "c", "fix": "f", "commands": ["c"], "sources": ["s"], "confirm_rules": ["GD1"], "facts": ["x"]}, "regular expression"),
        ({"id": "SIG-x", "key": "k", "title": "t", "patterns": ["a"], "cause": "c", "fix": "f", "commands": ["c"], "sources": [], "confirm_rules": ["GD1"], "facts": ["x"]}, "lacks sources"),
        ({"id": "bad id", "key": "k", "title": "t", "patterns": ["a"], "cause": "c", "fix": "f", "commands": ["c"], "sources": ["s"], "confirm_rules": ["GD1"], "facts": ["x"]}, "bad or duplicate"),
        ({"id": "SIG-x", "key": "k", "title": "t", "patterns": ["a"], "cause": "c", "fix": "f", "commands": ["c"], "sources": ["s"], "confirm_rules": ["driver"], "facts": ["x"]}, "confirm_rules"),
        ({"id": "SIG-x", "key": "k", "title": "t", "patterns": ["a"], "cause": "c", "fix": "f", "commands": ["c"], "sources": ["s"], "facts": ["x"]}, "lacks confirm_rules"),
        ({"id": "SIG-x", "key": "Bad Key", "title": "t", "patterns": ["a"], "cause": "c", "fix": "f", "commands": ["c"], "sources": ["s"], "confirm_rules": ["GD1"]}, "cause key"),
        ({"id": "SIG-x", "key": "k", "role": "symptom", "title": "t", "patterns": ["a"], "cause": "c", "fix": "f", "commands": ["c"], "sources": ["s"]}, "needs a hint"),
        ({"id": "SIG-x", "key": "k", "title": "t", "patterns": ["a"], "cause": "c", "fix": "f", "commands": ["c"], "sources": ["s"], "confirm_rules": ["GD1"],
          "thread_fixes": [{"fix": "x", "url": "vllm#1"}]}, "thread fix"),
    ],
)
def test_broken_database_entries_are_refused(entry, problem):
    with pytest.raises(explain.SignatureError, match=problem):
        explain.load_signatures([entry])


def test_signatures_are_installed_as_data_of_gpudoctor_rules():
    import gpudoctor.knowledge.signatures as data

    assert data.SIGNATURES and all(isinstance(entry, dict) for entry in data.SIGNATURES)


# --- confirming on this machine ------------------------------------------------------------
def load(path):
    return Snapshot.load(str(path))


def mismatched():
    """The H200 after an unattended driver upgrade: library 580.173.02, kernel module still 580.159.04."""
    snap = load(H200)
    snap.facts["driver.version"].value = "580.173.02"
    snap.facts["driver.library_path"].value = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.173.02"
    return snap


def test_nvml_mismatch_is_confirmed_by_gd102_with_both_versions():
    sig = explain.find_signature("SIG-nvml-driver-library-mismatch")
    conf = explain.confirm(sig, mismatched())
    assert conf.verdict == "confirmed"
    (check,) = conf.of_kind("confirmed")
    assert check.rule == "GD102"
    assert "580.159.04" in check.text and "580.173.02" in check.text
    assert dict(conf.facts)["driver.kernel_module_version"] == "580.159.04"


def test_nvml_mismatch_is_not_confirmed_on_the_healthy_h200():
    conf = explain.confirm(explain.find_signature("SIG-nvml-driver-library-mismatch"), load(H200))
    assert conf.verdict == "not_confirmed"
    assert [c.rule for c in conf.of_kind("not_confirmed")] == ["GD102"]


def test_free_memory_is_confirmed_by_gd302_on_the_busy_h200():
    conf = explain.confirm(explain.find_signature("SIG-free-memory-below-utilization"), load(BUSY))
    assert conf.verdict == "confirmed"
    confirmed = conf.of_kind("confirmed")
    assert [c.rule for c in confirmed] == ["GD302"] and "PID 896" in confirmed[0].text


def test_driver_insufficient_is_confirmed_by_gd103():
    snap = load(H200)
    snap.facts["driver.version"].value = "570.124.06"
    snap.facts["driver.kernel_module_version"].value = "570.124.06"
    snap.facts["driver.library_path"].value = "/usr/lib/libnvidia-ml.so.570.124.06"
    snap.facts["driver.cuda_max"].value = "12.8"
    conf = explain.confirm(explain.find_signature("SIG-driver-insufficient"), snap)
    assert conf.verdict == "confirmed"
    assert [c.rule for c in conf.of_kind("confirmed")] == ["GD103"]


def test_nccl_shm_is_confirmed_by_gd309_with_a_docker_sized_dev_shm():
    snap = load(BUSY)
    snap.facts["host.shm_total"].value = 64 << 20
    conf = explain.confirm(explain.find_signature("SIG-nccl-shm"), snap)
    assert [c.rule for c in conf.of_kind("confirmed")] == ["GD309"]


def test_rules_that_do_not_exist_yet_are_could_not_check():
    # The catalogue as it was before any flash-attn rule: the GD4 entries name nothing yet.
    catalogue = [meta for meta in registry.load_rules() if not meta.id.startswith("GD4")]
    conf = explain.confirm(explain.find_signature("SIG-flash-attn-cute-missing"), load(H200), catalogue)
    assert conf.verdict == "could_not_check"
    texts = [c.text for c in conf.of_kind("could_not_check")]
    assert "GD403 is not in this gpudoctor's rule catalogue (yet)" in texts, texts
    # the H200 snapshot predates the package probe: GD505 says so instead of passing
    assert any(c.rule == "GD505" and "packages.stack" in c.text for c in conf.of_kind("could_not_check"))


def _meta(rule_id, name, title):
    return RuleMeta(rule_id, name, "error", "driver", (), lambda snap: None, title)


def test_confirm_specs_accept_ids_prefixes_filters_and_unknown_ids():
    catalogue = [
        _meta("GD401", "flash-attn-abi-mismatch", "flash-attn was built for another torch"),
        _meta("GD402", "flash-attn-fa4-namespace", "FA4 shadows FA2"),
        _meta("GD601", "stale-serving-process", "a stale vLLM"),
    ]
    rules, missing = explain.resolve_confirm_rules(["GD4:torch|abi", "GD6", "GD999", "GD2", "GD6:nothing-matches"], catalogue)
    assert [m.id for m in rules] == ["GD401", "GD601"]
    texts = [c.text for c in missing]
    assert any("GD999" in t and "catalogue" in t for t in texts)
    assert any("CUDA" in t and "GD2xx" in t for t in texts)
    assert any("GD6xx matching nothing-matches" in t for t in texts)


def test_relevant_facts_follow_the_globs():
    sig = explain.find_signature("SIG-bf16-needs-cc80")
    facts = dict(explain.relevant_facts(sig, load(BUSY)))
    assert facts == {"gpu.0.name": "NVIDIA H200", "gpu.1.name": "NVIDIA H200", "gpu.0.compute_capability": "9.0", "gpu.1.compute_capability": "9.0"}


# --- reading input ---------------------------------------------------------------------------
def test_huge_log_is_read_from_its_tail(tmp_path):
    log = tmp_path / "huge.log"
    noise = ("INFO 01-01 00:00:00 [engine.py:1] step ok " + "x" * 60 + "\n").encode()
    with open(log, "wb") as handle:
        handle.write(b"RuntimeError: CUDA error: no kernel image is available for execution on the device\n")  # too early: cut off
        while handle.tell() < (6 << 20):
            handle.write(noise)
        handle.write(b"OSError: [Errno 98] Address already in use\n")
    text = explain.read_file(str(log))
    assert text.truncated and text.size > explain.MAX_LOG_BYTES
    assert len(text.text.encode()) <= explain.MAX_LOG_BYTES
    assert ids(text.text) == ["SIG-address-in-use"]


def test_binary_log_does_not_break_anything(tmp_path):
    log = tmp_path / "core.bin"
    log.write_bytes(os.urandom(200000) + b"\nFailed to infer device type\n" + os.urandom(1000) + b"\xff\xfe\x00")
    text = explain.read_file(str(log))
    assert "SIG-failed-to-infer-device-type" in ids(text.text)


def gd(*args, stdin=None):
    proc = subprocess.run(
        [sys.executable, "-m", "gpudoctor", *args],
        input=stdin,
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=dict(os.environ, PYTHONIOENCODING="utf-8"),
        cwd=str(REPO),
        timeout=120,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    return proc


# --- the command -----------------------------------------------------------------------------
def test_cli_explains_and_confirms_against_a_snapshot(tmp_path):
    snap = tmp_path / "mismatch.json"
    snap.write_text(mismatched().dumps(), encoding="utf-8")
    proc = gd("explain", text_of("tinygrad/open-gpu-kernel-modules#47"), "--snapshot", str(snap))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "SIG-nvml-driver-library-mismatch" in out and "library_version=570.124" in out
    assert "confirmed by GD102 driver-library-mismatch: kernel module 580.159.04 is loaded but the user-space driver is 580.173.02" in out
    assert "that is it: GD102" in out
    assert "sudo reboot" in out and "https://github.com/tinygrad/open-gpu-kernel-modules/issues/47" in out


def test_cli_not_confirmed_and_could_not_check_are_said(tmp_path):
    proc = gd("explain", text_of("tinygrad/open-gpu-kernel-modules#47"), "--snapshot", str(H200))
    assert proc.returncode == 0
    assert "not confirmed here: GD102" in proc.stdout and "not confirmed on this machine" in proc.stdout
    proc = gd("explain", text_of("vllm-project/vllm#14452"), "--snapshot", str(H200))
    assert "could not check" in proc.stdout


def test_cli_reads_stdin_and_log_files(tmp_path):
    text = text_of("vllm-project/vllm#14452") + "\n" + text_of("vllm-project/vllm#11485") + "\n" + text_of("vllm-project/vllm#9763") + "\n"
    proc = gd("explain", "-", "--no-confirm", stdin=text)
    assert proc.returncode == 0, proc.stderr
    assert "SIG-no-kernel-image" in proc.stdout and "SIG-address-in-use" in proc.stdout
    assert "line 1 (and 1 more line)" in proc.stdout
    log = tmp_path / "server.log"
    log.write_text("INFO starting\n" + text_of("pytorch/pytorch#35710") + "\n", encoding="utf-8")
    proc = gd("explain", "--log", str(log), "--no-confirm", "--format", "json")
    doc = json.loads(proc.stdout)
    assert [m["id"] for m in doc["matches"]] == ["SIG-cuda-802-not-initialized"]
    assert doc["matches"][0]["line"] == 2 and doc["matches"][0]["confirmation"] is None


def test_cli_exit_codes(tmp_path):
    assert gd("explain", "all good, nothing to see", "--no-confirm").returncode == 1
    assert gd("explain", text_of("vllm-project/vllm#14452"), "--no-confirm").returncode == 0
    for args in (["explain", "--log", str(tmp_path / "missing.log")], ["explain", "--log", str(tmp_path)],
                 ["explain", "GD999"], ["explain", "SIG-no-such-thing"], ["explain", "text", "--log", str(H200)], ["explain", ""]):
        proc = gd(*args)
        assert proc.returncode == 2, args
        assert proc.stdout == "" and proc.stderr.startswith("gpudoctor: error: ") and len(proc.stderr.splitlines()) == 1


def test_cli_rule_and_signature_lookup_still_work():
    proc = gd("explain", "GD103")
    assert proc.returncode == 0 and proc.stdout.startswith("GD103 driver-too-old-for-torch (error, area driver)")
    proc = gd("explain", "SIG-nccl-shm")
    assert proc.returncode == 0 and proc.stdout.startswith("SIG-nccl-shm: ") and "## Confirmed on this machine by" in proc.stdout
    proc = gd("explain", "--list", "--format", "json")
    assert {s["id"] for s in json.loads(proc.stdout)} == {sig.id for sig in explain.load_signatures()}


def test_vllm_undefined_symbol_is_confirmed_by_the_real_package_probe(tmp_path):
    """The brief's "this machine: X built for torch A, torch B installed -> that is it", end to end:
    the Python-environment probe reads a site-packages where vLLM pins torch 2.8.0 and torch 2.9.0
    is installed, and GD510 confirms the undefined-symbol error pasted from vllm-project/vllm#20361."""
    from gpudoctor.probes import python_stack_collect

    def dist(name, version, requires=()):
        info = tmp_path / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires),
            encoding="utf-8")
        (info / "RECORD").write_text("", encoding="utf-8")

    dist("vllm", "0.11.0", ["torch==2.8.0"])
    dist("torch", "2.9.0")
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "version.py").write_text("__version__ = '2.9.0+cu128'\ncuda = '12.8'\n", encoding="utf-8")
    snap = Snapshot.from_json({"schema_version": 1, "facts": python_stack_collect.collect_plain(paths=[str(tmp_path)])})
    (match,) = explain.match_text(text_of("vllm-project/vllm#20361"))
    conf = explain.confirm(match.signature, snap)
    assert conf.verdict == "confirmed"
    (check,) = conf.of_kind("confirmed")  # GD510 owns vLLM's torch pin (GD503 leaves it out: reported once)
    assert check.rule == "GD510" and check.text.startswith("vllm 0.11.0 (origin not read) is built against torch==2.8.0 (2.9.0 is installed)")


@pytest.mark.parametrize(
    "pattern, expected",
    [
        (r"Error 804:?\s*forward compatibility was attempted", ["forward compatibility was attempted"]),
        (r"\[Errno (?:98|48)\] Address already in use", ["] address already in use"]),
        (r"cudaErrorFoo|CUDA_ERROR_FOO_BAR", ["cudaerrorfoo", "cuda_error_foo_bar"]),
        (r"(?P<gpu>[A-Z][^\n]{0,80}?) with CUDA capability (?P<sm>sm_\d+)", [" with cuda capability "]),
        (r"abc|x", None),  # an alternative without a 4-character literal: always run
        (r"No module named ['\"]?flash_attn\.ops", ["no module named "]),
        (r"colou?r of the sky", ["r of the sky"]),  # "u" is optional, the "r" after it is not
    ],
)
def test_needles(pattern, expected):
    assert explain.needles(pattern) == expected


def test_needles_never_hide_a_real_match():
    """Soundness of the prefilter: whenever a pattern matches a real text, one of its literals is in it."""
    for sig in explain.load_signatures():
        for _, source, text in REAL:
            lowered = explain.clean(text).lower()
            for pattern, literals in zip(sig.patterns, sig.needles):
                if pattern.search(explain.clean(text)) and literals is not None:
                    assert any(lit in lowered for lit in literals), (sig.id, source, pattern.pattern)


def test_a_pipe_is_read_through_keeping_its_tail(tmp_path):
    """--log <(journalctl -u vllm) hands gpudoctor a pipe: it cannot seek, so it is read through."""
    import threading

    fifo = tmp_path / "journal"
    os.mkfifo(fifo)
    lines = b"INFO step ok " + b"x" * 80 + b"\n"

    def write():
        with open(fifo, "wb") as handle:
            handle.write(b"RuntimeError: CUDA error: no kernel image is available for execution on the device\n")
            for _ in range((5 << 20) // len(lines)):
                handle.write(lines)
            handle.write(b"OSError: [Errno 98] Address already in use\n")

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    text = explain.read_file(str(fifo))
    writer.join(10)
    assert text.truncated and text.source == str(fifo) and text.size > (5 << 20)
    assert ids(text.text) == ["SIG-address-in-use"]
