"""The engine: what runs in the one model process, which owns the device (fetch, load, warm-up, batching, the
model's end of the link). It never imports the front end."""
