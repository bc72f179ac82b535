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
CACHE_HITS = "CacheHits"
CACHE_MISSES = "CacheMisses"
