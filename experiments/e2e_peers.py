"""transformers peers for bench_e2e: static batched `generate` and continuous-batching `generate_batch`."""

from __future__ import annotations

import time

import torch
from transformers import AutoModelForCausalLM, GenerationConfig

from runtime.model.presets import preset_config


def load_hf(model: str):
    """The preset's shape as a transformers model with random bf16 weights, on the GPU."""
    config = preset_config(model)
    with torch.device("cuda"):
        hf = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    hf.generation_config.eos_token_id = None  # EOS ignored, as in the ANCHORS runs
    hf.generation_config.pad_token_id = 0
    return hf


@torch.inference_mode()
def hf_static(hf, prompts: list[list[int]], outs: list[int], batches: int, batch_size: int = 64) -> float:
    """Useful output tokens/s of left-padded static batches run to their longest output."""
    hf.generate(torch.ones(2, 8, dtype=torch.long, device="cuda"), max_new_tokens=4, do_sample=False)  # warm-up
    useful, seconds = 0, 0.0
    for b in range(batches):
        chunk = slice(b * batch_size, (b + 1) * batch_size)
        ps, os_ = prompts[chunk], outs[chunk]
        width = max(len(p) for p in ps)
        ids = torch.tensor([[0] * (width - len(p)) + p for p in ps], device="cuda")
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps], device="cuda")
        longest = max(os_)
        torch.cuda.synchronize()
        start = time.perf_counter()
        hf.generate(ids, attention_mask=mask, max_new_tokens=longest, min_new_tokens=longest, do_sample=False)
        torch.cuda.synchronize()
        seconds += time.perf_counter() - start
        useful += sum(os_)
    return useful / seconds


def hf_generate_batch(hf, prompts: list[list[int]], outs: list[int]) -> float | None:
    """Output tokens/s of transformers' continuous batching with its default config; None if it fails."""
    try:
        config = GenerationConfig(max_new_tokens=max(outs), do_sample=False, eos_token_id=None, pad_token_id=0)
        torch.cuda.synchronize()
        start = time.perf_counter()
        results = hf.generate_batch(inputs=prompts, generation_config=config)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        return sum(len(r.generated_tokens) for r in results.values()) / seconds
    except Exception as e:  # a peer failing must not lose the rest of the run
        print(f"generate_batch failed: {type(e).__name__}: {e}", flush=True)
        return None
