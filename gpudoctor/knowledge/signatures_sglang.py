"""Error signatures of SGLang's start-up: tensor-parallel divisibility, sgl-kernel's libraries, CUDA graphs.

Data in the format described in gpudoctor/knowledge/signatures.py (which joins this tuple after
the others). SGLang's KV-pool wording ("Not enough memory. Please try to increase
--mem-fraction-static") is a pattern of SIG-kv-cache-no-room, the same cause as vLLM's; its
ports share SIG-address-in-use and SIG-zmq-address-in-use. Each signature was written from real
texts of its cause (tests/explain_corpus/node_sglang.jsonl, with their threads).
"""

from __future__ import annotations

SGLANG = (
    {
        "id": "SIG-tensor-parallel-ensure-divisibility",
        "key": "tp_size_not_divisible",
        "title": "A head count of the model is not divisible by the tensor-parallel size (ensure_divisibility)",
        "patterns": [
            # SGLang's and vLLM's distributed/utils.py: the assertion names only two numbers, the function says which
            r"in ensure_divisibility\s*\n(?:[^\n]*\n){0,4}?[^\n]*AssertionError: (?P<heads>\d+) is not divisible by (?P<tp>\d+)",
        ],
        "cause": (
            "Tensor parallelism splits every attention layer's heads evenly across the GPUs, a vision tower's too: "
            "one head count of the model (the first number) is not a multiple of the tensor-parallel size (the second)."
        ),
        "fix": (
            "Use a --tp (--tensor-parallel-size) that divides every head count of the model (16 heads: 1, 2, 4, 8 or 16) "
            "and pipeline parallelism (--pp-size / --pipeline-parallel-size) for the remaining GPUs."
        ),
        "commands": ["python3 -m sglang.launch_server --model-path MODEL --tp 4 --pp-size 2"],
        "sources": ["gpustack/gpustack#4769", "vllm-project/vllm#414"],
        "confirm_rules": ["GD706"],
        "facts": ["gpu.count"],
    },
    {
        "id": "SIG-driver-api-symbol-missing",
        "key": "driver_too_old",
        "title": "A binary calls a CUDA driver function the installed driver lacks (undefined symbol: cu…)",
        # case-sensitive "cu" + a capital: the driver API (cuGreenCtxDestroy), not the runtime's cudaXxx (patterns run with re.I)
        "patterns": [r"undefined symbol:?\s*(?P<symbol>(?-i:cu[A-Z])\w+)"],
        "cause": (
            "The binary (sgl-kernel's common_ops, an attention kernel) was built for a newer CUDA and calls a driver API "
            "function (cu…, exported by libcuda.so, the driver) that the installed NVIDIA driver does not have: the "
            "driver is older than that CUDA (sgl-kernel's green-context streams need a CUDA 12.4/12.5 driver)."
        ),
        "fix": (
            "Upgrade the NVIDIA driver to one whose CUDA version (nvidia-smi, top right) is at least the wheels' CUDA, "
            "or install sglang/sgl-kernel builds for the CUDA the driver supports."
        ),
        "commands": ["nvidia-smi | head -4", "python3 -m pip list 2>/dev/null | grep -iE '^(torch|sgl.kernel|sglang) '"],
        "thread_fixes": [
            {"fix": "cuGreenCtx* are driver APIs: CUDA 12.8 wheels on an older driver (e.g. 525) fail; SGLang then checked the driver version at run time",
             "url": "https://github.com/sgl-project/sglang/pull/8701"},
        ],
        "sources": ["sgl-project/sglang#8701", "sgl-project/sglang#8131", "sgl-project/sglang#8090", "sgl-project/sglang#9021"],
        "confirm_rules": ["GD103", "GD204"],
        "facts": ["driver.version", "driver.cuda_max", "torch.cuda"],
    },
    # --- symptoms ---
    {
        "id": "SIG-sgl-kernel-common-ops-unloadable",
        "key": "failure_without_cause",
        "role": "symptom",
        "title": "sgl-kernel could not load its compiled library (common_ops)",
        "patterns": [r"\[sgl_kernel\] CRITICAL: Could not load any common_ops library"],
        "hint": (
            "the lines under 'Error details from previous import attempts' say why: 'undefined symbol: _ZN…c10…' (built "
            "for another torch), 'libnvrtc.so.12 / libcudart.so.12: cannot open shared object file' (built for another "
            "CUDA major), 'undefined symbol: cu…' (the driver is too old)"
        ),
        "cause": "sgl_kernel tried each build of its compiled ops for this GPU and none loaded; the reason of each attempt is listed below the message.",
        "fix": "Send the whole message including 'Error details from previous import attempts'; gpudoctor explain names the cause there.",
        "commands": ["python3 -c 'import sgl_kernel' 2>&1 | tail -5"],
        "sources": ["sgl-project/sglang#18203", "sgl-project/sglang#13948", "sgl-project/sglang#29646"],
        "facts": [],
    },
    {
        "id": "SIG-sglang-cuda-graph-capture-failed",
        "key": "failure_without_cause",
        "role": "symptom",
        "title": "SGLang could not capture its CUDA graphs at start-up",
        "patterns": [r"Capture cuda graph failed"],
        "hint": (
            "the exception after 'Capture cuda graph failed:' and its traceback are the cause. SGLang's own advice: out "
            "of memory -> a smaller --mem-fraction-static (0.8 or 0.7) or --cuda-graph-max-bs (16); an error inside "
            "torch.compile -> without --enable-torch-compile; a kernel that cannot be captured -> --disable-cuda-graph, "
            "the last resort (much slower)"
        ),
        "cause": "SGLang's CUDA-graph runner failed while capturing the decode batch sizes; the error it caught is printed with it.",
        "fix": "Read (or explain) the exception after 'Capture cuda graph failed:'; apply SGLang's suggestion for that kind of error.",
        "commands": ["python3 -m sglang.launch_server --model-path MODEL --mem-fraction-static 0.8 --cuda-graph-max-bs 16"],
        "sources": ["sgl-project/sglang#4489", "sgl-project/sglang#1751", "sgl-project/sglang#6218", "sgl-project/sglang#3430"],
        "facts": [],
    },
)
