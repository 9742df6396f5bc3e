"""Seeing the screen: the results of ``locate``, ``ocr``, ``compare`` and ``wait_for``, and
`Target`, what an action can aim at instead of x/y.

Coordinates and sizes are in the pixels the client sees (the screen, or the sandbox's API
resolution when it was created with one). A region is ``(x, y, width, height)``; wherever the
SDK takes one it also takes anything with ``x``, ``y``, ``width`` and ``height`` attributes (a
`Window`, a `Match`, an `OcrWord`...).
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .errors import DeskboxError

Region = Tuple[int, int, int, int]
# A box on the screen: (x, y, width, height), or an object with x, y, width, height attributes.
RegionLike = Any
# A PNG: its bytes, a path to a file (str or os.PathLike), or a "data:image/png;base64,..." URL.
# A PNG with alpha leaves its pixels of alpha < 128 out of the match.
ImageInput = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]"]

_DATA_URL = "data:image/png;base64,"


def encode_image(image: ImageInput) -> str:
    """The base64 text the API takes for an image given as bytes, a path or a data: URL."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(image)).decode("ascii")
    if isinstance(image, str) and image.startswith("data:"):
        return image
    if isinstance(image, (str, os.PathLike)):
        with open(image, "rb") as f:
            return base64.b64encode(f.read()).decode("ascii")
    raise TypeError(f"an image is PNG bytes, a file path or a data: URL, not {type(image).__name__}")


def region_json(region: RegionLike) -> List[int]:
    """``[x, y, width, height]`` from a 4-sequence or an object with those attributes."""
    if all(hasattr(region, a) for a in ("x", "y", "width", "height")):
        return [int(region.x), int(region.y), int(region.width), int(region.height)]
    values = list(region)
    if len(values) != 4:
        raise ValueError(f"a region is (x, y, width, height), not {region!r}")
    return [int(v) for v in values]


def _box(value: Any) -> Region:
    x, y, w, h = (int(v) for v in value)
    return (x, y, w, h)


def search_body(
    *,
    image: Optional[ImageInput] = None,
    text: Optional[str] = None,
    region: Optional[RegionLike] = None,
    threshold: Optional[float] = None,
    scales: Optional[Iterable[float]] = None,
    grayscale: Optional[bool] = None,
    exact: Optional[bool] = None,
    lang: Optional[str] = None,
) -> Dict[str, Any]:
    """The request fields locate, wait and targets share (only those given)."""
    body: Dict[str, Any] = {}
    if image is not None:
        body["image"] = encode_image(image)
    if text is not None:
        body["text"] = text
    if region is not None:
        body["region"] = region_json(region)
    if threshold is not None:
        body["threshold"] = threshold
    if scales is not None:
        body["scales"] = [float(s) for s in scales]
    if grayscale is not None:
        body["grayscale"] = grayscale
    if exact is not None:
        body["exact"] = exact
    if lang is not None:
        body["lang"] = lang
    return body


# ---------------------------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------------------------
@dataclass
class Match:
    """Where an image or a text was found. ``center`` is where a targeted action lands."""

    x: int
    y: int
    width: int
    height: int
    score: float
    center: Tuple[int, int]
    scale: Optional[float] = None  # image matches: the template's scale that matched
    text: Optional[str] = None  # text matches: the words as read
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def box(self) -> Region:
        """``(x, y, width, height)``."""
        return (self.x, self.y, self.width, self.height)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Match":
        """Builds it from the API's JSON object (an accessible element's: its bounds, score 1,
        its name as the text; ``raw`` keeps the element)."""
        if isinstance(j.get("bounds"), dict):  # an accessible target's element
            b = j["bounds"]
            match = cls.from_json({"x": b["x"], "y": b["y"], "width": b["width"],
                                   "height": b["height"], "score": 1.0, "text": j.get("name")})
            match.raw = j
            return match
        x, y, w, h = int(j.get("x", 0)), int(j.get("y", 0)), int(j.get("width", 0)), int(j.get("height", 0))
        c = j.get("center") or [x + w // 2, y + h // 2]
        return cls(
            x=x, y=y, width=w, height=h, score=float(j.get("score", 0)),
            center=(int(c[0]), int(c[1])),
            scale=None if j.get("scale") is None else float(j["scale"]),
            text=j.get("text"),
            raw=j,
        )


class Matches(List[Match]):
    """The list `Sandbox.locate` returns (best first for images, reading order for text), with
    the frame it looked at (``frame_version``) and how long it took (``elapsed_ms``)."""

    def __init__(self, matches: Iterable[Match] = (), frame_version: int = 0,
                 elapsed_ms: float = 0) -> None:
        super().__init__(matches)
        self.frame_version = frame_version
        self.elapsed_ms = elapsed_ms

    def __repr__(self) -> str:
        return f"Matches({list.__repr__(self)}, frame_version={self.frame_version})"


@dataclass
class OcrLine:
    """A line of text: its words joined by one space, their box, their mean confidence."""

    text: str
    x: int
    y: int
    width: int
    height: int
    confidence: float

    @property
    def box(self) -> Region:
        """``(x, y, width, height)``."""
        return (self.x, self.y, self.width, self.height)


@dataclass
class OcrWord:
    """One word; ``line`` is its index into `OcrResult.lines`."""

    text: str
    x: int
    y: int
    width: int
    height: int
    confidence: float  # 0..100
    line: int

    @property
    def box(self) -> Region:
        """``(x, y, width, height)``."""
        return (self.x, self.y, self.width, self.height)


@dataclass
class OcrResult:
    """The text on the screen (or a region): ``text`` is the lines joined by ``\\n``."""

    text: str
    lines: List[OcrLine]
    words: List[OcrWord]
    frame_version: int = 0
    elapsed_ms: float = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "OcrResult":
        """Builds it from the API's JSON object."""
        def num(o: Dict[str, Any], k: str) -> int:
            return int(o.get(k, 0))

        return cls(
            text=j.get("text", ""),
            lines=[OcrLine(text=l.get("text", ""), x=num(l, "x"), y=num(l, "y"),
                           width=num(l, "width"), height=num(l, "height"),
                           confidence=float(l.get("confidence", 0)))
                   for l in j.get("lines", [])],
            words=[OcrWord(text=w.get("text", ""), x=num(w, "x"), y=num(w, "y"),
                           width=num(w, "width"), height=num(w, "height"),
                           confidence=float(w.get("confidence", 0)), line=num(w, "line"))
                   for w in j.get("words", [])],
            frame_version=int(j.get("frame_version", 0)),
            elapsed_ms=j.get("elapsed_ms", 0),
            raw=j,
        )


@dataclass
class CompareResult:
    """The screen (or a region) against a baseline image.

    ``changed`` are boxes of the changed areas in screen coordinates; ``diff_image`` is a PNG
    (the screen dimmed, the changes marked) when ``diff=True`` was asked for. ``psnr`` is None
    when nothing differs.
    """

    identical: bool
    ssim: float
    psnr: Optional[float]
    changed_pixels: int
    changed_ratio: float
    changed: List[Region]
    width: int
    height: int
    diff_image: Optional[bytes] = None
    frame_version: int = 0
    elapsed_ms: float = 0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "CompareResult":
        """Builds it from the API's JSON object."""
        diff = j.get("diff_image")
        if isinstance(diff, str) and diff.startswith(_DATA_URL):
            diff = diff[len(_DATA_URL):]
        return cls(
            identical=bool(j.get("identical", False)),
            ssim=float(j.get("ssim", 0)),
            psnr=None if j.get("psnr") is None else float(j["psnr"]),
            changed_pixels=int(j.get("changed_pixels", 0)),
            changed_ratio=float(j.get("changed_ratio", 0)),
            changed=[_box(b) for b in j.get("changed", [])],
            width=int(j.get("width", 0)),
            height=int(j.get("height", 0)),
            diff_image=base64.b64decode(diff) if diff else None,
            frame_version=int(j.get("frame_version", 0)),
            elapsed_ms=j.get("elapsed_ms", 0),
            raw=j,
        )


@dataclass
class WaitResult:
    """How a wait ended. ``matched`` is False when it timed out (not an error, unless
    ``check=True`` was given); the result is truthy exactly when it matched.

    ``match`` is the match found (until image/text, and for gone the last one seen, if the
    server gives it); ``changed`` the boxes that changed (until change).
    """

    matched: bool
    until: str
    elapsed_ms: float
    frame_version: int
    match: Optional[Match] = None
    changed: List[Region] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return self.matched

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "WaitResult":
        """Builds it from the API's JSON object."""
        m = j.get("match")
        return cls(
            matched=bool(j.get("matched", False)),
            until=str(j.get("until", "")),
            elapsed_ms=j.get("elapsed_ms", 0),
            frame_version=int(j.get("frame_version", 0)),
            match=Match.from_json(m) if isinstance(m, dict) else None,
            changed=[_box(b) for b in (j.get("changed") or [])],
            raw=j,
        )


class WaitTimeoutError(DeskboxError):
    """Raised by the ``wait_for...`` calls with ``check=True`` when the wait timed out;
    ``result`` is the `WaitResult` (``matched`` False)."""

    def __init__(self, result: WaitResult, what: str) -> None:
        self.result = result
        super().__init__(f"waiting for {what}: timed out after {result.elapsed_ms} ms",
                         code="wait_timeout")


# ---------------------------------------------------------------------------------------------
# Targets
# ---------------------------------------------------------------------------------------------
@dataclass
class Target:
    """What a click, move, scroll, mouse press or release aims at instead of x/y: a text
    (``Target(text="OK")``), an image (``Target(image="ok.png", threshold=0.8)``) or an
    accessible element (``Target(role="push button", name="Save")``, with ``name_match``,
    ``states`` and ``app`` as in `Sandbox.find_elements`; the centre of its bounds).

    The action runs at the match's centre plus ``offset``; ``index`` picks among several
    matches (default the first: reading order for text, best score for images). The server
    waits up to ``timeout_ms`` (default 5000) for it to appear, else the action fails with
    `TargetNotFoundError`.
    """

    text: Optional[str] = None
    image: Optional[ImageInput] = None
    region: Optional[RegionLike] = None
    threshold: Optional[float] = None
    exact: Optional[bool] = None
    grayscale: Optional[bool] = None
    scales: Optional[Sequence[float]] = None
    lang: Optional[str] = None
    index: Optional[int] = None
    offset: Optional[Tuple[int, int]] = None
    timeout_ms: Optional[int] = None
    role: Optional[str] = None
    name: Optional[str] = None
    name_match: Optional[str] = None
    states: Optional[Sequence[str]] = None
    app: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        """The action's ``target`` object (the image base64-encoded)."""
        if self.role is not None:
            body: Dict[str, Any] = {"role": self.role}
            for key, value in (("name", self.name), ("name_match", self.name_match),
                               ("app", self.app)):
                if value is not None:
                    body[key] = value
            if self.states is not None:
                body["states"] = list(self.states)
        else:
            body = search_body(image=self.image, text=self.text, region=self.region,
                               threshold=self.threshold, scales=self.scales,
                               grayscale=self.grayscale, exact=self.exact, lang=self.lang)
        if self.index is not None:
            body["index"] = int(self.index)
        if self.offset is not None:
            body["offset"] = [int(self.offset[0]), int(self.offset[1])]
        if self.timeout_ms is not None:
            body["timeout_ms"] = int(self.timeout_ms)
        return body


__all__ = [
    "CompareResult",
    "ImageInput",
    "Match",
    "Matches",
    "OcrLine",
    "OcrResult",
    "OcrWord",
    "Region",
    "Target",
    "WaitResult",
    "WaitTimeoutError",
]
