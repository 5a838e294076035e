"""The lines a table or tree parser reads, numbered, so it can count the ones it did not.

`lines.mended_lines` and `lines.pasted_lines` hand the table and tree parsers (ibstat,
perfquery, scontrol, nvidia-smi topo, ...) each line's text alone; a parser that counts
the lines none of its parts read (`lines.UnrecognizedLines`: evidence to show, never a
reason to refuse a file whose known facts are there) needs each line's number too: its
sample names the line, and `hc parse --explain` marks it `not read`.

`mended_numbered` gives mended_lines' very lines (the same mending, the same one-task
label taken off) as `Line`s with their numbers; `note_unread` counts a line of a parser
that reads `pasted_lines` (whose index is its number less one), its prompts and command
echo left out as `read_lines` leaves them. Both belong in lines.py (`mended_lines`
returning `Line`s); they are here while another change holds that file.
"""

from __future__ import annotations

import msgspec

from healthcheck.parsers.lines import (
    Line,
    UnrecognizedLines,
    ends_mid_line,
    is_command_echo,
    is_prompt,
    mended_lines,
    read_lines,
    without_cut_end,
)


def mended_numbered(text: str, *, one_task: bool = True, cut_end: bool = False) -> list[Line]:
    """`mended_lines(text, one_task=...)` as `Line`s: each its number, its text mended.
    `cut_end`: where the text ends mid-line, the last line's text (as mended) loses the word
    it ends inside (`lines.without_cut_end`: `rate: 20` of 200 Gb/sec is never read)."""
    kept = [line for line in read_lines(text, stamps=False, srun=False) if not line.noise]
    texts = mended_lines(text, one_task=one_task)  # those lines' texts, a one-task label off
    out = [line if line.text == mended else msgspec.structs.replace(line, text=mended)
           for line, mended in zip(kept, texts, strict=True)]
    if cut_end and out and ends_mid_line(text):
        out[-1] = msgspec.structs.replace(out[-1], text=without_cut_end(out[-1].text)[0])
    return out


def note_unread(unread: UnrecognizedLines, number: int, text: str) -> None:
    """Count line `number` (1-based) of a parser that reads `lines.pasted_lines` unread,
    unless it is a shell prompt or the tool's command echoed before its output (noise, as
    `read_lines` marks them), a blank or a paste's `...`."""
    body = text.strip()
    noise = "prompt" if is_prompt(body) else "command" if is_command_echo(body) else ""
    unread.note(Line(number=number, raw=text, text=text, noise=noise))
