"""Whose store could not bind its port: a rank's process-group setup, or torchrun's agent.

c10d logs a port already in use (`[W socket.cpp:464] [c10d] The server socket has failed to
bind to [::]:29500 (errno: 98 - Address already in use)`, errors.py's AddressInUse) where a
TCPStore server starts, then raises through whoever created it; the traceback says whose it
was (its frames, outermost first; the bind lines come right before it, or its exception
line holds them):

* "process-group": a rank's init_process_group (distributed_c10d.py), its rendezvous
  handler (`_env_rendezvous_handler`, `_tcp_rendezvous_handler`) or `_create_c10d_store`
  (torch/distributed/rendezvous.py): only the rank that hosts the store starts a server there
  (rank 0 under env:// and tcp://; under torchrun's agent store no worker starts one);
* "launcher": torchrun's own (torch/distributed/run.py, launcher/api.py's launch_agent, the
  elastic agent or its rendezvous): the agent's store, no rank's.

The traceback's outermost such frame decides; a bind line waits for the next traceback of
its rank's lines within BIND_REACH lines (AddressInUse.setup).
"""

from __future__ import annotations

from healthcheck.parsers.torch_log.state import RankKey, TorchState

BIND_REACH = 64  # lines from a bind failure to the traceback that raised it
_LAUNCHER_FILES = ("/distributed/run.py", "/distributed/launcher/api.py", "/distributed/elastic/agent/",
                   "/distributed/elastic/rendezvous/", "/distributed/launch.py")
_SETUP_FUNCS = ("init_process_group", "_env_rendezvous_handler", "_tcp_rendezvous_handler", "_create_c10d_store")
_SETUP_FILES = ("/distributed/distributed_c10d.py", "/distributed/rendezvous.py")


def setup_of(path: str, func: str) -> str:
    """The setup one traceback frame belongs to ("" for any other frame)."""
    if path.endswith(("/bin/torchrun", "torchrun")) or any(f in path for f in _LAUNCHER_FILES):
        return "launcher"
    if func in _SETUP_FUNCS and path.endswith(_SETUP_FILES):
        return "process-group"
    return ""


def note_frame(state: TorchState, key: RankKey, path: str, func: str) -> None:
    """A frame of `key`'s open traceback: its setup, the outermost one kept, given to the
    bind failures that wait for it."""
    setup = setup_of(path, func)
    if not setup or key in state.setups:
        return
    if len(state.setups) < 4096:
        state.setups[key] = setup
    for index in state.pending_binds.pop(key, ()):
        state.amend("address_in_use", index, setup=setup)


def note_bind(state: TorchState, key: RankKey, index: int, line: int) -> None:
    """A bind failure read (fact `index`): its setup now, where the rank's open traceback
    has one (the exception line holds the bind's words), else when its traceback comes."""
    if index < 0:
        return
    if state.tracebacks.get(key) and key in state.setups:
        state.amend("address_in_use", index, setup=state.setups[key])
        return
    waiting = state.pending_binds.setdefault(key, [])
    if len(waiting) < 64:
        waiting.append(index)
    state.bind_lines[key] = line


def traceback_opened(state: TorchState, key: RankKey, line: int) -> None:
    """A new traceback of `key`: no setup yet; bind failures too far before it wait no more."""
    state.setups.pop(key, None)
    if line - state.bind_lines.get(key, line) > BIND_REACH:
        state.pending_binds.pop(key, None)


__all__ = ["BIND_REACH", "note_bind", "note_frame", "setup_of", "traceback_opened"]
