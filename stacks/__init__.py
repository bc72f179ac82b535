"""This repository's stacks: they compose the gpu_inference_constructs library per environment."""
