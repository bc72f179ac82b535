"""The front end: what runs in each HTTP worker process (the app, its front door, the protocols, admission and the
worker's end of the link to the model process). It never imports the engine."""
