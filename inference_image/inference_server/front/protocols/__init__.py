"""The protocols other servers speak, on the same service as /predict: the OpenAI embeddings API (/v1) and the
Open Inference Protocol v2 REST (/v2, KServe and Triton)."""
