"""Model pools: one server for many models, each loaded on its first request and kept while it is used.

- registry.py: which models (and versions) a pool serves: one JSON document in the model store.
- pool_settings.py: the pool's environment variables.
- store.py: getting a model version onto local disk (the bounded disk cache below host memory, above S3).
- loaded.py: a loaded model (its handler) and how a pool loads one (verified, probe-checked).
- scheduler.py: one inference thread, a queue per loaded model, batches taken from models in turn (fairness).
- resident.py: the pool itself: single-flight loads, the GPU memory and host memory budgets, LRU eviction, failed
  loads and their backoff, deadline admission that counts a pending load, registry changes.
- metrics.py: the pool's EMF documents (figures that do not grow with the model count).
- gate.py: what every request passes before its route (the API key, the drain, its span), as the single model's front.
- affinity.py, peers.py, peer_router.py: model affinity between the pool's tasks: which task owns a model, who the
  tasks are (a static list or DNS), and the one hop that sends a request to its model's owner.
- app.py / __main__.py: the HTTP routes (OpenAI, Open Inference Protocol, native) under /<pool>/, behind the shared
  result cache when there is one; the process, draining on SIGTERM as the single-model server does.
"""
