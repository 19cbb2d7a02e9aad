"""The guardrail's fixed probe set: real prompts when the model has a tokenizer, seeded ids otherwise.

With a tokenizer the set is chat turns through the model's own template, in two kinds:
    tasks   short factual and arithmetic questions with accepted answers (a case-insensitive whole-word
            match in the greedy answer); the task score counts them
    texts   open prompts whose continuations only token agreement and KL judge
The tasks are ones SmolLM2-135M-Instruct answers correctly in fp32 on CPU (experiments/quality_calibration.py
lists what it answered to the rest). Without a tokenizer (presets with random weights) the prompts are
seeded random ids, and there is no task score.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from tuner.config import QualityConfig

TASKS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("What is the capital of France?", ("Paris",)),
    ("What is the capital of Japan?", ("Tokyo",)),
    ("What is the capital of Germany?", ("Berlin",)),
    ("What is the capital of England?", ("London",)),
    ("What is the capital of Russia?", ("Moscow",)),
    ("What is the capital of China?", ("Beijing",)),
    ("What is the capital of Canada?", ("Ottawa",)),
    ("What is 2 + 2?", ("4", "four")),
    ("What is 6 times 7?", ("42", "forty-two")),
    ("What is 12 + 12?", ("24", "twenty-four")),
    ("How many hours are in a day?", ("24", "twenty-four")),
    ("What color is the sky on a clear day?", ("blue",)),
    ("Who wrote Romeo and Juliet?", ("Shakespeare",)),
    ("What is the chemical symbol for water?", ("H2O",)),
    ("What language is spoken in Brazil?", ("Portuguese",)),
    ("What is the opposite of hot?", ("cold",)),
    ("What is the boiling point of water in Celsius?", ("100",)),
    ("Who painted the Mona Lisa?", ("Leonardo", "da Vinci")),
    ("What gas do plants absorb from the air?", ("carbon dioxide", "CO2")),
)

TEXTS: tuple[str, ...] = (
    "Write a short story about a lighthouse keeper.",
    "Explain how a bicycle stays upright.",
    "Give three tips for writing clear emails.",
    "Describe the water cycle in simple words.",
    "What are the benefits of regular exercise?",
    "Summarize the plot of a detective novel you invent.",
    "How does a refrigerator keep food cold?",
    "List some fun things to do on a rainy day.",
)

Encoder = Callable[[str], list[int]]  # one user turn through the chat template -> token ids


class ProbePrompt(NamedTuple):
    token_ids: list[int]
    answers: tuple[str, ...] | None  # a task's accepted answers; None: judged by agreement and KL alone


def probe_prompts(cfg: QualityConfig, vocab_size: int, encode: Encoder | None) -> list[ProbePrompt]:
    """`cfg.probe_size` prompts: every task first, then open texts (real prompts); seeded ids without an encoder."""
    if encode is None:
        return _random_prompts(cfg.probe_size, vocab_size)
    chosen = [(q, a) for q, a in TASKS] + [(t, None) for t in TEXTS]
    return [ProbePrompt(encode(text), answers) for text, answers in chosen[: cfg.probe_size]]


def _random_prompts(n: int, vocab_size: int) -> list[ProbePrompt]:
    gen = torch.Generator().manual_seed(1234)
    lengths = torch.randint(16, 129, (n,), generator=gen).tolist()
    return [ProbePrompt(torch.randint(3, vocab_size, (k,), generator=gen).tolist(), None) for k in lengths]


def answered(text: str, answers: Sequence[str]) -> bool:
    """Whether `text` holds one of `answers` as a whole word (case-insensitive): "4" in "is 4." but not in "42"."""
    return any(re.search(rf"(?<![\w.]){re.escape(a)}(?!\w)", text, re.IGNORECASE) for a in answers)
