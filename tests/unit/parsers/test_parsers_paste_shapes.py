"""The paste shapes tests/field/mutate.py finds the parsers do not survive, each fixed at its
mechanism and tested on real outputs put through the transformation (mutate.TRANSFORMS: the
text is the real file's, the shape the transformation's; each test says which).
"""

from __future__ import annotations

import time

import msgspec
import pytest
from field import mutate
from support import FIXTURES

from healthcheck.core.errors import ParseError
from healthcheck.parsers.dcgmi_diag import parse_dcgmi_diag
from healthcheck.parsers.ibstat import parse_ibstat
from healthcheck.parsers.ibstatus import parse_ibstatus
from healthcheck.parsers.ibv_devinfo import parse_ibv_devinfo
from healthcheck.parsers.lines import NOTHING_UNREAD, flat_field, untabbed
from healthcheck.parsers.nvidia_smi import parse_nvidia_smi_q_pasted
from healthcheck.parsers.nvidia_smi_tree import adopted, flattened, renested
from healthcheck.parsers.sinfo import parse_sinfo
from healthcheck.parsers.torch_log import parse_torch_log
from healthcheck.parsers.xid import parse_kernel_log

FIELD = FIXTURES / "field"
# real ibstat outputs: two RoCE ports down/disabled (space-indented), four CAs tab-indented
IBSTAT_ROCE = FIELD / "repos" / "ibstat" / "h100-roce-2-ports-down-disabled.txt"
IBSTAT_TABS = FIELD / "issues" / "ibstat" / "gb10-spark-ibstat-tabs-roce-four-cas-cut.txt"
IBSTATUS = FIXTURES / "corpus" / "ibstatus" / "a100-hdr200-all-active.txt"
# a real full `nvidia-smi -q` of one H100 (driver 580), and 8 GPUs' (535)
Q_H100 = FIELD / "device" / "nvidia-smi-q" / "h100-q-full-580.159.04.txt"
Q_8GPU = FIXTURES / "corpus" / "nvidia-smi-q" / "h100-8gpu-driver-535.161.08.txt"


def _ports(parsed) -> list[dict]:
    return msgspec.to_builtins(parsed.ports)


# ---------------------------------------------------------------- flatten: indentation lost


def test_ibstat_with_its_indentation_flattened_reads_the_same_ports():
    # mutate.flatten: a web page put every line of the real outputs at column 0
    for path in (IBSTAT_ROCE, IBSTAT_TABS):
        text = path.read_text()
        flat = parse_ibstat(mutate.flatten(text))
        assert flat.ports and _ports(flat) == _ports(parse_ibstat(text)), path.name
        assert not flat.unrecognized.count, path.name


def test_ibstatus_with_its_indentation_flattened_reads_the_same_ports():
    text = IBSTATUS.read_text()
    flat = parse_ibstatus(mutate.flatten(text))
    assert flat.ports and _ports(flat) == _ports(parse_ibstatus(text))


def test_prose_at_the_left_margin_is_no_field_of_a_flattened_tree():
    # the writer's `Note: ...` after a flattened port is left unread, never a field of the port
    text = mutate.flatten(IBSTAT_ROCE.read_text()) + "\nNote: the second port is cabled later\n"
    parsed = parse_ibstat(text)
    assert _ports(parsed) == _ports(parse_ibstat(IBSTAT_ROCE.read_text()))
    assert parsed.unrecognized.count == 1
    assert flat_field("State: Active", frozenset({"State"})) == ("State", "Active")
    assert flat_field("Note: State: Active", frozenset({"State"})) is None
    assert flat_field("x" * 1_000_000 + ": y", frozenset({"State"})) is None  # bounded key: no match, linear


# ---------------------------------------------------------------- head-cut: a fragment from mid-GPU


def _from(text: str, starts: str) -> str:
    """The real text from its first line that starts (after blanks) with `starts` on."""
    lines = text.splitlines()
    return "\n".join(lines[next(i for i, line in enumerate(lines) if line.strip().startswith(starts)):])


def test_a_q_fragment_from_mid_gpu_is_the_gpu_its_pci_section_names():
    # mutate.head_cut: the real report without its first quarter (the `GPU 00000000:00:06.0`
    # line among it), as field/issues-15's fragment from `Board Part Number` on
    text = Q_H100.read_text()
    whole = parse_nvidia_smi_q_pasted(text).gpus[0]
    for fragment in (mutate.head_cut(text), _from(text, "Board Part Number")):
        gpus = parse_nvidia_smi_q_pasted(fragment).gpus
        assert [g.pci_bus_id for g in gpus] == [whole.pci_bus_id]
        assert gpus[0].memory_total_mib == whole.memory_total_mib


def test_a_q_fragment_from_inside_the_pci_section_is_the_gpu_it_names():
    # the real report from the PCI section's `Bus : 0x..` line on: its `PCI` line cut off too
    text = Q_H100.read_text()
    gpus = parse_nvidia_smi_q_pasted(_from(text, "Bus ")).gpus
    assert [g.pci_bus_id for g in gpus] == [parse_nvidia_smi_q_pasted(text).gpus[0].pci_bus_id]


def test_a_multi_gpu_fragment_keeps_the_cut_gpu_and_every_whole_one():
    text = Q_8GPU.read_text()
    whole = [g.pci_bus_id for g in parse_nvidia_smi_q_pasted(text).gpus]
    cut = [g.pci_bus_id for g in parse_nvidia_smi_q_pasted(mutate.head_cut(text)).gpus]
    assert cut == whole[len(whole) - len(cut):] and len(cut) >= len(whole) * 3 // 4


def test_a_fragment_whose_bus_id_line_is_cut_names_no_gpu():
    # the Bus Id cut in half (`00000000:00:0`): its sections stay an unnamed GPU's readings
    text = _from(Q_H100.read_text(), "Board Part Number")
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("Bus Id"))
    cut = "\n".join([*lines[:at], lines[at][: lines[at].rindex(":") + 3]])
    parsed = parse_nvidia_smi_q_pasted(cut)
    assert not parsed.gpus and parsed.unnamed


# ---------------------------------------------------------------- -q's tree without its indentation

# real reports: 8 H100s (535), an H200 with MIG devices (590: their own ECC and memory
# sections inside each MIG device), a Titan V (560: Volta's Single/Double Bit ECC groups)
Q_CORPUS = [FIXTURES / "corpus" / "nvidia-smi-q" / name for name in (
    "h100-8gpu-driver-535.161.08.txt", "h200-mig-driver-590.48.01.txt", "titanv-driver-560.35.03.txt")]


def _gpus(text: str) -> list[dict]:
    return msgspec.to_builtins(parse_nvidia_smi_q_pasted(text).gpus)


@pytest.mark.parametrize("shape", ["flatten", "squeeze"])
@pytest.mark.parametrize("path", [*Q_CORPUS, Q_H100], ids=lambda p: p.stem[:24])
def test_a_q_report_that_lost_its_indentation_reads_the_same_gpus(path, shape):
    # mutate.flatten (every line at the margin: a web page) and mutate.squeeze (each run of
    # blanks one: HTML) of the real report: the sections nested again by their own keys
    text = path.read_text()
    assert _gpus(mutate.TRANSFORMS[shape](text, "nvidia-smi-q")) == _gpus(text)


def test_only_a_report_at_one_indentation_is_nested_again():
    text = Q_H100.read_text()
    assert not flattened(text.splitlines())  # as printed: the sections deeper than their block
    assert flattened(mutate.flatten(text).splitlines())
    assert not flattened(["GPU 00000000:01:00.0", "Hello : there", "General : Kenobi"])  # none of -q's lines
    assert renested(["Driver Version : 1", "GPU 00000000:01:00.0", "ECC Errors", "Volatile", "SRAM Correctable : 1",
                     "Aggregate", "Product Name : X"]) == [
        "Driver Version : 1", "GPU 00000000:01:00.0", "    ECC Errors", "        Volatile",
        "            SRAM Correctable : 1", "        Aggregate", "    Product Name : X"]


def test_a_flattened_report_at_scale_costs_its_length():
    flat = mutate.flatten(Q_CORPUS[0].read_text())

    def cost(copies: int) -> float:
        start = time.perf_counter()
        parse_nvidia_smi_q_pasted(flat * copies)
        return time.perf_counter() - start

    small = min(cost(4) for _ in range(3))
    # 8x the text: linear, with room for noise; the min of up to three runs decides, so the
    # runs after the first under the bound are not made (the same verdict, a third the cost)
    large = float("inf")
    for _ in range(3):
        large = min(large, cost(32))
        if large < small * 8 * 3:
            break
    assert large < small * 8 * 3


# ---------------------------------------------------------------- dcgmi's table: tabified, cut inside Metadata

DCGMI = FIELD / "repos" / "dcgmi-diag" / "r2-p4de-a100-dcgm-3.3.3-all-pass-shell-prompt.txt"  # real, 3.3.3 -r 2


def _diag(text: str) -> dict:
    return msgspec.to_builtins(msgspec.structs.replace(parse_dcgmi_diag(text), unrecognized=NOTHING_UNREAD))


def test_a_dcgmi_table_whose_blanks_an_editor_tabified_reads_the_same():
    # mutate.tabs: the real table's runs of blanks tabs at 8-column stops (`unexpand -a`)
    text = DCGMI.read_text()
    tabbed = mutate.tabs(text)
    assert "\t" in tabbed and _diag(tabbed) == _diag(text)
    assert untabbed("|\tA\t|", 64) == "|       A       |"
    assert len(untabbed("\t" * 100_000, 4096)) == 4096  # a line of tabs grows no further than the cut


def test_a_dcgmi_fragment_cut_inside_metadata_keeps_its_versions():
    # the real table from its `DCGM Version` row on: the `Metadata` category line cut off
    parsed = parse_dcgmi_diag(_from(DCGMI.read_text(), "| DCGM Version"))
    assert (parsed.dcgm_version, parsed.driver_version, list(parsed.device_ids[:1])) == ("3.3.3", "535.104.12", ["20b2"])
    assert {t.name for t in parsed.tests} >= {"Denylist", "NVML Library"}


# ---------------------------------------------------------------- sinfo's headerless rows: prose around, last row cut

# real `sinfo -N -o` rows, `|`-separated and blank-padded, no header (a `$` after a state)
SINFO_ROWS = FIELD / "unseen" / "sinfo" / "sinfo-N-o-gres-pipe-padded-no-header-drained-dollar.txt"


def test_headerless_sinfo_rows_with_prose_around_them_read_the_same_rows():
    # mutate.prompt: a sentence, `$ sinfo -R`, the real rows, a question
    text = SINFO_ROWS.read_text()
    pasted = parse_sinfo(mutate.prompt(text, "sinfo"))
    assert pasted.rows == parse_sinfo(text).rows
    assert pasted.unrecognized.count == 2  # the two sentences; the prompt line is noise


def test_headerless_sinfo_rows_whose_last_row_is_cut_keep_the_whole_ones():
    # mutate.tail_cut: the real rows, the last one cut in half
    text = SINFO_ROWS.read_text()
    rows = parse_sinfo(text).rows
    cut = parse_sinfo(mutate.tail_cut(text))
    assert cut.rows == rows[:-1] and cut.unrecognized.count == 1
    # a single row, or rows of unequal widths, are no cut: read (or refused) as before
    assert parse_sinfo(text.splitlines()[0] + "\n").rows == rows[:1]  # a whole row: its line end


# ---------------------------------------------------------------- the kernel log tabified

NVRM_LOAD = FIELD / "device" / "xid" / "h100-dmesg-nvrm-load-no-xid.txt"  # real dmesg of an H100 VM, driver 580


def test_the_driver_banner_in_a_tabified_kernel_log_names_its_version():
    # mutate.tabs: the real dmesg's runs of blanks tabs (`x86_64\t580.159.04`)
    tabbed = mutate.tabs(NVRM_LOAD.read_text())
    assert "x86_64\t580.159.04" in tabbed
    assert parse_kernel_log(tabbed).driver_version == parse_kernel_log(NVRM_LOAD.read_text()).driver_version


# ---------------------------------------------------------------- ibv_devinfo from inside a device block

IBV = FIXTURES / "ibv_devinfo" / "cx6-vv-2hca-port2-down-disabled.txt"  # real -vv, two ConnectX-6


def test_an_ibv_devinfo_fragment_without_its_hca_id_line_is_a_device_of_unknown_name():
    # the real output from its first `transport:` line on (mutate.head_cut's shape: the hca_id cut)
    text = IBV.read_text()
    whole = parse_ibv_devinfo(text).devices
    cut = parse_ibv_devinfo(_from(text, "transport:")).devices
    assert [d.name for d in cut] == ["", *(d.name for d in whole[1:])]
    assert msgspec.to_builtins(cut[0].ports) == msgspec.to_builtins(whole[0].ports)
    assert cut[0].fw_ver == whole[0].fw_ver


def test_a_line_before_the_first_hca_id_that_is_no_device_field_opens_no_device():
    text = IBV.read_text()
    parsed = parse_ibv_devinfo("Note: the second HCA is the storage one\n" + text)
    assert [d.name for d in parsed.devices] == [d.name for d in parse_ibv_devinfo(text).devices]
    assert parsed.unrecognized.count == 1


Q_A100 = FIELD / "repos" / "nvidia-smi-q" / "a100-80gb-510.73.08-elided-ecc-remap-pending.txt"  # real, 177 DRAM CEs


def test_a_q_fragment_from_inside_ecc_errors_keeps_its_counts():
    # mutate.head_cut of the real A100 report: it starts at `Volatile`, its `ECC Errors` line cut off
    text = Q_A100.read_text()
    whole = parse_nvidia_smi_q_pasted(text).gpus[0]
    unnamed = parse_nvidia_smi_q_pasted(mutate.head_cut(text)).unnamed
    assert mutate.head_cut(text).lstrip().startswith("Volatile")
    assert [(u.ecc_volatile_corrected, u.ecc_aggregate_corrected, u.remapped_rows_pending) for u in unnamed] == [
        (whole.ecc_volatile_corrected, whole.ecc_aggregate_corrected, whole.remapped_rows_pending)]
    # keys more than one section holds (`Current`, `Max`) name no section: left as they are
    assert adopted(["            Max : 4", "            Current : 4", "    Fan Speed : 30 %"])[0] == "            Max : 4"


# ---------------------------------------------------------------- torchrun's failure box, blanks changed

# real ChildFailedError boxes: two failures and a root cause (2023), a SIGKILL root cause with
# a long k8s host (2025), three failures cut before the root cause (launch.py, 2022), the 2021
# box with a recorded error file and its traceback, and a box cut to its last four fields
BOXES = [FIELD / name for name in (
    "issues-4/torch-log/prose-then-box-root-cause-rank0-byted-host.txt",
    "issues-2/torch-log/box-sigkill-long-k8s-host-no-other-failures.txt",
    "issues-9/torch-log/launch-py-box-three-failures-docker-hex-host-cut.txt",
    "issues-9/torch-log/2021-box-with-record-error-file-and-traceback-fqdn-host.txt",
    "issues-9/torch-log/box-tail-rank-exitcode-pid-error-file-only.txt")]
_FAILURE_FIELDS = ("index", "root_cause", "time", "host", "rank", "local_rank", "exitcode", "pid", "signal",
                   "error_file")


def _box_failures(text: str) -> list[tuple]:
    return [tuple(getattr(f, name) for name in _FAILURE_FIELDS)
            for block in parse_torch_log(text).child_failed for f in block.failures]


@pytest.mark.parametrize("shape", ["flatten", "squeeze", "tabs"])
@pytest.mark.parametrize("path", BOXES, ids=lambda p: p.stem[:32])
def test_a_failure_box_whose_blanks_a_paste_changed_reads_the_same_failures(path, shape):
    # mutate.flatten (the fields at the margin: `rank      : 1 (local_rank: 1)`), mutate.squeeze
    # (` rank : 1 (local_rank: 1)`) and mutate.tabs (`  rank\t    : 1 ...`) of the real boxes:
    # each field read by its name, so rank, local rank, exit code, pid and host are the box's
    text = path.read_text()
    whole = _box_failures(text)
    assert whole and all(f[4] is not None and f[6] is not None for f in whole)
    assert _box_failures(mutate.TRANSFORMS[shape](text, "torch-log")) == whole


def test_box_field_names_outside_a_box_or_inside_a_traceback_are_not_read():
    text = BOXES[0].read_text()
    whole = _box_failures(text)
    # prose after the box's closing rule that names its fields (made up) is no field of it
    assert _box_failures(text + "rank : 1\nexitcode : 1\nhost : node7\n") == whole
    with pytest.raises(ParseError):
        parse_torch_log("rank : 1\nexitcode : 1\nhost : node7\n")
    # a traceback's line deeper than its field is the traceback's, whatever its words: the real
    # 2021 box's traceback with a made-up source line `rank: int = 0` under its header
    record = BOXES[3].read_text().rstrip("\n") + "\n    rank: int = 0\n"
    (failure,) = parse_torch_log(record).child_failed[0].failures
    assert (failure.rank, failure.local_rank) == (0, 0) and "rank: int = 0" in failure.traceback


# ---------------------------------------------------------------- a quoted paste with prose around it

# real `dmesg -T` lines quoted in a GitHub reply (`> [Fri Aug 30 11:43:09 2024] NVRM: Xid ...`),
# five lines each; and a quoted dmesg whose quote has `>` alone between its lines
QUOTED_DMESG = [FIELD / "repos" / "xid" / name for name in (
    "xid13-109-ctime-stamps-md-blockquote-peermem.txt", "xid79-sxid20034-md-blockquote-with-empty-quote-lines.txt")]


def _events(text: str) -> list[tuple]:
    parsed = parse_kernel_log(text)
    return [(e.code, e.pci_bus_id, e.message, e.time, e.uptime_s) for e in (*parsed.xids, *parsed.sxids)]


@pytest.mark.parametrize("shape", ["prompt", "indent4"])
@pytest.mark.parametrize("path", QUOTED_DMESG, ids=lambda p: p.stem[:24])
def test_a_quoted_kernel_log_with_prose_around_it_keeps_its_timestamps(path, shape):
    # mutate.prompt (the writer's sentence, `$ sudo dmesg -T`, the quoted lines, a question) and
    # mutate.indent4 (a sentence, then the quoted lines in a code block) of the real quoted
    # pastes: the quote is the reply's, so each line's `[Fri Aug 30 ...]` stamp is still read
    text = path.read_text()
    whole = _events(text)
    assert whole and all(e[3] is not None or e[4] is not None for e in whole)
    assert _events(mutate.TRANSFORMS[shape](text, "xid")) == whole
