"""Versioned registries in the model store: one JSON document naming what a consumer serves and the version of each,
changed whole by one conditional PutObject. A model pool's registry (pool/registry.py) and an LLM service's adapter
registry (adapters/registry.py) are two kinds of the same document.

- document.py: the document, its validation and its changes (kind-agnostic; a kind names its keys and prefix).
- s3.py: reading it (conditional GETs for polling) and changing it atomically in S3 (If-Match / If-None-Match).
"""
