"""Error signatures: the text users paste, what it means, how to fix it (``gpudoctor explain``).

This module is data. Each entry of ``SIGNATURES`` is a plain dict:

- ``id``: stable, ``SIG-<words>``; never reused.
- ``title``: one line.
- ``patterns``: regular expressions (searched case-insensitively, line by line; a pasted
  error that the terminal wrapped is also tried with its lines joined). Named groups
  (``(?P<symbol>…)``) become details shown next to the match.
- ``details`` (optional): more regexes searched in the whole text for named groups only
  (the "NVML library version: 570.124" line that follows the mismatch line).
- ``exclude`` (optional): a line that matches one of these is not this signature
  (near misses: ``Failed to import from vllm._C`` because a *library is missing* is not
  the undefined-symbol case).
- ``superseded_by`` (optional): drop this (generic) match when one of these ids matched.
- ``cause``, ``fix`` (text) and ``commands`` (copy-pasteable).
- ``key``: the cause, shared by every signature of one cause (the corpus of real texts,
  tests/explain_corpus/, labels its records with it).
- ``role`` (optional): "cause" (default) or "symptom": where a program gave up ("WorkerProc
  failed to start"), never the answer; a symptom carries a ``hint``: which earlier line names
  the cause.
- ``sources``: the public threads the text and the fix come from, as ``owner/repo#N`` (shown
  as https://github.com/owner/repo/issues/N) or full links.
- ``thread_fixes`` (optional): what fixed it in a thread (versions, commands, as the
  maintainers or the reporter confirmed), each with the thread's https:// URL.
- ``confirm_rules``: which rules, run on this machine, confirm the cause. Each entry is
  a rule ID (``GD102``), an ID prefix, usually an area (``GD2`` = CUDA & kernels), or a
  prefix with a filter on the rule's name and title (``GD4:torch|abi``: the flash-attn
  rules about torch or the ABI). IDs that this gpudoctor does not have yet are fine:
  they are reported as "could not check".
- ``other_rules`` (optional): rules whose failure is a *different* cause that gives the same
  text (no driver at all, when the text says the driver is too old): said as "different cause
  found", never as a confirmation.
- ``cannot_check`` (optional): why no rule on a machine can confirm the cause (a model repo's
  files, the Hub's access list); with it, ``confirm_rules`` may be empty.
- ``facts``: fact paths (``*`` matches one path segment) shown as context on this machine.

The entries are split by concern: this module (driver, CUDA runtime, GPU, memory, shared
memory, ports), signatures_build.py (ABI symbols, flash-attn, xformers, nvcc, libraries),
signatures_serving.py (OOM, launch arguments, models, containers, clusters, symptoms),
signatures_more.py (late causes), signatures_fabric.py (GPU peer access, NCCL, kernel-log Xid lines)
and signatures_sglang.py (SGLang start-up). On one
line, the earlier entry of SIGNATURES wins a tie; ``superseded_by`` settles the rest.
The matching and the confirmation live in gpudoctor/explain.py.
"""

from __future__ import annotations

SIGNATURES = (
    {
        "id": "SIG-no-kernel-image",
        "key": "no_kernel_image",
        "title": "CUDA has no kernel for this GPU (no kernel image is available)",
        "patterns": [
            r"no kernel image is available for execution on the device",
            r"cudaErrorNoKernelImageForDevice",
            r"CUDA_ERROR_NO_BINARY_FOR_GPU",
            r"has no device code compatible with CUDA arch (?P<arch>\d+)",  # llama.cpp / ggml
            r"(?P<gpu>[A-Z][^\n]{0,80}?) with CUDA capability (?P<sm>sm_\d+[af]?) is not compatible with the current PyTorch installation",
        ],
        "cause": (
            "A binary on the path (torch, vLLM's _C, a flash-attn or other extension wheel) carries neither "
            "SASS for this GPU's architecture nor PTX it can JIT: an old build on a new GPU (RTX 50xx / "
            "sm_120 with a cu124-era wheel) or a new build on a GPU below its minimum (cu13 torch starts at sm_75)."
        ),
        "fix": (
            "Install builds whose architecture list includes the GPU (Blackwell needs CUDA >= 12.8 builds), or "
            "rebuild the extension for it with TORCH_CUDA_ARCH_LIST set to the GPU's compute capability."
        ),
        "commands": [
            "nvidia-smi --query-gpu=name,compute_cap --format=csv",
            "python3 -c 'import torch; print(torch.cuda.get_arch_list())'",
            "python3 -m pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128",
        ],
        "thread_fixes": [
            {"fix": "RTX 50xx (sm_120): a torch build with sm_120, pip install --pre torch --index-url https://download.pytorch.org/whl/nightly/cu128", "url": "https://github.com/Hellod035/LeggedLab/issues/26"},
        ],
        "sources": [
            "vllm-project/vllm#19906", "vllm-project/vllm#14452", "vllm-project/vllm#16307",
            "vllm-project/vllm#4604", "vllm-project/vllm#11485", "gpustack/gpustack#2097", "pytorch/pytorch#31285",
        ],
        "confirm_rules": ["GD201", "GD502"],
        "facts": ["gpu.*.name", "gpu.*.compute_capability", "torch.version", "torch.cuda", "env.TORCH_CUDA_ARCH_LIST"],
    },
    {
        "id": "SIG-nvml-driver-library-mismatch",
        "key": "nvml_driver_library_mismatch",
        "title": "NVML: driver/library version mismatch (driver upgraded without reboot)",
        "patterns": [
            r"Failed to initialize NVML:\s*Driver/library version mismatch",
            r"Driver/library version mismatch",
            r"NVML/RM version mismatch",
            r"NVML_ERROR_LIB_RM_VERSION_MISMATCH|LibRmVersionMismatch",
        ],
        "details": [r"NVML library version:\s*(?P<library_version>\d+\.\d+(?:\.\d+)?)"],
        "cause": (
            "The user-space driver libraries (libnvidia-ml, libcuda) were upgraded, often by unattended "
            "upgrades, while the old NVIDIA kernel module is still loaded; NVML and CUDA refuse to start "
            "until both are the same version."
        ),
        "fix": "Reboot, or unload and reload the NVIDIA kernel modules when nothing uses the GPU; then hold the driver packages.",
        "commands": [
            "cat /proc/driver/nvidia/version",
            "sudo reboot",
            "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo modprobe nvidia  # instead of a reboot",
            "sudo apt-mark hold 'nvidia-*' 'libnvidia-*'",
        ],
        "thread_fixes": [
            {"fix": "reinstall the driver whose user-space version matches the loaded module (570.124.04 != 570.124.06)",
             "url": "https://github.com/tinygrad/open-gpu-kernel-modules/issues/47"},
            {"fix": "reboot after the driver upgrade so the new kernel module is loaded", "url": "https://github.com/canonical/ubuntu-server-documentation/pull/369"},
        ],
        "sources": [
            "NVIDIA/ubuntu-packaging-nvidia-driver#3", "mozilla/translations#1167", "lyulyul/shine-cluster#30",
            "tinygrad/open-gpu-kernel-modules#47", "intel/llvm#17614",
        ],
        "confirm_rules": ["GD102"],
        "facts": ["driver.kernel_module_version", "driver.library_path", "driver.version"],
    },
    {
        "id": "SIG-driver-insufficient",
        "key": "driver_too_old",
        "title": "The NVIDIA driver is too old for the CUDA runtime (driver version is insufficient)",
        "patterns": [
            r"CUDA driver version is insufficient for CUDA runtime version",
            r"cudaErrorInsufficientDriver",
            r"CUDA_ERROR_INSUFFICIENT_DRIVER",
            r"The NVIDIA driver on your system is too old \(found version (?P<found_version>\d+)\)",
        ],
        "cause": (
            "The host driver is older than the CUDA runtime the wheel or image was built with needs "
            "(a CUDA 12 runtime needs R525+, CUDA 13 needs R580+). nvidia-smi's banner 'CUDA Version' is "
            "the newest CUDA this driver can run."
        ),
        "fix": (
            "Upgrade the driver, or install torch/vLLM built for the CUDA the driver supports (or, on data-center "
            "GPUs only, the cuda-compat forward-compatibility package)."
        ),
        "commands": [
            "nvidia-smi | head -4",
            "python3 -m pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu126",
        ],
        "thread_fixes": [
            {"fix": "maintainer: the container uses CUDA 12.1; update the GPU driver to 535 (the reporter confirmed)", "url": "https://github.com/IEIT-Yuan/Yuan-2.0/issues/65"},
            {"fix": "maintainer: install the latest NVIDIA driver; CUDA 13 builds need a newer driver", "url": "https://github.com/nagadomi/nunif/issues/702"},
        ],
        "sources": [
            "ovg-project/kvcached#74", "nagadomi/nunif#702", "vllm-project/vllm#1907", "vllm-project/vllm#4940",
            "vllm-project/vllm#5283", "mlcommons/inference#54",
        ],
        "confirm_rules": ["GD103", "GD204"],
        # No driver at all, or one whose library and module differ, is another cause than "too old".
        "other_rules": ["GD101", "GD102"],
        "facts": ["driver.version", "driver.cuda_max", "torch.version", "torch.cuda"],
    },
    {
        "id": "SIG-cuda-804-forward-compat",
        "key": "cuda_forward_compat_unsupported",
        "title": "CUDA error 804: forward compatibility was attempted on non-supported hardware",
        "patterns": [
            r"Error 804:?\s*forward compatibility was attempted on non supported HW",
            r"forward compatibility was attempted on non supported HW",
            r"cudaErrorCompatNotSupportedOnDevice|CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
        ],
        "cause": (
            "A cuda-compat (forward compatibility) libcuda from a container image or CUDA toolkit is loaded "
            "on a GPU that does not support it (consumer GeForce/RTX cards; forward compatibility is for "
            "data-center GPUs), or the image needs a newer driver than the host has."
        ),
        "fix": (
            "Upgrade the host driver to the image's CUDA version, or use an image/wheel for the host's CUDA; "
            "remove the compat directory from LD_LIBRARY_PATH on non data-center GPUs."
        ),
        "commands": ["nvidia-smi | head -4", "echo \"$LD_LIBRARY_PATH\" | tr ':' '\\n' | grep -i compat"],
        "thread_fixes": [
            {"fix": "the host driver (525) was older than the image's CUDA; a newer host driver (550) fixed it", "url": "https://github.com/vllm-project/vllm/issues/4940"},
            {"fix": "maintainer: update the host driver for the CUDA 12.4 image, or use an older image (confirmed fixed)", "url": "https://github.com/Haidra-Org/horde-worker-reGen/issues/349"},
        ],
        "sources": [
            "gpustack/gpustack#1254", "gpustack/gpustack#1540", "vllm-project/vllm#5510", "vllm-project/vllm#4940",
        ],
        "confirm_rules": ["GD103", "GD207"],
        "other_rules": ["GD101"],
        "facts": ["driver.version", "driver.cuda_max", "gpu.*.name", "torch.cuda", "env.LD_LIBRARY_PATH"],
    },
    {
        "id": "SIG-cuda-803-driver-combination",
        "key": "cuda_driver_combination_unsupported",
        "title": "CUDA error 803: unsupported display driver / CUDA driver combination",
        "patterns": [
            r"Error 803:?\s*system has unsupported display driver\s*/\s*cuda driver combination",
            r"system has unsupported display driver\s*/\s*cuda driver combination",
            r"Error 803:?\s*system has unsupported display driver",
            r"cudaErrorSystemDriverMismatch|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
        ],
        "cause": (
            "The libcuda the process loads does not belong to the running kernel driver: a container's CUDA "
            "compat or driver libraries shadow the host's (vLLM >= 0.15 images under the nvidia runtime pick "
            "the wrong libcuda through their ld.so.conf), or stale driver libraries after an upgrade."
        ),
        "fix": (
            "Put the host driver's libraries first (LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib "
            "in containers), run with --gpus all, or remove stale cuda-compat packages."
        ),
        "commands": [
            "ldconfig -p | grep -E 'libcuda\\.so|libnvidia-ml\\.so'",
            "export LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib:$LD_LIBRARY_PATH",
        ],
        "thread_fixes": [
            {"fix": "maintainer: the image's cuda-compat.conf overrode the driver library from nvidia.conf; fixed by ordering it last (zzz-cuda-compat.conf)", "url": "https://github.com/vllm-project/vllm/pull/34226"},
        ],
        "sources": [
            "gpustack/gpustack#4678", "llm-d/llm-d#706", "vllm-project/vllm#33447", "vllm-project/vllm#15335",
        ],
        "confirm_rules": ["GD102", "GD207"],
        "other_rules": ["GD101"],
        "facts": ["driver.version", "driver.library_path", "env.LD_LIBRARY_PATH", "host.container"],
    },
    {
        "id": "SIG-cuda-802-not-initialized",
        "key": "cuda_system_not_initialized",
        "title": "CUDA error 802: system not yet initialized (fabric manager not running)",
        "patterns": [
            r"Error 802:?\s*system not yet initialized",
            r"\(802\)\s*:?\s*system not yet initialized",
            r"cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY",
            r"system not yet initialized",
        ],
        "cause": (
            "On NVSwitch systems (HGX/DGX A100, H100, H200, B200 with 8 GPUs) CUDA cannot start until the "
            "NVIDIA Fabric Manager service has configured the NVSwitch fabric: it is not installed, not "
            "running, or its version differs from the driver's."
        ),
        "fix": "Install nvidia-fabricmanager of exactly the driver's version and start it.",
        "commands": [
            "systemctl status nvidia-fabricmanager",
            "sudo apt install nvidia-fabricmanager-580 && sudo systemctl enable --now nvidia-fabricmanager",
            "nvidia-smi -q | grep -iA2 fabric",
        ],
        "thread_fixes": [
            {"fix": "the Fabric Manager version did not match the driver; reinstalling the matching nvidia-fabricmanager and rebooting fixed it (H100 SXM)", "url": "https://github.com/ollama/ollama/issues/12136"},
        ],
        "sources": [
            "gpustack/gpustack#4154", "pytorch/pytorch#35710", "aws-samples/aws-deep-learning-ami-ubuntu-dcv-desktop#33",
            "huggingface/huggingface_hub#4134",
        ],
        "confirm_rules": ["GD1:fabric", "GD3:fabric|nvswitch"],
        "facts": ["driver.version", "gpu.count", "gpu.*.name"],
    },
    {
        "id": "SIG-unsupported-ptx-toolchain",
        "key": "ptx_unsupported_toolchain",
        "title": "PTX built by a newer CUDA than the driver can compile (unsupported toolchain)",
        "patterns": [
            r"the provided PTX was compiled with an unsupported toolchain",
            r"cudaErrorUnsupportedPtxVersion|CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
        ],
        "cause": (
            "A kernel exists only as PTX generated by a newer CUDA toolkit than the driver's JIT understands: "
            "the binary relies on minor-version compatibility with an older driver (often vLLM's "
            "_vllm_fa2_C, flashinfer or Triton kernels)."
        ),
        "fix": (
            "Upgrade the driver to at least the toolkit's own driver version, or install builds with native "
            "SASS for this GPU; as a stopgap choose another attention backend."
        ),
        "commands": ["nvidia-smi | head -4", "export VLLM_ATTENTION_BACKEND=TRITON_ATTN  # stopgap"],
        "thread_fixes": [
            {"fix": "maintainer: the toolchain (CUDA 11.1) was newer than the driver can JIT; use a driver and toolkit that agree", "url": "https://github.com/mit-han-lab/inter-operator-scheduler/issues/4"},
        ],
        "sources": [
            "vllm-project/vllm#31700", "vllm-project/vllm#37140", "vllm-project/vllm#28305", "vllm-project/vllm#50872",
            "ztxz16/fastllm#649",
        ],
        "confirm_rules": ["GD202", "GD103"],
        "other_rules": ["GD101"],
        "facts": ["driver.version", "driver.cuda_max", "torch.cuda", "gpu.*.compute_capability"],
    },
    {
        "id": "SIG-free-memory-below-utilization",
        "key": "gpu_memory_utilization_exceeds_free",
        "title": "vLLM: free GPU memory at startup is less than --gpu-memory-utilization asks for",
        "patterns": [
            r"Free memory on device[^\n]*?on startup is less than desired GPU memory utilization",
        ],
        "details": [
            r"\((?P<free_gib>[\d.]+)/(?P<total_gib>[\d.]+) GiB\) on startup is less than",
            r"desired GPU memory utilization \((?P<utilization>[\d.]+), (?P<wanted_gib>[\d.]+) GiB\)",
        ],
        "cause": (
            "Other processes already hold GPU memory (a surviving EngineCore after a kill, a notebook, another "
            "tenant): --gpu-memory-utilization is a fraction of the *total* memory that must be free when the "
            "engine starts."
        ),
        "fix": "Stop the stale processes that hold the memory, or lower --gpu-memory-utilization.",
        "commands": [
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
            "gpudoctor fix  # stops stale serving processes you own, after confirmation",
        ],
        "sources": [
            "vllm-project/vllm#20305", "vllm-project/vllm#55510", "vllm-project/vllm#42017", "pytorch/pytorch#175666",
        ],
        "confirm_rules": ["GD302", "GD601", "GD604", "GD708"],
        "facts": ["gpu.*.memory_used", "gpu.*.memory_total", "gpu.*.processes"],
    },
    {
        "id": "SIG-kv-cache-no-room",
        "key": "kv_cache_insufficient",
        "title": "vLLM: no memory left for the KV cache",
        "patterns": [
            r"No available memory for the cache blocks",
            r"KV cache is needed, which is larger than the available KV cache memory",
            r"Available KV cache memory:\s*-\d",
            r"# GPU blocks: 0\b",
            r"max seq len \((?P<max_seq_len>\d+)\) is larger than the maximum number of tokens that can be stored in KV cache",
            r"Not enough memory\. Please try to increase --mem-fraction-static",  # SGLang's wording
            r"Not enough memory to allocate KV cache",  # SGLang since sgl-project/sglang#23181
            r"Loaded weights leave no GPU memory for the KV cache",  # SGLang (sgl-project/sglang#36260)
        ],
        "cause": (
            "After weights, activations and CUDA graphs there is no room for the KV cache within the memory "
            "budget: a small GPU, other processes holding memory, a large draft model for speculative "
            "decoding, or a too-long --max-model-len."
        ),
        "fix": (
            "Raise --gpu-memory-utilization (if the GPU is free), lower --max-model-len / --max-num-seqs, quantize, or free "
            "the GPU. SGLang: raise --mem-fraction-static (a big model leaves the KV pool no room), or lower --context-length."
        ),
        "commands": ["nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv"],
        "thread_fixes": [
            {"fix": "maintainer: raise --gpu-memory-utilization (0.03-0.4 was too low for Qwen2.5-0.5B; 0.5-0.6 works)", "url": "https://github.com/vllm-project/vllm/issues/10439"},
            {"fix": "maintainer: restart with a higher gpu_memory_utilization or a lower max_model_len", "url": "https://github.com/basalam/product-catalog-generator/issues/10"},
        ],
        "sources": ["vllm-project/vllm#2248", "vllm-project/vllm#10439", "vllm-project/vllm#14574", "QwenLM/Qwen3#12"],
        "confirm_rules": ["GD302", "GD601", "GD604", "GD710"],
        "facts": ["gpu.*.memory_total", "gpu.*.memory_used"],
    },
    {
        "id": "SIG-nccl-shm",
        "key": "nccl_shm_error",
        "title": "NCCL cannot create its shared-memory segment in /dev/shm",
        "patterns": [
            r"NCCL WARN Error while creating shared memory segment",
            r"NCCL WARN Error: failed to extend /dev/shm/",
            r"NCCL WARN Error while attaching to shared memory segment",
            r"NCCL WARN Call to posix_fallocate failed",
            r"Error while (?:creating|attaching to) shared memory segment\s+(?:/dev/shm/)?nccl-",
            r"failed to extend /dev/shm/nccl-",
            r"\bncclShmOpen\b",
            r"NCCL error[^\n]*unhandled system error",
            r"\bncclSystemError\b",
        ],
        "cause": (
            "/dev/shm is too small (Docker's default is 64 MiB) or full of segments left by killed runs "
            "(nccl-*, psm_*), so NCCL's shared-memory transport between local GPUs fails."
        ),
        "fix": "Run the container with --ipc=host or a large --shm-size; remove stale segments of dead processes; NCCL_SHM_DISABLE=1 as a last resort.",
        "commands": ["df -h /dev/shm", "ls -la /dev/shm", "docker run --ipc=host …  # or --shm-size=16g"],
        "thread_fixes": [
            {"fix": "Docker limits /dev/shm to 64 MB; a larger --shm-size fixed it (NCCL_SHM_DISABLE=1 is the fallback)",
             "url": "https://github.com/NVIDIA/nccl/issues/342"},
            {"fix": "started the container with --shm-size=1g", "url": "https://github.com/NVIDIA/JAX-Toolbox/issues/183"},
            {"fix": "added --shm-size=1g to docker run", "url": "https://github.com/fal-ai-community/video-diffusion-speedrun/issues/2"},
        ],
        "sources": [
            "NVIDIA/nccl#342", "NVIDIA/JAX-Toolbox#183", "fal-ai-community/video-diffusion-speedrun#2",
            "MiniMax-AI/MiniMax-01#42", "vllm-project/vllm#1710", "vllm-project/vllm#6574", "vllm-project/vllm#1125",
            "vllm-project/vllm#18831", "NVIDIA/nccl-tests#166", "NVIDIA/nccl#1518",
        ],
        "confirm_rules": ["GD309", "GD603"],
        "facts": ["host.shm_total", "host.container", "gpu.count"],
    },
    {
        "id": "SIG-address-in-use",
        "key": "port_in_use",
        "title": "The server's port is already taken (address already in use)",
        "patterns": [
            r"error while attempting to bind on address \((?P<address>[^)]*)\):\s*address already in use",
            r"\[Errno (?:98|48)\] Address already in use",
            r"The server socket has failed to listen on any local network address",
            r"\bEADDRINUSE\b",
        ],
        "details": [r"\('[^']*',\s*(?P<port>\d+)\)"],
        "cause": (
            "Another process listens on the port: usually the previous vLLM (or a zombie API server) is still "
            "running. A torch.distributed 'server socket has failed to listen' / EADDRINUSE is the internal "
            "rendezvous port instead."
        ),
        "fix": "Find the owner of the port and stop it if it is stale, or pick another --port (or MASTER_PORT / VLLM_PORT for the rendezvous).",
        "commands": ["ss -ltnp | grep ':8000 '", "gpudoctor fix  # stops stale serving processes you own, after confirmation"],
        "sources": ["vllm-project/vllm#9763", "vllm-project/vllm#7514", "vllm-project/vllm#11617"],
        "confirm_rules": ["GD602", "GD722"],
        "facts": ["processes.port"],
    },
    {
        "id": "SIG-bf16-needs-cc80",
        "key": "bf16_unsupported_gpu",
        "title": "bfloat16 needs compute capability 8.0 (use --dtype half)",
        "patterns": [r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0"],
        "details": [r"Your (?P<gpu>[^\n]+?) GPU has compute capability (?P<compute_capability>\d+\.\d+)"],
        "cause": "The model's dtype is bfloat16 and this GPU is older than Ampere (T4, V100, P100/P40): it has no bf16 support.",
        "fix": "Serve in float16 (--dtype half) or use an Ampere or newer GPU.",
        "commands": ["vllm serve MODEL --dtype half"],
        "thread_fixes": [
            {"fix": "maintainer: Turing and Volta have no native bfloat16; use dtype=\"half\" (the reporter fixed it with float16)", "url": "https://github.com/vllm-project/vllm/issues/946"},
        ],
        "sources": [
            "vllm-project/vllm#946", "vllm-project/vllm#1157", "vllm-project/vllm#1153", "vllm-project/vllm#2374",
            "hiyouga/LlamaFactory#4960",
        ],
        "confirm_rules": ["GD711"],
        "facts": ["gpu.*.name", "gpu.*.compute_capability"],
    },
    {
        "id": "SIG-failed-to-infer-device-type",
        "key": "vllm_device_type_unknown",
        "title": "vLLM could not detect the platform (Failed to infer device type)",
        "patterns": [r"Failed to infer device type"],
        "cause": (
            "vLLM's platform detection found no usable CUDA: NVML did not start (no driver, a driver/library "
            "mismatch, a container without GPUs), the NVML binding is broken or shadowed (the deprecated "
            "'pynvml' package), or torch is a CPU build."
        ),
        "fix": "Check the driver first (nvidia-smi), then the NVML binding and torch's CUDA build; VLLM_LOGGING_LEVEL=DEBUG shows why detection failed.",
        "commands": [
            "nvidia-smi",
            "python3 -m pip uninstall -y pynvml && python3 -m pip install -U nvidia-ml-py",
            "VLLM_LOGGING_LEVEL=DEBUG vllm serve MODEL 2>&1 | grep -i platform",
        ],
        "thread_fixes": [
            {"fix": "maintainer: no GPU was available inside the container", "url": "https://github.com/vllm-project/vllm/issues/13946"},
        ],
        "sources": ["vllm-project/vllm#12847", "vllm-project/vllm#13865", "vllm-project/vllm#13946", "vllm-project/vllm#14200"],
        "confirm_rules": ["GD101", "GD102", "GD103", "GD501"],
        "facts": ["driver.nvml", "driver.version", "torch.version", "torch.cuda"],
    },
    {
        "id": "SIG-no-driver",
        "key": "no_driver",
        "title": "No NVIDIA driver reachable",
        "patterns": [
            r"Found no NVIDIA driver on your system",
            r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver",
            r"NVML Shared Library Not Found",
            r"libnvidia-ml\.so(?:\.1)?: cannot open shared object file",
            r"libcuda\.so(?:\.1)?: cannot open shared object file",
        ],
        "cause": (
            "The NVIDIA driver is not installed, its kernel module is not loaded, or a container was started "
            "without the GPUs (no NVIDIA Container Toolkit / --gpus)."
        ),
        "fix": "Install and load the driver (read dmesg if the module does not load), or start the container with --gpus all.",
        "commands": ["nvidia-smi", "lsmod | grep nvidia", "sudo dmesg | grep -iE 'nvrm|nvidia' | tail -20"],
        "thread_fixes": [
            {"fix": "maintainer: the machine had no CUDA GPU; run where one is, or drop the .cuda() calls", "url": "https://github.com/ShuweiShao/AF-SfMLearner/issues/39"},
        ],
        "sources": ["https://github.com/pytorch/pytorch/blob/main/torch/cuda/__init__.py", "https://docs.nvidia.com/deploy/nvidia-smi/index.html", "vllm-project/vllm#12847"],
        "confirm_rules": ["GD101"],
        "superseded_by": ["SIG-container-nvml-library-missing"],
        "facts": ["driver.nvml", "driver.kernel_module_version"],
    },
    {
        "id": "SIG-illegal-memory-access",
        "key": "illegal_memory_access",
        "title": "CUDA error: an illegal memory access was encountered",
        "patterns": [
            r"an illegal memory access was encountered",
            r"cudaErrorIllegalAddress|CUDA_ERROR_ILLEGAL_ADDRESS",
        ],
        "cause": (
            "A kernel read or wrote outside its memory: a bug in a kernel or the way it is called (attention backends, "
            "CUDA graphs, custom all-reduce, quantized kernels), a binary built for another torch, or failing GPU memory. "
            "The error is sticky and asynchronous: the traceback often points at a later call."
        ),
        "fix": (
            "Rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; try --enforce-eager and another attention backend; "
            "update vLLM; check the GPU's ECC and Xid errors."
        ),
        "commands": [
            "CUDA_LAUNCH_BLOCKING=1 vllm serve MODEL --enforce-eager",
            "sudo dmesg | grep -i xid | tail",
            "nvidia-smi -q -d ECC,ROW_REMAPPER | grep -iE 'uncorr|pending|failure'",
        ],
        "sources": ["vllm-project/vllm#6976", "vllm-project/vllm#11366", "vllm-project/vllm#14404"],
        "confirm_rules": ["GD303", "GD304"],
        "cannot_check": "a kernel bug shows only while the kernel runs; gpudoctor checks the hardware side (ECC, row remapping) only",
        "facts": ["gpu.*.name", "gpu.*.ecc_uncorrectable", "torch.version", "vllm.*"],
    },
    {
        "id": "SIG-nvrm-api-mismatch",
        "key": "nvrm_api_mismatch",
        "title": "Kernel log: NVRM API mismatch (driver libraries and kernel module differ)",
        "patterns": [
            r"NVRM: API mismatch: the client (?:'[^']*' \(pid \d+\)\s*)?has the version (?P<client_version>[\d.]+)",
            r"NVRM: API mismatch: the client",
        ],
        "details": [r"this kernel module has(?:\s*NVRM:)?\s*(?:the )?version (?P<kernel_version>[\d.]+)"],
        "cause": "The NVIDIA user-space driver was upgraded (or a container brings its own) while the old kernel module is still loaded.",
        "fix": "Reboot (or reload the nvidia modules when the GPU is idle) so the kernel module matches the libraries.",
        "commands": [
            "cat /proc/driver/nvidia/version; nvidia-smi --version",
            "sudo reboot",
            "sudo rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && sudo nvidia-modprobe  # instead of a reboot",
        ],
        "thread_fixes": [
            {"fix": "maintainer: the kernel module is still the old one; rmmod nvidia nvidia_uvm nvidia_drm nvidia_modeset then nvidia-modprobe (the reporter: a reboot fixed it)",
             "url": "https://github.com/NVIDIA/nvidia-docker/issues/182"},
            {"fix": "fixed by a reboot", "url": "https://github.com/stackhpc/ansible-slurm-appliance/issues/287"},
        ],
        "sources": ["NVIDIA/nvidia-docker#182", "stackhpc/ansible-slurm-appliance#287", "negativo17/nvidia-driver#43", "saharmor/dalle-playground#104"],
        "confirm_rules": ["GD102"],
        "facts": ["driver.kernel_module_version", "driver.version"],
    },
    {
        "id": "SIG-gpu-too-old",
        "key": "gpu_compute_capability_too_old",
        "title": "The GPU is older than the software supports (compute capability too low)",
        "patterns": [
            r"GPUs with compute capability (?:below|less than) (?P<minimum>[\d.]+) are not supported",
            r"PyTorch no longer supports this GPU because it is too old",
        ],
        "details": [r"minimum cuda capability supported by this library is (?P<minimum>[\d.]+)"],
        "cause": "vLLM needs compute capability 7.0+ (Volta); recent torch wheels dropped Maxwell/Pascal (and CUDA 13 builds start at sm_75).",
        "fix": "Use a GPU the release supports, or an older torch/vLLM release that still supports this GPU.",
        "commands": ["nvidia-smi --query-gpu=name,compute_cap --format=csv", "python3 -c 'import torch; print(torch.cuda.get_arch_list())'"],
        "sources": ["vllm-project/vllm#1284"],
        "confirm_rules": ["GD502"],
        "facts": ["gpu.*.name", "gpu.*.compute_capability", "torch.version"],
    },
    {
        "id": "SIG-cuda-driver-init-failed",
        "key": "cuda_driver_init_failed",
        "title": "CUDA driver initialisation failed (cuInit)",
        "patterns": [
            r"CUDA driver initialization failed, you might not have a CUDA gpu",
            r"cuInit failed: unknown error",
            r"failed call to cuInit: CUDA_ERROR_UNKNOWN",
            r"CUDA unknown error - this may be due to an incorrectly set up environment",
            r"cuInit\(0\) failed|CUDA_ERROR_UNKNOWN[^\n]*cuInit",
        ],
        "cause": (
            "libcuda loaded but could not start the GPU: no NVIDIA GPU, its kernel module (or nvidia_uvm) not loaded, the "
            "/dev/nvidia* nodes missing in a container, or a GPU in a bad state after suspend or an Xid error."
        ),
        "fix": "Make nvidia-smi work first; load nvidia_uvm (sudo modprobe nvidia_uvm) and check dmesg; in containers pass the GPUs (--gpus all).",
        "commands": ["nvidia-smi", "ls -l /dev/nvidia*", "sudo modprobe nvidia_uvm && sudo dmesg | grep -iE 'nvrm|xid' | tail"],
        "thread_fixes": [
            {"fix": "after suspend/resume: reloading the NVIDIA kernel modules (rmmod, modprobe) fixed it without a reboot", "url": "https://github.com/gbionics/jaxsim/issues/50"},
            {"fix": "several users: sudo apt-get install nvidia-modprobe (the /dev/nvidia-uvm node was not created)", "url": "https://github.com/tensorflow/tensorflow/issues/394"},
        ],
        "sources": ["Points2Surf/points2surf#17", "wenet-e2e/wenet#700", "ratt-ru/PyMORESANE#22"],
        "confirm_rules": ["GD101", "GD102"],
        "facts": ["driver.nvml", "driver.kernel_module_version", "gpu.count"],
    },
    {
        "id": "SIG-invalid-device-ordinal",
        "key": "invalid_device_ordinal",
        "title": "CUDA error: invalid device ordinal (a GPU index that does not exist)",
        "patterns": [r"invalid device ordinal"],
        "cause": "The code asks for GPU N (cuda:N, --gpu-id, local rank) but fewer GPUs are visible: CUDA_VISIBLE_DEVICES narrows them, or the index was written for a bigger machine.",
        "fix": "Use an index below the number of visible GPUs, or widen CUDA_VISIBLE_DEVICES; tensor/data parallel sizes must fit the visible GPUs.",
        "commands": ["echo \"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"; nvidia-smi -L"],
        "thread_fixes": [
            {"fix": "maintainer: with CUDA_VISIBLE_DEVICES=1,2 use --nproc_per_node=2, the number of visible GPUs (confirmed)", "url": "https://github.com/wenwenyu/PICK-pytorch/issues/14"},
            {"fix": "maintainer: the script used cuda:1 on a one-GPU machine; use cuda:0", "url": "https://github.com/LuyaooChen/uninformed-students-pytorch/issues/3"},
        ],
        "sources": ["pytorch/pytorch#14", "thuml/Time-LLM#10"],
        "confirm_rules": ["GD308", "GD705"],
        "facts": ["env.CUDA_VISIBLE_DEVICES", "gpu.count"],
    },
)

from .signatures_build import BUILD  # noqa: E402  (data of the same format, by concern)
from .signatures_serving import SERVING  # noqa: E402
from .signatures_more import MORE  # noqa: E402
from .signatures_fabric import FABRIC  # noqa: E402
from .signatures_sglang import SGLANG  # noqa: E402

SIGNATURES = SIGNATURES + BUILD + SERVING + MORE + FABRIC + SGLANG
