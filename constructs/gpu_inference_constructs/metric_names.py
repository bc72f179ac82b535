"""CloudWatch metric names the model server emits (EMF). Mirrors inference_server/metric_names.py; a test keeps the two in step."""

NAMESPACE = "GpuInference"
DIMENSION_ENVIRONMENT = "Environment"   # value from env DEPLOYMENT_ENV (default "local")
DIMENSION_MODEL = "ModelName"           # value from MODEL_NAME
REQUEST_LATENCY = "RequestLatency"      # Milliseconds, per request
QUEUE_WAIT = "QueueWait"                # Milliseconds, per request
INFERENCE_TIME = "InferenceTime"        # Milliseconds, per request
BATCH_SIZE = "BatchSize"                # Count, per batch
QUEUE_DEPTH = "QueueDepth"              # Count, sampled each interval
REJECTED_REQUESTS = "RejectedRequests"  # Count, 503s from a full queue or draining, per interval
TIMED_OUT_REQUESTS = "TimedOutRequests" # Count, 504s, per interval
GPU_UTILIZATION = "GpuUtilization"      # Percent
GPU_MEMORY_UTILIZATION = "GpuMemoryUtilization"  # Percent
# The model process's own figures, per interval: on a shared GPU (NVIDIA MPS) the two above are every co-tenant's.
GPU_MEMORY_USED_MIB = "GpuMemoryUsedMiB"  # Megabytes (MiB), what torch holds on the GPU (reserved); 0 on CPU
MODEL_BUSY_PERCENT = "ModelBusyPercent"  # Percent of the interval the inference thread spent in forwards
CACHE_HITS = "CacheHits"
CACHE_MISSES = "CacheMisses"
SHARED_CACHE_HITS = "SharedCacheHits"          # Count, inputs answered by the shared cache, per interval
SHARED_CACHE_MISSES = "SharedCacheMisses"      # Count, inputs looked up and not found
SHARED_CACHE_ERRORS = "SharedCacheErrors"      # Count, failed or timed-out cache calls
SHARED_CACHE_SKIPPED = "SharedCacheSkipped"    # Count, inputs not looked up: circuit open or the call failed
SHARED_CACHE_OVERSIZED = "SharedCacheOversized"  # Count, predictions larger than the model's limit, not stored
SHARED_CACHE_STORED = "SharedCacheStored"      # Count, predictions stored
SHARED_CACHE_OPEN = "SharedCacheOpen"          # 1 while the circuit skips the cache, else 0
SHARED_CACHE_LATENCY = "SharedCacheLatency"    # Milliseconds, per successful cache call
# Seconds, once per start of the server (the model process, when it reports ready): what a new task spends before it
# serves, from the server's process start; and within it the model's fetch, load and warm-up before ready.
STARTUP_SECONDS = "StartupSeconds"
STARTUP_FETCH_SECONDS = "StartupFetchSeconds"
STARTUP_LOAD_SECONDS = "StartupLoadSeconds"
STARTUP_WARMUP_SECONDS = "StartupWarmupSeconds"
# Seconds, once per start of a model that compiles (MODEL_RUNTIME=compile), when every shape has compiled: from the
# model loaded, so the compile it runs after ready (on its eager forward meanwhile) is on the dashboard too.
STARTUP_COMPILE_SECONDS = "StartupCompileSeconds"
