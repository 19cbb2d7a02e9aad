"""Text in and out: prompts and chats through the model's tokenizer, `.text` from the incremental detokenizer,
and clear errors where there is no tokenizer."""

from __future__ import annotations

import itertools

import pytest

from runtime import SamplingParams
from runtime.detokenizer import IncrementalDetokenizer
from runtime.model.tokenizer import NoTokenizerError, load_tokenizer
from runtime.outputs import CompletionOutput
from tests.factories import assert_drained, greedy, make_llm

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
MIXED = "Cats 🐱 love 東京 and naïve café ☕!"


def test_chat_answers_the_france_question(smollm2_llm):
    [out] = smollm2_llm.chat(FRANCE, SamplingParams(max_tokens=24, temperature=0.0), use_tqdm=False)
    assert out.outputs[0].text == "The capital of France is Paris."
    assert out.outputs[0].finish_reason == "stop"
    assert out.outputs[0].token_ids[-1] == 2  # <|im_end|>: in the ids, left out of the text


def test_text_equals_decode_of_the_token_ids(smollm2_llm):
    """Text prompts, a chat batch and n=2 sampled outputs: every `.text` is the full decode of its ids."""
    tokenizer = smollm2_llm.tokenizer
    outs = smollm2_llm.generate(["Once upon a time", "日本の首都は", "Three emoji about cats:"], greedy(12),
                                use_tqdm=False)
    outs += smollm2_llm.chat([FRANCE, [{"role": "user", "content": "Say hello in Chinese."}]],
                             SamplingParams(max_tokens=12, temperature=0.8, n=2, seed=3), use_tqdm=False)
    completions = [c for o in outs for c in o.outputs]
    assert len(completions) == 7
    for c in completions:
        assert c.text == tokenizer.decode(c.token_ids, skip_special_tokens=True)
    assert outs[0].prompt_token_ids == tokenizer("Once upon a time")["input_ids"]


def test_streamed_text_grows_to_the_full_decode(smollm2_llm):
    """CUMULATIVE outputs of a Japanese continuation (characters of several byte tokens): each step's text is
    the decode of its ids so far, less an unfinished character; the last is the full decode."""
    engine, tokenizer = smollm2_llm.engine, smollm2_llm.tokenizer
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    engine.add_request("stream", tokenizer("日本の首都は")["input_ids"], params)
    steps = []
    while engine.has_unfinished_requests():
        steps += [o.outputs[0] for o in engine.step() if o.request_id == "stream"]
    assert [len(s.token_ids) for s in steps] == list(range(1, 17))
    for s in steps:
        full = tokenizer.decode(s.token_ids, skip_special_tokens=True)
        assert s.text == (full if s.finish_reason else full.rstrip("\ufffd"))
    assert sum(s.text == prev.text for prev, s in itertools.pairwise(steps)) > 0  # some steps held a partial character


def test_incremental_detokenizer_on_multibyte_characters(smollm2_llm):
    """An emoji and a CJK character span several byte tokens: nothing shows until a character is whole."""
    tokenizer = smollm2_llm.tokenizer
    ids = tokenizer(MIXED, add_special_tokens=False)["input_ids"]
    detok = IncrementalDetokenizer(tokenizer)
    pieces = [detok.add([i]) for i in ids] + [detok.finish()]
    assert pieces == ["Cats", "", "", " 🐱", " love", "", "", " 東", "", "京", " and", " na", "ïve", " café", "", "",
                      " ☕", "!", ""]
    assert detok.text == "".join(pieces) == tokenizer.decode(ids) == MIXED


def test_detokenizer_finishing_inside_a_character_shows_it_as_decode_does(smollm2_llm):
    tokenizer = smollm2_llm.tokenizer
    ids = tokenizer(MIXED, add_special_tokens=False)["input_ids"][:3]  # "Cats" and 2 of the cat emoji's 3 tokens
    detok = IncrementalDetokenizer(tokenizer)
    assert [detok.add([i]) for i in ids] == ["Cats", "", ""]
    assert detok.finish() == " \ufffd"
    assert detok.text == tokenizer.decode(ids) == "Cats \ufffd"


def test_no_text_when_not_asked(smollm2_llm):
    prompt = smollm2_llm.tokenizer("Once upon a time")["input_ids"]
    [out] = smollm2_llm.generate(prompt_token_ids=[prompt], sampling_params=SamplingParams(
        max_tokens=4, temperature=0.0, detokenize=False), use_tqdm=False)
    assert out.outputs[0].text is None
    assert len(out.outputs[0].token_ids) == 4
    assert not smollm2_llm.engine._detokenizers  # nothing kept after the request


def test_preset_without_tokenizer_gives_token_ids_only_and_a_clear_error_for_text():
    llm = make_llm("tiny", device_memory_gb=0.1, max_model_len=256)
    assert llm.tokenizer is None and load_tokenizer("tiny") is None
    [out] = llm.generate([[5, 6, 7]], greedy(3), use_tqdm=False)
    [same] = llm.generate(prompt_token_ids=[[5, 6, 7]], sampling_params=greedy(3), use_tqdm=False)
    assert out.outputs[0].token_ids == same.outputs[0].token_ids and out.outputs[0].text is None
    message = ("model 'tiny' has no tokenizer (a preset with random weights): pass prompt_token_ids instead of "
               "text, or use a model that has one (a .gguf file, a folder with tokenizer files, smollm2-135m)")
    with pytest.raises(NoTokenizerError) as err:
        llm.generate(prompts=["What is the capital of France?"], use_tqdm=False)
    assert str(err.value) == message
    with pytest.raises(NoTokenizerError) as err:
        llm.chat(FRANCE, use_tqdm=False)
    assert str(err.value) == message


def test_folder_without_tokenizer_files_says_so(llama_dir):
    llm = make_llm(llama_dir)
    with pytest.raises(NoTokenizerError, match=r"has no tokenizer \(a folder without tokenizer files"):
        llm.generate("hello", use_tqdm=False)


def test_generate_takes_prompts_or_token_ids_not_both():
    llm = make_llm("tiny", device_memory_gb=0.1, max_model_len=256)
    with pytest.raises(ValueError, match=r"^pass exactly one of prompts and prompt_token_ids$"):
        llm.generate([[1, 2]], prompt_token_ids=[[1, 2]])
    with pytest.raises(ValueError, match=r"^pass exactly one of prompts and prompt_token_ids$"):
        llm.generate()


def _greedy_text(llm, prompt: str, max_tokens: int = 24, **stops) -> CompletionOutput:
    [out] = llm.generate([prompt], SamplingParams(max_tokens=max_tokens, temperature=0.0, **stops), use_tqdm=False)
    return out.outputs[0]


ONCE = "Once upon a time"
ONCE_TEXT = (", the city of Nova Haven was a thriving metropolis, with towering skyscrapers and bustling streets. "
             "But as the years went by")


def test_greedy_with_stop_strings_is_the_greedy_text_cut_at_the_first(smollm2_llm):
    """The text ends before the stop string that starts first (after it with include_stop_str_in_output), the ids
    end at the token that completed it, and the request's blocks are freed."""
    base = _greedy_text(smollm2_llm, ONCE)
    assert (base.text, base.finish_reason) == (ONCE_TEXT, "length")
    cut = _greedy_text(smollm2_llm, ONCE, stop=["metropolis", "Nova H"])
    assert (cut.text, cut.finish_reason) == (", the city of ", "stop")
    assert cut.token_ids == base.token_ids[:6]  # ", the city of Nova Haven": " Haven" completed "Nova H"
    kept = _greedy_text(smollm2_llm, ONCE, stop="Nova H", include_stop_str_in_output=True)
    assert kept.text == ", the city of Nova Haven"[: len(", the city of Nova H")]
    assert_drained(smollm2_llm)


def test_a_stop_token_ends_the_sample_and_stays_out_of_the_text(smollm2_llm):
    base = _greedy_text(smollm2_llm, ONCE)
    stop_id = base.token_ids[4]  # " Nova"
    out = _greedy_text(smollm2_llm, ONCE, stop_token_ids=[stop_id])
    assert (out.token_ids, out.finish_reason) == (base.token_ids[:5], "stop")
    assert out.text == ", the city of"
    kept = _greedy_text(smollm2_llm, ONCE, stop_token_ids=[stop_id], include_stop_str_in_output=True)
    assert kept.text == ", the city of Nova"


def test_stop_strings_need_a_tokenizer():
    llm = make_llm("tiny", device_memory_gb=0.1, max_model_len=256)
    with pytest.raises(ValueError, match=r"^stop strings \('x',\) need the model's tokenizer, and this engine has"):
        llm.generate([[1, 2]], SamplingParams(stop="x"), use_tqdm=False)


@pytest.mark.parametrize(("stops", "keep", "pieces", "text"), [
    (("</x>",), False, ["", "ab", "</s>c", "", ""], "ab</s>c"),  # "<", "</s" held back: no stop; then "</x>" cut
    (("</x>",), True, ["ab<", "/s", ">c</x>", "", ""], "ab</s>c</x>"),  # kept: nothing held back
    ((), False, ["ab<", "/s", ">c</x>", "", ""], "ab</s>c</x>"),
])
def test_a_stream_holds_back_what_a_stop_string_may_claim(smollm2_llm, stops, keep, pieces, text):
    """Pieces never show the start of a stop string that a later token completes; they join to the cut text."""
    tokenizer = smollm2_llm.tokenizer
    ids = [tokenizer.convert_tokens_to_ids(t) for t in ("ab", "<", "/", "s", ">")]
    detok = IncrementalDetokenizer(tokenizer, True, stops, keep)
    got = []
    for chunk in ([ids[0], ids[1]], [ids[2], ids[3]], [ids[4]] + tokenizer("c</x>")["input_ids"], [], []):
        detok.add(chunk)
        got.append(detok.next_piece(finished=False))
    got[-1] = detok.next_piece(finished=True)
    assert "".join(got) == detok.text
    assert (got, detok.text) == (pieces, text)
