"""Shared by the tuner tests: compose `conf/` the way `python -m tuner` does."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import DictConfig

from tuner.config import CONF_DIR


@pytest.fixture
def compose() -> Callable[..., DictConfig]:
    """compose(*overrides, with_hydra=False) -> the composed config of conf/config.yaml."""
    def _compose(*overrides: str, with_hydra: bool = False) -> DictConfig:
        with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
            return hydra_compose("config", overrides=list(overrides), return_hydra_config=with_hydra)
    return _compose
