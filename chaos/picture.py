"""A small raster canvas that writes PNG files: rectangles, lines and a 3x5 pixel font.

The project's dependencies have no plotting library, and a chaos report needs one picture:
this is enough to draw it (zlib and struct from the standard library do the encoding).
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

Color = tuple[int, int, int]

# 3x5 glyphs, rows top to bottom, "#" lit.
_FONT = {
    "0": "###|#.#|#.#|#.#|###",
    "1": ".#.|##.|.#.|.#.|###",
    "2": "###|..#|###|#..|###",
    "3": "###|..#|.##|..#|###",
    "4": "#.#|#.#|###|..#|..#",
    "5": "###|#..|###|..#|###",
    "6": "###|#..|###|#.#|###",
    "7": "###|..#|.#.|.#.|.#.",
    "8": "###|#.#|###|#.#|###",
    "9": "###|#.#|###|..#|###",
    ".": "...|...|...|...|.#.",
    "-": "...|...|###|...|...",
    "/": "..#|..#|.#.|#..|#..",
    "(": ".#.|#..|#..|#..|.#.",
    ")": ".#.|..#|..#|..#|.#.",
    ":": "...|.#.|...|.#.|...",
    " ": "...|...|...|...|...",
    "%": "#.#|..#|.#.|#..|#.#",
    "a": ".#.|#.#|###|#.#|#.#",
    "b": "##.|#.#|##.|#.#|##.",
    "c": "###|#..|#..|#..|###",
    "d": "##.|#.#|#.#|#.#|##.",
    "e": "###|#..|##.|#..|###",
    "f": "###|#..|##.|#..|#..",
    "g": "###|#..|#.#|#.#|###",
    "h": "#.#|#.#|###|#.#|#.#",
    "i": "###|.#.|.#.|.#.|###",
    "k": "#.#|#.#|##.|#.#|#.#",
    "l": "#..|#..|#..|#..|###",
    "m": "#.#|###|###|#.#|#.#",
    "n": "##.|#.#|#.#|#.#|#.#",
    "o": "###|#.#|#.#|#.#|###",
    "p": "###|#.#|###|#..|#..",
    "q": "###|#.#|#.#|###|..#",
    "r": "##.|#.#|##.|#.#|#.#",
    "s": "###|#..|###|..#|###",
    "t": "###|.#.|.#.|.#.|.#.",
    "u": "#.#|#.#|#.#|#.#|###",
    "v": "#.#|#.#|#.#|#.#|.#.",
    "w": "#.#|#.#|###|###|#.#",
    "x": "#.#|#.#|.#.|#.#|#.#",
    "y": "#.#|#.#|.#.|.#.|.#.",
    "z": "###|..#|.#.|#..|###",
}


class Canvas:
    def __init__(self, width: int, height: int, background: Color = (255, 255, 255)) -> None:
        self.width = width
        self.height = height
        self.pixels = bytearray(bytes(background) * (width * height))

    def dot(self, x: int, y: int, color: Color) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            i = 3 * (y * self.width + x)
            self.pixels[i : i + 3] = bytes(color)

    def rect(self, x0: int, y0: int, x1: int, y1: int, color: Color) -> None:
        x0, x1 = max(0, min(x0, x1)), min(self.width, max(x0, x1))
        y0, y1 = max(0, min(y0, y1)), min(self.height, max(y0, y1))
        row = bytes(color) * (x1 - x0)
        for y in range(y0, y1):
            i = 3 * (y * self.width + x0)
            self.pixels[i : i + len(row)] = row

    def line(self, x0: int, y0: int, x1: int, y1: int, color: Color, width: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for k in range(steps + 1):
            x = x0 + (x1 - x0) * k // steps
            y = y0 + (y1 - y0) * k // steps
            self.rect(x, y, x + width, y + width, color)

    def text(self, x: int, y: int, words: str, color: Color, scale: int = 2) -> None:
        for ch in words.lower():
            glyph = _FONT.get(ch, _FONT[" "])
            for gy, row in enumerate(glyph.split("|")):
                for gx, lit in enumerate(row):
                    if lit == "#":
                        self.rect(
                            x + gx * scale,
                            y + gy * scale,
                            x + (gx + 1) * scale,
                            y + (gy + 1) * scale,
                            color,
                        )
            x += 4 * scale

    def save(self, path: Path) -> None:
        raw = b"".join(
            b"\x00" + bytes(self.pixels[3 * y * self.width : 3 * (y + 1) * self.width])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        path.write_bytes(
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(raw, 9))
            + chunk(b"IEND", b"")
        )
