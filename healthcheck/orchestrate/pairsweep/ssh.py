"""`SshTransport`: a torch test started per test over hc's own SSH (`bandwidth.pairs.launcher:
ssh` with `persistent_workers: false`, or where a member's hc has no `bw serve`): `hc bw
allreduce` on every member at once, each told its rank by torchrun's variables (RANK,
WORLD_SIZE, MASTER_ADDR/PORT); the first member is the rendezvous, at the address SSH
connects to. Each member's session has the test's timeout; one that fails is named."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from healthcheck.orchestrate.pairsweep.plan import PairPlan, node_address, worker_argv
from healthcheck.orchestrate.pairsweep.transport import TorchOutcome, samples_from_json
from healthcheck.runners.ssh import SshConnection, SshError

if TYPE_CHECKING:
    from healthcheck.core.config import Config


class SshTransport:
    """Every torch test of a sweep as `hc bw allreduce` per member over hc's own SSH."""

    def __init__(self, config: Config, plan: PairPlan) -> None:
        self.config = config
        self.plan = plan

    def run(self, members: Sequence[str]) -> TorchOutcome:
        plan, settings = self.plan, self.config.main.ssh
        try:
            master = node_address(self.config, members[0])
        except SshError as exc:
            return TorchOutcome(None, exc.message)
        argv = worker_argv(settings.remote_hc, plan, master)
        outputs: dict[int, Any] = {}

        def member(rank: int, node: str) -> None:
            env = {"RANK": str(rank), "WORLD_SIZE": str(len(members)), "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                   "MASTER_ADDR": master, "MASTER_PORT": str(plan.pairs.port), **plan.torch.env}
            conn = SshConnection(node, settings)
            try:
                conn.connect()
                outputs[rank] = conn.run(argv, timeout_s=plan.pairs.timeout_s, env=env)
            except SshError as exc:
                outputs[rank] = exc.message
            except Exception as exc:  # one member's surprise is this test's ERROR, not the sweep's end
                outputs[rank] = f"{type(exc).__name__}: {exc}"
            finally:
                conn.close()

        threads = [threading.Thread(target=member, args=(i, n), daemon=True) for i, n in enumerate(members)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(plan.pairs.timeout_s + settings.connect_timeout_s + 10)
        return _outcome(outputs, members)

    def release(self, node: str) -> None:
        """Nothing is held between tests: each test's sessions end with it."""

    def close(self) -> list[str]:
        return []


def _outcome(outputs: dict[int, Any], members: Sequence[str]) -> TorchOutcome:
    """Rank 0's samples with each member's failure, or None and why."""
    first = outputs.get(0)
    if first is None or isinstance(first, str):
        return TorchOutcome(None, f"{members[0]}: {first or 'no result'}")
    problems = [f"{members[r]}: {o if isinstance(o, str) else (o.stderr or o.stdout).strip()[-300:]}"
                for r, o in sorted(outputs.items()) if isinstance(o, str) or not o.ok]
    samples = samples_from_json(first.stdout)
    if samples is None:
        return TorchOutcome(None, "; ".join(problems) or "the torch sweep printed no result")
    if problems and not samples:
        return TorchOutcome(None, "; ".join(problems))
    return TorchOutcome(samples, "; ".join(problems))
