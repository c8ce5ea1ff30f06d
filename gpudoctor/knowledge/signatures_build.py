"""Error signatures of the Python stack and of builds: ABI symbols, flash-attn, xformers, nvcc, libraries.

Data in the format described in gpudoctor/knowledge/signatures.py (which joins this tuple to its own).
"""

from __future__ import annotations

BUILD = (
    {
        "id": "SIG-flash-attn-undefined-symbol",
        "key": "torch_abi_undefined_symbol",
        "title": "flash-attn's compiled extension does not match the installed torch (undefined symbol)",
        "patterns": [
            r"flash_attn[^\s:'\"]*\.(?:so|pyd)\b[^\n]*?undefined symbol:?\s*(?P<symbol>[\w.@$]+)",
            r"undefined symbol:?\s*(?P<symbol>_Z[\w.@$]+)(?![\w.@$])[^\n]*flash_attn",
        ],
        "exclude": [r"vllm_flash_attn", r"_vllm_fa\d_C"],
        "cause": (
            "The flash-attn binary (flash_attn_2_cuda / flash_attn_3) was built against another torch version "
            "or the other C++ ABI (cxx11abiTRUE/FALSE) than the torch installed now: torch's C++ symbols "
            "(_ZN3c10…, _ZN2at…) changed between releases. Typical after upgrading torch (or letting pip do it) "
            "without rebuilding flash-attn."
        ),
        "fix": (
            "Install the flash-attn wheel built for this torch major.minor, CUDA major and C++ ABI "
            "(name: flash_attn-X+cuXXtorchX.Ycxx11abi{TRUE|FALSE}-…), or rebuild it against the installed torch."
        ),
        "commands": [
            "python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch._C._GLIBCXX_USE_CXX11_ABI)'",
            "python3 -m pip uninstall -y flash-attn && python3 -m pip install flash-attn --no-build-isolation --no-cache-dir",
        ],
        "thread_fixes": [
            {"fix": "installing the flash-attn wheel built for the exact torch/CUDA/C++ ABI fixed it (torch 2.6.0 with flash-attn 2.6.3)", "url": "https://github.com/Dao-AILab/flash-attention/issues/1832"},
            {"fix": "flash-attn 2.5.7 was built for another torch than vLLM 0.4.0 installed; flash-attn==2.4.2 (matching torch) fixed it", "url": "https://github.com/vllm-project/vllm/issues/3912"},
        ],
        "sources": [
            "Dao-AILab/flash-attention#1832", "Dao-AILab/flash-attention#723", "Dao-AILab/flash-attention#853",
            "Dao-AILab/flash-attention#975", "Dao-AILab/flash-attention#784", "Dao-AILab/flash-attention#931",
            "Dao-AILab/flash-attention#966", "Dao-AILab/flash-attention#1816",
        ],
        "confirm_rules": ["GD404"],
        "facts": ["torch.version", "torch.cuda", "flash_attn.*"],
    },
    {
        "id": "SIG-vllm-c-undefined-symbol",
        "key": "torch_abi_undefined_symbol",
        "title": "vLLM's compiled extension does not match the installed torch (undefined symbol in vllm._C)",
        "patterns": [
            r"vllm[/\\][^\s:'\"]*\.(?:so|pyd)\b[^\n]*?undefined symbol:?\s*(?P<symbol>[\w.@$]+)",
            r"Failed to import from vllm\._C with ImportError\([^\n]*undefined symbol:?\s*(?P<symbol>[\w.@$]+)",
        ],
        "cause": (
            "vLLM pins an exact torch version and its compiled extensions (_C, _moe_C, vllm_flash_attn's "
            "_vllm_fa2_C …) only load against that torch. torch was replaced (a pip install of something else "
            "upgraded it), or a source build of vLLM is used with another torch than it was built with."
        ),
        "fix": (
            "Reinstall the torch version this vLLM pins (its Requires-Dist), or reinstall/rebuild vLLM against "
            "the torch you need."
        ),
        "commands": [
            "python3 -m pip show vllm | grep -i requires",
            "python3 -m pip install --force-reinstall vllm  # brings back the pinned torch",
        ],
        "sources": [
            "vllm-project/vllm#13608", "vllm-project/vllm#5501", "vllm-project/vllm#15010",
            "vllm-project/vllm#20361", "vllm-project/vllm#21226", "vllm-project/vllm#28199",
        ],
        "confirm_rules": ["GD510", "GD508:\\[vllm\\]$"],
        "facts": ["torch.version", "torch.cuda", "vllm.*", "packages.stack", "torch.extensions"],
    },
    {
        "id": "SIG-torch-extension-undefined-symbol",
        "key": "torch_abi_undefined_symbol",
        "title": "A compiled extension was built against another torch (undefined symbol _ZN3c10… / _ZN2at…)",
        "patterns": [
            # N, then the member's qualifiers (Itanium ABI: r V K, then a ref-qualifier R or O): _ZNK a const
            # member (c10::SymInt::sym_ne), _ZNR an lvalue-ref one (torch::Library::_def &, sglang-kernel
            # 0.4.10 over torch 2.11 on the H200)
            r"undefined symbol:?\s*(?P<symbol>_ZN[rVK]*[RO]?(?:3c10|2at|5torch)[\w.@$]*)",
            # macOS (dyld) words it differently and adds a leading underscore
            r"Symbol not found:\s*'?(?P<symbol>__ZN[rVK]*[RO]?(?:3c10|2at|5torch)[\w.@$]*)",
            r"symbol not found in flat namespace\s*'(?P<symbol>__ZN[rVK]*[RO]?(?:3c10|2at|5torch)[\w.@$]*)'",
        ],
        "superseded_by": ["SIG-flash-attn-undefined-symbol", "SIG-vllm-c-undefined-symbol"],
        "cause": (
            "A C++/CUDA extension (xformers, flashinfer, a custom kernel) references torch C++ symbols "
            "(c10, at, torch namespaces) that the installed torch does not export: it was built for another "
            "torch version or C++ ABI."
        ),
        "fix": "Reinstall the extension built for this torch, or rebuild it with --no-build-isolation against it.",
        "commands": ["python3 -m pip list 2>/dev/null | grep -iE '^(torch|xformers|flashinfer|flash.attn)'"],
        "sources": ["Dao-AILab/flash-attention#853", "vllm-project/vllm#3630", "meta-pytorch/csprng#78", "open-mmlab/mmcv#3161"],
        "confirm_rules": ["GD508", "GD510", "GD503:requires.*\\btorch\\b", "GD404"],
        "facts": ["torch.version", "torch.cuda", "torch.cxx11_abi", "torch.extensions"],
    },
    {
        "id": "SIG-flash-attn-ampere-only",
        "key": "flash_attn_unsupported_gpu",
        "title": "FlashAttention needs an Ampere or newer GPU (compute capability >= 8.0)",
        "patterns": [
            r"FlashAttention only supports Ampere GPUs or newer",
            r"Cannot use FA version (?P<fa_version>\d) is not supported due to (?P<reason>FA\d is only supported on devices with compute capability[^\n]*)",
            r"FA\d is only supported on devices with compute capability",
            r"Expected (?:is_sm\d+x? \|\| )+is_sm\d+x? to be true, but got false",
            r"FlashAttention requires building with sm version",
            r"assert is_fa_version_supported\(",
        ],
        "cause": (
            "FA2 kernels need compute capability 8.0+ (FA3 needs 9.x): they cannot run on Turing or Volta "
            "(T4, V100, RTX 20xx, Quadro RTX), or the configuration forces a FlashAttention version this GPU "
            "cannot run."
        ),
        "fix": (
            "Use a backend the GPU supports (vLLM picks one when flash_attn_version is not forced: FlashInfer, "
            "Triton attention; transformers: attn_implementation='sdpa'), or drop the forced FA version."
        ),
        "commands": [
            "nvidia-smi --query-gpu=name,compute_cap --format=csv",
            "unset VLLM_FLASH_ATTN_VERSION VLLM_ATTENTION_BACKEND",
        ],
        "sources": [
            "Dao-AILab/flash-attention#762", "Dao-AILab/flash-attention#1485", "vllm-project/vllm#8189",
            "vllm-project/vllm#13766", "vllm-project/vllm#15853", "hiyouga/LlamaFactory#3508",
        ],
        "confirm_rules": ["GD401", "GD714"],
        "facts": ["gpu.*.name", "gpu.*.compute_capability", "env.VLLM_FLASH_ATTN_VERSION", "env.VLLM_ATTENTION_BACKEND"],
    },
    {
        "id": "SIG-flash-attn-ops-missing",
        "key": "flash_attn_ops_missing",
        "title": "No module named 'flash_attn.ops' (flash-attn-4 without flash-attn 2)",
        "patterns": [r"No module named ['\"]?flash_attn\.ops"],
        # vLLM's own fallback when the rotary kernel is missing: a warning of a run that works
        "exclude": [r"falling back to native rotary implementation"],
        "cause": (
            "flash-attn-4 installs only flash_attn/cute into the shared flash_attn namespace; without FA2 "
            "(the 'flash-attn' distribution) there is no flash_attn.ops, yet code that checks "
            "find_spec('flash_attn') imports it (vLLM's rotary embedding before PR #42679)."
        ),
        "fix": "Upgrade vLLM (fixed by PR #42679), or install FA2 next to FA4, or uninstall flash-attn-4 if you do not need it.",
        "commands": [
            "python3 -m pip list 2>/dev/null | grep -iE '^flash[-_]attn'",
            "python3 -m pip install -U vllm  # includes the guarded import (PR #42679)",
        ],
        "thread_fixes": [
            {"fix": "vLLM imported flash_attn.ops.triton.rotary whenever find_spec('flash_attn') succeeded; fixed by checking the submodule (PR #42679)", "url": "https://github.com/vllm-project/vllm/issues/42675"},
        ],
        "sources": [
            "vllm-project/vllm#42675", "vllm-project/vllm#42679", "vllm-project/vllm#32974",
            "ai-bond/flash-attention-v100#29", "vllm-project/vllm-ascend#5563",
        ],
        "confirm_rules": ["GD403", "GD402", "GD505:flash"],
        "facts": ["flash_attn.*", "vllm.*", "packages.stack"],
    },
    {
        "id": "SIG-flash-attn-cute-missing",
        "key": "flash_attn_cute_missing",
        "title": "No module named 'flash_attn.cute' (FA4 missing or clobbered by FA2)",
        "patterns": [r"No module named ['\"]?flash_attn\.cute"],
        "cause": (
            "FA2 and flash-attn-4 share the flash_attn namespace: installing or uninstalling one (FA2 2.8.3.x "
            "ships its own flash_attn/cute) removes or shadows the other's files, or flash-attn-4 (a "
            "pre-release, pip needs --pre or an exact version) is simply not installed."
        ),
        "fix": "Install flash-attn-4 last with an exact version, or keep FA2 and FA4 in separate environments.",
        "commands": [
            "python3 -m pip list 2>/dev/null | grep -iE '^flash[-_]attn'",
            "python3 -m pip install --force-reinstall --no-deps 'flash-attn-4==4.0.0b36'",
        ],
        "sources": ["Dao-AILab/flash-attention#2310", "vllm-project/vllm#32974", "PrimeIntellect-ai/prime-rl#1949"],
        "confirm_rules": ["GD403", "GD402", "GD505:flash"],
        "facts": ["flash_attn.*", "packages.stack"],
    },
    {
        "id": "SIG-nvcc-torch-cuda-mismatch",
        "key": "nvcc_torch_cuda_mismatch",
        "title": "Extension build: nvcc's CUDA is not the CUDA torch was built with",
        "patterns": [r"The detected CUDA version \((?P<nvcc_cuda>[\d.]+)\) mismatches the version that was used to compile"],
        "details": [r"PyTorch \((?P<torch_cuda>[\d.]+)\)\.?\s*Please make sure to use the same CUDA versions"],
        "cause": (
            "torch.utils.cpp_extension refuses to build (flash-attn, xformers, a vLLM source build…) with an nvcc "
            "whose CUDA major differs from torch's own CUDA: the toolkit on PATH / CUDA_HOME is another version."
        ),
        "fix": "Point CUDA_HOME and PATH at a toolkit of torch's CUDA version, or install the torch build for the toolkit you have.",
        "commands": [
            "python3 -c 'import torch; print(torch.version.cuda)'; nvcc --version | tail -2",
            "export CUDA_HOME=/usr/local/cuda-12.8 PATH=/usr/local/cuda-12.8/bin:$PATH  # the toolkit of torch's CUDA",
        ],
        "thread_fixes": [
            {"fix": "install the PyTorch built for the local CUDA toolkit (11.2 toolkit vs torch for 10.2)",
             "url": "https://github.com/rusty1s/pytorch_sparse/issues/189"},
            {"fix": "reinstall a PyTorch matching the installed toolkit, or install the toolkit PyTorch was built with",
             "url": "https://github.com/kodenii/Responsible-Visual-Editing/issues/4"},
        ],
        "sources": ["rusty1s/pytorch_sparse#189", "kodenii/Responsible-Visual-Editing#4", "PKUHaoWang/EmbodiedOcc2#6", "pytorch/pytorch#73047"],
        "confirm_rules": ["GD203"],
        "facts": ["cuda.nvcc", "torch.cuda", "env.CUDA_HOME"],
    },
    {
        "id": "SIG-unsupported-gnu-version",
        "key": "unsupported_gcc",
        "title": "nvcc refuses the host compiler (unsupported GNU version)",
        "patterns": [
            r"#error\s*--\s*unsupported GNU version!\s*gcc versions later than (?P<max_gcc>\d+) are not supported",
            r"#error\s*--\s*unsupported (?:GNU|clang) version",
        ],
        "cause": "The host gcc/g++ is newer than the CUDA toolkit supports (its crt/host_config.h checks the version), or an older nvcc than intended is used.",
        "fix": "Build with a gcc the toolkit supports (NVCC_CCBIN / CUDAHOSTCXX), or use a newer CUDA toolkit; check which nvcc is used.",
        "commands": [
            "gcc --version | head -1; which nvcc; nvcc --version | tail -2",
            "sudo apt install g++-12 && export NVCC_CCBIN=/usr/bin/g++-12 CUDAHOSTCXX=/usr/bin/g++-12",
        ],
        "thread_fixes": [
            {"fix": "pointed the build at a supported compiler: cmake .. -DCMAKE_C_COMPILER=/usr/bin/gcc-6",
             "url": "https://github.com/NVIDIA/AMGX/issues/76"},
            {"fix": "two CUDA installs: nvcc 10.2 was used instead of 11.4; use the newer toolkit", "url": "https://github.com/colmap/colmap/issues/1765"},
        ],
        "sources": ["NVIDIA/AMGX#76", "colmap/colmap#1765", "ceccocats/tkDNN#134", "facebookarchive/caffe2#442"],
        "confirm_rules": ["GD205"],
        "facts": ["cuda.nvcc", "cuda.host_compiler"],
    },
    {
        "id": "SIG-torch-not-compiled-with-cuda",
        "key": "torch_not_compiled_with_cuda",
        "title": "torch is a CPU-only build (Torch not compiled with CUDA enabled)",
        "patterns": [r"Torch not compiled with CUDA enabled"],
        "cause": "The installed torch has no CUDA support: pip picked the CPU wheel (the default on some indexes), or another package replaced the CUDA build.",
        "fix": "Install the CUDA build of torch from PyTorch's index for the driver's CUDA (pip show torch: no +cuXXX suffix means CPU).",
        "commands": [
            "python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'",
            "python3 -m pip install --force-reinstall torch --index-url https://download.pytorch.org/whl/cu128",
        ],
        "thread_fixes": [
            {"fix": "install the GPU build of torch matching the CUDA version (torch x.y.z+cuXXX); a version without +cu is a CPU build",
             "url": "https://github.com/X-PLUG/MobileAgent/issues/60"},
        ],
        "sources": ["X-PLUG/MobileAgent#60", "jaketae/storyteller#22", "vllm-project/vllm-ascend#780"],
        "confirm_rules": ["GD501"],
        "facts": ["torch.version", "torch.cuda"],
    },
    {
        "id": "SIG-flash-attn-extension-missing",
        "key": "flash_attn_2_cuda_missing",
        "title": "flash-attn's compiled extension is missing (No module named 'flash_attn_2_cuda')",
        "patterns": [
            r"No module named ['\"]?flash_attn_[23]_cuda\b",
            r"DLL load failed while importing flash_attn_[23]_cuda",
        ],
        "cause": (
            "The flash_attn Python package is importable but its compiled extension is not: it was installed into another "
            "Python environment, built with FLASH_ATTENTION_SKIP_CUDA_BUILD, installed from a source tree without the build, "
            "or the import picks up a flash-attention checkout in the current directory."
        ),
        "fix": "Install a prebuilt flash-attn wheel for this Python, torch and CUDA into the environment that runs the code (or build it there).",
        "commands": [
            "python3 -c 'import sys, flash_attn; print(sys.executable, flash_attn.__file__)'",
            "python3 -m pip install --force-reinstall --no-build-isolation flash-attn",
        ],
        "thread_fixes": [
            {"fix": "maintainer: usually installed into one Python/conda env and run from another", "url": "https://github.com/Dao-AILab/flash-attention/issues/614"},
            {"fix": "on aarch64 (no wheel) building from source with FLASH_ATTENTION_SKIP_CUDA_BUILD=FALSE fixed it",
             "url": "https://github.com/Dao-AILab/flash-attention/issues/933"},
        ],
        "sources": ["Dao-AILab/flash-attention#614", "Dao-AILab/flash-attention#933", "Dao-AILab/flash-attention#1499", "oobabooga/textgen#4344"],
        "confirm_rules": ["GD505:flash", "GD404"],
        "facts": ["flash_attn.*", "python.executable"],
    },
    {
        "id": "SIG-torchvision-ops-missing",
        "key": "torchvision_built_for_other_torch",
        "title": "torchvision's C++ ops did not load (built for another torch, or a CUDA build over a CPU torch)",
        "patterns": [
            r"operator torchvision::(?P<op>\w+) does not exist",
            r"No such operator torchvision::(?P<op>\w+)",
            r"Couldn't load custom C\+\+ ops\. This can happen if your PyTorch and torchvision versions are incompatible",
        ],
        "cause": (
            "torchvision's compiled extension (torchvision/_C.so) failed to load, silently, at import: it was built for "
            "another torch release (each torchvision pins one, e.g. 0.27 -> torch 2.12), or it is a CUDA build over a CPU "
            "torch (it needs libc10_cuda.so / libcudart). Its operators (nms, roi_align, deform_conv2d) are then never "
            "registered, and the first use (or torchvision's own meta registrations) fails."
        ),
        "fix": "Install the torchvision built for the installed torch (the same index and CUDA variant as torch), or the torch it pins.",
        "commands": [
            "python3 -m pip list 2>/dev/null | grep -iE '^(torch|torchvision|torchaudio) '",
            "python3 -m pip install --force-reinstall torch torchvision --index-url https://download.pytorch.org/whl/cu128",
        ],
        "thread_fixes": [
            {"fix": "uninstall torch, torchvision and torchaudio, then reinstall all three from one index (cu118 / cu126)",
             "url": "https://github.com/huggingface/diffusers/issues/9109"},
            {"fix": "torch 2.4.0+cu121 with torchvision 0.20.1+cu124 (built for torch 2.5): install the matching pair",
             "url": "https://github.com/vladmandic/sdnext/issues/3531"},
        ],
        "sources": [
            "huggingface/diffusers#9109", "vladmandic/sdnext#3531", "pytorch/vision#9174", "pytorch/vision#8985",
            "pytorch/pytorch#122494", "vllm-project/vllm#5736", "microsoft/scene_graph_benchmark#60",
        ],
        "confirm_rules": ["GD508:\\[torchvision\\]$", "GD503:^torchvision\\b.*requires.*\\btorch\\b"],
        "facts": ["torch.version", "torch.cuda", "torch.extensions"],
    },
    {
        "id": "SIG-torch-cuda-library-missing",
        "key": "torch_cuda_lib_missing",
        "title": "An extension needs torch's CUDA libraries, and this torch has none (libc10_cuda.so: cannot open shared object file)",
        "patterns": [r"(?P<library>lib(?:c10_cuda|torch_cuda\w*|c10_hip|torch_hip)\.so): cannot open shared object file"],
        "cause": (
            "A compiled extension built against a CUDA (or ROCm) torch needs that torch's own GPU libraries "
            "(libc10_cuda.so, libtorch_cuda.so); the torch installed is a CPU build, which has none, or an older "
            "layout (libtorch_cuda_cu.so was merged into libtorch_cuda.so in torch 1.13)."
        ),
        "fix": "Install the torch build the extension was made for (the CUDA build of its torch pin), or the extension's build for this torch.",
        "commands": [
            "python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'",
            "python3 -m pip list 2>/dev/null | grep -iE '^(torch|torchvision|torchaudio|xformers|vllm|sglang-kernel) '",
        ],
        "thread_fixes": [
            {"fix": "the CPU-only machine had a CUDA build of the extension: install its CPU build (the wheel index of the CPU torch)",
             "url": "https://github.com/pyg-team/pytorch_geometric/issues/3904"},
        ],
        "sources": ["pyg-team/pytorch_geometric#3904", "facebookresearch/pytorch3d#923", "RUCAIBox/CRSLab#6", "pytorch/pytorch#110074"],
        # GD508 names the loader's words, or, for an engine installed without its requirements (one
        # finding for the cause), the CPU torch installed where the engine pins another torch
        "confirm_rules": ["GD508:cannot open shared object", r"GD508:\+cpu is installed where \S+ requires torch"],
        "facts": ["torch.version", "torch.cuda", "torch.extensions"],
    },
    {
        "id": "SIG-xformers-built-for-other-torch",
        "key": "xformers_wrong_torch",
        "title": "xFormers can't load its C++/CUDA extensions (built for another torch)",
        "patterns": [r"xFormers can't load C\+\+/CUDA extensions", r"xFormers was built for:?\s*(?:PyTorch (?P<built_torch>\S+))?"],
        "details": [r"PyTorch (?P<built_for>\S+) with CUDA (?P<built_cuda>\d+) \(you have (?P<installed>[^)]+)\)"],
        "cause": "Each xformers release is built for one torch version (and CUDA); a different torch, or a CPU torch, cannot load its kernels.",
        "fix": "Install the xformers release made for the installed torch (see xformers' CHANGELOG), or the torch it was built for.",
        "commands": [
            "python3 -m xformers.info | head -5",
            "python3 -m pip install --force-reinstall xformers --index-url https://download.pytorch.org/whl/cu128",
        ],
        "thread_fixes": [
            {"fix": "maintainer: official builds target the latest PyTorch; with an older torch use the older xFormers listed in CHANGELOG.md",
             "url": "https://github.com/facebookresearch/xformers/issues/1079"},
            {"fix": "the torch was a CPU build (+cpu): install the CUDA build of torch", "url": "https://github.com/open-mmlab/PIA/issues/30"},
        ],
        "sources": ["facebookresearch/xformers#1079", "open-mmlab/PIA#30", "facebookresearch/xformers#971", "facebookresearch/xformers#800"],
        "confirm_rules": ["GD508:\\[xformers\\]$", "GD503:^xformers\\b.*requires.*\\btorch\\b", "GD501"],
        "facts": ["torch.version", "torch.cuda", "torch.extensions"],
    },
    {
        "id": "SIG-fa4-unsupported-gpu",
        "key": "flash_attn_unsupported_gpu",
        "title": "FlashAttention 4 (CuTe) does not support this GPU",
        "patterns": [
            r"FA4 requires compute capability",
            r"only supported on SM100 \(compute capability 10\.x\) for FA4",
            r"FP8_FA4 requires Hopper or Blackwell",
        ],
        "cause": "FA4's CuTe kernels exist only for Hopper (sm_90) and data-center Blackwell (sm_100); consumer Blackwell (sm_120), Ada and Ampere are not supported.",
        "fix": "Use another attention backend on this GPU (FlashInfer, FA2/FA3, Triton), or uninstall flash-attn-4.",
        "commands": ["nvidia-smi --query-gpu=name,compute_cap --format=csv", "unset VLLM_ATTENTION_BACKEND  # let vLLM choose"],
        "thread_fixes": [
            {"fix": "maintainer: FA4 doesn't support SM120 (RTX 5090); use the flashinfer backend", "url": "https://github.com/sgl-project/sglang/issues/23985"},
        ],
        "sources": ["sgl-project/sglang#23985", "sgl-project/sglang#18748", "vllm-project/vllm#32974"],
        "confirm_rules": ["GD401", "GD714"],
        "facts": ["gpu.*.name", "gpu.*.compute_capability", "flash_attn.*"],
    },
    {
        "id": "SIG-cuda-runtime-library-missing",
        "key": "cuda_runtime_lib_missing",
        "title": "A CUDA runtime library is missing (libcudart / libcublas … cannot open shared object file)",
        "patterns": [
            r"(?P<library>lib(?:cudart|cublas(?:Lt)?|cudnn\w*|nvrtc|cufft|curand|cusparse|cusolver|nvJitLink)\.so[\d.]*): cannot open shared object file",
        ],
        "cause": (
            "A binary needs the CUDA runtime of one major version (libcudart.so.12, .so.13) and nothing on the library path "
            "provides it: the nvidia-*-cuXX wheels of that CUDA are not installed, or the binary (vLLM, vllm-flash-attn, an "
            "extension) was built for another CUDA major than the installed torch."
        ),
        "fix": "Install builds of one CUDA major throughout (torch, vLLM and extensions for the same cuXX), or the nvidia-cuda-runtime wheel that major needs.",
        "commands": [
            "python3 -m pip list 2>/dev/null | grep -iE '^(torch|vllm|nvidia-cuda-runtime)'",
            "python3 -m pip install --force-reinstall vllm  # brings the torch and CUDA runtime it was built with",
        ],
        "sources": ["vllm-project/vllm#52300", "vllm-project/vllm#31018", "vllm-project/vllm#1369", "vllm-project/vllm#5232"],
        "confirm_rules": ["GD508:cannot open shared object", "GD510", "GD503:nvidia|cuda", "GD207"],
        "facts": ["torch.version", "torch.cuda", "env.LD_LIBRARY_PATH", "torch.extensions"],
    },
    {
        "id": "SIG-libstdcxx-too-old",
        "key": "libstdcxx_too_old",
        "title": "The loaded libstdc++ is older than a binary needs (GLIBCXX_x not found)",
        "patterns": [r"version [`'](?P<version>(?:GLIBCXX|CXXABI)_[\d.]+)' not found"],
        "cause": (
            "A compiled module was built with a newer GCC than the libstdc++.so.6 the process loads: an old OS libstdc++, "
            "or (very often) an old one inside a conda environment that shadows the system's."
        ),
        "fix": "Load a newer libstdc++ (conda install -c conda-forge libstdcxx-ng, or put the system's first on LD_LIBRARY_PATH), or use a newer OS image.",
        "commands": [
            "strings \"$(python3 -c 'import ctypes.util; print(ctypes.util.find_library(\"stdc++\"))')\" 2>/dev/null | grep -c GLIBCXX_",
            "conda install -c conda-forge 'libstdcxx-ng>=12'",
        ],
        "thread_fixes": [
            {"fix": "conda install -c conda-forge libstdcxx-ng fixed it", "url": "https://github.com/ztxz16/fastllm/issues/102"},
        ],
        "details": [r"\(required by (?P<required_by>/[^)\s]+)\)"],
        "sources": ["pytorch/pytorch#87279", "pytorch/pytorch#115138", "kvcache-ai/ktransformers#439", "llm-d/llm-d#445"],
        "confirm_rules": ["GD207"],
        "detail_check": "symbol_version",
        "cannot_check": "gpudoctor reads the symbol versions torch-linked extensions need (GD508), not those of other modules",
        "facts": ["env.LD_LIBRARY_PATH", "python.executable"],
    },
    {
        "id": "SIG-glibc-too-old",
        "key": "glibc_too_old",
        "title": "The system's glibc is older than a wheel needs (GLIBC_x not found)",
        "patterns": [r"version [`'](?P<version>GLIBC_[\d.]+)' not found"],
        "cause": "A wheel built for a newer manylinux (glibc) than this OS provides was installed; glibc cannot be replaced inside an environment.",
        "fix": "Use an OS or container image with a newer glibc (e.g. Ubuntu 22.04+), or a build of the package for this glibc.",
        "commands": ["ldd --version | head -1", "python3 -m pip debug --verbose 2>/dev/null | grep -m3 manylinux"],
        "thread_fixes": [
            {"fix": "maintainer: PyTorch binaries do not support CentOS 6 (glibc 2.12); upgrade the OS (CentOS 7) or build from source", "url": "https://github.com/pytorch/pytorch/issues/14274"},
        ],
        "details": [r"\(required by (?P<required_by>/[^)\s]+)\)"],
        "sources": ["vllm-project/vllm#6562"],
        "detail_check": "symbol_version",
        "cannot_check": "gpudoctor reads the symbol versions torch-linked extensions need (GD508), not those of other modules",
        "facts": ["host.os"],
    },
    {
        "id": "SIG-flash-attn-version-range",
        "key": "flash_attn_version_mismatch",
        "title": "A package accepts only a range of flash-attn versions (Requires Flash-Attention version …)",
        "patterns": [r"Requires Flash-Attention version (?P<wanted>\S+) but got (?P<installed>[\w.+-]+?)\.?(?:\s|$)"],
        "cause": "xformers (or another package) checks flash-attn's version at import and refuses the installed one: flash-attn was upgraded past (or is below) the range it was built and tested with.",
        "fix": "Install a flash-attn inside the printed range, or the xformers release made for the installed flash-attn.",
        "commands": ["python3 -m pip list 2>/dev/null | grep -iE '^(xformers|flash.attn)'", "python3 -m pip install 'flash-attn>=2.7.1,<=2.8.2' --no-build-isolation"],
        "sources": ["OpenBMB/MiniCPM-V#974", "rednote-hilab/dots.ocr#31"],
        "confirm_rules": ["GD503:flash"],
        "facts": ["flash_attn.*"],
    },
    {
        "id": "SIG-flash-attn-1x-api",
        "key": "flash_attn_version_mismatch",
        "title": "Code written for flash-attn 1.x runs against flash-attn 2.x (flash_attn.flash_attention is gone)",
        "patterns": [r"No module named ['\"]?flash_attn\.flash_attention\b"],
        "cause": "flash-attn 2.0 removed the 1.x modules (flash_attn.flash_attention.FlashMHA, flash_attn_cuda); the code imports the 1.x API.",
        "fix": "Use the 2.x API (flash_attn.modules.mha.MHA, flash_attn_func), or pin the flash-attn 1.x release the code was written for.",
        "commands": ["python3 -m pip list 2>/dev/null | grep -i flash", "python3 -m pip install 'flash-attn<2' --no-build-isolation  # only for 1.x code"],
        "thread_fixes": [
            {"fix": "flash_attn.flash_attention is gone after 2.x: use flash_attn.modules.mha.MHA, or a 1.x/0.x release (e.g. 0.2.8)",
             "url": "https://github.com/Dao-AILab/flash-attention/issues/923"},
        ],
        "sources": ["Dao-AILab/flash-attention#923", "Dao-AILab/flash-attention#739"],
        "confirm_rules": ["GD503:flash"],
        "facts": ["flash_attn.*"],
    },
)
