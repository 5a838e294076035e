"""A stand-in for the deep sweep's torch transport (orchestrate/pairsweep/transport.py): every
torch test answered by a model, `model(config, plan, members) -> (samples, why)`, in place of
the transport the sweep would choose (choose.open_transport)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from healthcheck.orchestrate.pairsweep.transport import TorchOutcome


class ModelTransport:
    """A PairTransport whose tests `model` answers; `released` records the nodes released."""

    def __init__(self, config: Any, plan: Any, model: Callable[..., Any], released: list[str] | None = None) -> None:
        self.config = config
        self.plan = plan
        self.model = model
        self.released = released if released is not None else []

    def run(self, members: Sequence[str]) -> TorchOutcome:
        samples, why = self.model(self.config, self.plan, members)
        return TorchOutcome(samples, why)

    def release(self, node: str) -> None:
        self.released.append(node)

    def close(self) -> list[str]:
        return []


def torch_tests_by(model: Callable[..., Any], released: list[str] | None = None) -> Callable[..., ModelTransport]:
    """What to put in place of choose.open_transport: a ModelTransport answered by `model`."""
    return lambda config, plan, nodes: ModelTransport(config, plan, model, released)
