"""Error signatures of causes taught late: host limits, container runtime, tokenizers, Triton, launch flags.

Data in the format described in gpudoctor/knowledge/signatures.py (which joins this tuple after
the others, so the older, more specific entries win a tie on one line). Each signature was written
from several real texts of its cause (tests/explain_corpus/new_causes.jsonl, with their threads).
"""

from __future__ import annotations

MORE = (
    {
        "id": "SIG-open-files-limit",
        "key": "open_files_limit",
        "title": "The open-files limit was reached (Too many open files, errno 24 / EMFILE)",
        "patterns": [
            r"\[Err(?:no|or) 24\] Too many open files",
            r"ZMQError: Too many open files",
            r"code: 24, kind: \w+, message: \"Too many open files\"",
            r"EMFILE\W{1,3}too many open files",
            r"(?:failed|error|cannot|unable)[^\n]{0,40}: Too many open files",
        ],
        # vLLM's own start-up warning names the error it may cause; it is a hint, not the failure.
        "exclude": [r"can cause fd limit errors"],
        "cause": (
            "A process reached its open-files limit (RLIMIT_NOFILE, `ulimit -n`; 1024 by default in many shells, "
            "services and containers). Every socket counts: the ZMQ sockets between an engine's processes, HTTP "
            "connections under load, NCCL's sockets, shared-memory files. vLLM raises its own soft limit towards "
            "65536 only as far as the hard limit allows; a descriptor leak reaches any limit in the end."
        ),
        "fix": (
            "Raise the limit where the server starts: `ulimit -n 65536` in its shell, `LimitNOFILE=65536` in a systemd "
            "unit, `docker run --ulimit nofile=65536:65536`; if the count keeps growing under a high limit, it is a leak "
            "(upgrade the engine)."
        ),
        "commands": [
            "ulimit -Sn; ulimit -Hn",
            "grep 'open files' /proc/$(pgrep -f 'vllm serve|sglang' | head -1)/limits",
            "ls /proc/$(pgrep -f 'vllm serve|sglang' | head -1)/fd | wc -l",
        ],
        "thread_fixes": [
            {"fix": "`ulimit -n 10240` fixed it (a Linux limit)", "url": "https://github.com/WZMIAOMIAO/deep-learning-for-image-processing/issues/845"},
            {"fix": "raising ulimit fixed the SGLang router's 'Too many open files' panic", "url": "https://github.com/Ziems/arbor/issues/48"},
            {"fix": "open-files limit 1024 raised to 32768", "url": "https://github.com/twitter/twemproxy/issues/7"},
        ],
        "sources": [
            "vllm-project/vllm#7920", "sgl-project/sglang#31766", "Ziems/arbor#48", "gpustack/gpustack#2011",
            "mlcommons/endpoints#110", "bytedance/xpu-perf#121", "WZMIAOMIAO/deep-learning-for-image-processing#845",
        ],
        "confirm_rules": ["GD320"],
        "facts": ["host.nofile", "host.container"],
    },
    {
        "id": "SIG-docker-nvidia-runtime-missing",
        "key": "docker_nvidia_runtime_missing",
        "title": "Docker was asked for GPUs but has no NVIDIA container runtime",
        "patterns": [
            r"could not select device driver \"(?P<driver>[^\"]*)\" with capabilities: \[\[gpu\]\]",
            r"unknown or invalid runtime name: nvidia",
            r"Unknown runtime specified nvidia",
        ],
        "cause": (
            "`docker run --gpus …`, `--runtime=nvidia` or a compose GPU reservation needs the NVIDIA Container Toolkit "
            "registered with this Docker daemon. It is not installed, Docker was not restarted after installing it, or "
            "this Docker (rootless, snap, Docker Desktop without WSL2) reads another daemon.json. On a host with no "
            "NVIDIA GPU or driver at all Docker says the same."
        ),
        "fix": (
            "Install nvidia-container-toolkit, register it with `sudo nvidia-ctk runtime configure --runtime=docker`, "
            "restart Docker, then check with a CUDA base image running nvidia-smi."
        ),
        "commands": [
            "nvidia-smi",
            "sudo apt-get install -y nvidia-container-toolkit",
            "sudo nvidia-ctk runtime configure --runtime=docker && sudo systemctl restart docker",
            "docker info | grep -i runtime",
            "docker run --rm --gpus all ubuntu nvidia-smi",
        ],
        "thread_fixes": [
            {"fix": "resolved by installing the NVIDIA Container Toolkit and configuring Docker", "url": "https://github.com/nv-tlabs/3dgrut/issues/71"},
            {"fix": "maintainer: the NVIDIA container runtime is not installed; install the toolkit and configure Docker",
             "url": "https://github.com/Steam-Headless/docker-steam-headless/issues/117"},
        ],
        "sources": [
            "NVIDIA/nvidia-docker#1034", "hiyouga/LlamaFactory#5268", "NVlabs/BundleSDF#184", "infiniflow/ragflow#9573",
            "nv-tlabs/3dgrut#71", "sair-lab/AirSLAM#113", "NVIDIA/nvidia-docker#578", "fboulnois/stable-diffusion-docker#82",
        ],
        "confirm_rules": ["GD321"],
        "facts": ["host.container", "host.nvidia_devices", "host.nvidia_container_toolkit"],
    },
    {
        "id": "SIG-container-cuda-requirement",
        "key": "driver_too_old",
        "title": "The container's CUDA needs a newer host driver (nvidia-container-cli: unsatisfied condition: cuda>=X)",
        "patterns": [
            r"nvidia-container-cli: requirement error: unsatisfied condition: cuda ?>= ?(?P<cuda>\d+\.\d+)",
        ],
        "cause": (
            "The image declares the CUDA it needs (NVIDIA_REQUIRE_CUDA); the NVIDIA container runtime refuses to start it "
            "because the host driver supports only an older CUDA (nvidia-smi's 'CUDA Version')."
        ),
        "fix": (
            "Upgrade the host driver (CUDA 11 needs R450+, CUDA 12 R525+, CUDA 13 R580+), or use an image of the CUDA the "
            "driver supports. NVIDIA_DISABLE_REQUIRES=true only skips the check; the CUDA runtime then fails inside."
        ),
        "commands": ["nvidia-smi | head -4", "docker inspect IMAGE | grep -i NVIDIA_REQUIRE_CUDA"],
        "thread_fixes": [
            {"fix": "maintainer: a CUDA 11 container needs a host driver of 450 or later", "url": "https://github.com/NVIDIA/nvidia-docker/issues/1442"},
            {"fix": "install an NVIDIA driver >= 410.78 for a CUDA 10.0 image", "url": "https://github.com/Xilinx/Vitis-AI/issues/103"},
        ],
        "sources": ["NVIDIA/nvidia-docker#1442", "Xilinx/Vitis-AI#103", "SyneRBI/PETRIC2#27", "NVIDIA/nvidia-container-toolkit#152"],
        "confirm_rules": ["GD103", "GD204"],
        "other_rules": ["GD101", "GD102"],
        "facts": ["driver.version", "driver.cuda_version", "host.container"],
    },
    {
        "id": "SIG-tokenizers-too-old",
        "key": "tokenizers_too_old",
        "title": "tokenizers cannot read the model's tokenizer.json (data did not match any variant of untagged enum)",
        "patterns": [
            r"data did not match any variant of untagged enum (?P<enum>\w*Wrapper)(?: at line (?P<line>\d+) column \d+)?",
        ],
        "cause": (
            "The model's tokenizer.json was written by a newer `tokenizers` release than the one installed (new model "
            "or pre-tokenizer fields, BPE merges stored as pairs since tokenizers 0.20); the old Rust parser cannot read it."
        ),
        "fix": "Upgrade tokenizers (and transformers, whose pin may hold it back) in the serving environment.",
        "commands": [
            "python3 -m pip show tokenizers transformers | grep -E '^(Name|Version|Requires)'",
            "python3 -m pip install -U tokenizers transformers",
        ],
        "thread_fixes": [
            {"fix": "tokenizers 0.19.1 cannot read Tulu 3.1's tokenizer.json; a newer tokenizers reads it", "url": "https://github.com/allenai/open-instruct/issues/738"},
            {"fix": "maintainer: update your tokenizers package", "url": "https://github.com/huggingface/sentence-transformers/issues/1105"},
        ],
        "sources": ["allenai/open-instruct#738", "huggingface/sentence-transformers#1105", "dleemiller/WordLlama#16", "lllyasviel/FramePack#147"],
        # GD503 fails when transformers requires a tokenizers that is not installed: then this is confirmed.
        "confirm_rules": ["GD503:tokenizers"],
        "detail_check": "tokenizers_version",
        "cannot_check": "what tokenizers release the model's tokenizer.json needs is written in the file, which gpudoctor does not read",
        "facts": ["packages.dists"],
    },
    {
        "id": "SIG-triton-shared-memory",
        "key": "triton_shared_memory_exceeded",
        "title": "A Triton kernel needs more shared memory per block than this GPU has",
        "patterns": [
            r"out of resource: shared memory, Required: (?P<required>\d+), Hardware limit(?:ation)?: (?P<limit>\d+)",
            r"OutOfResources: out of resource: shared memory",
        ],
        "cause": (
            "The kernel's tile configuration (block sizes x num_stages) was tuned for GPUs with more shared memory per "
            "block (H100/B200: 227 KiB, A100: 163 KiB) than this one (RTX 30xx/40xx/50xx: 99 KiB, T4/RTX 20xx: 64 KiB, "
            "Pascal: 48 KiB). Nothing is broken in the install: this kernel configuration cannot run on this GPU."
        ),
        "fix": (
            "Upgrade the engine (kernel configurations for smaller GPUs are added over time), pick another attention or "
            "MoE backend, or lower the kernel's num_stages/block sizes; a GPU with more shared memory runs it as is."
        ),
        "commands": ["nvidia-smi --query-gpu=name,compute_cap --format=csv", "python3 -m pip install -U vllm"],
        "thread_fixes": [
            {"fix": "maintainer: num_stages=2 on sm86 (RTX 3090); set it to 1 if it still fails", "url": "https://github.com/alipay/PainlessInferenceAcceleration/issues/35"},
            {"fix": "maintainers lowered num_stages of the kernel for smaller GPUs", "url": "https://github.com/OpenSpaceAI/DEST3D/issues/2"},
        ],
        "sources": [
            "vllm-project/vllm#12498", "vllm-project/vllm#36802", "InternLM/lmdeploy#2451", "triton-lang/triton#8182",
            "sasha0552/pascal-pkgs-ci#50", "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications",
        ],
        "confirm_rules": [],
        "detail_check": "shared_memory_per_block",
        "cannot_check": "the kernel's shared-memory need is in the text; gpudoctor compares it with the GPUs here when the text gives it",
        "facts": ["gpu.*.name", "gpu.*.compute_capability"],
    },
    {
        "id": "SIG-ptxas-arch-unknown",
        "key": "triton_ptxas_too_old",
        "title": "ptxas (Triton's bundled one) does not know this GPU's architecture",
        "patterns": [
            r"ptxas fatal\s*: Value '(?P<arch>sm_\d+[af]?)' is not defined for option 'gpu-name'",
        ],
        "cause": (
            "Triton compiles its kernels with the ptxas bundled in its wheel (triton/backends/nvidia/bin/ptxas), or the one "
            "TRITON_PTXAS_PATH names; a ptxas from a CUDA older than the GPU does not know its architecture (sm_89 needs "
            "CUDA 11.8, sm_100/sm_120 CUDA 12.8, sm_103/sm_121 CUDA 12.9, sm_110 CUDA 13.0)."
        ),
        "fix": (
            "Upgrade triton (with the torch that pins it), or point Triton at a newer CUDA toolkit's ptxas: "
            "export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas."
        ),
        "commands": [
            "python3 -c 'import triton, os; print(triton.__version__, os.path.dirname(triton.__file__))'",
            "$(python3 -c 'import triton, os; print(os.path.dirname(triton.__file__))')/backends/nvidia/bin/ptxas --version",
            "export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas",
        ],
        "thread_fixes": [
            {"fix": "export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (CUDA 13) fixed sm_121a on DGX Spark", "url": "https://github.com/triton-lang/triton/issues/8539"},
            {"fix": "maintainer: use triton 2.1.0; triton 2.0.0 cannot compile for the RTX 4090 (sm_89)", "url": "https://github.com/ModelTC/LightLLM/issues/176"},
        ],
        "sources": ["triton-lang/triton#8539", "gpustack/gpustack#4372", "ModelTC/LightLLM#176", "vllm-project/vllm#31338"],
        "confirm_rules": [],
        "cannot_check": "gpudoctor does not read the version of Triton's bundled ptxas yet",
        "facts": ["gpu.*.compute_capability", "packages.dists", "env.TRITON_PTXAS_PATH"],
    },
    {
        "id": "SIG-speculative-config-invalid",
        "key": "speculative_config_invalid",
        "title": "The speculative-decoding configuration is refused (token count, method, drafter)",
        "patterns": [
            r"num_speculative_tokens must be provided with speculative model",
            r"Expected both speculative_model and num_speculative_tokens to be provided",
            r"Expected num_speculative_tokens to be greater than zero",
            r"(?P<method>Eagle3?|EAGLE3?|MTP) is only supported for (?P<supported>[^\n.]{1,120}?) models",
            r"Unsupported speculative method:? '?(?P<method>[\w-]+)",
            r"draft model vocab must match target model to use speculation",
            r"num_speculative_tokens:?\s*\d+ must be divisible by n_predict",
        ],
        "cause": (
            "The engine refused the speculative-decoding settings: no num_speculative_tokens (vLLM needs it unless the "
            "drafter's config has n_predict), more tokens than the drafter predicts, a method this release does not "
            "support for the target's architecture (EAGLE3 only for some model types), or a drafter whose vocabulary "
            "differs from the target's."
        ),
        "fix": (
            "Give num_speculative_tokens in --speculative-config (at most the drafter's n_predict), use a drafter trained "
            "for this target, or a release that supports the method for this architecture."
        ),
        "commands": ["gpudoctor preflight -- vllm serve MODEL --speculative-config '{\"method\": …, \"model\": …, \"num_speculative_tokens\": 3}'"],
        "thread_fixes": [
            {"fix": "vLLM's EAGLE example gained num_speculative_tokens, which the config requires", "url": "https://github.com/vllm-project/vllm/pull/20375"},
            {"fix": "the MLPSpeculator predicts 3 tokens (n_predict); num_speculative_tokens=4 is refused", "url": "https://github.com/vllm-project/vllm/issues/5893"},
        ],
        "sources": ["vllm-project/vllm#20375", "vllm-project/vllm#22152", "vllm-project/vllm#5893", "ggml-org/llama.cpp#3812"],
        "confirm_rules": ["GD716", "GD717", "GD718", "GD719", "GD720"],
        "facts": ["vllm.*"],
    },
    {
        "id": "SIG-tool-choice-flags-missing",
        "key": "tool_choice_flags_missing",
        "title": "\"auto\" tool choice was requested from a server started without --enable-auto-tool-choice / --tool-call-parser",
        "patterns": [
            r"\"?auto\\?\"? tool choice requires --enable-auto-tool-ch",
        ],
        "cause": (
            "A client (an agent framework, LangChain, the OpenAI SDK with tools) sent tool_choice \"auto\"; vLLM answers "
            "400 unless the server was started with --enable-auto-tool-choice and a --tool-call-parser that matches the "
            "model's tool-call format (hermes for Qwen, llama3_json, mistral, openai for gpt-oss …)."
        ),
        "fix": "Restart the server with --enable-auto-tool-choice --tool-call-parser PARSER for the model, or send requests without tools.",
        "commands": ["vllm serve MODEL --enable-auto-tool-choice --tool-call-parser hermes"],
        "thread_fixes": [
            {"fix": "maintainer: start vLLM with --enable-auto-tool-choice and --tool-call-parser", "url": "https://github.com/langchain4j/langchain4j/issues/3475"},
        ],
        "sources": ["vllm-project/vllm#9986", "langchain4j/langchain4j#3475", "FoundationAgents/OpenManus#331", "mike-nott/mcp-assist#21"],
        "confirm_rules": [],
        "cannot_check": "the flags are the running server's; gpudoctor does not read them from a request error",
        "facts": ["vllm.*"],
    },
    {
        "id": "SIG-tensor-parallel-not-divisible-words",
        "key": "tp_size_not_divisible",
        "title": "The attention heads do not divide by the tensor-parallel size (without numbers)",
        "patterns": [r"Total number of attention heads must be divisible by tensor parallel size"],
        "cause": "Tensor parallelism splits the attention heads evenly over the GPUs; the model's head count is not a multiple of --tensor-parallel-size.",
        "fix": "Use a tensor-parallel size that divides the head count (1, 2, 4, 8 for most models), or add pipeline parallelism instead.",
        "commands": ["gpudoctor preflight -- vllm serve MODEL --tensor-parallel-size N"],
        "sources": ["gpustack/gpustack#885", "gpustack/gpustack#814"],
        "confirm_rules": ["GD706"],
        "facts": ["gpu.count"],
    },
    {
        "id": "SIG-oom-allocation-on-device",
        "key": "cuda_oom",
        "title": "PyTorch ran out of GPU memory (the short 'Allocation on device' wording)",
        "patterns": [
            r"OutOfMemoryError: Allocation on device\b",
            r"Exception during processing !!! Allocation on device[ \t]*(?=\n|$)",
        ],
        "cause": "An allocation did not fit in the GPU memory left: the model, its activations and other processes together need more than the GPU has.",
        "fix": "Free the GPU (other processes), lower batch size, resolution or context length, or use a smaller or quantized model.",
        "commands": ["nvidia-smi --query-compute-apps=pid,used_memory --format=csv"],
        "sources": ["Comfy-Org/ComfyUI#6176", "Comfy-Org/ComfyUI#6073", "Comfy-Org/ComfyUI#5278"],
        "confirm_rules": ["GD302"],
        "facts": ["gpu.*.memory_total", "gpu.*.memory_used"],
    },
    {
        "id": "SIG-kv-cache-no-room-other-servers",
        "key": "kv_cache_insufficient",
        "title": "No room for the KV cache the server was asked for (TGI, other servers' words)",
        "patterns": [
            r"Not enough memory to handle (?P<tokens>\d+) total tokens with \d+ prefill tokens",
            r"Not enough memory for KV cache",
        ],
        "cause": (
            "After the weights, the memory the server may use holds fewer KV-cache tokens than it was configured for "
            "(TGI's --max-batch-total-tokens, a page or token count): the GPU is too small for that budget, or other "
            "processes hold part of it."
        ),
        "fix": "Lower the token budget (--max-batch-total-tokens, --num-pages/--num-tokens, the context length), quantize, or free the GPU.",
        "commands": ["nvidia-smi --query-gpu=memory.used,memory.total --format=csv"],
        "thread_fixes": [
            {"fix": "starting with --num-tokens 4096 instead of the 8k default let it start", "url": "https://github.com/FlashML-org/FreeToken-Web/issues/2"},
        ],
        "sources": ["huggingface/text-generation-inference#710", "FlashML-org/FreeToken-Web#2"],
        "confirm_rules": ["GD302", "GD601", "GD604"],
        "facts": ["gpu.*.memory_total", "gpu.*.memory_used"],
    },
    {
        "id": "SIG-parallel-size-exceeds-gpus-words",
        "key": "ray_placement_group",
        "title": "The parallel size asks for more GPUs than the (Ray) cluster has",
        "patterns": [
            r"The number of required GPUs exceeds the total number of available GPUs in the cluster",
            r"Tensor parallel size \((?P<tp>\d+)\) exceeds available GPUs \((?P<gpus>\d+)\)",
        ],
        "cause": (
            "tensor-parallel x pipeline-parallel size needs more GPUs than this machine, or the Ray cluster it joined, "
            "offers: a node has not joined yet, CUDA_VISIBLE_DEVICES hides GPUs, or the size was written for a bigger machine."
        ),
        "fix": "Lower --tensor-parallel-size/--pipeline-parallel-size to the GPUs present, or start the other nodes (ray status) first.",
        "commands": ["nvidia-smi -L", "ray status"],
        "sources": ["vllm-project/vllm#7107", "NVIDIA/dgx-spark-playbooks#63", "vllm-project/vllm#25775"],
        "confirm_rules": ["GD705", "GD907"],
        "facts": ["gpu.count", "env.CUDA_VISIBLE_DEVICES"],
    },
)
