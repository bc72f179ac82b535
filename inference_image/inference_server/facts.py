"""The server's facts that the CDK library reads too: the tasks and runtimes it serves, its drain and exit seconds,
its worker limit, the variables it reads, and the CloudWatch metric names it emits (EMF).

The library (gpu_inference_constructs) loads this file by its path from the build context it ships, without the
server installed: it imports nothing, not even the standard library.
"""

# -- what it serves --------------------------------------------------------------------------------------------------
TASKS = ("text-classification", "text-embedding", "torch-export", "image-classification")
TEXT_TASKS = ("text-classification", "text-embedding")  # the tasks a runtime other than eager is converted for
RUNTIMES = ("eager", "compile", "onnx", "int8")  # MODEL_RUNTIME

# -- how it runs and stops -------------------------------------------------------------------------------------------
PORT = 8080
MAX_WORKERS = 256  # WORKERS' upper bound
DRAIN_TIMEOUT_S = 70  # DRAIN_TIMEOUT_S's default: after SIGTERM, how long accepted work may finish
EXIT_GRACE_S = 15  # after the drain, how long the supervisor gives its processes before it kills them and exits

# -- the variables a deployment sets ---------------------------------------------------------------------------------
HANDLER_VARIABLE = "MODEL_HANDLER"  # module:Class of a team's handler
RUNTIME_VARIABLE = "MODEL_RUNTIME"
TASK_VARIABLE = "MODEL_TASK"
DRAIN_VARIABLE = "DRAIN_TIMEOUT_S"
WORKERS_VARIABLE = "WORKERS"
# Request spans: the OTLP/HTTP base URL of the task's collector (unset: nothing traced), and the share of requests
# traced where the caller's trace context does not decide (parent-based).
TRACES_ENDPOINT_VARIABLE = "OTEL_EXPORTER_OTLP_ENDPOINT"
TRACE_SAMPLE_RATIO_VARIABLE = "TRACE_SAMPLE_RATIO"
# The default share: a sampled request costs its worker about 0.43 ms (mostly the OTLP encoding; bench.tracing_cost),
# so 1 % stays within a few percent of a saturated worker where 5 % cost a null model about 10 %.
TRACE_SAMPLE_RATIO = 0.01

# -- CloudWatch metric names (EMF) -----------------------------------------------------------------------------------
NAMESPACE = "GpuInference"
DIMENSION_ENVIRONMENT = "Environment"  # value from env DEPLOYMENT_ENV (default "local")
DIMENSION_MODEL = "ModelName"  # value from MODEL_NAME
REQUEST_LATENCY = "RequestLatency"  # Milliseconds, per request
QUEUE_WAIT = "QueueWait"  # Milliseconds, per request
INFERENCE_TIME = "InferenceTime"  # Milliseconds, per request
BATCH_SIZE = "BatchSize"  # Count, per batch
QUEUE_DEPTH = "QueueDepth"  # Count, sampled each interval
REJECTED_REQUESTS = "RejectedRequests"  # Count, 503s from a full queue or draining, per interval
TIMED_OUT_REQUESTS = "TimedOutRequests"  # Count, 504s, per interval
GPU_UTILIZATION = "GpuUtilization"  # Percent
GPU_MEMORY_UTILIZATION = "GpuMemoryUtilization"  # Percent
# The model process's own figures, per interval: on a shared GPU (NVIDIA MPS) the two above are every co-tenant's.
GPU_MEMORY_USED_MIB = "GpuMemoryUsedMiB"  # Megabytes (MiB), what torch holds on the GPU (reserved); 0 on CPU
MODEL_BUSY_PERCENT = "ModelBusyPercent"  # Percent of the interval the inference thread spent in forwards
CACHE_HITS = "CacheHits"
CACHE_MISSES = "CacheMisses"
SHARED_CACHE_HITS = "SharedCacheHits"  # Count, inputs answered by the shared cache, per interval
SHARED_CACHE_MISSES = "SharedCacheMisses"  # Count, inputs looked up and not found
SHARED_CACHE_ERRORS = "SharedCacheErrors"  # Count, failed or timed-out cache calls
SHARED_CACHE_SKIPPED = "SharedCacheSkipped"  # Count, inputs not looked up: circuit open or the call failed
SHARED_CACHE_OVERSIZED = "SharedCacheOversized"  # Count, predictions larger than the model's limit, not stored
SHARED_CACHE_STORED = "SharedCacheStored"  # Count, predictions stored
SHARED_CACHE_OPEN = "SharedCacheOpen"  # 1 while the circuit skips the cache, else 0
SHARED_CACHE_LATENCY = "SharedCacheLatency"  # Milliseconds, per successful cache call
# Seconds, once per start of the server (the model process, when it reports ready): what a new task spends before it
# serves, from the server's process start; and within it the model's fetch, load and warm-up before ready.
STARTUP_SECONDS = "StartupSeconds"
STARTUP_FETCH_SECONDS = "StartupFetchSeconds"
STARTUP_LOAD_SECONDS = "StartupLoadSeconds"
STARTUP_WARMUP_SECONDS = "StartupWarmupSeconds"
# Seconds, once per start of a model that compiles (MODEL_RUNTIME=compile), when every shape has compiled: from the
# model loaded, so the compile it runs after ready (on its eager forward meanwhile) is on the dashboard too.
STARTUP_COMPILE_SECONDS = "StartupCompileSeconds"

# Model pools (pool/), per pool and interval; the pool's name is the ModelName dimension. Each model's requests, errors
# and latency p95 are a log line of their own per interval (POOL_MODEL_FIELDS), never a metric or a dimension, so the
# metric count does not grow with the models (Logs Insights and Contributor Insights read them).
POOL_RESIDENT_MODELS = "PoolResidentModels"  # Count, models on the device at the interval's end
POOL_HIT_RATE = "PoolHitRate"  # Percent of requests whose model was on the device
POOL_LOADS = "PoolLoads"  # Count, loads (from host memory, local disk or S3)
POOL_LOAD_TIME = "PoolLoadTime"  # Milliseconds, per load (p95 in CloudWatch)
POOL_EVICTIONS = "PoolEvictions"  # Count, models moved off the device
POOL_FAILED_LOADS = "PoolFailedLoads"  # Count, loads refused (fetch, verification or probe check)
POOL_MODEL_MESSAGE = "pool model"  # the per-model line's message
POOL_MODEL_FIELDS = ("PoolModel", "PoolModelRequests", "PoolModelLatencyP95", "PoolModelErrors")

# LoRA adapters: the adapter-sync sidecar of an LLM service (adapters/), per task and poll; the base model is the
# ModelName dimension. Which adapter loaded, and how long it took, are properties of the same lines (never a dimension),
# so the metric count does not grow with the adapters.
ADAPTER_LOADS = "AdapterLoads"  # Count, adapters loaded into the server (added, moved, reloaded)
ADAPTER_LOAD_SECONDS = "AdapterLoadSeconds"  # Seconds, per load: the server's load call (files already verified)
ADAPTER_FAILED_LOADS = "AdapterFailedLoads"  # Count, loads refused or failed (each retried after its backoff)
ADAPTERS_REGISTERED = "AdaptersRegistered"  # Count, adapters the registry names
ADAPTERS_LOADED = "AdaptersLoaded"  # Count, adapters this task's server serves at their registered version
ADAPTER_METRIC_NAMES = (ADAPTER_LOADS, ADAPTER_LOAD_SECONDS, ADAPTER_FAILED_LOADS, ADAPTERS_REGISTERED, ADAPTERS_LOADED)

METRIC_NAMES = (
    REQUEST_LATENCY,
    QUEUE_WAIT,
    INFERENCE_TIME,
    BATCH_SIZE,
    QUEUE_DEPTH,
    REJECTED_REQUESTS,
    TIMED_OUT_REQUESTS,
    GPU_UTILIZATION,
    GPU_MEMORY_UTILIZATION,
    GPU_MEMORY_USED_MIB,
    MODEL_BUSY_PERCENT,
    CACHE_HITS,
    CACHE_MISSES,
    SHARED_CACHE_HITS,
    SHARED_CACHE_MISSES,
    SHARED_CACHE_ERRORS,
    SHARED_CACHE_SKIPPED,
    SHARED_CACHE_OVERSIZED,
    SHARED_CACHE_STORED,
    SHARED_CACHE_OPEN,
    SHARED_CACHE_LATENCY,
    STARTUP_SECONDS,
    STARTUP_FETCH_SECONDS,
    STARTUP_LOAD_SECONDS,
    STARTUP_WARMUP_SECONDS,
    STARTUP_COMPILE_SECONDS,
    POOL_RESIDENT_MODELS,
    POOL_HIT_RATE,
    POOL_LOADS,
    POOL_LOAD_TIME,
    POOL_EVICTIONS,
    POOL_FAILED_LOADS,
)
