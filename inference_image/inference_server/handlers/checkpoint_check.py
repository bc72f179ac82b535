"""Is this the model its task needs? Checked by the built-in text handlers' load, in the model process and at
publish: transformers loads a checkpoint that lacks weights of the task's model class with those weights newly
initialised at random, and only logs it. For text-classification every weight of the class counts (BERT's classifier
reads its pooler's output); for text-embedding every weight but the pooler's (the embedding is the mean of the last
hidden state). A classifier also needs named labels: config.json's id2label empty, or transformers' placeholders
LABEL_0.. (what it writes for a head nobody trained or named), is refused.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any


class ModelCheckError(Exception):
    """The model cannot serve its task (a head or labels missing), or does not answer as it did at publish."""


# -- the checkpoint --------------------------------------------------------------------------------------------------


def check_checkpoint(
    task: str, model_dir: Path, config: Any, missing_keys: Collection[str] | None = None, base_prefix: str = ""
) -> None:
    """Refuse (ModelCheckError) a checkpoint that lacks what `task` needs. missing_keys: transformers' loading info
    (None where no torch weights were loaded: the labels alone are checked); base_prefix: the model class's
    base_model_prefix, which the body's keys start with."""
    fatal = sorted(k for k in missing_keys or () if task == "text-classification" or not _is_pooler(k))
    problems = (
        [
            f"its weights lack {', '.join(fatal)} (transformers would initialise them at random, so every "
            f"answer would be noise)"
        ]
        if fatal
        else []
    )
    labels = _label_problem(config) if task == "text-classification" else None
    problems += [labels] if labels else []
    if problems:
        raise ModelCheckError(
            f"{model_dir} cannot serve {task}: {'; '.join(problems)}. "
            f"{_fix(task, fatal, base_prefix, labels_only=not fatal)}."
        )


def _is_pooler(key: str) -> bool:
    return "pooler" in key.split(".")


def _label_problem(config: Any) -> str | None:
    labels = [str(label) for _, label in sorted((getattr(config, "id2label", None) or {}).items())]
    if not labels:
        return "config.json's id2label is empty, so it has no labels to answer with"
    if labels == [f"LABEL_{i}" for i in range(len(labels))]:
        return (
            f"config.json's id2label holds only transformers' placeholder names ({', '.join(labels)}), what it "
            f"writes for a classification head nobody trained or named"
        )
    return None


def _fix(task: str, fatal: list[str], base_prefix: str, *, labels_only: bool) -> str:
    fine_tune = (
        "fine-tune a classification head on labelled data (transformers' AutoModelForSequenceClassification "
        "and Trainer), name its labels in config.json's id2label and label2id, save_pretrained it and publish "
        "that directory with --task text-classification"
    )
    if task != "text-classification":
        return (
            "The checkpoint does not hold the model its config.json describes (architectures, model_type): "
            "publish the directory the model was saved to with save_pretrained"
        )
    if labels_only:
        return (
            'If the head is trained, name its labels in config.json\'s id2label and label2id (e.g. "id2label": '
            f'{{"0": "negative", "1": "positive"}}) and publish it again; if it is not, {fine_tune}'
        )
    if all(not k.startswith(f"{base_prefix}.") or _is_pooler(k) for k in fatal):
        return (
            "The rest of the checkpoint is complete, a model without a classification head (a sentence-embedding "
            "model, say): serve it as text-embedding (MODEL_TASK=text-embedding, or publish it with --task "
            f"text-embedding), or, to classify, {fine_tune}"
        )
    return (
        "The checkpoint's body is incomplete too: it is not a classifier of its config.json's architecture; "
        f"{fine_tune}"
    )
