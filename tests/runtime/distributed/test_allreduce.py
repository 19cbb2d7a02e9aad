"""An all-reduce's cost measured (gloo, two CPU ranks) and written into a GPU profile for the simulator."""

from __future__ import annotations

import pytest

from runtime.distributed.allreduce import fit_line, main
from runtime.sim import load_profile
from tests.runtime.sim.sim_factories import write_tiny_profile


def test_the_line_through_the_medians():
    assert fit_line((0, 1000), [1e-5, 3e-5]) == pytest.approx((1e-5, 2e-8), rel=1e-9)
    assert fit_line((0, 1000), [3e-5, 1e-5]) == (pytest.approx(3e-5), 0.0)  # never a negative cost


@pytest.mark.slow
def test_gloo_allreduce_is_measured_into_the_profile(tmp_path):
    path = write_tiny_profile(tmp_path, device_type="cpu")
    assert main([str(path), "--degrees", "2"]) == 0
    cost = load_profile(path).allreduce_cost(2)
    assert cost.measured and cost.latency_s > 0 and cost.s_per_byte > 0
