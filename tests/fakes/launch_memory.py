"""vLLM's startup memory code as 0.33.0 and 0.34.0 write it, for the fake vLLM trees of
tests/fakes/launch_trees.py (the shapes of the real files; tests/real/test_vllm_memory.py reads the real ones)."""

# vllm/v1/worker/utils.py request_memory, 0.33.0 (the same words from 0.20.0).
MEMORY_CHECK_033 = '''
def request_memory(init_snapshot, cache_config, external_weight_memory=0):
    requested_memory = math.ceil(
        init_snapshot.total_memory * cache_config.gpu_memory_utilization
    )
    if init_snapshot.free_memory < requested_memory:
        raise ValueError(
            f"Free memory on device {init_snapshot.device_} "
            f"({format_gib(init_snapshot.free_memory)}/"
            f"{format_gib(init_snapshot.total_memory)} GiB) on startup "
            f"is less than desired GPU memory utilization "
            f"({cache_config.gpu_memory_utilization}, "
            f"{format_gib(requested_memory)} GiB). Decrease GPU memory "
            f"utilization or reduce GPU memory used by other processes."
        )
    return requested_memory
'''

# 0.34.0: the same check, skipped with the extensible KV cache.
MEMORY_CHECK_034 = '''
def request_memory(init_snapshot, cache_config, external_weight_memory=0):
    gpu_memory_utilization = cache_config.resolved_gpu_memory_utilization
    requested_memory = math.ceil(init_snapshot.total_memory * gpu_memory_utilization)
    if (
        init_snapshot.free_memory < requested_memory
        and not cache_config.enable_extensible_kv_cache
    ):
        raise ValueError(
            f"Free memory on device {init_snapshot.device_} "
            f"({format_gib(init_snapshot.free_memory)}/"
            f"{format_gib(init_snapshot.total_memory)} GiB) on startup "
            f"is less than desired GPU memory utilization "
            f"({gpu_memory_utilization}, "
            f"{format_gib(requested_memory)} GiB). Decrease GPU memory "
            f"utilization or reduce GPU memory used by other processes."
        )
    return requested_memory
'''

# 0.34.0's CacheConfig (vllm/config/cache.py): no default fraction; resolved from the sizing mode.
CACHE_CONFIG_034 = '''    DEFAULT_GPU_MEMORY_UTILIZATION: ClassVar[float] = 0.92
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    enable_extensible_kv_cache: bool = Field(default=None)  # type: ignore[assignment]
    kv_cache_memory_bytes: int | None = None

    @property
    def resolved_gpu_memory_utilization(self) -> float:
        if self.gpu_memory_utilization is not None:
            return self.gpu_memory_utilization
        if self.enable_extensible_kv_cache:
            return 1.0
        return self.DEFAULT_GPU_MEMORY_UTILIZATION
'''

# 0.34.0's VllmConfig._resolve_extensible_kv_cache (vllm/config/vllm.py), its first branches.
RESOLVE_EXTENSIBLE_034 = '''
class VllmConfig:
    def _resolve_extensible_kv_cache(self) -> None:
        cache_config = self.cache_config
        requested = cache_config.enable_extensible_kv_cache
        unsupported = None
        if not current_platform.is_cuda_alike():
            unsupported = "it is only supported on CUDA and ROCm"
        elif cache_config.kv_cache_memory_bytes is not None:
            unsupported = "it sizes the KV cache from measured memory, which kv_cache_memory_bytes overrides"
        elif (
            self.kv_transfer_config is not None
            and self.kv_transfer_config.uses_custom_mem_pool()
        ):
            unsupported = "custom_mem_pool allocates the KV cache from a connector's memory pool"
        if requested is None:
            cache_config.enable_extensible_kv_cache = unsupported is None
'''
