"""Our top-level `kernels` package must not be mistaken for Hugging Face's kernel-hub package."""

from __future__ import annotations

import importlib.util
import subprocess
import sys


def test_transformers_does_not_take_our_kernels_for_the_hub():
    from transformers.utils.import_utils import is_kernels_available

    spec = importlib.util.find_spec("kernels")
    assert spec is not None and spec.origin.endswith("kernels/__init__.py")  # ours is importable...
    assert is_kernels_available() is False  # ...and transformers does not treat it as the hub


def test_transformers_model_runs_beside_our_kernels():
    """A fresh interpreter with ours imported first: a transformers Llama still builds and generates. Seeded, and
    without an EOS (Llama's default id 2 would end a random model's generation early about one run in thirty)."""
    code = (
        "import kernels, torch\n"
        "torch.manual_seed(0)\n"
        "from transformers import LlamaConfig, LlamaForCausalLM\n"
        "from transformers.integrations import hub_kernels\n"
        "assert hub_kernels._kernels_enabled is False\n"
        "assert hub_kernels.LayerRepository.__module__ == 'transformers.integrations.hub_kernels'\n"
        "cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,"
        " num_attention_heads=2, num_key_value_heads=1, eos_token_id=None)\n"
        "m = LlamaForCausalLM(cfg).eval()\n"
        "out = m.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2, do_sample=False)\n"
        "print(out.shape[1])\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "5"
