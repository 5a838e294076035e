"""The mechanisms behind held-out-12's misses (issue 20's fourteenth round), each on the real
file and on real lines of other fixtures (a transformation says so): torchrun's agent line
`failed (exitcode: N) local_rank: L (pid: P) of binary: B` cut anywhere after the pid;
NCCL 2.3-era debug lines with no `NCCL` word after the `host:pid:tid [dev]` prefix; a paste
inside markdown's indented code block (the line layer's shape, every parser).
"""

from __future__ import annotations

import pytest
from support import FIXTURES

from healthcheck.core.errors import ParseError
from healthcheck.parsers.ibstatus import parse_ibstatus
from healthcheck.parsers.lines import read_lines
from healthcheck.parsers.nccl_log import parse_nccl_log
from healthcheck.parsers.torch_log import parse_torch_log

FIELD12 = FIXTURES / "field" / "issues-12"
TWO_FAILED = FIELD12 / "torch-log" / "prose-two-bracket-error-failed-lines-minus9-local-rank-1-then-0.txt"
# the agent's line under each logger's prefix, whole (the binary after `of binary:`)
GLOG_FAILED = FIXTURES / "corpus" / "torchrun" / "glog-format-failed-exitcode-9-local-rank-5-header-fragment.txt"
OLD_FAILED = FIXTURES / "corpus" / "torchrun" / "old-logger-format-sigterm-siblings-failed-exitcode-9-local-rank-3.txt"


def _real(path, words: str) -> str:
    return next(line for line in path.read_text().splitlines() if words in line)


# ---------------------------------------------------------------- torchrun's agent line, cut


def test_the_agent_line_with_nothing_after_binary_is_a_worker_failure():
    failures = parse_torch_log(TWO_FAILED.read_text()).worker_failures
    assert [(f.exitcode, f.local_rank, f.pid, f.signal, f.binary) for f in failures] == [
        (-9, 1, 14447, "SIGKILL", ""), (-9, 0, 14447, "SIGKILL", "")]


@pytest.mark.parametrize("path", [GLOG_FAILED, OLD_FAILED, TWO_FAILED], ids=lambda p: p.stem[:24])
def test_the_agent_line_cut_anywhere_after_the_pid_is_read_under_every_logger(path):
    # each real line (glog's, the old logger's `ERROR:...api:`, the `api: [ERROR]` form) cut at
    # every character after the pid's end (its `)` shows it whole; a pid the text ends on may be
    # the head of a longer one, not read): the worker, its exit and pid read; the binary only
    # where the paste kept it whole
    line = _real(path, "failed (exitcode: ")
    whole = parse_torch_log(line + "\n").worker_failures[0]
    pid_end = line.index("(pid: ") + len("(pid: ") + len(str(whole.pid))
    for cut in range(pid_end + 1, len(line) + 1):
        [failed] = parse_torch_log(line[:cut]).worker_failures
        assert (failed.exitcode, failed.local_rank, failed.pid) == (whole.exitcode, whole.local_rank, whole.pid)
        assert failed.binary in ("", whole.binary) or whole.binary.startswith(failed.binary)


def test_a_sentence_that_only_mentions_an_exitcode_is_no_worker_failure():
    # the real line cut before its local_rank (prose that quotes the exit alone), and cut
    # inside the pid's word: no worker, local rank or pid is made up
    line = _real(TWO_FAILED, "failed (exitcode: ")
    for cut in (line.index(" local_rank"), line.index("(pid:") + 3):
        sentence = f"the job {line[line.index('failed'):cut]} again\n"
        try:
            assert parse_torch_log(sentence).worker_failures == []
        except ParseError:
            pass  # nothing of torch's in it: refused, never read as a worker that failed


# ---------------------------------------------------------------- NCCL 2.3's prefix, no `NCCL` word

OLD_NCCL = FIELD12 / "nccl-log" / "2018-nccl-info-without-nccl-word-net-using-interface-cut.txt"
# a 2.19 process that chose sockets (`Bootstrap : Using ...`, `Using network Socket`): the facts
# the old phrases map to
NEW_SOCKET = FIXTURES / "corpus" / "nccl-debug" / "nccl-2.19.3-gcp-plugin-symbol-missing-socket-nranks1-channel-00-32.txt"
# old NCCL's WARN with its source and no `NCCL` word, as quoted in a sentence (held-out-11)
OLD_WARN = FIXTURES / "field" / "issues-11" / "nccl-log" / "prose-quoted-net-ib-cu-781-warn-len0-no-nccl-word.txt"


def test_nccl_2_3_lines_without_the_nccl_word_name_the_process_its_interface_and_network():
    log = parse_nccl_log(OLD_NCCL.read_text())
    [proc] = log.processes
    assert (proc.host, proc.pid, proc.devices) == ("seyun", 17280, (0,))
    assert (proc.bootstrap_if, proc.bootstrap_addr) == ("eth0", "115.145.178.160<0>")
    assert (proc.network, proc.network_inferred, proc.socket_fallback) == ("Socket", False, True)
    assert log.nccl_lines == 4  # the line cut right after its prefix is the process's too
    assert [s.line for s in log.unrecognized.sample] == [1, 3]  # the prose and the row of `=`


def test_the_old_phrases_give_the_facts_the_new_ones_do():
    new = next(p for p in parse_nccl_log(NEW_SOCKET.read_text()).processes if p.network)
    [old] = parse_nccl_log(OLD_NCCL.read_text()).processes
    assert (old.network, old.socket_fallback) == (new.network, new.socket_fallback) == ("Socket", True)
    assert bool(old.bootstrap_if) == bool(new.bootstrap_if)


@pytest.mark.parametrize("label", ["", "0: ", "[1,0]<stdout>:", "    "])
def test_old_lines_are_read_behind_a_launchers_label_or_an_indent(label):
    text = "\n".join(label + line.lstrip() for line in OLD_NCCL.read_text().splitlines()[3:])
    [proc] = parse_nccl_log(text).processes
    assert (proc.host, proc.network, proc.bootstrap_if) == ("seyun", "Socket", "eth0")


def test_an_old_warn_with_its_source_and_the_full_prefix_names_its_process():
    # the real prefix of the 2018 file before the real quoted WARN of held-out-11 (a transformation)
    prefix = OLD_NCCL.read_text().splitlines()[4].split(" INFO ")[0]
    quoted = OLD_WARN.read_text().split("'")[1]  # `transport/net_ib.cu:781 WARN NET/IB : Got completion ...`
    [warn] = parse_nccl_log(f"{prefix} {quoted}\n").warns
    assert (warn.kind, warn.host, warn.pid, warn.src, warn.status) == (
        "ib-completion", "seyun", 17280, "transport/net_ib.cu:781", 12)


def test_prose_or_a_partial_prefix_with_info_is_no_nccl_line():
    line = OLD_NCCL.read_text().splitlines()[5]  # `seyun:17280:17553 [0] INFO Using internal Network Socket`
    host, _, rest = line.partition(" ")
    for text in (f"seyun {rest}",  # no pid:tid
                 f"{host} INFO Using internal Network Socket",  # no [dev]
                 f"{host} [0] then I saw INFO Using internal Network Socket",  # words before the level
                 f"I ran it and {line}",  # a sentence around it
                 f"{host} [0] transport/net_ib.cu:781 INFO x"):  # a source before INFO: only a WARN has one
        with pytest.raises(ParseError):
            parse_nccl_log(text + "\n")


# ---------------------------------------------------------------- markdown's indented code block

INDENTED_IBSTATUS = FIELD12 / "ibstatus" / "indented-code-ssh-prompt-ibstatus-mlx4-tab-after-colon-cut-in-gid.txt"
# ibv_devinfo -v's port sections after a blank line, indented by its own tabs (a real capture)
DEVINFO_PORTS = FIXTURES / "ibv_devinfo" / "cx6-vv-2hca-port2-down-disabled.txt"
IBSTATUS = FIXTURES / "corpus" / "ibstatus" / "a100-hdr200-all-active.txt"


def test_ibstatus_in_an_indented_code_block_after_a_sentence_is_read():
    [port] = parse_ibstatus(INDENTED_IBSTATUS.read_text()).ports
    assert (port.ca, port.port) == ("mlx4_0", 1)


def test_the_line_layer_takes_the_blocks_common_indent_off_and_marks_its_prompts():
    lines = list(read_lines(INDENTED_IBSTATUS.read_text()))
    assert [line.noise for line in lines[2:4]] == ["prompt", "prompt"]
    assert lines[4].text == "Infiniband device 'mlx4_0' port 1 status:" and "code-block" in lines[4].repairs
    assert lines[5].text.startswith("\tdefault gid:")  # the tool's own tab kept: its indent is relative
    assert lines[0].text.startswith("Fixed through") and not lines[0].repairs


def test_a_tools_own_indentation_is_no_code_block():
    from healthcheck.parsers.lines import code_block_indents

    # ibv_devinfo's port sections follow a blank line after a line of its own; topo's header row
    # starts with a tab and is followed by a row with none; a block a line of text follows with no
    # blank line between; a block whose lines share fewer than 4 blanks
    assert not any(code_block_indents(DEVINFO_PORTS.read_text().split("\n")))
    real = IBSTATUS.read_text().split("\n")
    assert not any(code_block_indents(["", *real]))  # ibstatus's own tabs after its header line
    field = [line for line in real if line.startswith("        ")][:2]  # 8 blanks, as printed
    assert code_block_indents(["", *field, "Infiniband device 'x' port 1 status:"]) == ["", "", "", ""]
    assert code_block_indents(["", "\t" + field[0].lstrip(), "    " + field[1].lstrip()]) == ["", "", ""]


def test_a_block_in_a_list_loses_its_common_indent_and_a_text_indented_from_its_start_keeps_it():
    from healthcheck.parsers.lines import code_block_indents

    real = IBSTATUS.read_text().rstrip("\n").split("\n")
    for indent in ("    ", "        ", "\t"):
        shaped = [indent + line if line.strip() else "" for line in real]
        assert code_block_indents(["1. ibstatus says:", "", *shaped]) == ["", "", *(indent if x else "" for x in shaped)]
        assert parse_ibstatus("\n".join(["1. ibstatus says:", "", *shaped]) + "\n").ports == parse_ibstatus(
            IBSTATUS.read_text()).ports
        # a text indented from its first line is no block: a grep of `-q`'s tree keeps its depth
        assert not any(code_block_indents(shaped)) and not any(code_block_indents(["", *shaped]))
