"""Debian's headless Chromium, bounded, for the HTML report's browser test and its docs screenshot;
and a PNG reader (no imaging library here) to look at what it drew."""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def available() -> bool:
    return os.access(CHROMIUM, os.X_OK)


def run(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    """One headless Chromium run with a fresh profile: exit code, stdout, stderr (its log with
    --enable-logging=stderr). At the timeout its process group (the one started here, so its
    renderers and zygote too) is killed by pid and TimeoutError raised; after a normal exit
    the group is killed as well, so nothing it left keeps running."""
    with tempfile.TemporaryDirectory(prefix="hc-chromium-") as profile:
        argv = [CHROMIUM, "--headless", "--disable-gpu", f"--user-data-dir={profile}", "--no-first-run",
                "--disable-extensions", "--disable-background-networking", "--disable-sync", "--mute-audio",
                "--enable-logging=stderr", "--v=0", *args]
        if os.geteuid() == 0:
            argv.insert(2, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
        env = {k: v for k, v in os.environ.items() if not k.startswith("DBUS")}
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                                env=env)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.communicate()
            raise TimeoutError(f"chromium {' '.join(args)} did not finish in {timeout:g}s") from None
        finally:
            _kill_group(proc.pid)
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def read_png(path: Path) -> tuple[int, int, list[bytes], int]:
    """Width, height, the unfiltered rows and bytes per pixel of an 8-bit non-interlaced RGB(A) PNG."""
    data = path.read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, head = 8, b"", None
    while pos + 8 <= len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            head = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        elif kind == b"IEND":
            break
    if head is None:
        raise ValueError(f"{path}: no IHDR")
    width, height, depth, colour, _compression, _filter, interlace = head
    if depth != 8 or interlace != 0 or colour not in (2, 6):
        raise ValueError(f"{path}: not an 8-bit non-interlaced RGB(A) PNG: {head}")
    bpp = 3 if colour == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1:start + 1 + stride])
        for i in range(stride):  # PNG's filters: none, sub, up, average, Paeth
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, height, rows, bpp
