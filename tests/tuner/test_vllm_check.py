"""`python -m tuner.vllm_check`: an exported vllm.yaml as a one-point search space, written as it is."""

from __future__ import annotations

import pytest
import yaml

from runtime import EngineConfig
from tuner.config import load_app_config
from tuner.search.space import SearchSpace
from tuner.vllm import trial_file
from tuner.vllm_check import check_space, overrides

EXPORTED = {"model": "llama-3-8b", "max-num-seqs": 256, "no-enable-prefix-caching": True, "block-size": 32,
            "enable-chunked-prefill": True}


def test_each_key_is_a_vllm_knob_with_the_files_value_as_its_only_choice():
    assert check_space(EXPORTED) == {"params": {
        "max_num_seqs": {"path": "vllm.max_num_seqs", "type": "categorical", "choices": [256]},
        "enable_prefix_caching": {"path": "vllm.enable_prefix_caching", "type": "categorical", "choices": [False]},
        "block_size": {"path": "vllm.block_size", "type": "categorical", "choices": [32]},
        "enable_chunked_prefill": {"path": "vllm.enable_chunked_prefill", "type": "categorical", "choices": [True]}}}


def test_the_files_trial_writes_the_file_again_and_the_baseline_nothing(compose, tmp_path):
    rest = overrides_for(tmp_path)
    traffic = tmp_path / "t.jsonl"
    traffic.write_text("{}\n")
    app = load_app_config(compose(f"traffic={traffic}", *rest))  # the generated space found on the search path
    assert app.executor.vllm.only_args and app.tuner.n_trials == 2 and app.tuner.finalists == 1
    space = SearchSpace.from_config(app.search)
    assert space.searched == ("block_size", "enable_chunked_prefill", "max_num_seqs", "enable_prefix_caching")
    config = EngineConfig.from_mapping({"metadata": {"vllm": {"args": {"max_num_seqs": 256,
                                                                       "enable_prefix_caching": False}}}})
    assert trial_file(config, model="/m", deploy={}, only_args=True) == {
        "model": "/m", "max-num-seqs": 256, "no-enable-prefix-caching": True}


def overrides_for(tmp_path):
    path = tmp_path / "vllm.yaml"
    path.write_text(yaml.safe_dump(EXPORTED))
    return overrides(path, tmp_path / "conf", ["replay.max_requests=10"])


def test_the_overrides_add_the_generated_space_to_hydras_search_path(tmp_path):
    assert overrides_for(tmp_path) == [
        f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "search=vllm_check", "executor=vllm",
        "executor.vllm.only_args=true", "tuner.n_trials=2", "tuner.finalists=1", "replay.max_requests=10"]


@pytest.mark.parametrize(("exported", "message"), [
    ({"model": "m"}, "no engine argument besides the model: the file is vLLM's defaults already"),
    ({"cudagraph-capture-sizes": [1, 2]}, "cudagraph-capture-sizes: a list or mapping value cannot be a knob's "
                                          "choice; pass it in executor.vllm.args for both configs instead"),
])
def test_what_cannot_be_checked_is_refused(exported, message):
    with pytest.raises(ValueError) as e:
        check_space(exported)
    assert str(e.value) == message
