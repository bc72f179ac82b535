"""The model-fetch init container's script: copy a model version's S3 prefix to scratch, then check every file
against the digests that publish wrote beside the manifest, side by side.

The copy (`aws s3 sync`, parallel ranged GETs) runs at the volume's rate. The check reads the files back, from the
page cache when the instance's memory holds them, so its cost is the hash's CPU. A file larger than one piece is
checked by the digests of its 16 MiB pieces (SHA256PIECES) and its size, so one large file is hashed on several
cores; a smaller file, or one from a version published before pieces, by its SHA256SUMS line. Up to CHECK_PARALLEL
hashes run at once, with OpenSSL's SHA-256 when the image has `openssl` (SHA-NI: 1.24 GB/s a core on the build
machine) and coreutils' `sha256sum` otherwise (0.22 GB/s a core there). docs/aws-facts.md has the figures.
"""

from __future__ import annotations

from .published_files import MANIFEST_FILE, SHA256PIECES_FILE, SHA256SUMS_FILE

CHECK_PARALLEL = 8


def fetch_script() -> str:
    """The script, for ``/bin/sh -c`` with MODEL_URI (ending in /), MODEL_DIR and TMPDIR set. A prefix without a
    manifest is copied unverified and says so; a manifest without its sums, a listed file that is missing, differs
    or is not its listed size, or a name that leaves MODEL_DIR stops the task before the server starts."""
    return (
        "set -eu; "
        'aws s3 sync --only-show-errors --no-progress "$MODEL_URI" "$MODEL_DIR"; '
        'if [ -z "$(ls -A "$MODEL_DIR")" ]; then echo "no model files under $MODEL_URI" >&2; exit 1; fi; '
        f'if [ ! -f "$MODEL_DIR/{MANIFEST_FILE}" ]; then '
        f'echo "$MODEL_URI has no {MANIFEST_FILE}: files not verified" >&2; exit 0; fi; '
        f'if [ ! -f "$MODEL_DIR/{SHA256SUMS_FILE}" ]; then '
        f'echo "$MODEL_URI has {MANIFEST_FILE} but no {SHA256SUMS_FILE}: '
        'publish it again with python -m inference_server.publish" >&2; exit 1; fi; '
        # digest: SHA-256 of stdin, in hex
        'if command -v openssl >/dev/null 2>&1; then digest() { openssl dgst -sha256 -r | cut -d " " -f 1; }; '
        'else digest() { sha256sum | cut -d " " -f 1; }; fi; '
        'failed="$TMPDIR/model-fetch-failed"; : > "$failed"; '
        'check() { if [ "$(digest < "$MODEL_DIR/$2" 2>/dev/null)" != "$1" ]; then '
        'echo "$2: FAILED" >> "$failed"; fi; }; '
        'check_piece() { if [ "$(dd if="$MODEL_DIR/$4" bs="$2" skip="$3" count=1 2>/dev/null | digest)" != "$1" ]; '
        'then echo "$4: FAILED (piece $3)" >> "$failed"; fi; }; '
        # wc -c's count compared as a number: some wc implementations pad it with spaces
        'check_size() { actual=$(wc -c < "$MODEL_DIR/$2" 2>/dev/null) || actual=-1; '
        'if ! [ "$actual" -eq "$1" ] 2>/dev/null; then echo "$2: FAILED (not $1 bytes)" >> "$failed"; fi; }; '
        "running=0; pause() { running=$((running + 1)); "
        f"if [ $((running % {CHECK_PARALLEL})) -eq 0 ]; then wait; fi; }}; "
        'outside() { case "/$1/" in */../*) echo "$1: FAILED (outside the model directory)" >> "$failed"; '
        "return 0;; esac; return 1; }; "
        'not_sha256() { if [ "${#1}" -ne 64 ]; then return 0; fi; '
        'case "$1" in *[!0-9a-f]*) return 0;; esac; return 1; }; '
        # A file with piece digests is checked piece by piece, CHECK_PARALLEL pieces at once, and by its size; its
        # lines must list every piece in order. Names are kept one per line (publish refuses newlines in them).
        'pieced="\n"; cur=""; next=0; need=0; cur_size=""; cur_bytes=""; '
        'finish() { if [ -n "$cur" ] && [ "$next" -ne "$need" ]; then '
        f'echo "$cur: FAILED ({SHA256PIECES_FILE} lists $next of its $need pieces)" >> "$failed"; fi; }}; '
        f'if [ -f "$MODEL_DIR/{SHA256PIECES_FILE}" ]; then '
        'while read -r sum size bytes index name || [ -n "$sum" ]; do '
        'case "$size $bytes $index" in *[!0-9\\ ]*|" "*|*"  "*|*" ") bad=1;; *) bad=0;; esac; '
        'if [ "$bad" -eq 1 ] || not_sha256 "$sum" || [ -z "$name" ] || [ "$bytes" -eq 0 ]; then '
        f'echo "$sum $size $bytes $index $name: FAILED (not a {SHA256PIECES_FILE} line)" >> "$failed"; continue; fi; '
        'if outside "$name"; then continue; fi; '
        'if [ "$index" -eq 0 ]; then finish; cur="$name"; cur_size="$size"; cur_bytes="$bytes"; next=0; '
        "need=$(( (size + bytes - 1) / bytes )); "
        'pieced="$pieced$name\n"; check_size "$size" "$name"; fi; '
        'if [ "$name" != "$cur" ] || [ "$index" -ne "$next" ]; then '
        f'echo "$name: FAILED (piece $index out of order in {SHA256PIECES_FILE})" >> "$failed"; continue; fi; '
        # every line of a file must give the size and piece bytes its first line gave
        'if [ "$size" != "$cur_size" ] || [ "$bytes" != "$cur_bytes" ]; then '
        f'echo "$name: FAILED (piece $index disagrees with piece 0 in {SHA256PIECES_FILE})" >> "$failed"; '
        "continue; fi; "
        "next=$((next + 1)); "
        'check_piece "$sum" "$bytes" "$index" "$name" & pause; '
        f'done < "$MODEL_DIR/{SHA256PIECES_FILE}"; finish; fi; '
        "listed=0; "
        'while read -r sum name || [ -n "$sum" ]; do '  # a last line without its newline is read too
        "name=${name#\\*}; "  # sha256sum's binary-mode marker
        'if not_sha256 "$sum" || [ -z "$name" ]; then '
        'echo "$sum $name: FAILED (not a SHA256SUMS line)" >> "$failed"; continue; fi; '
        'if outside "$name"; then continue; fi; '
        "listed=$((listed + 1)); "
        'case "$pieced" in *"\n$name\n"*) continue;; esac; '
        'check "$sum" "$name" & pause; '
        f'done < "$MODEL_DIR/{SHA256SUMS_FILE}"; '
        "wait; "
        f'if [ "$listed" -eq 0 ]; then echo "$MODEL_URI: {SHA256SUMS_FILE} lists no files" >&2; exit 1; fi; '
        'if [ -s "$failed" ]; then cat "$failed"; '
        f'echo "model files under $MODEL_URI do not match {SHA256SUMS_FILE}" >&2; exit 1; fi'
    )
