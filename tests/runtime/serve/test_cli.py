"""`python -m runtime.serve`: a best.yaml tuned for another model or other hardware is refused unless --force."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runtime import ConfigError, EngineConfig
from runtime.serve.cli import deployment_problems, load_config

H200 = "1 x NVIDIA H200"


def _best(tmp_path: Path, model: str = "tiny", hardware: str = H200) -> Path:
    """A best.yaml as the tuner exports it: the runtime config with its provenance in `metadata`."""
    config = EngineConfig.from_mapping({"model": {"name": model}, "scheduler": {"max_num_seqs": 32},
                                        "metadata": {"model": model, "hardware": hardware, "study": "s"}})
    path = tmp_path / "best.yaml"
    path.write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    return path


def test_same_model_and_hardware_serve_as_tuned(tmp_path):
    config = load_config(str(_best(tmp_path)), None, False, lambda c: H200)
    assert (config.model.name, config.scheduler.max_num_seqs) == ("tiny", 32)


def test_other_hardware_or_model_is_refused_naming_both(tmp_path):
    path = _best(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_config(str(path), "tiny-qwen2", False, lambda c: "CPU x86_64 x 2 cores")
    assert str(e.value) == (
        f"{path}: refusing to serve it: it was tuned for model 'tiny', not 'tiny-qwen2'; it was tuned on "
        "'1 x NVIDIA H200', and this machine is 'CPU x86_64 x 2 cores'. Its knobs were measured there: tune again "
        "here (python -m tuner), or pass --force to serve it anyway")


def test_force_serves_it_anyway_with_the_model_asked_for(tmp_path):
    config = load_config(str(_best(tmp_path)), "tiny-qwen2", True, lambda c: "CPU")
    assert (config.model.name, config.scheduler.max_num_seqs) == ("tiny-qwen2", 32)


def test_a_hand_written_config_has_no_provenance_to_check():
    assert deployment_problems(EngineConfig(), None, "CPU") == []


def test_the_command_refuses_before_loading_anything(tmp_path):
    path = _best(tmp_path, hardware="8 x NVIDIA B200")
    done = subprocess.run([sys.executable, "-m", "runtime.serve", "--config", str(path), "--port", "0"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[3])
    assert done.returncode == 2
    assert done.stderr.startswith(f"error: {path}: refusing to serve it: it was tuned on '8 x NVIDIA B200'")
