"""The runtime on a real GPU (marked `gpu`; skipped without CUDA): Triton vs torch path, CUDA graphs, sizing."""

from __future__ import annotations

import pytest
import torch

from experiments.graph_agreement import distributions, kl, shared_history_kls
from runtime import LLM, EngineConfig, LLMEngine, SamplingParams

pytestmark = pytest.mark.gpu
MODEL = "llama-3.2-1b"


def _prompts(n: int = 16) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(20, 400, (n,), generator=gen).tolist()
    return [torch.randint(4, 32000, (k,), generator=gen).tolist() for k in lengths]


def _greedy(llm: LLM, max_tokens: int = 48) -> list[list[int]]:
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(_prompts(), params, use_tqdm=False)]


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """Share of positions where both paths chose the same token."""
    same = sum(x == y for ra, rb in zip(a, b) for x, y in zip(ra, rb))
    return same / sum(len(r) for r in a)


@pytest.fixture(scope="module")
def torch_path() -> list[list[int]]:
    llm = LLM(model=MODEL, attention_backend="torch", gpu_memory_utilization=0.3, max_model_len=1024)
    out = _greedy(llm)
    del llm
    torch.cuda.empty_cache()
    return out


def _first_logprobs(backend: str) -> torch.Tensor:
    """Log-distributions of each prompt's first generated token: [n_prompts, V] (same history on both paths)."""
    config = EngineConfig.from_flat(MODEL, attention_backend=backend, gpu_memory_utilization=0.3, max_model_len=1024)
    engine = LLMEngine(config, record_logprobs=True)
    for i, prompt in enumerate(_prompts()):
        engine.add_request(str(i), prompt, SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True))
    while engine.has_unfinished_requests():
        engine.step()
    rows = torch.stack([engine.logprobs[str(i)][0] for i in range(len(_prompts()))])
    del engine
    torch.cuda.empty_cache()
    return rows


def test_triton_path_agrees_with_torch_path(torch_path):
    """Random weights give near-flat logits, so bf16 rounding flips greedy choices early: the agreement
    rate is reported, and the numerics are checked on the same history (the first token's distribution)."""
    llm = LLM(model=MODEL, attention_backend="triton", gpu_memory_utilization=0.3, max_model_len=1024)
    triton_tokens = _greedy(llm)
    del llm
    rate = agreement(torch_path, triton_tokens)
    ref, tri = _first_logprobs("torch"), _first_logprobs("triton")
    kl = float((ref.exp() * (ref - tri)).sum(-1).mean())
    print(f"\ntriton vs torch path ({MODEL} shape, bf16): greedy token agreement {rate:.3f}, "
          f"first-token agreement {sum(a[0] == b[0] for a, b in zip(torch_path, triton_tokens)) / 16:.3f}, "
          f"mean KL of the first next-token distribution {kl:.2e}")
    assert kl < 1e-2


def test_cuda_graphs_agree_with_eager(torch_path):
    eager = _greedy(LLM(model=MODEL, gpu_memory_utilization=0.3, max_model_len=1024, cuda_graphs=False))
    torch.cuda.empty_cache()
    graphs = _greedy(LLM(model=MODEL, gpu_memory_utilization=0.3, max_model_len=1024, cuda_graphs=True))
    rate = agreement(eager, graphs)
    print(f"\ngreedy token agreement, cuda graphs vs eager: {rate:.3f}")
    assert rate >= 0.8


def test_async_scheduling_gives_the_synchronous_tokens():
    """Greedy and seeded requests, CUDA graphs as served (decode graphs and piecewise): every decode step takes
    its tokens on the device. Lengths are fixed (ignore_eos), so both modes run the same batches: equal tokens."""
    params = [SamplingParams(max_tokens=48, ignore_eos=True, temperature=0.0 if i % 2 else 0.8, seed=i)
              for i in range(len(_prompts()))]
    outputs = []
    for overlapped in (False, True):
        llm = LLM(model=MODEL, gpu_memory_utilization=0.3, max_model_len=1024, async_scheduling=overlapped)
        outputs.append([o.outputs[0].token_ids for o in llm.generate(_prompts(), params, use_tqdm=False)])
        assert llm.engine.overlapped == overlapped
        del llm
        torch.cuda.empty_cache()
    print(f"\ngreedy and seeded token agreement, async scheduling vs sync: {agreement(*outputs):.3f}")
    assert outputs[1] == outputs[0]


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_async_scheduling_gives_the_synchronous_tokens_on_mixed_steps(cuda_graphs):
    """A 256-token budget: prompts in chunks beside decodes, so decode rows of mixed steps take their tokens on
    the device, eagerly and in piecewise graphs. Equal tokens, as above."""
    params = SamplingParams(max_tokens=24, ignore_eos=True, temperature=0.0)
    outputs = []
    for overlapped in (False, True):
        llm = LLM(model=MODEL, gpu_memory_utilization=0.3, max_model_len=1024, max_num_batched_tokens=256,
                  cuda_graphs=cuda_graphs, async_scheduling=overlapped)
        outputs.append([o.outputs[0].token_ids for o in llm.generate(_prompts(), params, use_tqdm=False)])
        paths = dict(llm.engine.runner.paths)
        del llm
        torch.cuda.empty_cache()
    print(f"\nmixed steps (graphs {cuda_graphs}): async vs sync token agreement {agreement(*outputs):.3f}; {paths}")
    assert outputs[1] == outputs[0]


def test_pool_is_sized_from_utilization_with_a_profiled_peak():
    llm = LLM(model=MODEL, gpu_memory_utilization=0.2, max_model_len=2048)
    plan = llm.engine.placement.memory
    total = torch.cuda.get_device_properties(0).total_memory
    assert plan.device_bytes == total and plan.budget_bytes == int(0.2 * total)
    assert plan.activation_bytes > 0 and plan.kv_bytes == plan.budget_bytes - plan.weight_bytes - plan.activation_bytes
    print(f"\nweights {plan.weight_bytes / 2**30:.2f} GiB, profiled activations {plan.activation_bytes / 2**30:.2f} "
          f"GiB, KV {plan.kv_bytes / 2**30:.2f} GiB = {plan.num_blocks} blocks")


@pytest.mark.parametrize("async_scheduling", [False, True])
@pytest.mark.parametrize("tiers", [False, True])
def test_piecewise_graphs_agree_with_eager(tiers, async_scheduling):
    """Mixed steps (a 256-token budget splits the prompts into chunks beside decodes) replay piecewise graphs;
    with tiers, decode steps too. Random weights' near-flat logits flip greedy choices on bf16 rounding (the
    graphs' padded GEMM shapes pick other cuBLAS kernels), after which the histories differ: the agreement rate
    is reported, and the numerics are judged where both paths share the history, as KL(eager || graphs) at every
    such position, against the KL between two different requests' distributions (what a wrong row would give)."""
    knobs = dict(async_scheduling=async_scheduling)
    if tiers:
        knobs["block_tiers"] = [{"max_len": 256, "block_size": 8, "share": 0.5},
                                {"max_len": 1024, "block_size": 32, "share": 0.5}]
    eager = distributions(MODEL, 256, cuda_graphs=False, **knobs)
    graphs = distributions(MODEL, 256, **knobs)
    padded = distributions(MODEL, 256, cuda_graphs=False, pad_multiple=64, **knobs)  # other GEMM shapes: noise floor
    kls, noise = shared_history_kls(eager, graphs), shared_history_kls(eager, padded)
    wrong_row = sum(kl(a[0], b[0]) for a, b in zip(eager.rows, eager.rows[1:])) / (len(eager.rows) - 1)
    print(f"\npiecewise graphs vs eager (tiers {tiers}, async {async_scheduling}): greedy token agreement "
          f"{agreement(eager.tokens, graphs.tokens):.3f}; KL on shared history mean {sum(kls) / len(kls):.2e}, max "
          f"{max(kls):.2e} over {len(kls)} positions; eager padded to 64 rows: agreement "
          f"{agreement(eager.tokens, padded.tokens):.3f}, KL max {max(noise):.2e}; another request's row "
          f"{wrong_row:.2e}; steps by path {graphs.paths}")
    assert graphs.paths.get("piecewise", 0) > 0
    assert len(kls) >= len(_prompts())
    assert max(kls) < wrong_row / 100


def test_graphs_give_the_tokens_of_eager_on_the_real_model():
    """SmolLM2-135M-Instruct (its GGUF file found installed or in the pagetune cache), bf16: full decode graphs and
    piecewise graphs (a 64-token budget puts prompt chunks beside decodes) against eager, token for token."""
    from runtime.model.presets import PACKAGED
    from runtime.model.source import find_packaged

    if find_packaged(PACKAGED["smollm2-135m"]) is None:
        pytest.skip("smollm2-135m is not installed or cached")
    questions = ["What is the capital of France?", "Name three primary colours.", "Write a haiku about rain.",
                 "How many legs does a spider have?", "Explain what a CPU does in one sentence.",
                 "What is 12 times 12?", "Give a synonym for happy.", "Why is the sky blue?"]
    chats = [[{"role": "user", "content": q}] for q in questions]
    params = SamplingParams(max_tokens=32, temperature=0.0)
    knobs = dict(max_model_len=2048, max_num_batched_tokens=64, gpu_memory_utilization=0.3)

    def run(**more) -> tuple[list[list[int]], dict[str, int]]:
        llm = LLM(model="smollm2-135m", **knobs, **more)
        tokens = [o.outputs[0].token_ids for o in llm.chat(chats, params, use_tqdm=False)]
        return tokens, dict(llm.engine.runner.paths)

    eager, _ = run(cuda_graphs=False)
    graphs, paths = run()
    print(f"\nsmollm2-135m, graphs vs eager: steps by path {paths}, "
          f"{sum(a == b for a, b in zip(eager, graphs))} of {len(eager)} outputs identical")
    assert paths.get("piecewise", 0) > 0 and paths.get("full graph", 0) > 0
    assert graphs == eager


def test_nothing_compiles_after_the_warm_up():
    """Steps of every composition after the start-up warm-up (1 to 40 sequences; chunks of one sequence and of
    many; contexts under and over split_kv_min_len; decode-only, mixed and eager steps: piecewise graphs only up to
    512 tokens here) compile no Triton kernel: a compile mid-serving stalls a step for a fraction of a second (a
    TTFT tail)."""
    from kernels.compile_log import CompileLog

    llm = LLM(model=MODEL, gpu_memory_utilization=0.3, max_model_len=4096, max_num_batched_tokens=2048,
              split_kv_min_len=512, max_cudagraph_capture_size=512)  # steps past 512 tokens run eagerly
    gen = torch.Generator().manual_seed(3)
    params = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)
    with CompileLog() as log:
        assert log.available
        for count, low, high in ((1, 5, 40), (3, 600, 1500), (16, 20, 300), (40, 50, 900), (2, 2500, 3900)):
            lengths = torch.randint(low, high, (count,), generator=gen).tolist()
            prompts = [torch.randint(4, 32000, (k,), generator=gen).tolist() for k in lengths]
            llm.generate(prompts, params, use_tqdm=False)
    assert log.compiles == []


def test_the_skinny_gemm_gives_the_tokens_of_cublas_on_the_real_model():
    """SmolLM2-135M-Instruct, bf16, eager: every projection's calls of up to 16 rows forced onto the skinny Triton
    GEMM (whatever the start-up timing picked) against cuBLAS throughout, token for token; and the timing's picks
    as an engine takes them, printed."""
    from kernels.skinny_gemm import CANDIDATES
    from runtime.model.linear import ROW_BUCKETS, Linear, SkinnyPicks
    from runtime.model.presets import PACKAGED
    from runtime.model.source import find_packaged

    if find_packaged(PACKAGED["smollm2-135m"]) is None:
        pytest.skip("smollm2-135m is not installed or cached")
    chats = [[{"role": "user", "content": q}] for q in
             ["What is the capital of France?", "Name three primary colours.", "Write a haiku about rain.",
              "What is 12 times 12?"]]
    params = SamplingParams(max_tokens=32, temperature=0.0)
    knobs = dict(max_model_len=2048, gpu_memory_utilization=0.3, cuda_graphs=False)
    cublas = LLM(model="smollm2-135m", skinny_gemm=False, **knobs)
    expected = [o.outputs[0].token_ids for o in cublas.chat(chats, params, use_tqdm=False)]
    del cublas
    forced = LLM(model="smollm2-135m", **knobs)
    print("\nstart-up picks:", [(t.out_features, t.in_features, t.rows, round(t.cublas_us, 1), round(t.best_us, 1),
                                 t.picked) for t in forced.engine.runner.skinny])
    layers = [m for m in forced.engine.runner.model.modules() if isinstance(m, Linear)]
    for layer in layers:
        layer.skinny = SkinnyPicks((CANDIDATES[0],) * len(ROW_BUCKETS))
    assert [o.outputs[0].token_ids for o in forced.chat(chats, params, use_tqdm=False)] == expected


def test_the_skinny_gemm_agrees_with_cublas_where_the_histories_are_shared(monkeypatch):
    """Random weights (llama-3.2-1b shape), graphs as served: every projection's calls of up to 16 rows forced onto
    the skinny Triton GEMM against cuBLAS throughout. As for the graphs, bf16 rounding flips near-flat greedy
    choices, so the numerics are judged on the shared history, against another request's row."""
    import runtime.runner
    from kernels.skinny_gemm import CANDIDATES
    from runtime.model.linear import ROW_BUCKETS, Linear, SkinnyPicks

    cublas = distributions(MODEL, 256, skinny_gemm=False)

    def force(model):
        for layer in model.modules():
            if isinstance(layer, Linear):
                layer.skinny = SkinnyPicks((CANDIDATES[0],) * len(ROW_BUCKETS))
        return []

    monkeypatch.setattr(runtime.runner, "pick_skinny", force)
    skinny = distributions(MODEL, 256)
    kls = shared_history_kls(cublas, skinny)
    wrong_row = sum(kl(a[0], b[0]) for a, b in zip(cublas.rows, cublas.rows[1:])) / (len(cublas.rows) - 1)
    print(f"\nskinny GEMM vs cuBLAS: greedy agreement {agreement(cublas.tokens, skinny.tokens):.3f}; KL on shared "
          f"history mean {sum(kls) / len(kls):.2e}, max {max(kls):.2e} over {len(kls)} positions; another request's "
          f"row {wrong_row:.2e}")
    assert len(kls) >= len(_prompts())
    assert max(kls) < wrong_row / 100
