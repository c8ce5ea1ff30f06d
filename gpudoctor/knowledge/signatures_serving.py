"""Error signatures of serving: memory, launch arguments, models, containers, clusters, symptoms.

Data in the format described in gpudoctor/knowledge/signatures.py (which joins this tuple to its own);
split off so neither module grows past one screenful of causes per area.
"""

from __future__ import annotations

_LAUNCH = "gpudoctor preflight -- vllm serve MODEL …  # checks the launch command against this machine"

SERVING = (
    {
        "id": "SIG-cuda-oom",
        "key": "cuda_oom",
        "title": "CUDA out of memory (loading, profiling, warm-up or a request)",
        "patterns": [
            r"CUDA out of memory\.? Tried to allocate (?P<requested>[\d.]+ ?[KMGT]i?B)",
            r"CUDA out of memory occurred when warming up (?P<phase>[\w ]+?) with",
            r"OutOfMemoryError: CUDA out of memory",
            r"would exceed allowed memory\.? \(out of memory\)",
            r"CUDA error: out of memory",
            r"CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation",
        ],
        "cause": (
            "The GPU has less free memory than the step needs: other processes already hold part of it (vLLM "
            "preallocates --gpu-memory-utilization of the *total*), the weights nearly fill it, or warm-up with "
            "max_num_seqs dummy requests / CUDA graph capture needs more than what is left."
        ),
        "fix": (
            "Free the GPU of other processes; lower --gpu-memory-utilization a little (0.95 -> 0.90) or --max-num-seqs; "
            "use --enforce-eager, a shorter --max-model-len, more tensor parallelism or a quantized model."
        ),
        "commands": [
            "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv",
            "vllm serve MODEL --gpu-memory-utilization 0.90 --max-num-seqs 256",
            _LAUNCH,
        ],
        "thread_fixes": [
            {"fix": "other processes held ~15 GB of the GPU; lower --gpu-memory-utilization or free the GPU",
             "url": "https://github.com/vllm-project/vllm/issues/783"},
            {"fix": "warm-up OOM (vLLM 0.11.0, Qwen3-32B TP=2): --gpu-memory-utilization 0.90-0.92 instead of 0.95, or --max-num-seqs=512",
             "url": "https://github.com/llm-d/llm-d/issues/787"},
        ],
        "sources": ["vllm-project/vllm#783", "llm-d/llm-d#787", "vllm-project/vllm#14452", "vllm-project/vllm#15105",
                    "huggingface/text-generation-inference#563"],
        "confirm_rules": ["GD302", "GD601", "GD604", "GD709", "GD710"],
        "facts": ["gpu.*.name", "gpu.*.memory_total", "gpu.*.memory_used", "gpu.*.processes"],
    },
    {
        "id": "SIG-nccl-watchdog-timeout",
        "key": "nccl_watchdog_timeout",
        "title": "NCCL watchdog: a collective operation timed out",
        "patterns": [
            r"Watchdog caught collective operation timeout: WorkNCCL\((?P<work>[^)]*)\) ran for (?P<ran_ms>\d+) milliseconds",
            r"Watchdog caught collective operation timeout",
        ],
        "cause": (
            "One rank did not join a collective (ALLREDUCE, ALLGATHER…) within the process group's timeout (10 or 30 min): "
            "it crashed or hung earlier (look above for its own error), it is far slower (data loading or evaluation on "
            "rank 0 only), or GPU peer-to-peer / the network between the ranks stalls."
        ),
        "fix": (
            "Find the first error of the other ranks; test the links with NCCL_DEBUG=INFO (and NCCL_P2P_DISABLE=1 to rule out "
            "P2P); raise the timeout only when a rank is legitimately slow."
        ),
        "commands": [
            "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,P2P vllm serve MODEL … 2>&1 | grep -E 'NCCL (WARN|INFO) (Channel|P2P|NET)'",
            "nvidia-smi topo -m",
        ],
        "thread_fixes": [
            {"fix": "maintainer: the timeout follows a worker that died (exit -6) while rank 0 waited in an all-reduce: find that worker's error", "url": "https://github.com/vllm-project/vllm/issues/6042"},
            {"fix": "maintainer: the hang after days of serving was fixed in vLLM v0.3.2", "url": "https://github.com/vllm-project/vllm/issues/3071"},
        ],
        "sources": ["hiyouga/LlamaFactory#7396", "hiyouga/LlamaFactory#6269", "pytorch/pytorch#118369", "OFA-Sys/OFA#271"],
        "confirm_rules": ["GD305"],
        "cannot_check": "a stalled collective is a run-time event; gpudoctor checks only the PCIe links of this machine",
        "facts": ["gpu.count", "gpu.*.name", "env.NCCL_P2P_DISABLE"],
    },
    {
        "id": "SIG-fp8-unsupported-gpu",
        "key": "fp8_unsupported_gpu",
        "title": "FP8 quantization on a GPU without FP8 support",
        "patterns": [
            r"The quantization method (?P<method>fp8\w*) is not supported for the current GPU",
            r"FP8 quantized models is only supported on GPUs with compute capability >= (?P<minimum>[\d.]+)",
            r"torch\._scaled_mm is only supported on (?:CUDA )?devices with compute capability >= (?P<minimum>[\d.]+)",
            r"type fp8e4nv not supported in this architecture",
            r"FP8 models require a GPU with Compute Capability (?P<minimum>[\d.]+)",
            r"Device compute capability (?P<minimum>[\d.x]+) required for FP8 execution",
        ],
        "details": [r"Minimum capability: (?P<minimum>\d+)\. Current capability: (?P<current>\d+)"],
        "cause": "FP8 compute needs compute capability 8.9+ (Ada, Hopper, Blackwell); older vLLM/transformers releases require 9.0. A100 (8.0) and older have no FP8 tensor cores.",
        "fix": "Serve a non-FP8 variant (BF16, AWQ/GPTQ INT4), or a vLLM whose Marlin weight-only FP8 path runs on Ampere; or use an FP8-capable GPU.",
        "commands": ["nvidia-smi --query-gpu=name,compute_cap --format=csv", _LAUNCH],
        "thread_fixes": [
            {"fix": "maintainer: a hardware limit, the A100 has no FP8 tensor cores; use an INT4 variant instead",
             "url": "https://github.com/huggingface/huggingface-llama-recipes/issues/21"},
        ],
        "sources": ["huggingface/huggingface-llama-recipes#21", "vllm-project/vllm#4327", "neuralmagic/nm-vllm#190"],
        "confirm_rules": ["GD712", "GD713"],
        "facts": ["gpu.*.name", "gpu.*.compute_capability"],
    },
    {
        "id": "SIG-quantization-unsupported-gpu",
        "key": "quantization_unsupported_gpu",
        "title": "The quantization method needs a newer GPU",
        "patterns": [
            r"The quantization method (?P<method>(?!fp8)[\w-]+) is not supported for the current GPU",
            r"Quantization scheme is not supported for [^\n]{0,10}the current GPU",
        ],
        "details": [r"Minimum capability: (?P<minimum>\d+)\. Current capability: (?P<current>\d+)"],
        "cause": "vLLM's kernels for this quantization method need a newer compute capability than this GPU has (e.g. AWQ/GPTQ-Marlin need 8.0, some need 7.5).",
        "fix": "Use a quantization this GPU supports (the error names the minimum capability), or a different GPU.",
        "commands": ["nvidia-smi --query-gpu=name,compute_cap --format=csv", _LAUNCH],
        "thread_fixes": [
            {"fix": "maintainer: AWQ needs Turing or newer (Ampere recommended); the V100 (sm_70) cannot run it", "url": "https://github.com/vllm-project/vllm/issues/1488"},
        ],
        "sources": ["vllm-project/vllm#4327", "vllm-project/vllm#1345"],
        "confirm_rules": ["GD713"],
        "facts": ["gpu.*.name", "gpu.*.compute_capability"],
    },
    {
        "id": "SIG-max-model-len-too-large",
        "key": "max_model_len_too_large",
        "title": "--max-model-len is larger than the model's context (derived max_model_len)",
        "patterns": [
            r"User-specified max_model_len \((?P<max_model_len>\d+)\) is greater than the derived max_model_len \((?P<derived>[^)]*)\)",
            r"max_model_len[^\n]{0,40}? is greater than the derived max_model_len",
        ],
        "cause": "The requested context is longer than the model's config.json allows (max_position_embeddings / seq_length / model_max_length) and no rope scaling extends it.",
        "fix": "Lower --max-model-len to the model's context, or (if the model really supports more) set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 or configure rope scaling.",
        "commands": ["vllm serve MODEL --max-model-len 8192", _LAUNCH],
        "thread_fixes": [
            {"fix": "Qwen-14B-Chat-Int4's config.json has seq_length 2048: lower max_model_len (or edit the config)",
             "url": "https://github.com/xorbitsai/inference/issues/1715"},
        ],
        "sources": ["xorbitsai/inference#1715", "vllm-project/vllm#3676", "vllm-project/vllm#19660"],
        "confirm_rules": ["GD715"],
        "facts": [],
    },
    {
        "id": "SIG-trust-remote-code",
        "key": "trust_remote_code_needed",
        "title": "The model repo ships custom code: trust_remote_code is needed",
        "patterns": [
            r"requires you to execute the configuration file in that repo on your local machine",
            r"contains custom code which must be executed to correctly load the model",
            r"set the option `?trust_remote_code=True`? to remove this error",
        ],
        "cause": "The model's architecture (or tokenizer) is implemented in Python files inside the model repo, and loading them was not allowed.",
        "fix": "Read the repo's code, then pass --trust-remote-code (vLLM) / trust_remote_code=True (transformers).",
        "commands": ["vllm serve MODEL --trust-remote-code", _LAUNCH],
        "sources": ["h2oai/h2o-llmstudio#560", "runpod-workers/worker-vllm#43", "oobabooga/textgen#5730"],
        "confirm_rules": ["GD723"],
        "facts": [],
    },
    {
        "id": "SIG-unknown-tool-parser",
        "key": "unknown_tool_parser",
        "title": "--tool-call-parser names a parser this vLLM does not have",
        "patterns": [
            r"argument --tool-call-parser: invalid choice: '(?P<parser>[^']+)'",
            r"invalid tool call parser: (?P<parser>[\w.-]+)",
        ],
        "cause": "The parser was added in a later vLLM release (glm45 after 0.10.0, llama3_json after 0.6.2), or the name is misspelt; the error lists the parsers this vLLM has.",
        "fix": "Upgrade vLLM to a release that has the parser, or pick one from the list the error prints.",
        "commands": ["python3 -m pip install -U vllm", _LAUNCH],
        "thread_fixes": [
            {"fix": "maintainer: vLLM 0.10.0 lacks the glm45 parser; update vLLM (main/nightly)", "url": "https://github.com/zai-org/GLM-4.5/issues/58"},
            {"fix": "llama3_json came after vLLM 0.6.2; works in 0.6.3", "url": "https://github.com/vllm-project/vllm/issues/9312"},
        ],
        "sources": ["zai-org/GLM-4.5#58", "zai-org/GLM-4.5#16", "vllm-project/vllm#9312", "vllm-project/recipes#51"],
        "confirm_rules": ["GD721"],
        "facts": ["vllm.*"],
    },
    {
        "id": "SIG-unknown-reasoning-parser",
        "key": "unknown_reasoning_parser",
        "title": "--reasoning-parser names a parser this vLLM does not have",
        "patterns": [
            r"argument --reasoning-parser: invalid choice: '(?P<parser>[^']+)'",
            r"invalid reasoning parser: (?P<parser>[\w.-]+)",
            r"Reasoning parser '(?P<parser>[^']+)' not found",
        ],
        "cause": "The reasoning parser was added in a later vLLM release, comes from a plugin that failed to load, or the name is misspelt.",
        "fix": "Upgrade vLLM to a release that has the parser, or pick one from the list the error prints.",
        "commands": ["python3 -m pip install -U vllm", _LAUNCH],
        "thread_fixes": [
            {"fix": "maintainer: with --headless vLLM looks the parser up before --reasoning-parser-plugin is imported, so a plugin parser is not registered", "url": "https://github.com/vllm-project/vllm-ascend/issues/14573"},
        ],
        "sources": ["vllm-project/vllm-ascend#14573", "https://github.com/vllm-project/vllm/blob/main/vllm/entrypoints/openai/api_server.py", "smg-project/smg#869"],
        "confirm_rules": ["GD721"],
        "facts": ["vllm.*"],
    },
    {
        "id": "SIG-chat-template-missing",
        "key": "chat_template_error",
        "title": "The tokenizer has no chat template for a chat request",
        "patterns": [
            r"default chat template is no longer allowed, so you must provide a chat template",
            r"Cannot use (?:apply_)?chat_template\(\) because tokenizer\.chat_template is not set",
            r"ChatTemplateResolutionError",
        ],
        "cause": "The model's tokenizer_config.json defines no chat_template (base models, some repos) and transformers >= 4.44 no longer falls back to a default one.",
        "fix": "Start the server with --chat-template FILE (a Jinja template for this model), or use /v1/completions instead of chat.",
        "commands": ["vllm serve MODEL --chat-template ./template.jinja"],
        "thread_fixes": [
            {"fix": "maintainer: pass a chat template (e.g. from chujiezheng/chat_templates) with --chat-template",
             "url": "https://github.com/David-Li0406/Preference-Leakage/issues/6"},
            {"fix": "DeepSeek-V3.2 ships no chat template; use the V3.2-Exp template via --chat-template", "url": "https://github.com/vllm-project/vllm/issues/29849"},
        ],
        "sources": ["David-Li0406/Preference-Leakage#6", "vllm-project/vllm#29849", "vllm-project/vllm#39279", "huggingface/transformers#33246"],
        "cannot_check": "the model's tokenizer files decide it, not this machine",
        "facts": [],
    },
    {
        "id": "SIG-ray-placement-group",
        "key": "ray_placement_group",
        "title": "Ray cannot place vLLM's workers (placement group)",
        "patterns": [
            r"Ray does not allocate any GPUs on the driver node",
            r"The number of required GPUs exceeds the total number of available GPUs in the placement group",
            r"Cannot provide a placement group of",
            r"Waiting for creating a placement group of specs for \d+ seconds",
        ],
        "cause": "The Ray cluster does not offer the GPUs the placement group asks for where vLLM needs them: no GPU bundle on the driver's node, fewer GPUs than tensor × pipeline parallel, or a node that has not joined.",
        "fix": "Run the driver on a GPU node (or put it in the placement group's bundle), and make tensor × pipeline parallel size fit the GPUs `ray status` shows.",
        "commands": ["ray status", "gpudoctor cluster  # checks every node and the parallel plan"],
        "thread_fixes": [
            {"fix": "vLLM needs a worker on the driver's node: schedule the driver actor into the placement group's bundle",
             "url": "https://github.com/OpenRLHF/OpenRLHF/pull/732"},
        ],
        "sources": ["OpenRLHF/OpenRLHF#732", "vllm-project/vllm#6956", "vllm-project/vllm#2416"],
        "confirm_rules": ["GD907", "GD705"],
        "facts": ["gpu.count"],
    },
    {
        "id": "SIG-hf-gated-repo",
        "key": "hf_gated_repo",
        "title": "Hugging Face refused the download: gated or private repo (401/403)",
        "patterns": [
            r"Cannot access gated repo for url",
            r"\bGatedRepoError\b",
            r"You are trying to access a gated repo",
            r"Access to model (?P<model>\S+) is restricted",
            r"Your request to access (?:model )?(?P<model>\S+) is awaiting a review",
        ],
        "cause": "The model is gated (or private): the request carried no token, or the token's account has not been granted access on huggingface.co.",
        "fix": "Request access on the model's page, then log in (hf auth login) or pass HF_TOKEN to the server (and into the container).",
        "commands": ["hf auth login  # or: huggingface-cli login", "docker run -e HF_TOKEN …"],
        "thread_fixes": [
            {"fix": "maintainer: request access to the repo on huggingface.co first", "url": "https://github.com/ToTheBeginning/PuLID/issues/97"},
            {"fix": "maintainer: request access, then provide the token as the HF_TOKEN environment variable", "url": "https://github.com/McGill-NLP/llm2vec/issues/130"},
            {"fix": "maintainer: log in with huggingface-cli login, or use a non-gated mirror", "url": "https://github.com/city96/ComfyUI_ExtraModels/issues/99"},
        ],
        "sources": ["ToTheBeginning/PuLID#97", "McGill-NLP/llm2vec#130", "city96/ComfyUI_ExtraModels#99"],
        "cannot_check": "access is decided by the Hugging Face Hub, and gpudoctor works offline",
        "facts": [],
    },
    {
        "id": "SIG-container-nvml-driver-not-loaded",
        "key": "container_nvml_driver_not_loaded",
        "title": "nvidia-container-cli: NVML says the host driver is not loaded",
        "patterns": [r"nvml error: driver not loaded"],
        "cause": "The container runtime hook asks the host's NVML for the GPUs, and the host has no NVIDIA kernel module loaded (not installed, not built for the running kernel, or blocked by Secure Boot).",
        "fix": "Fix the driver on the host first (nvidia-smi must work there), then start the container again.",
        "commands": ["nvidia-smi", "lsmod | grep nvidia", "sudo dmesg | grep -iE 'nvrm|nvidia' | tail -20"],
        "thread_fixes": [
            {"fix": "no NVIDIA driver loaded on the host; check nvidia-smi", "url": "https://github.com/cedricxie/apollo_perception_ros/issues/20"},
        ],
        "sources": ["cedricxie/apollo_perception_ros#20", "NVIDIA/nvidia-container-toolkit#1269", "NVIDIA/nvidia-docker#1629"],
        "confirm_rules": ["GD101"],
        "facts": ["driver.nvml", "driver.kernel_module_version"],
    },
    {
        "id": "SIG-container-nvml-library-missing",
        "key": "container_nvml_library_missing",
        "title": "nvidia-container-cli cannot load libnvidia-ml.so.1",
        "patterns": [r"load library failed: libnvidia-ml\.so"],
        "cause": "The host has no NVIDIA user-space driver libraries where the container toolkit looks (driver not installed, or a WSL/Docker Desktop without GPU support).",
        "fix": "Install the NVIDIA driver on the host (and on WSL the Windows driver with WSL support), then restart Docker.",
        "commands": ["nvidia-smi", "ldconfig -p | grep libnvidia-ml"],
        "thread_fixes": [
            {"fix": "the NVIDIA drivers were simply not installed", "url": "https://github.com/docker/for-win/issues/13835"},
        ],
        "sources": ["docker/for-win#13835", "NVIDIA/nvidia-container-toolkit#154"],
        "confirm_rules": ["GD101"],
        "facts": ["driver.nvml", "driver.library_path"],
    },
    {
        "id": "SIG-k8s-device-plugin-nvml",
        "key": "k8s_device_plugin_nvml",
        "title": "NVIDIA k8s device plugin cannot load NVML",
        "patterns": [
            r"could not load NVML library",
            r"If this is a GPU node, did you set the docker default runtime to",
        ],
        "cause": "The device plugin pod runs without the NVIDIA runtime (the node's default container runtime is not nvidia, or no RuntimeClass), so the driver libraries are not mounted into it; or the node has no driver.",
        "fix": "Make nvidia the node's default runtime (containerd/docker config) or deploy the plugin with runtimeClassName: nvidia; check the driver on the node.",
        "commands": ["sudo nvidia-ctk runtime configure --runtime=containerd --set-as-default && sudo systemctl restart containerd", "nvidia-smi"],
        "thread_fixes": [
            {"fix": "maintainer: set nvidia as the docker default runtime on the node (README 'Preparing your GPU nodes'); the reporter confirmed",
             "url": "https://github.com/NVIDIA/k8s-device-plugin/issues/23"},
        ],
        "sources": ["NVIDIA/k8s-device-plugin#23", "NVIDIA/k8s-device-plugin#444", "NVIDIA/k8s-device-plugin#303"],
        "confirm_rules": ["GD101"],
        "facts": ["driver.nvml", "host.container"],
    },
    {
        "id": "SIG-shm-bus-error",
        "key": "docker_shm_too_small",
        "title": "A worker died with a bus error: /dev/shm is too small",
        "patterns": [
            r"bus error encountered in worker\.? This might be caused by insufficient shared memory",
            r"insufficient shared memory \(shm\)",
            r"out of shared memory\. Please try to raise your shared memory limit",
            r"Caught signal 7 \(Bus error",
            r"received signal SIGBUS, Bus error",
            r"killed by signal: Bus error",
        ],
        "superseded_by": ["SIG-nccl-shm"],
        "cause": "Shared memory in /dev/shm ran out: Docker gives containers 64 MB by default, far less than DataLoader workers, NCCL or vLLM's IPC need; writing past it raises SIGBUS.",
        "fix": "Start the container with --ipc=host or a larger --shm-size (Kubernetes: an emptyDir with medium: Memory on /dev/shm).",
        "commands": ["df -h /dev/shm", "docker run --ipc=host …  # or --shm-size=16g"],
        "thread_fixes": [
            {"fix": "a fresh container with --ipc=host fixed it", "url": "https://github.com/microsoft/RepPoints/issues/18"},
            {"fix": "maintainer: increase the shared memory limit (--shm-size in Docker); the reporter confirmed", "url": "https://github.com/nianticlabs/simplerecon/issues/3"},
            {"fix": "docker run gives 64M of shared memory by default; --shm-size=\"6g\"", "url": "https://github.com/msr-fiddle/pipedream/issues/76"},
        ],
        "sources": ["microsoft/RepPoints#18", "nianticlabs/simplerecon#3", "msr-fiddle/pipedream#76", "open-mmlab/mmdetection#6993"],
        "confirm_rules": ["GD309", "GD603"],
        "facts": ["host.shm_total", "host.container"],
    },
    {
        "id": "SIG-zmq-address-in-use",
        "key": "zmq_address_in_use",
        "title": "vLLM/SGLang internal ZMQ socket: address already in use",
        "patterns": [r"ZMQError: Address (?:already )?in use(?: \(addr='(?P<address>[^']*)'\))?"],
        "cause": "An internal IPC or KV-transfer port (ZMQ) is taken: a previous engine or worker of the same server did not exit, or two servers were given the same port range.",
        "fix": "Stop the stale engine processes (VLLM::EngineCore, sglang schedulers), or give each server its own ports.",
        "commands": ["ss -ltnp | grep -E 'python|VLLM'", "gpudoctor fix  # stops stale serving processes you own, after confirmation"],
        "sources": ["vllm-project/vllm#7196", "vllm-project/vllm#20965", "sgl-project/sglang#9396"],
        "confirm_rules": ["GD601", "GD605"],
        "facts": ["processes.serving"],
    },
    {
        "id": "SIG-torch-distributed-connect",
        "key": "torch_distributed_connect_failed",
        "title": "torch.distributed: a rank cannot reach the rendezvous (MASTER_ADDR:MASTER_PORT)",
        "patterns": [
            r"The client socket has failed to connect to (?P<address>\S+)",
            r"DistNetworkError: [^\n]*(?:timed out|refused|failed to connect)",
            r"Gloo connectFullMesh failed",
            r"Unable to resolve hostname to a \(local\) address\. Using the loopback address as fallback",
        ],
        "cause": "A rank cannot open a TCP connection to the rendezvous store: a wrong or unroutable MASTER_ADDR, a firewall, the wrong network interface, or the rank-0 process is not up.",
        "fix": "Give MASTER_ADDR an address every node can reach (and GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME its interface); open MASTER_PORT between the nodes.",
        "commands": ["nc -vz \"$MASTER_ADDR\" \"${MASTER_PORT:-29500}\"", "ip -br addr"],
        "thread_fixes": [
            {"fix": "maintainer: configure the right MASTER_ADDR and port (it named an address that was not this node)", "url": "https://github.com/hiyouga/LlamaFactory/issues/3715"},
            {"fix": "multi-node vLLM on Ray: set GLOO_SOCKET_IFNAME to the interface the nodes reach each other on", "url": "https://github.com/vllm-project/vllm/issues/5094"},
        ],
        "sources": ["hiyouga/LlamaFactory#3715"],
        "cannot_check": "the network between the nodes is outside what gpudoctor probes on one machine",
        "facts": ["env.MASTER_ADDR", "env.MASTER_PORT", "env.GLOO_SOCKET_IFNAME", "env.NCCL_SOCKET_IFNAME"],
    },
    {
        "id": "SIG-tensor-parallel-not-divisible",
        "key": "tp_size_not_divisible",
        "title": "The tensor-parallel size does not divide the model's attention heads",
        "patterns": [
            r"Total number of attention heads \((?P<heads>\d+)\) must be divisible by tensor parallel size \((?P<tp>\d+)\)",
            r"num_heads \((?P<heads>\d+)\) must be divisible by mp_size \((?P<tp>\d+)\)",
        ],
        "cause": "Tensor parallelism splits the attention heads evenly across GPUs: the head count (and KV-head count) must be a multiple of --tensor-parallel-size.",
        "fix": "Use a tensor-parallel size that divides the head count (e.g. 52 heads: 1, 2, 4 or 13), and pipeline parallelism for the remaining GPUs.",
        "commands": ["vllm serve MODEL --tensor-parallel-size 4 --pipeline-parallel-size 2", _LAUNCH],
        "thread_fixes": [
            {"fix": "maintainer: LLaMA 33B has 52 heads: run on 4 GPUs", "url": "https://github.com/vllm-project/vllm/issues/414"},
        ],
        "sources": ["vllm-project/vllm#2652", "vllm-project/vllm#414", "vllm-project/vllm#596", "microsoft/DeepSpeed#3634"],
        "confirm_rules": ["GD706"],
        "facts": ["gpu.count"],
    },
    {
        "id": "SIG-model-arch-not-supported",
        "key": "model_arch_not_supported",
        "title": "vLLM does not implement the model's architecture",
        "patterns": [
            # When the architecture is in the printed list of supported ones, the model failed to import: a symptom (below).
            r"Model architectures \['(?P<architecture>\w+)'\] are not supported for now?(?![^\n]*Supported architectures: \[[^\]]*'(?P=architecture)')",
        ],
        "cause": (
            "The architecture in the model's config.json is not one this vLLM implements: it came in a later release, or the "
            "model needs --trust-remote-code / a plugin. vLLM prints the same line when a supported architecture's module "
            "failed to import: then an earlier 'Error in inspecting model architecture' traceback holds the cause."
        ),
        "fix": "Upgrade vLLM to a release that supports the architecture (see its supported-models list), or serve the model with --trust-remote-code where it ships its code.",
        "commands": ["python3 -m pip install -U vllm", _LAUNCH],
        "thread_fixes": [
            {"fix": "maintainer: Qwen2ForSequenceClassification is only supported by more recent vLLM (reporter on 0.6.1): upgrade",
             "url": "https://github.com/vllm-project/vllm/issues/10990"},
        ],
        "sources": ["vllm-project/vllm#10990"],
        "confirm_rules": ["GD723"],
        "facts": ["vllm.*"],
    },
    {
        "id": "SIG-cuda-fork-reinit",
        "key": "cuda_fork_reinit",
        "title": "CUDA was initialised before a fork (Cannot re-initialize CUDA in forked subprocess)",
        "patterns": [r"Cannot re-initialize CUDA in forked subprocess"],
        "cause": "The parent process touched CUDA (often an import or a torch.cuda call in user code) before multiprocessing forked the workers; a forked child cannot use CUDA.",
        "fix": "Use the spawn start method for vLLM's workers (VLLM_WORKER_MULTIPROC_METHOD=spawn), and keep CUDA calls out of module import time.",
        "commands": ["export VLLM_WORKER_MULTIPROC_METHOD=spawn"],
        "thread_fixes": [
            {"fix": "export VLLM_WORKER_MULTIPROC_METHOD=spawn fixed it (workers were forked after CUDA was initialised)", "url": "https://github.com/lm-sys/FastChat/issues/3507"},
        ],
        "sources": ["vllm-project/vllm#7151", "lm-sys/FastChat#3507", "GeeeekExplorer/nano-vllm#22"],
        "cannot_check": "it depends on the program's start-up order, not on this machine",
        "facts": ["env.VLLM_WORKER_MULTIPROC_METHOD"],
    },
    {
        "id": "SIG-no-cuda-gpus-visible",
        "key": "cuda_visible_devices_no_gpu",
        "title": "No CUDA GPUs are available (CUDA_VISIBLE_DEVICES hides them)",
        "patterns": [r"No CUDA GPUs are available"],
        "cause": "CUDA sees no device: CUDA_VISIBLE_DEVICES names GPUs that do not exist (an index copied from another machine, set inside the script), or is empty.",
        "fix": "Set CUDA_VISIBLE_DEVICES to indices (or UUIDs) that exist here, or unset it; check the script does not set it itself.",
        "commands": ["echo \"CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES\"; nvidia-smi -L", "unset CUDA_VISIBLE_DEVICES"],
        "thread_fixes": [
            {"fix": "train.py set CUDA_VISIBLE_DEVICES='1' on a machine without that index; removing it fixed it", "url": "https://github.com/CoMoSVC/CoMoSVC/issues/6"},
        ],
        "sources": ["CoMoSVC/CoMoSVC#6", "vine-project/vine#3"],
        "confirm_rules": ["GD308"],
        "other_rules": ["GD101"],
        "facts": ["env.CUDA_VISIBLE_DEVICES", "gpu.count"],
    },
    {
        "id": "SIG-swap-space-too-large",
        "key": "swap_space_too_large",
        "title": "vLLM's --swap-space takes (almost) all CPU memory",
        "patterns": [r"(?<!possibly )Too large swap space\. (?P<swap>[\d.]+ ?GiB) out of the (?P<total>[\d.]+ ?GiB) total CPU memory"],
        "cause": "--swap-space (CPU memory reserved for swapped KV blocks, per GPU) is more than vLLM allows of this machine's RAM.",
        "fix": "Lower --swap-space (e.g. 1 or 0) on machines with little RAM.",
        "commands": ["vllm serve MODEL --swap-space 1", "free -g"],
        "sources": ["index-tts/index-tts#99"],
        "confirm_rules": ["GD7:swap"],
        "facts": ["host.memory_total"],
    },
    # --- symptoms: where a program gave up, not why. Never the answer on their own. ---
    {
        "id": "SIG-worker-failed-to-start",
        "key": "failure_without_cause",
        "role": "symptom",
        "title": "vLLM's engine or a worker failed to start (the cause is printed earlier)",
        "patterns": [
            r"WorkerProc failed to start",
            r"WorkerProc initialization failed due to an exception in a background process",
            r"Engine core initialization failed\. See root cause above",
            r"\bEngineCore failed to start\b",
            r"Engine process failed to start",
            r"Got fatal signal from worker process",
            r"Error executing method \w+\. This might cause deadlock in distributed execution",
            r"Error in inspecting model architecture",
            r"EngineDeadError: EngineCore encountered an issue",
            r"Model architectures \[[^\]]*\] failed to be inspected",
            r"Model architectures \['(?P<architecture>\w+)'\] are not supported for now[^\n]*Supported architectures: \[[^\]]*'(?P=architecture)'",
        ],
        "hint": (
            "the first ERROR line of a worker or of the engine core ('(VllmWorker rank=0 pid=…) ERROR …', "
            "'(EngineCore_DP0 pid=…) ERROR …'): below it, that process's 'Traceback (most recent call last)' ends in "
            "the exception that is the cause; with several GPUs every rank prints one, and the earliest is the cause"
        ),
        "cause": "vLLM reports that its engine core or one of its worker processes died during start-up; the exception that killed it is printed above, by that process.",
        "fix": "Send the log from the first ERROR line (not only the last traceback): gpudoctor explain --log FILE finds the cause there.",
        "commands": ["grep -n -m5 -E 'ERROR|CRITICAL' vllm.log", "gpudoctor explain --log vllm.log"],
        "sources": ["vllm-project/vllm#30021", "vllm-project/vllm#18455", "vllm-project/vllm#26898", "gpustack/gpustack#2723"],
        "facts": [],
    },
)
