"""A model folder `vllm serve` loads with random weights (`load_format: dummy`) in the shape of one of the runtime's
presets, with a tokenizer of the preset's vocabulary size, so vLLM streams text for token-id prompts.

    python -m experiments.vllm_model_dir llama-3-8b /tmp/vllm-llama-3-8b

The folder holds config.json (the preset's shape, bf16, its architecture) and a word-level tokenizer in which id
N is the word `<tN>`: every id of the vocabulary decodes to a non-empty piece of text, none is special (an EOS
skipped as special would stream an empty chunk, and the replay counts a token where text arrives). Why this and
not the real SmolLM2-135M: the figures must be those of the shape the pagetune-runtime study measured (Llama-3-8B),
on the same synthesized token ids; no weights leave a GPU host without a network, and the dummy loader needs none.
`skip_tokenizer_init` is no way out: vLLM then streams token ids without text, and the replay sees no token.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from runtime.model.presets import preset_config


def write_model_dir(preset: str, out: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    config = preset_config(preset)
    config.architectures = [f"{type(config).__name__.removesuffix('Config')}ForCausalLM"]
    out.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(out)
    written = json.loads((out / "config.json").read_text())  # both names: transformers 5 reads `dtype`, 4 `torch_dtype`
    (out / "config.json").write_text(json.dumps({**written, "dtype": "bfloat16", "torch_dtype": "bfloat16"}, indent=2))
    vocab = {f"<t{i}>": i for i in range(config.vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<t0>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=config.max_position_embeddings)
    fast.save_pretrained(out)
    assert len(fast) == config.vocab_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("preset", help="a runtime preset name, e.g. llama-3-8b")
    parser.add_argument("out", type=Path, help="the folder to write")
    args = parser.parse_args()
    write_model_dir(args.preset, args.out)
    print(f"{args.out}: config.json ({args.preset}), tokenizer.json")


if __name__ == "__main__":
    main()
