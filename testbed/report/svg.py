"""A few helpers to write SVG and HTML elements as text, and a linear scale
with readable ticks. Everything is escaped here, so callers pass raw data."""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass

# Okabe-Ito: distinguishable with the common colour-vision deficiencies.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#8C6D1F", "#000000")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def attrs(**values: object) -> str:
    """Keyword arguments as attributes: `class_` -> class, `data_op` -> data-op; None is left out."""
    parts = []
    for name, value in values.items():
        if value is None or value is False:
            continue
        key = name.rstrip("_").replace("_", "-")
        parts.append(key if value is True else f'{key}="{esc(_short(value))}"')
    return " ".join(parts)


def _short(value: object) -> object:
    """Coordinates with two decimals at most: the page stays small."""
    if isinstance(value, float):
        return f"{value:.2f}".rstrip("0").rstrip(".")
    return value


def el(tag: str, body: str = "", **values: object) -> str:
    """An element; `body` is markup (escape text with `esc` or use `text`)."""
    opened = f"<{tag} {attrs(**values)}".rstrip()
    return f"{opened}>{body}</{tag}>"


def void(tag: str, **values: object) -> str:
    return f"<{tag} {attrs(**values)}/>"


def text(x: float, y: float, content: object, **values: object) -> str:
    return el("text", esc(content), x=x, y=y, **values)


def tip(content: object) -> str:
    """A tooltip for the enclosing SVG element."""
    return el("title", esc(content))


def svg(width: float, height: float, body: str, **values: object) -> str:
    return el(
        "svg",
        body,
        xmlns="http://www.w3.org/2000/svg",
        viewBox=f"0 0 {_short(float(width))} {_short(float(height))}",
        width=width,
        height=height,
        role="img",
        **values,
    )


def fmt(value: float) -> str:
    """A number as a reader wants it: no trailing zeros, thousands grouped."""
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:,.2f}".rstrip("0")


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """Round tick values covering [lo, hi] (1, 2, 5 times a power of ten apart)."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / max(1, count)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    ticks = []
    value = first
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < hi:
        ticks.append(round(value, 10))
    return ticks


@dataclass(frozen=True, slots=True)
class Linear:
    """Maps data values in [d0, d1] to pixels in [r0, r1]."""

    d0: float
    d1: float
    r0: float
    r1: float

    @classmethod
    def nice(cls, lo: float, hi: float, r0: float, r1: float, count: int = 6) -> Linear:
        """A scale whose domain ends on round ticks around [lo, hi]."""
        ticks = nice_ticks(lo, hi, count)
        return cls(ticks[0], ticks[-1], r0, r1)

    def __call__(self, value: float) -> float:
        span = self.d1 - self.d0 or 1.0
        return self.r0 + (value - self.d0) / span * (self.r1 - self.r0)

    def ticks(self, count: int = 6) -> list[float]:
        return [t for t in nice_ticks(self.d0, self.d1, count) if self.d0 <= t <= self.d1]


@dataclass(frozen=True, slots=True)
class Log:
    """Maps positive values to pixels on a log10 scale, from a round power of ten to another."""

    d0: float
    d1: float
    r0: float
    r1: float

    @classmethod
    def nice(cls, lo: float, hi: float, r0: float, r1: float) -> Log:
        """From the round value (1, 2 or 5 times a power of ten) at or below lo to the one at or above hi."""
        lo, hi = max(lo, 1e-3), max(hi, lo * 2)
        steps = [m * 10.0**k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) for m in _STEPS]
        return cls(max(v for v in steps if v <= lo * (1 + 1e-9)), min(v for v in steps if v >= hi * (1 - 1e-9)), r0, r1)

    def __call__(self, value: float) -> float:
        clamped = min(max(value, self.d0), self.d1)  # at the edge: the exact value is in the tooltip
        share = (math.log10(clamped) - math.log10(self.d0)) / (math.log10(self.d1) - math.log10(self.d0))
        return self.r0 + share * (self.r1 - self.r0)

    def ticks(self, count: int = 6) -> list[float]:
        first, last = math.floor(math.log10(self.d0)), math.ceil(math.log10(self.d1))
        steps = _STEPS if last - first <= 4 else (1,)
        values = [round(m * 10.0**k, 10) for k in range(first, last + 1) for m in steps]
        return [v for v in values if self.d0 * (1 - 1e-9) <= v <= self.d1 * (1 + 1e-9)]


_STEPS = (1, 2, 5)


Scale = Linear | Log


def x_axis(scale: Scale, y: float, top: float, label: Callable[[float], str], count: int = 8, caption: str = "") -> str:
    """Ticks and labels along y, with faint grid lines up to `top`."""
    parts = [void("line", x1=scale.r0, x2=scale.r1, y1=y, y2=y, class_="axis")]
    for t in scale.ticks(count):
        x = scale(t)
        parts.append(void("line", x1=x, x2=x, y1=top, y2=y, class_="grid"))
        parts.append(void("line", x1=x, x2=x, y1=y, y2=y + 4, class_="axis"))
        parts.append(text(x, y + 16, label(t), class_="tick", text_anchor="middle"))
    if caption:
        parts.append(text(scale.r1, y + 32, caption, class_="caption", text_anchor="end"))
    return el("g", "".join(parts), class_="x-axis")


def y_axis(scale: Linear, x: float, right: float, label: Callable[[float], str], count: int = 5) -> str:
    """Ticks and labels along x, with faint grid lines across to `right`."""
    parts = [void("line", x1=x, x2=x, y1=scale.r0, y2=scale.r1, class_="axis")]
    for t in scale.ticks(count):
        y = scale(t)
        parts.append(void("line", x1=x, x2=right, y1=y, y2=y, class_="grid"))
        parts.append(text(x - 6, y + 4, label(t), class_="tick", text_anchor="end"))
    return el("g", "".join(parts), class_="y-axis")
