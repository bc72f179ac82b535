"""The HTTP workers' tokenizer without transformers: transformers' own fast tokenizer (the `tokenizers` library
object it runs, as transformers configured it from the model's files) saved by the model process and loaded by each
worker with `tokenizers` alone, so a worker imports neither transformers nor torch (about 2.4 s of CPU at each
worker's start, and 210 MiB of memory in every worker).

The model process loads transformers' AutoTokenizer for itself anyway. It saves that tokenizer's backend, loads the
file back as the workers will, and hands it to them only when both encode a set of probe texts (accents, CJK, emoji,
special-token strings, empty and over-long texts) to the same ids (``worker_tokenizer``). A slow (pure Python)
tokenizer has no backend to save, and a tokenizer from the artifact's own code (trust_remote_code) may encode in
Python what no probe shows: their workers load transformers' tokenizer, as before.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

_PROBES = (
    "warm up",
    "readiness probe",
    "The quick brown fox jumps over the lazy dog.",
    "HELLO World!!  two  spaces,\ta tab\nand a newline",
    "naïve café résumé Zürich São Paulo Ångström",
    "日本語のテキスト、中文文本，한국어 텍스트",
    "emoji 🙂🚀 and symbols © ® ™ € ½ → ≤",
    "[CLS] [SEP] [MASK] [PAD] [UNK] <s> </s> <pad> <mask> <unk> <|endoftext|>",
    "https://example.com/a?b=c&d=e user@example.com 3.14159 1,000,000 don't can't",
    "",
    "   ",
)


def probe_texts(max_length: int) -> list[str]:
    """Texts that exercise normalisation, pre-tokenisation, special tokens and truncation at ``max_length``."""
    long_text = " ".join(f"word{i} ünïcödé 語" for i in range(2 * max_length))
    return [*_PROBES, long_text, long_text[::-1]]


class FastTokenizer:
    """Token ids as ``AutoTokenizer(texts, truncation=True, max_length=max_length, padding=False)`` gives them:
    special tokens added, truncated at ``max_length`` on ``truncation_side``, no padding."""

    def __init__(self, path: Path, max_length: int, truncation_side: str = "right") -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(path))
        self._tokenizer.no_padding()
        # transformers' own settings for truncation=True: longest_first, no stride.
        self._tokenizer.enable_truncation(max_length, stride=0, strategy="longest_first", direction=truncation_side)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self._tokenizer.encode_batch(texts, add_special_tokens=True)]


def worker_tokenizer(tokenizer: Any, max_length: int, directory: str | None = None) -> dict[str, str] | None:
    """Save transformers' fast ``tokenizer`` (its backend, as transformers configured it) to a file in ``directory``
    (default: the temporary directory) and return the settings FastTokenizer reads it with, or None (and no file):
    not a fast tokenizer, or one whose file, loaded back, encodes a probe text otherwise."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not getattr(tokenizer, "is_fast", False) or backend is None:
        return None
    side = str(getattr(tokenizer, "truncation_side", "right"))
    handle, name = tempfile.mkstemp(prefix="worker-tokenizer-", suffix=".json", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(backend.to_str())
        texts = probe_texts(max_length)
        expected = tokenizer(texts, truncation=True, max_length=max_length, padding=False,
                             return_attention_mask=False, return_token_type_ids=False)["input_ids"]
        if FastTokenizer(Path(name), max_length, side).encode(texts) == [list(ids) for ids in expected]:
            return {"file": name, "truncation_side": side}
    except Exception:  # a backend `tokenizers` cannot read back, or a probe one of them refuses
        pass
    os.unlink(name)
    return None
