"""Ranks' stacks grouped the way LLNL STAT groups them: ranks whose stacks are identical
form one equivalence class, shown once with its rank range; small classes stand out.

"ranks 0-2,4-7 (7): all_reduce <- train_step (train.py:88)"
"rank 3 (1): load_batch (train.py:61) <- train_step (train.py:51)"    <- a singleton
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import msgspec

from healthcheck.parsers.py_spy import PySpyFrame, PySpyProcess, PySpyThread, collective, user_frame


def fold_ranks(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 4, 5, 7] -> "0-2,4-5,7"."""
    out: list[str] = []
    run: list[int] = []
    for r in sorted(set(ranks)):
        if run and r == run[-1] + 1:
            run.append(r)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [r]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def rank_words(ranks: Iterable[int]) -> str:
    """"rank 3" / "ranks 0-2,4"."""
    ranks = sorted(set(ranks))
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {fold_ranks(ranks)}"


class StackGroup(msgspec.Struct, frozen=True, omit_defaults=True):
    """One equivalence class of stacks."""

    ranks: tuple[int, ...]
    label: str  # "all_reduce <- train_step (train.py:88)"
    collective: str | None = None  # the c10d call the stack waits in; None: outside any
    where: str = ""  # the innermost user frame: "train.py:88"
    function: str = ""  # its function: "train_step"
    frames: tuple[str, ...] = ()  # the whole stack, innermost first: "name (file:line)"
    singleton: bool = False  # a class of its own while others are larger: look here first

    @property
    def text(self) -> str:
        return f"{rank_words(self.ranks)} ({len(self.ranks)}): {self.label}"


def _frame_text(f: PySpyFrame) -> str:
    return f"{f.name} ({f.file}:{f.line})" if f.line is not None else f"{f.name} ({f.file})"


def main_thread(proc: PySpyProcess) -> PySpyThread | None:
    """The thread that says what the rank is doing: the one inside a collective, else
    MainThread, else the first with frames."""
    with_frames = [t for t in proc.threads if t.frames]
    for t in with_frames:
        if t.in_collective and t.name == "MainThread":
            return t
    for t in with_frames:
        if t.name == "MainThread":
            return t
    for t in with_frames:
        if t.in_collective:
            return t
    return with_frames[0] if with_frames else None


_THREAD_WAITS = frozenset({"join", "_wait_for_tstate_lock", "get", "result", "wait", "acquire"})
_THREAD_FILES = ("threading.py", "queue.py", "concurrent/futures/")


def _waits_on_a_thread(thread: PySpyThread) -> bool:
    """The thread sits in a join, a queue's get, a future's result (the standard
    library's waits on another thread), outside any collective."""
    if thread.collective is not None:
        return False
    for f in thread.frames:
        if not f.library:
            return False
        if f.name.rsplit(".", 1)[-1] in _THREAD_WAITS and (f.file or f.filename).endswith(_THREAD_FILES):
            return True
    return False


def blocking_thread(proc: PySpyProcess, main: PySpyThread | None) -> PySpyThread | None:
    """The thread the main thread waits on: where main waits on a thread (join, a queue,
    a future), the first other thread with frames of the program; None otherwise."""
    if main is None or not _waits_on_a_thread(main):
        return None
    return next((t for t in proc.threads if t is not main and t.frames and user_frame(t.frames) is not None), None)


def _label(frames: tuple[PySpyFrame, ...]) -> tuple[str, str | None, PySpyFrame | None]:
    coll = collective(frames)
    users = [f for f in frames if not f.library]
    user = user_frame(frames)
    parts: list[str] = []
    if coll is not None:
        parts.append(coll)
        parts.extend(_frame_text(f) for f in users[:2])
    else:
        parts.extend(_frame_text(f) for f in (users[:2] or frames[:2]))
    return " <- ".join(parts) or "(no frames)", coll, user


def _group(ranks: tuple[int, ...], key: tuple[str, ...], thread: PySpyThread | None, blocker: PySpyThread | None,
           singleton: bool) -> StackGroup:
    """One class; where the main thread waits on another thread, that thread's stack is
    shown beside it and its program frame is where the rank is."""
    label, coll, user = _label(thread.frames if thread is not None else ())
    if blocker is not None:
        blocked_label, _, user = _label(blocker.frames)
        label += f" | waits on thread {blocker.name or blocker.id!r}: {blocked_label}"
    return StackGroup(ranks=ranks, label=label, collective=coll,
                      where=f"{user.file}:{user.line}" if user is not None and user.line is not None else "",
                      function=user.name if user is not None else "", frames=key[:32], singleton=singleton)


def group_stacks(stacks: Mapping[int, PySpyProcess]) -> list[StackGroup]:
    """rank -> py-spy process, grouped; the largest class first, singletons marked when
    there are at least two classes and three ranks."""
    classes: dict[tuple[str, ...], list[int]] = {}
    info: dict[tuple[str, ...], tuple[PySpyThread | None, PySpyThread | None]] = {}
    for rank, proc in stacks.items():
        thread = main_thread(proc)
        blocker = blocking_thread(proc, thread)
        key = tuple(_frame_text(f) for t in (thread, blocker) if t is not None for f in t.frames)
        classes.setdefault(key, []).append(rank)
        info.setdefault(key, (thread, blocker))
    several = len(classes) > 1 and len(stacks) >= 3
    groups = []
    for key, ranks in classes.items():
        thread, blocker = info[key]
        groups.append(_group(tuple(sorted(ranks)), key, thread, blocker, several and len(ranks) == 1))
    groups.sort(key=lambda g: (-len(g.ranks), g.ranks))
    return groups
