"""The figures the load-step timeline (timeline.py) adds up, each measured here, AWS-documented (with its source) or
estimated, and the phase they make."""

from __future__ import annotations

from dataclasses import dataclass

MEASURED, DOCUMENTED, ESTIMATED = "measured here", "AWS-documented", "estimated"
MIB = 1024 * 1024

# The latest `python -m bench.startup --repeats 3` on the 2-core build machine (2026-12-05 07:23 UTC, load average 1.1;
# the run before, 2026-12-04 at load average 10-12, gave 38.0 s): our server's median start-to-ready and, within that
# run, model fetched -> model loaded and the warm-up before ready.
LATEST_STARTUP = {
    "ours_median_s": 5.88,
    "bare_median_s": 6.07,
    "load_s": 3.53,
    "warmup_s": 0.15,
    "command": "python -m bench.startup --repeats 3",
}
# The latest `python -m bench.startup --compile` (2026-12-05 19:2x UTC, load average 1.2, MAX_BATCH_SIZE 4) of a runtime
# "compile" model, ready on its eager forward, starting with the compile cache its version's first task saved: model
# fetched -> model loaded (restoring the cache within it), the warm-up before ready, and when every shape had compiled
# (from the start; the first task, with no cache, and this one).
LATEST_COMPILE_STARTUP = {
    "cached_load_s": 3.18,
    "restore_s": 0.14,
    "cached_warmup_s": 0.12,
    "cached_compiled_s": 29.8,
    "first_compiled_s": 110.5,
    "command": "python -m bench.startup --compile",
}
# vLLM's own start (its image, not our server): torch.compile and CUDA-graph capture, 54 s without its cache and 7 s
# with it (issue 22's anchor, vLLM's published figures), and the load from the page cache (an estimate).
VLLM_COMPILE_S, VLLM_CACHED_COMPILE_S = 54.0, 7.0
VLLM_LOAD_GB_S = 2.0
GP3_BASELINE_MIB_S = 125  # gp3 without provisioned throughput
GP3_MAX_MIB_S = 1000
STREAMER_GIB_S = 3.5  # Run:ai Model Streamer, Llama-3-8B from S3 on g5.12xlarge (issue 22's anchor)
IMAGE_GB = 8.0  # a CUDA PyTorch runtime image, compressed layers (estimate; see the Dockerfile's base)
# The images a task pulls beside the server's, compressed (estimates of their order, not measured here: no Docker):
# the metrics and traces collector every task runs (the CloudWatch agent, or the ADOT collector), FireLens's AWS for
# Fluent Bit where the environment routes logs through it, and the AWS CLI of the init containers (the LLM presets').
SIDECAR_IMAGE_GB = {"collector": 0.25, "log router": 0.1, "fetcher": 0.15}
ECR_PULL_MB_S = 60.0  # pull and extract together, one image, estimate
AMI_CACHED_START_S = 5.0  # the images already on the AMI's snapshot (see the image pull phase's source)
# A stopped instance of the warm pool started and booted: the launch's boot (60 s, the "instance launch" phase) without
# the first boot's work; AWS put a warm-pool instance's start at "as low as 30 seconds" (EC2 Auto Scaling warm pools'
# launch, 2021, as InfoQ reported it), and the GPU AMI's driver load is not in that figure: an estimate.
WARM_START_S = 40.0
GOAL_S = 180.0  # issue 44: a task that needs a new instance serves within three minutes of a load step (prod)
# `head -c 2G /dev/zero > f; time sha256sum f` on the build machine (coreutils 9.1): 2 GiB in 9.5 s (`openssl dgst
# -sha256 f`, SHA-NI: 1.74 s). The fetcher's check hashes each 16 MiB piece SHA256PIECES lists as a process of its
# own, CHECK_PARALLEL at once (model_fetch.py), so a model's size, not its largest file, sets the check: the aws-cli
# fetcher image is counted with sha256sum.
SHA256SUM_GB_S = 0.225
# The bundled server's fetch (inference_server.artifacts.DOWNLOAD_WORKERS ranged GETs at once). One S3 connection
# carries on the order of 80-100 MB/s (reported by users, e.g. gitlab-runner MR 6473; AWS documents only "use
# concurrent connections" and 8-16 MB ranges); an estimate.
PIECE_FETCH_CONNECTIONS = 16
S3_CONNECTION_MB_S = 90.0


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    basis: str  # MEASURED, DOCUMENTED or ESTIMATED
    source: str
