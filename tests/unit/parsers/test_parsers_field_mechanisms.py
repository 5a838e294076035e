"""The mechanisms behind the field files issue 20 retired as a measure (they were held
out; the shapes are fixed here, each on the real file and on a transformation of another
real fixture): a GPU that "can't recover" from a PCIe AER error, an NVLink5 Xid whose
status words a word wrap moved, a perftest row cut at the text's end, sinfo's compact
state names.
"""

from __future__ import annotations

from support import FIXTURES

from healthcheck.parsers.pcie_aer import RECOVERY_MAX
from healthcheck.parsers.perftest import parse_perftest
from healthcheck.parsers.sinfo import parse_sinfo
from healthcheck.parsers.xid import parse_kernel_log

FIELD = FIXTURES / "field"
XID145 = FIELD / "repos" / "xid" / "xid145-rlw-rxpipe-nonfatal-link-13-bare-line.txt"
XID144_WRAPPED = FIELD / "repos" / "xid" / "xid144-149-nvlink5-quoted-wrapped-hex-with-gpud-verdicts.txt"
AER_HUMAN = FIELD / "issues" / "xid" / "dmesg-human-aer-fatal-cmplt-timeout-no-xid.txt"
SINFO_WRAPPED = FIELD / "repos" / "sinfo" / "trn1-16node-fail-alloc-nodelist-hard-wrapped.txt"
PERFTEST_ROWS = FIXTURES / "ib_write_bw" / "client-bidir-4qp-all-sizes-ainic-800g.txt"
PERFTEST_CUT = FIELD / "issues" / "ib_write_bw" / "duration-mode-roce-gid-lines-mb-cut.txt"


def test_a_device_that_cannot_recover_from_aer_names_its_bus():
    # field/issues/xid/dmesg-human-aer-fatal-cmplt-timeout-no-xid.txt: the GPU behind the root
    # port names itself only in `AER: can't recover`
    log = parse_kernel_log(AER_HUMAN.read_text())
    assert [(r.driver, r.pci_bus_id) for r in log.aer_recovery if r.outcome.startswith("can't recover")][0] == (
        "nvidia", "0000:03:00.0")
    assert {r.outcome for r in log.aer_recovery} == {
        "can't recover (no error_detected callback)", "device recovery failed", "Root Port link has been reset (0)"}
    assert log.aer[0].pci_bus_id == "0000:00:03.0" and log.xids == []
    # a flood of them keeps a bounded list
    flood = AER_HUMAN.read_text().splitlines()[0] + "\n"
    assert len(parse_kernel_log(flood * (RECOVERY_MAX + 10)).aer_recovery) == RECOVERY_MAX


def test_an_nvlink5_xid_word_wrapped_before_its_status_keeps_it():
    # field/repos/xid/xid145-rlw-rxpipe-nonfatal-link-13-bare-line.txt wrapped before its status
    # words (a transformation: the shape the xid144-149 file below shows) reads as the line
    line = XID145.read_text().strip()
    wrapped = line.replace(" (0x", "\n(0x", 1)
    (joined,), (whole,) = parse_kernel_log(wrapped + "\n").xids, parse_kernel_log(line + "\n").xids
    assert (joined.message, joined.status, joined.link) == (whole.message, whole.status, whole.link)
    assert len(whole.status) == 6 and joined.line == wrapped.splitlines()[0]
    # a line after the Xid that is no status list stays out of it
    assert parse_kernel_log(line[:line.index(" (0x")] + "\n- Warning\n").xids[0].status == []
    xids = parse_kernel_log(XID144_WRAPPED.read_text()).xids
    assert [(x.code, x.link, x.status[:2]) for x in xids] == [
        (144, 0, ["0x00000001", "0x00000008"]), (149, 0, ["0x026001c6", "0x00000000"]),
        (149, 0, ["0x025001c6", "0x00000000"])]
    assert "(0x00000001 0x00000008" in xids[0].message and xids[0].line.endswith("Link 0")


def test_a_perftest_row_cut_at_the_texts_end_is_its_size_not_a_measurement():
    # tests/fixtures/ib_write_bw/client-bidir-4qp-all-sizes-ainic-800g.txt cut inside its
    # last row, after the iterations (a transformation: the cut field/issues/ib_write_bw's
    # duration-mode-roce-gid-lines-mb-cut.txt shows)
    text = PERFTEST_ROWS.read_text()
    lines_ = text.splitlines()
    last = max(i for i, t in enumerate(lines_) if t.strip()[:1].isdigit())
    size, iters = lines_[last].split()[:2]
    cut_text = "\n".join([*lines_[:last], lines_[last][:lines_[last].index(iters) + len(iters)]]) + "\n"
    whole, cut = parse_perftest(text), parse_perftest(cut_text)
    assert whole.cut_row is None
    assert (cut.cut_row.size_bytes, cut.cut_row.iterations) == (int(size), int(iters))
    assert cut.rows == whole.rows[:-1]
    # a short row with a line after it was no cut at the end
    assert parse_perftest(cut_text + lines_[last] + "\n").cut_row is None
    field = parse_perftest(PERFTEST_CUT.read_text())
    assert field.cut_row.size_bytes == 65536 and field.rows == ()


def test_sinfo_compact_states_read_as_slurms_long_names():
    rows = parse_sinfo(SINFO_WRAPPED.read_text()).rows
    assert [(r.state, r.columns["STATE"]) for r in rows] == [("fail", "fail"), ("allocated", "alloc")]
