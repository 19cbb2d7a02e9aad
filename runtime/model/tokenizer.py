"""The model's own tokenizer (transformers'), for text in: built from a GGUF file's metadata or from a
folder's tokenizer files. Presets with random weights have none; the text APIs then raise NoTokenizerError.

The tuner tokenizes traffic text in a separate process (`python -m runtime.model.tokenize`), so that its
own process never imports transformers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeAlias

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from runtime.model.source import TOKENIZER_FILES, SourceKind, brings_tokenizer, resolve_source

Tokenizer: TypeAlias = PreTrainedTokenizerBase
Message: TypeAlias = Mapping[str, str]  # {"role": ..., "content": ...}


class NoTokenizerError(ValueError):
    """Text was given (or asked for) but the model has no tokenizer, or no chat template; the message says which."""


def load_tokenizer(name: str) -> Tokenizer | None:
    """The tokenizer of the model `name` (a preset, .gguf file or folder, as `model.name` takes), or None."""
    source = resolve_source(name)
    if not brings_tokenizer(source):
        return None
    if source.kind is SourceKind.GGUF:
        return AutoTokenizer.from_pretrained(source.path.parent, gguf_file=source.path.name, local_files_only=True)
    return AutoTokenizer.from_pretrained(source.path, local_files_only=True)


def require_tokenizer(tokenizer: Tokenizer | None, model: str) -> Tokenizer:
    """`tokenizer`, or a NoTokenizerError that says why model `model` has none and what to pass instead."""
    if tokenizer is not None:
        return tokenizer
    why = "a preset with random weights" if resolve_source(model).kind is SourceKind.PRESET else \
        f"a folder without tokenizer files ({', '.join(TOKENIZER_FILES)})"
    raise NoTokenizerError(f"model {model!r} has no tokenizer ({why}): pass prompt_token_ids instead of text, "
                           "or use a model that has one (a .gguf file, a folder with tokenizer files, smollm2-135m)")


def encode_prompt(tokenizer: Tokenizer, prompt: str) -> list[int]:
    """Token ids of a text prompt, with the special tokens the tokenizer adds (a BOS, where it uses one)."""
    return list(tokenizer(prompt)["input_ids"])


def encode_chat(tokenizer: Tokenizer, conversation: Sequence[Message], add_generation_prompt: bool = True) -> list[int]:
    """Token ids of a conversation rendered by the model's chat template (which writes its own special tokens)."""
    if tokenizer.chat_template is None:
        raise NoTokenizerError(f"the tokenizer of {tokenizer.name_or_path!r} has no chat template")
    text = tokenizer.apply_chat_template(list(conversation), tokenize=False,
                                         add_generation_prompt=add_generation_prompt)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
