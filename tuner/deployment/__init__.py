"""The deployment's shape (TP degree x replicas over `devices` GPUs) and the replicas' load balancer.

    shape.py              the shapes of `devices`, the degree as a search knob (`with_shape_knob`)
    least_outstanding.py  the balancer's rule (`LeastOutstanding`), for the simulated and the real replicas
    balancer.py           `Deployment`: simulated replicas behind that balancer, for the replay
    sim.py                a simulated deployment of a config: its replicas on the GPU profile

The real replicas (one server each) are `tuner.executors.replicas`'s.
"""

from tuner.deployment.balancer import Deployment, DeploymentClock
from tuner.deployment.least_outstanding import LeastOutstanding
from tuner.deployment.shape import (
    SHAPE_KNOB,
    Shape,
    deployment_line,
    deployment_meta,
    shape_of,
    shapes,
    shapes_line,
    with_shape_knob,
)
from tuner.deployment.sim import deployment_label, deployment_notes, sim_deployment

__all__ = ["SHAPE_KNOB", "Deployment", "DeploymentClock", "LeastOutstanding", "Shape", "deployment_label",
           "deployment_line", "deployment_meta", "deployment_notes", "shape_of", "shapes", "shapes_line",
           "sim_deployment", "with_shape_knob"]
