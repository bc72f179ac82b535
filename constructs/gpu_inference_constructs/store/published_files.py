"""The files ``python -m inference_server.publish`` writes beside a model version's files (the server's manifest module
says the same): named here, without aws_cdk, for the bucket, the fetch script and the sizing advisor alike."""

MANIFEST_FILE = "manifest.json"
SHA256SUMS_FILE = "SHA256SUMS"
SHA256PIECES_FILE = "SHA256PIECES"
