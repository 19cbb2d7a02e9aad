"""The deployment's shape (TP degree x replicas over `devices` GPUs) and the replicas' load balancer.

    shape.py     the shapes of `devices`, the degree as a search knob (`with_shape_knob`)
    balancer.py  `Deployment`: replicas behind a least-outstanding-requests balancer, for the replay
    sim.py       a simulated deployment of a config: its replicas on the GPU profile
"""

from tuner.deployment.balancer import Deployment, DeploymentClock
from tuner.deployment.shape import (
    SHAPE_KNOB,
    Shape,
    deployment_line,
    deployment_meta,
    shape_of,
    shapes,
    with_shape_knob,
)
from tuner.deployment.sim import deployment_label, deployment_notes, sim_deployment

__all__ = ["SHAPE_KNOB", "Deployment", "DeploymentClock", "Shape", "deployment_label", "deployment_line",
           "deployment_meta", "deployment_notes",
           "shape_of", "shapes", "sim_deployment", "with_shape_knob"]
