"""Deterministic request texts: short, realistic sentences of 10 to 60 words, the same on every run."""

from __future__ import annotations

import random

_SENTENCES = (
    "The delivery arrived two days late and the box was crushed on one side.",
    "Customer support answered my question within minutes and solved the billing problem.",
    "I have been using this laptop for three months and the battery still lasts all day.",
    "The hotel room was clean, but the air conditioning made a loud noise all night.",
    "Please reset my password, the link in the last email has already expired.",
    "Our team shipped the new search feature after a long week of testing.",
    "The soup was cold when it reached the table and the waiter never came back.",
    "Can you tell me whether the blue jacket is available in a larger size?",
    "The quarterly report shows revenue growth in Europe and a small decline in Asia.",
    "Setting up the printer took an hour because the driver would not install.",
    "I love how quiet the new dishwasher is, I can barely hear it running.",
    "The train was cancelled without notice and nobody at the station could explain why.",
    "Thanks for the quick refund, I will definitely order from your shop again.",
    "The app crashes every time I try to upload a photo from my gallery.",
    "Heavy rain is expected across the northern region until late on Sunday evening.",
    "My order number is missing from the confirmation page, is that a problem?",
    "The course material is well structured and the exercises are genuinely useful.",
    "We would like to move our meeting to Thursday afternoon if that works for you.",
    "The screen is bright and sharp, although the speakers sound a little thin.",
    "After the latest update the settings menu takes several seconds to open.",
    "Staff were friendly and helpful, and the check-in took less than five minutes.",
    "The invoice lists a service we never ordered, please correct it and send a new one.",
    "Fresh bread, good coffee and a view of the harbour made the morning perfect.",
    "The instructions were confusing and two screws were missing from the package.",
)


def make_texts(count: int = 512, seed: int = 8, min_words: int = 10, max_words: int = 60) -> list[str]:
    """`count` texts, each a run of whole sentences cut to a word count drawn uniformly from the range."""
    rng = random.Random(seed)
    texts = []
    for _ in range(count):
        target = rng.randint(min_words, max_words)
        words: list[str] = []
        while len(words) < target:
            words.extend(rng.choice(_SENTENCES).split())
        text = " ".join(words[:target])
        texts.append(text if text.endswith((".", "?", "!")) else text.rstrip(",") + ".")
    return texts
