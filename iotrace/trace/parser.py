"""The contract of a trace format: :class:`TraceParser`. A plugin returns instances from ``iotrace_trace_parsers``.

A parser looks at the first bytes of a file (:class:`Head`) and says whether the file is its format; then it reads
the whole file into :class:`~iotrace.trace.tables.TraceTables`. It decides by content, never by the file's name.
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from iotrace.trace.errors import TraceFormatError

if TYPE_CHECKING:
    from iotrace.trace.tables import TraceTables

__all__ = ["HEAD_BYTES", "Head", "TraceParser", "read_head"]

#: How much of a file the sniffers see: enough for a CSV header after a ``==PROF==`` preamble or a JSON prologue.
HEAD_BYTES = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"


@dataclass(frozen=True)
class Head:
    """The start of a file as the sniffers see it.

    ``raw`` is the first bytes on disk; ``data`` is the same after gunzip when the file is gzip (else ``raw``);
    ``text`` is ``data`` decoded as UTF-8 (``None`` when it is not text).
    """

    path: Path
    size: int
    raw: bytes
    data: bytes
    gzipped: bool

    @property
    def text(self) -> str | None:
        try:
            return self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            # The cut at HEAD_BYTES may split a multi-byte character: accept an error only in the last 3 bytes.
            if exc.start >= len(self.data) - 3:
                return self.data[: exc.start].decode("utf-8")
            return None

    def lines(self, limit: int = 200) -> list[str]:
        """The first ``limit`` lines of text (without line ends); empty when the head is not text."""
        text = self.text
        return [] if text is None else text.lstrip("\ufeff").splitlines()[:limit]


def read_head(path: Path) -> Head:
    """Read the first :data:`HEAD_BYTES` of ``path``, gunzipping them when the file is gzip."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        raw = handle.read(HEAD_BYTES)
    data, gzipped = raw, raw.startswith(GZIP_MAGIC)
    if gzipped:
        try:
            # A decompressobj tolerates a head cut mid-stream; a damaged stream raises zlib.error.
            data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(raw, HEAD_BYTES)
        except zlib.error as exc:
            raise TraceFormatError(path, f"is gzip but cannot be decompressed ({exc})",
                                   "the file is damaged; copy it again") from exc
    return Head(path=path, size=size, raw=raw, data=data, gzipped=gzipped)


def read_bytes(path: Path, gzipped: bool) -> bytes:
    """The whole file, gunzipped when it is gzip; a truncated or damaged gzip is a :class:`TraceFormatError`."""
    if not gzipped:
        return path.read_bytes()
    data = path.read_bytes()
    # One zlib call into a buffer of the size the gzip trailer states (ISIZE, RFC 1952 section 2.3.1: the input
    # size mod 2^32) is 2-3x faster than gzip's chunked reads and needs half the extra memory. The hint is capped
    # (DEFLATE expands at most ~1032:1), and anything unusual (several members, a size past 4 GiB, damage) goes
    # through gzip, which reads every member and names the fault.
    # zlib stops after the first member without a word, so the output counts only when the file's last trailer
    # (CRC-32 and ISIZE) is that member's: a single-member file, as every profiler writes.
    crc, isize = (int.from_bytes(data[-8:-4], "little"), int.from_bytes(data[-4:], "little")) if len(data) >= 18 \
        else (-1, -1)
    try:
        out = zlib.decompress(data, 16 + zlib.MAX_WBITS, bufsize=max(min(isize, 1032 * len(data)), 1))
    except zlib.error:
        out = None
    if out is not None and len(out) & 0xFFFFFFFF == isize and zlib.crc32(out) == crc:
        return out
    del out
    try:
        return gzip.decompress(data)
    except EOFError as exc:
        raise TraceFormatError(path, "is a truncated gzip (the stream ends before its end marker)",
                               "the file was cut short; copy or download it again") from exc
    except (gzip.BadGzipFile, zlib.error, OSError) as exc:
        raise TraceFormatError(path, f"is a damaged gzip ({exc})", "copy or download it again") from exc


def _cells(line: str) -> set[str]:
    return {c.strip().strip('"') for c in line.split(",")}


class TraceParser:
    """One trace format. Subclass, set the class attributes, implement :meth:`parse`.

    Sniffing is declarative where it can be: set :attr:`magic` (a binary format's first bytes) or :attr:`headers`
    (a CSV export's header row), or override :meth:`sniff` for anything else.
    """

    #: Short format name shown by ``iotrace info`` and stored in ``meta["format"]``, e.g. ``"nsys-sqlite"``.
    name: ClassVar[str] = ""
    #: The tool that writes the format, e.g. ``"Nsight Systems"``.
    tool: ClassVar[str] = ""
    #: Parsers are asked in descending priority; a specific sniff (magic bytes) should outrank a generic one.
    priority: ClassVar[int] = 0
    #: The first bytes of the file on disk; a gzip file never matches (these formats are not gzipped).
    magic: ClassVar[bytes] = b""
    #: CSV header rows: the file matches when one of its first :attr:`header_lines` lines holds every column of
    #: any one set (cells stripped of spaces and quotes; extra columns allowed).
    headers: ClassVar[tuple[frozenset[str], ...]] = ()
    #: How many lines of the head :attr:`headers` looks through (tools print preambles before the header).
    header_lines: ClassVar[int] = 200

    def sniff(self, head: Head) -> bool:
        """Whether the file whose start is ``head`` is this format. Must not raise and must not read the file."""
        if self.magic:
            return not head.gzipped and head.raw.startswith(self.magic)
        if self.headers:
            return any(cells >= wanted for cells in map(_cells, head.lines(self.header_lines))
                       for wanted in self.headers)
        raise NotImplementedError

    def parse(self, head: Head) -> TraceTables:
        """Read the whole file into tables, or raise :class:`~iotrace.trace.errors.TraceFormatError`."""
        raise NotImplementedError
