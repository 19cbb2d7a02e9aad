"""The deployment's shape: the degrees a model and a device count allow, the knob the search gets, replicas behind
a least-outstanding-requests balancer replayed side by side, and a trial's capacity that of the whole deployment."""

from __future__ import annotations

import pytest

from runtime import ConfigError, EngineConfig, VirtualClock, model_info, sim_engine
from tests.runtime.sim.sim_factories import tiny_profile, write_tiny_profile
from tests.tuner.executors.test_sim_executor import _job, _requests
from tuner.config import ParamConfig, SearchConfig
from tuner.deployment import Shape, deployment_line, deployment_meta, shapes, sim_deployment, with_shape_knob
from tuner.executors.sim import SimExecutor
from tuner.measure.replay import replay
from tuner.traffic import TrafficRequest

# SmolLM2-135M's heads, without reading its GGUF file
SMOLLM2 = model_info("tiny")._replace(name="smollm2-135m", num_heads=9, num_kv_heads=3, intermediate_size=1536)
CONFIG = EngineConfig.from_mapping({"model": {"name": "tiny"}, "cache": {"device_memory_gb": 0.05},
                                    "scheduler": {"max_model_len": 1024}})


def test_the_shapes_divide_the_devices_and_the_heads():
    assert shapes(4, model_info("llama-3-8b")) == (Shape(1, 4), Shape(2, 2), Shape(4, 1))
    assert shapes(8, model_info("tiny")) == (Shape(1, 8), Shape(2, 4))  # 2 KV heads
    assert shapes(2, SMOLLM2) == (Shape(1, 2),)  # 9 and 3 heads: 2 cannot split them


def test_the_search_gets_the_degree_as_a_knob_unless_there_is_no_choice_or_it_is_declared():
    search = SearchConfig()
    knob = with_shape_knob(search, 4, model_info("llama-3-8b")).params["tensor_parallel_size"]
    assert knob == ParamConfig(path="runtime.tensor_parallel_size", type="categorical", choices=[1, 2, 4])
    assert with_shape_knob(search, 1, model_info("llama-3-8b")) is search
    assert with_shape_knob(search, 2, SMOLLM2) is search
    declared = SearchConfig(params={"tp": ParamConfig(path="runtime.tensor_parallel_size", choices=[2])})
    assert with_shape_knob(declared, 4, model_info("llama-3-8b")) is declared


def test_the_exports_name_the_shape():
    tp2 = EngineConfig.from_flat("llama-3-8b", tensor_parallel_size=2)
    assert deployment_meta(tp2, 4) == {"devices": 4, "tensor_parallel_size": 2, "replicas": 2}
    assert deployment_meta(tp2, 1) is None
    assert deployment_line(tp2, 4).startswith("TP 2 x 2 replicas on 4 devices (tensor-parallel-size 2")
    with pytest.raises(ConfigError, match=r"^runtime.tensor_parallel_size: 2 does not divide devices \(3\)$"):
        deployment_meta(tp2, 3)


def _burst(n: int) -> list[TrafficRequest]:
    return [TrafficRequest(f"r{i}", 0.0, tuple(range(10, 10 + 40 + 8 * i)), 16, f"t:{i}") for i in range(n)]


def test_replicas_run_side_by_side_each_as_a_lone_engine_would():
    """A burst at t=0 over 2 replicas: requests 0, 2, 4 go to replica 0 and 1, 3, 5 to replica 1 (least outstanding,
    then the lower index), and every request finishes when it would on a lone engine given its replica's share."""
    profile = tiny_profile()
    deployment, clock = sim_deployment(CONFIG, profile, None, 2)
    both = {r.request_id: r for r in replay(deployment, clock, _burst(6)).records}
    for replica, ids in ((0, ["r0", "r2", "r4"]), (1, ["r1", "r3", "r5"])):
        alone_clock = VirtualClock()
        alone = replay(sim_engine(CONFIG, profile, alone_clock), alone_clock,
                       [r for r in _burst(6) if r.request_id in ids]).records
        assert {r.request_id: (r.first_token, r.finished) for r in alone} == {
            i: (both[i].first_token, both[i].finished) for i in ids}, replica


def test_the_balancer_sends_each_arrival_to_the_replica_with_the_fewest_outstanding():
    profile = tiny_profile()
    deployment, clock = sim_deployment(CONFIG, profile, None, 2)
    requests = [TrafficRequest("long", 0.0, tuple(range(10, 500)), 200, "t:0"),
                *[TrafficRequest(f"s{i}", 0.1 * (i + 1), (5, 6, 7), 2, f"t:{i + 1}") for i in range(3)]]
    replay(deployment, clock, requests)
    assert deployment.engines[0].totals.steps > deployment.engines[1].totals.steps  # "long" held replica 0
    assert deployment.placed == {"long": 0, "s0": 1, "s1": 1, "s2": 1}  # each short one done before the next
    both_busy = [TrafficRequest("a", 0.0, (5, 6, 7), 50, "t:0"), TrafficRequest("b", 0.0, (5, 6, 7), 50, "t:1"),
                 TrafficRequest("c", 0.001, (5, 6, 7), 2, "t:2")]
    replay(deployment, clock, both_busy)
    assert deployment.placed == {"a": 0, "b": 1, "c": 0}  # one outstanding each: the lower index


def test_a_two_device_trial_measures_the_whole_deployment(tmp_path):
    slow = {"bs16/auto/eager": (1e-2, 1e-4, 5e-9, 2.5e-4, 1e-7)}  # 2.5x the factory's: one replica saturates
    path = write_tiny_profile(tmp_path, coefficients=slow)
    one, two = (SimExecutor(path, devices=n).run(_job(), _requests(), lambda *_: None, lambda _: True, 60.0)
                for n in (1, 2))
    assert two.measurement.values[0] > 1.5 * one.measurement.values[0]  # two replicas sustain about twice the rate
