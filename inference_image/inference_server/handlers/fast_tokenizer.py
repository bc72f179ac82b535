"""The HTTP workers' tokenizer without transformers: transformers' own fast tokenizer (the `tokenizers` library
object it runs, as transformers configured it from the model's files), serialised by the model process and rebuilt
in each worker with `tokenizers` alone, so a worker imports neither transformers nor torch (about 2.4 s of CPU at
each worker's start, and 210 MiB of memory in every worker).

The model process loads transformers' AutoTokenizer for itself anyway. It serialises that tokenizer's backend,
rebuilds it as the workers will, and hands it to them only when both encode a set of probe texts (accents, CJK,
emoji, the tokenizer's own special and added tokens, empty and over-long texts) to the same ids
(``worker_tokenizer``). A slow (pure Python) tokenizer has no backend to serialise, and one that splits its special
tokens sets the backend per call: their workers load transformers' tokenizer, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

log = logging.getLogger(__name__)

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


def probe_texts(max_length: int, special_tokens: Sequence[str] = ()) -> list[str]:
    """Texts that exercise normalisation, pre-tokenisation, ``special_tokens`` and truncation at ``max_length``."""
    long_text = " ".join(f"word{i} ünïcödé 語" for i in range(2 * max_length))
    specials = [f"a{token}b {token} c" for token in special_tokens]
    return [*_PROBES, *specials, long_text, long_text[::-1]]


class FastTokenizer:
    """Token ids as ``AutoTokenizer(texts, truncation=True, max_length=max_length, padding=False)`` gives them:
    special tokens added, truncated at ``max_length`` on ``truncation_side``, no padding. ``serialized``: a
    tokenizer.json document (``Tokenizer.to_str()``)."""

    def __init__(self, serialized: str, max_length: int, truncation_side: str = "right") -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_str(serialized)
        self._tokenizer.no_padding()
        # transformers' own settings for truncation=True: longest_first, no stride.
        self._tokenizer.enable_truncation(max_length, stride=0, strategy="longest_first", direction=truncation_side)

    def encode(self, texts: list[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self._tokenizer.encode_batch(texts, add_special_tokens=True)]


def worker_tokenizer(
    tokenizer: Any, max_length: int, encode: Callable[[list[str]], list[list[int]]]
) -> dict[str, str] | None:
    """transformers' fast ``tokenizer`` serialised, with the truncation side FastTokenizer rebuilds it with; None
    (logged with why) where it cannot stand in for ``encode`` (the handler's own encoding with ``tokenizer``, at
    ``max_length``) in the workers."""
    reason = _why_not_shared(tokenizer)
    if reason is None:
        serialized = tokenizer.backend_tokenizer.to_str()
        side = str(getattr(tokenizer, "truncation_side", "right"))
        try:
            texts = probe_texts(max_length, _special_tokens(tokenizer))
            if FastTokenizer(serialized, max_length, side).encode(texts) == [list(ids) for ids in encode(texts)]:
                return {"json": serialized, "truncation_side": side}
            reason = "a probe text encodes to other ids"
        except Exception as exc:  # a document `tokenizers` cannot read back, or a probe one of them refuses
            reason = f"the probes failed: {exc!r}"
    log.info("the workers load transformers' tokenizer", extra={"reason": reason})
    return None


def _why_not_shared(tokenizer: Any) -> str | None:
    if not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "backend_tokenizer", None) is None:
        return "not a fast tokenizer"
    if getattr(tokenizer, "split_special_tokens", False):
        return "it splits special tokens (transformers sets that on the backend for every call)"
    return None


def _special_tokens(tokenizer: Any) -> list[str]:
    added = [str(getattr(token, "content", token)) for token in getattr(tokenizer, "added_tokens_decoder", {}).values()]
    return sorted(set(getattr(tokenizer, "all_special_tokens", [])) | set(added))
