"""The model-fetch init container's script: copy a model version's S3 prefix to scratch, then check every file
against the SHA256SUMS that publish wrote beside the manifest, the files side by side.

The copy (`aws s3 sync`, parallel ranged GETs) runs at the volume's rate. The check reads the files back, from the
page cache when the instance's memory holds them, so its cost is the hash's CPU: one process per file, up to
CHECK_PARALLEL at once, with OpenSSL's SHA-256 when the image has `openssl` (SHA-NI: 1.24 GB/s a core on the build
machine) and coreutils' `sha256sum` otherwise (0.22 GB/s a core there). docs/aws-facts.md has the figures.
"""

from __future__ import annotations

from .model_store import MANIFEST_FILE, SHA256SUMS_FILE

CHECK_PARALLEL = 8


def fetch_script() -> str:
    """The script, for ``/bin/sh -c`` with MODEL_URI (ending in /), MODEL_DIR and TMPDIR set. A prefix without a
    manifest is copied unverified and says so; a manifest without its sums, a listed file that is missing or differs,
    or a name that leaves MODEL_DIR stops the task before the server starts."""
    return (
        "set -eu; "
        'aws s3 sync --only-show-errors --no-progress "$MODEL_URI" "$MODEL_DIR"; '
        'if [ -z "$(ls -A "$MODEL_DIR")" ]; then echo "no model files under $MODEL_URI" >&2; exit 1; fi; '
        f'if [ ! -f "$MODEL_DIR/{MANIFEST_FILE}" ]; then echo "$MODEL_URI has no {MANIFEST_FILE}: files not verified" >&2; exit 0; fi; '
        f'if [ ! -f "$MODEL_DIR/{SHA256SUMS_FILE}" ]; then echo "$MODEL_URI has {MANIFEST_FILE} but no {SHA256SUMS_FILE}: '
        'publish it again with python -m inference_server.publish" >&2; exit 1; fi; '
        'if command -v openssl >/dev/null 2>&1; then digest() { openssl dgst -sha256 -r < "$1" | cut -d " " -f 1; }; '
        'else digest() { sha256sum < "$1" | cut -d " " -f 1; }; fi; '
        'failed="$TMPDIR/model-fetch-failed"; : > "$failed"; '
        'check() { if [ "$(digest "$MODEL_DIR/$2" 2>/dev/null)" != "$1" ]; then echo "$2: FAILED" >> "$failed"; fi; }; '
        "listed=0; "
        'while read -r sum name || [ -n "$sum" ]; do '  # a last line without its newline is read too
        'name=${name#\\*}; '  # sha256sum's binary-mode marker
        'if [ "${#sum}" -ne 64 ] || [ -z "$name" ]; then echo "$sum $name: FAILED (not a SHA256SUMS line)" >> "$failed"; continue; fi; '
        'case "$sum" in *[!0-9a-f]*) echo "$name: FAILED (not a SHA-256)" >> "$failed"; continue;; esac; '
        'case "/$name/" in */../*) echo "$name: FAILED (outside the model directory)" >> "$failed"; continue;; esac; '
        'check "$sum" "$name" & '
        f'listed=$((listed + 1)); if [ $((listed % {CHECK_PARALLEL})) -eq 0 ]; then wait; fi; '
        f'done < "$MODEL_DIR/{SHA256SUMS_FILE}"; '
        "wait; "
        f'if [ "$listed" -eq 0 ]; then echo "$MODEL_URI: {SHA256SUMS_FILE} lists no files" >&2; exit 1; fi; '
        f'if [ -s "$failed" ]; then cat "$failed"; echo "model files under $MODEL_URI do not match {SHA256SUMS_FILE}" >&2; exit 1; fi'
    )
