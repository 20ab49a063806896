"""Readers of the binary formats a push publishes. Each reads a whole file (or archive member) of its format, checks
its structure to its last byte, and returns its parts: `(where, bytes)` for what it holds (text chunks, the image data,
a header) and, for archives and compressed streams, what it unpacks to, to be read again as files of their own. Bytes
it cannot account for (a broken checksum, data after the end, an encrypted member, more than the budget once
unpacked) raise `Unreadable`: what push cannot read in full, it does not publish.

Formats: safetensors (the JSON header, the tensor data covering the rest exactly), PNG (every chunk's CRC, text chunks
and image data inflated), JPEG (every segment up to EOI, nothing after), NumPy `.npy` (not of Python objects),
protocol buffers (`tokenizer.model` of sentencepiece: every field to the end), zip archives (members stored or
deflated, each stream ending at its compressed size, no gap between members and directory, nothing after the end
record), tar archives (members one after the other, zero padding, header blocks returned to be searched), gzip,
bzip2, xz, lzma and zlib streams (decompressed to their end, checksum checked).
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import re
import struct
import tarfile
import zipfile
import zlib
from collections.abc import Callable

from ..readers import JSON_LIMIT

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
JPEG_MARKER = re.compile(rb"\xff(?=[^\x00\xd0-\xd7\xff])")  # a marker after entropy-coded data (not a stuffed byte)
PICKLE_REASON = "a pickle (can run code when loaded; training_args.bin holds hub_token)"
Parts = list[tuple[str, bytes]]


class Unreadable(Exception):
    """Bytes of a file that push cannot read in full; the message says what and why."""


def safetensors_header(data: bytes, size: int) -> bytes:
    """The JSON header of a safetensors file whose first bytes are `data` (all of them, or at least the header) and
    whose size is `size`; Unreadable unless the header parses and its tensors cover the data after it exactly."""
    length = int.from_bytes(data[:8], "little")
    if length > JSON_LIMIT or 8 + length > min(size, len(data)):
        raise Unreadable("a safetensors file whose header is larger than the file or than 64 MiB")
    header = data[8 : 8 + length]
    try:
        value = json.loads(header)
        spans = sorted(tuple(entry["data_offsets"]) for name, entry in value.items() if name != "__metadata__")
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise Unreadable("a safetensors file whose header does not parse") from None
    end = 0
    for begin, stop in spans:
        if begin != end or stop < begin:
            raise Unreadable("a safetensors file whose tensors leave bytes unaccounted for")
        end = stop
    if end != size - 8 - length:
        raise Unreadable("a safetensors file whose tensors do not cover its data exactly")
    return header


def inflate(data: bytes, budget: int, window: int = zlib.MAX_WBITS) -> bytes:
    """What the zlib (or, with another `window`, raw/gzip) stream `data` decompresses to: Unreadable unless it ends
    exactly at the end of `data` with its checksum right, within `budget` bytes."""
    decompressor = zlib.decompressobj(window)
    try:
        out = decompressor.decompress(data, budget + 1)
    except zlib.error as error:  # a bad checksum, a preset dictionary, corrupt data
        raise Unreadable(f"a compressed stream that does not decompress ({error})") from None
    if len(out) > budget:
        raise Unreadable(f"more than {budget >> 20} MiB once unpacked")
    if not decompressor.eof or decompressor.unused_data:
        raise Unreadable("a compressed stream that does not end where the data ends")
    return out


def png_parts(data: bytes, budget: int) -> Parts:
    """Every chunk of a PNG, CRC checked, up to IEND and nothing after; text chunks and the image data inflated."""
    parts, image, position = [], [], len(PNG_SIGNATURE)
    while True:
        length = int.from_bytes(data[position : position + 4], "big")
        kind, body = data[position + 4 : position + 8], data[position + 8 : position + 8 + length]
        crc = data[position + 8 + length : position + 12 + length]
        if len(body) != length or len(crc) != 4 or zlib.crc32(kind + body) != int.from_bytes(crc, "big"):
            raise Unreadable("a PNG cut short or with a chunk whose checksum is wrong")
        position += 12 + length
        name = kind.decode("latin-1")
        if kind == b"IDAT":
            image.append(body)
        elif kind in (b"zTXt", b"iCCP"):
            keyword, _, rest = body.partition(b"\0")
            parts.append((f"its {name} chunk", keyword + b"\n" + inflate(rest[1:], budget)))
        elif kind == b"iTXt":
            keyword, _, rest = body.partition(b"\0")
            text = rest[2:].split(b"\0", 2)[-1]
            parts.append(
                (f"its {name} chunk", keyword + b"\n" + (inflate(text, budget) if rest[:1] == b"\1" else text))
            )
        elif kind == b"IEND":
            break
        else:
            parts.append((f"its {name} chunk", body))
    if position != len(data):
        raise Unreadable("a PNG with bytes after its end")
    return [*parts, ("its image data", inflate(b"".join(image), budget))]


def jpeg_parts(data: bytes) -> Parts:
    """Every segment of a JPEG up to EOI, and nothing after; comments and application segments as parts."""
    parts, position = [], 2
    while True:
        if data[position : position + 1] != b"\xff":
            raise Unreadable("a JPEG cut short or with bytes that are no segment")
        while data[position : position + 1] == b"\xff":
            position += 1
        marker, position = data[position : position + 1], position + 1
        if marker == b"\xd9":
            break
        if marker == b"" or b"\xd0" <= marker <= b"\xd7" or marker == b"\x01":
            continue
        length = int.from_bytes(data[position : position + 2], "big")
        segment, position = data[position + 2 : position + length], position + length
        if len(segment) != length - 2:
            raise Unreadable("a JPEG cut short")
        parts.append((f"its segment {marker.hex().upper()}", segment))
        if marker == b"\xda":  # entropy-coded data up to the next marker
            found = JPEG_MARKER.search(data, position)
            if found is None:
                raise Unreadable("a JPEG without its end")
            parts.append(("its image data", data[position : found.start()]))
            position = found.start()
    if position != len(data):
        raise Unreadable("a JPEG with bytes after its end")
    return parts


def npy_parts(data: bytes) -> Parts:
    """A NumPy `.npy` array: its header, and data of exactly the size it announces; a pickle for Python objects."""
    import numpy as np

    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(stream)
    except (ValueError, SyntaxError, TypeError):
        raise Unreadable("a NumPy array whose header does not parse") from None
    if dtype.hasobject:
        raise Unreadable(PICKLE_REASON)
    count = 1
    for dimension in shape:
        count *= dimension
    if len(data) - stream.tell() != count * dtype.itemsize:
        raise Unreadable("a NumPy array whose data is not the size its header says")
    return [("its header", data[: stream.tell()]), ("its data", data[stream.tell() :])]


def protobuf_parts(data: bytes) -> Parts:
    """The fields of a protocol buffer message (sentencepiece's `tokenizer.model`), read to the last byte; each
    length-delimited field as a part."""
    parts, position = [], 0
    while position < len(data):
        key, position = varint(data, position)
        wire = key & 7
        if key >> 3 == 0 or wire not in (0, 1, 2, 5):
            raise Unreadable("a protocol buffer with a field that does not parse")
        if wire == 0:
            position = varint(data, position)[1]
        elif wire == 2:
            length, position = varint(data, position)
            parts.append((f"its field {key >> 3}", data[position : position + length]))
            position += length
        else:
            position += 8 if wire == 1 else 4
    if position != len(data):
        raise Unreadable("a protocol buffer cut short")
    return parts


def varint(data: bytes, position: int) -> tuple[int, int]:
    """The protocol buffer varint at `position`, and where it ends."""
    value, shift = 0, 0
    while position < len(data) and shift < 64:
        byte, position, value = data[position], position + 1, value | (data[position] & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7
    raise Unreadable("a protocol buffer cut short")


def zip_members(data: bytes, budget: int) -> tuple[Parts, bytes]:
    """(every member of a zip archive, the bytes of its headers and directory: names, extra fields, comments), for an
    archive whose members and directory cover it from its first byte to its end record's comment, with no gap."""
    end = data.rfind(b"PK\x05\x06")
    if end < 0 or end + 22 + int.from_bytes(data[end + 20 : end + 22], "little") != len(data):
        raise Unreadable("a zip archive with bytes after its end record")
    members, headers, covered = [], [], 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in sorted(archive.infolist(), key=lambda info: info.header_offset):
                if info.flag_bits & 1:
                    raise Unreadable(f"an encrypted zip member ({info.filename})")
                if info.header_offset != covered:
                    raise Unreadable("a zip archive with bytes before or between its members")
                start, covered = member_span(data, info)
                headers += [data[info.header_offset : start], data[start + info.compress_size : covered]]
                check_member_stream(data[start : start + info.compress_size], info, budget)
                with archive.open(info) as member:
                    members.append((info.filename, member.read(budget + 1)))
                budget -= len(members[-1][1])
            directory_end = archive.start_dir + int.from_bytes(data[end + 12 : end + 16], "little")
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, zlib.error, lzma.LZMAError) as error:
        raise Unreadable(f"a zip archive that does not unpack ({error})") from None
    if covered != archive.start_dir or not 0 <= end - directory_end <= 76:  # 76: the zip64 end record and locator
        raise Unreadable("a zip archive with bytes between its members and its directory")
    return members, b"".join(headers) + data[archive.start_dir :]


def member_span(data: bytes, info: zipfile.ZipInfo) -> tuple[int, int]:
    """Where the zip member `info`'s data starts (after its local header, name and extra field) and where the member
    ends (after its data and data descriptor)."""
    name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    start = info.header_offset + 30 + name_length + extra_length
    end = start + info.compress_size
    if info.flag_bits & 8:  # a data descriptor: CRC and sizes (8 bytes each with zip64), after an optional signature
        end += 4 if data[end : end + 4] == b"PK\x07\x08" else 0
        end += 20 if info.file_size >= 0xFFFFFFFF or info.compress_size >= 0xFFFFFFFF else 12
    return start, end


def check_member_stream(raw: bytes, info: zipfile.ZipInfo, budget: int) -> None:
    """Unreadable unless the zip member's compressed bytes `raw` are stored, or a deflate stream that ends exactly at
    their end (zipfile stops at the stream's end and never reads what follows it)."""
    if info.compress_type == zipfile.ZIP_DEFLATED:
        inflate(raw, budget, window=-zlib.MAX_WBITS)
    elif info.compress_type != zipfile.ZIP_STORED:
        raise Unreadable(f"a zip member compressed with method {info.compress_type}, not stored or deflated")


def tar_members(data: bytes, budget: int) -> tuple[Parts, bytes]:
    """(every member of a tar archive (ustar or v7), the bytes of its header blocks: names, pax and GNU headers), for
    an archive whose members follow each other with zeros as padding, and nothing but zeros after its last."""
    members, headers, covered = [], [], 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for info in archive:
                padded = info.offset_data + (-(-info.size // 512) * 512 if info.isfile() else 0)
                if info.offset != covered or data[info.offset_data + info.size : padded].strip(b"\0"):
                    raise Unreadable("a tar archive with bytes between its members or in their padding")
                headers.append(data[info.offset : info.offset_data])
                content = archive.extractfile(info).read(budget + 1) if info.isfile() else info.linkname.encode()
                members.append((info.name, content))
                budget, covered = budget - len(content), padded
    except (tarfile.TarError, OSError, EOFError) as error:
        raise Unreadable(f"a tar archive that does not unpack ({error})") from None
    if data[covered:].strip(b"\0"):
        raise Unreadable("a tar archive with bytes after its end")
    return members, b"".join(headers)


def is_tar(data: bytes) -> bool:
    """Whether `data` starts with a tar header whose checksum is right (ustar, GNU or v7)."""
    try:
        tarfile.TarInfo.frombuf(data[:512], "utf-8", "surrogateescape")
    except (tarfile.HeaderError, ValueError):
        return False
    return True


def decompressor_of(header: bytes) -> Callable[[bytes, int], bytes] | None:
    """`decompress(data, budget)` for a gzip, bzip2, xz, lzma or zlib stream starting with `header`, else None."""
    opener = None
    if header.startswith(b"\x1f\x8b"):
        opener = open_gzip
    elif header.startswith(b"BZh"):
        opener = bz2.BZ2File
    elif header.startswith((b"\xfd7zXZ\x00", b"\x5d\x00\x00")):
        opener = lzma.LZMAFile
    elif len(header) > 1 and header[0] & 0x0F == 8 and int.from_bytes(header[:2], "big") % 31 == 0:
        return inflate
    return None if opener is None else lambda data, budget: read_all(opener, data, budget)


def open_gzip(stream: io.BytesIO) -> gzip.GzipFile:
    """A gzip stream read from the file object `stream`."""
    return gzip.GzipFile(fileobj=stream)


def read_all(opener: Callable, data: bytes, budget: int) -> bytes:
    """All of what the compressed stream `data` decompresses to (`opener`: GzipFile, BZ2File, LZMAFile), within
    `budget`; Unreadable when it is corrupt, cut short or followed by other bytes."""
    try:
        with opener(io.BytesIO(data)) as stream:
            out = stream.read(budget + 1)
    except (OSError, EOFError, lzma.LZMAError, zlib.error) as error:
        raise Unreadable(f"a compressed stream that does not decompress ({error})") from None
    if len(out) > budget:
        raise Unreadable(f"more than {budget >> 20} MiB once unpacked")
    return out
