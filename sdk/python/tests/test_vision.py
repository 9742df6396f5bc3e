"""Seeing the screen (locate, ocr, compare, wait_for, targeted actions) against a real deskboxd.

One sandbox (container runtime, template `minimal`) with a second xterm of a larger font at a
known place, into which setUpClass types

    W=APPLE
    echo PINE$W             -> PINEAPPLE
    echo MANGO$W MANGO$W    -> MANGOAPPLE MANGOAPPLE

so that the words searched for appear only where the shell printed them (the command lines
hold ``PINE$W``, not ``PINEAPPLE``). Templates and baselines are cut from and painted on the
test's own screenshots.
"""

from __future__ import annotations

import asyncio
import base64
import os
import pathlib
import tempfile
import time
import unittest
from typing import List, Optional, Tuple

import support  # noqa: F401  (puts sdk/python on sys.path)
from support import RUNTIME, TEMPLATE, DeskboxdProcess, Picture, wait_until

import deskbox
from deskbox import (
    BadRequestError,
    CompareResult,
    DeskboxError,
    Match,
    Matches,
    OcrResult,
    Sandbox,
    Target,
    TargetNotFoundError,
    WaitResult,
    WaitTimeoutError,
    Window,
)

server: Optional[DeskboxdProcess] = None
FONT = ["-fa", "DejaVu Sans Mono", "-fs", "16", "-bg", "white", "-fg", "black"]
# A corner of the bare desktop no window covers (the xterms are placed elsewhere) and the
# pointer is kept out of.
STILL = (1180, 700, 80, 80)
POINTER_PARK = (1270, 10)
MULTI_CLICK_S = 0.6  # more than xterm's multiClickTime (250 ms)


def setUpModule() -> None:
    global server
    server = DeskboxdProcess()


def tearDownModule() -> None:
    if server is not None:
        server.stop()


def inside(box: Tuple[int, int, int, int], outer: Tuple[int, int, int, int]) -> bool:
    x, y, w, h = box
    ox, oy, ow, oh = outer
    return ox <= x and oy <= y and x + w <= ox + ow and y + h <= oy + oh


def intersects(box: Tuple[int, int, int, int], outer: Tuple[int, int, int, int]) -> bool:
    x, y, w, h = box
    ox, oy, ow, oh = outer
    return x < ox + ow and ox < x + w and y < oy + oh and oy < y + h


def rect(w: Window) -> Tuple[int, int, int, int]:
    return (w.x, w.y, w.width, w.height)


def near(a: Tuple[int, ...], b: Tuple[int, ...], tolerance: int = 2) -> bool:
    """Two points (or boxes) equal within a few pixels (OCR of a region and of the whole screen
    may draw a word's box a few pixels apart)."""
    return len(a) == len(b) and all(abs(x - y) <= tolerance for x, y in zip(a, b))


def checkerboard(width: int = 40, height: int = 20) -> bytes:
    """A magenta/green checkerboard PNG: nothing like it is on the screen."""
    px = bytearray()
    for y in range(height):
        for x in range(width):
            px += b"\xff\x00\xff" if (x // 4 + y // 4) % 2 else b"\x00\xff\x00"
    return Picture(width, height, 3, px).to_png()


class VisionTest(unittest.TestCase):
    sb: Sandbox
    term: Window  # the test's xterm, holding the typed lines

    @classmethod
    def setUpClass(cls) -> None:
        assert server is not None
        cls.sb = Sandbox.create(template=TEMPLATE, runtime=RUNTIME, network=False, timeout=600,
                                server=server.url)
        try:
            # Typed before its shell reads the terminal, a line is echoed twice (by the tty,
            # then by readline after the prompt): wait for bash's first prompt.
            prompt = "/tmp/vision-prompt"
            cls.term = cls._start_xterm(["-geometry", "64x10+40+40", "-e", "env",
                                         f"PROMPT_COMMAND=touch {prompt}", "bash"])
            if not wait_until(lambda: cls.sb.files.exists(prompt), 15):
                raise RuntimeError("the test's xterm showed no prompt")
            cls.sb.left_click(cls.term.x + 30, cls.term.y + cls.term.height - 10)
            for line in ("W=APPLE", "echo PINE$W", "echo MANGO$W MANGO$W",
                         "touch /tmp/vision-ready"):
                cls.sb.write(line + "\n")
            if not wait_until(lambda: cls.sb.files.exists("/tmp/vision-ready"), 15):
                raise RuntimeError("the typed commands did not run in the test's xterm")
            cls.sb.move_mouse(*POINTER_PARK)
            time.sleep(0.5)  # the last prompt is drawn
        except BaseException:
            cls.sb.kill()
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sb.kill()

    @classmethod
    def _start_xterm(cls, args: List[str], lives: str = "") -> Window:
        """Starts an xterm and returns its window once it is mapped."""
        def xterms() -> List[Window]:
            return [w for w in cls.sb.windows() if w.wm_class == "XTerm" and w.visible]

        # The template's own xterm first, so that the new window is the one that was not there.
        wait_until(xterms, 20)
        before = {w.id for w in xterms()}
        argv = ["xterm", *FONT, *args] + (["-e", "sh", "-c", lives] if lives else [])
        cls.sb.commands.run(argv, background=True)
        new = wait_until(lambda: [w for w in xterms() if w.id not in before], 20)
        if not new:
            raise RuntimeError(f"the xterm {argv} did not appear")
        window: Window = new[0]
        return window

    def _reset_pointer(self) -> None:
        self.sb.move_mouse(*POINTER_PARK)

    def _deselect(self) -> None:
        """Leaves no button down and no selection in the test's xterm: a lone click on its
        empty last line (not part of a double click before it)."""
        t = self.term
        time.sleep(MULTI_CLICK_S)
        self.sb.act([{"type": "move", "x": t.x + 30, "y": t.y + t.height - 10},
                     {"type": "mouse_up", "button": "left"}])
        time.sleep(MULTI_CLICK_S)
        self.sb.left_click(t.x + 30, t.y + t.height - 10)
        self._reset_pointer()

    def _template(self, shot: Optional[bytes] = None) -> Tuple[Picture, Tuple[int, int, int, int]]:
        """A patch of the screen over the test's xterm's first lines (prompt + ``W=APPLE``,
        prompt + ``echo PINE$W``, ``PINEAPPLE``): found nowhere else."""
        pic = Picture.from_png(shot or self.sb.screenshot())
        t = self.term
        box = (t.x + 4, t.y + 3, min(360, t.width - 8), t.height * 3 // 10)
        return pic.crop(*box), box

    # -- locate: images ---------------------------------------------------------------------
    def test_locate_image_cut_from_a_screenshot(self) -> None:
        tpl, box = self._template()
        png = tpl.to_png()
        found = self.sb.locate(png)
        self.assertIsInstance(found, Matches)
        self.assertGreaterEqual(len(found), 1, found)
        m = found[0]
        self.assertIsInstance(m, Match)
        self.assertEqual(m.box, box)
        self.assertGreater(m.score, 0.99)
        self.assertLessEqual(m.score, 1.0)
        self.assertEqual(m.scale, 1.0)
        self.assertIsNone(m.text)
        self.assertLessEqual(abs(m.center[0] - (box[0] + box[2] // 2)), 1)
        self.assertLessEqual(abs(m.center[1] - (box[1] + box[3] // 2)), 1)
        self.assertGreater(found.frame_version, 0)
        self.assertGreaterEqual(found.elapsed_ms, 0)
        self.assertEqual([x.score for x in found], sorted((x.score for x in found), reverse=True))

        # The same as a path (str and PathLike), a data: URL, in grayscale, within a region.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "template.png")
            with open(path, "wb") as f:
                f.write(png)
            self.assertEqual(self.sb.locate(path)[0].box, box)
            self.assertEqual(self.sb.locate(pathlib.Path(path))[0].box, box)
        data_url = "data:image/png;base64," + base64.b64encode(png).decode()
        self.assertEqual(self.sb.locate(data_url)[0].box, box)
        self.assertEqual(self.sb.locate(png, grayscale=True)[0].box, box)
        self.assertEqual(self.sb.locate(png, region=self.term)[0].box, box)
        self.assertLessEqual(len(self.sb.locate(png, max_results=1, threshold=0.1)), 1)
        # A region that does not hold it: nothing (not an error).
        self.assertEqual(self.sb.locate(png, region=(0, 500, 1280, 300)), [])

    def test_locate_image_transparent_pixels_are_left_out(self) -> None:
        tpl, box = self._template()
        # The right half transparent, and painted over: the opaque half still matches exactly.
        half = tpl.width // 2
        masked = tpl.with_alpha().paint(half, 0, tpl.width - half, tpl.height,
                                        lambda p: [255, 0, 255, 0])
        m = self.sb.locate(masked.to_png())
        self.assertGreaterEqual(len(m), 1, m)
        self.assertEqual(m[0].box, box)
        self.assertGreater(m[0].score, 0.95)
        # The same painting opaque does not match at the default threshold.
        opaque = tpl.paint(half, 0, tpl.width - half, tpl.height, lambda p: [255, 0, 255])
        self.assertEqual([x for x in self.sb.locate(opaque.to_png()) if x.box == box], [])

    def test_locate_image_at_another_scale(self) -> None:
        tpl, box = self._template()
        small = tpl.scale_down(2)  # the screen shows it at twice this size
        found = self.sb.locate(small.to_png(), scales=[1.0, 2.0], threshold=0.6)
        self.assertGreaterEqual(len(found), 1, found)
        m = found[0]
        self.assertEqual(m.scale, 2.0)
        for got, want in zip(m.box, (box[0], box[1], small.width * 2, small.height * 2)):
            self.assertLessEqual(abs(got - want), 3, (m.box, box))

    def test_locate_image_not_there_and_errors(self) -> None:
        magenta = checkerboard()
        self.assertEqual(self.sb.locate(magenta), [])
        huge = Picture(1300, 4, 3, bytearray(1300 * 4 * 3)).to_png()
        tpl, _ = self._template()
        cases = [
            (dict(image=b"not a png"), "image"),
            (dict(image=huge), "image"),
            (dict(image=magenta, threshold=2), "threshold"),
            (dict(image=magenta, max_results=0), "max_results"),
            (dict(image=magenta, scales=[10.0]), "scales"),
            (dict(image=magenta, region=(1200, 700, 200, 200)), "region"),
            (dict(image=tpl.to_png(), region=(0, 0, 30, 30)), "image"),  # larger than the region
            (dict(text=""), "text"),
            (dict(text="x", lang="no_such_language"), "lang"),
        ]
        for kwargs, field in cases:
            with self.subTest(field=field, kwargs=list(kwargs)):
                with self.assertRaises(BadRequestError) as cm:
                    self.sb.locate(**kwargs)  # type: ignore[arg-type]
                self.assertEqual((cm.exception.status, cm.exception.field), (400, field))
        with self.assertRaises(BadRequestError):
            self.sb.locate()  # neither image nor text
        with self.assertRaises(BadRequestError):
            self.sb.locate(magenta, text="both")
        with self.assertRaises(FileNotFoundError):
            self.sb.locate("/no/such/template.png")

    # -- locate: text -------------------------------------------------------------------------
    def test_locate_text(self) -> None:
        found = self.sb.locate(text="PINEAPPLE")
        self.assertEqual(len(found), 1, found)
        m = found[0]
        self.assertIn("PINEAPPLE", (m.text or "").upper())
        self.assertTrue(inside(m.box, rect(self.term)), (m, self.term))
        self.assertTrue(m.x <= m.center[0] < m.x + m.width and m.y <= m.center[1] < m.y + m.height)
        self.assertTrue(0 < m.score <= 1, m.score)
        self.assertGreater(found.frame_version, 0)
        # Case-insensitive substrings by default; exact is whole words, case-sensitive.
        self.assertEqual([x.box for x in self.sb.locate(text="pineapple")], [m.box])
        self.assertEqual([x.box for x in self.sb.locate(text="PINEAPPLE", exact=True)], [m.box])
        self.assertEqual(self.sb.locate(text="pineapple", exact=True), [])
        self.assertEqual(self.sb.locate(text="APPL", exact=True), [])
        self.assertEqual(self.sb.locate(text="NO-SUCH-WORD-ON-SCREEN"), [])
        in_term = self.sb.locate(text="PINEAPPLE", region=self.term, lang="eng")
        self.assertEqual(len(in_term), 1, in_term)
        self.assertTrue(near(in_term[0].center, m.center, 3), (in_term, m))

    def test_locate_text_in_reading_order(self) -> None:
        # APPLE: in "W=APPLE" (line 1), "PINEAPPLE" (line 3) and twice in line 5.
        found = self.sb.locate(text="APPLE", region=self.term)
        self.assertEqual(len(found), 4, found)
        self.assertEqual([m.y for m in found], sorted(m.y for m in found))
        line1, pine, mango1, mango2 = found
        self.assertIn("PINEAPPLE", (pine.text or "").upper())
        self.assertLess(line1.y + line1.height, pine.y + 1)
        self.assertLess(pine.y + pine.height, mango1.y + 1)
        self.assertLessEqual(abs(mango1.y - mango2.y), 2)
        self.assertLess(mango1.x + mango1.width, mango2.x + 1)
        # max_results cuts the list, keeping the first ones.
        self.assertEqual([m.box for m in self.sb.locate(text="APPLE", region=self.term,
                                                        max_results=2)],
                         [line1.box, pine.box])

    # -- ocr ----------------------------------------------------------------------------------
    def test_ocr_reads_what_was_typed(self) -> None:
        r = self.sb.ocr(region=self.term)
        self.assertIsInstance(r, OcrResult)
        self.assertIn("PINEAPPLE", r.text)
        self.assertIn("MANGOAPPLE MANGOAPPLE", r.text)
        self.assertEqual(r.text, "\n".join(line.text for line in r.lines))
        self.assertGreater(r.frame_version, 0)
        words = [w for w in r.words if w.text == "PINEAPPLE"]
        self.assertEqual(len(words), 1, r.words)
        w = words[0]
        self.assertTrue(inside(w.box, rect(self.term)), (w, self.term))
        self.assertTrue(0 <= w.confidence <= 100, w.confidence)
        self.assertIn("PINEAPPLE", r.lines[w.line].text)
        self.assertTrue(inside(w.box, r.lines[w.line].box) or w.box == r.lines[w.line].box)
        # Lines in reading order, words line by line.
        self.assertEqual([ln.y for ln in r.lines], sorted(ln.y for ln in r.lines))
        self.assertEqual([x.line for x in r.words], sorted(x.line for x in r.words))
        mangos = [x for x in r.words if x.text == "MANGOAPPLE"]
        self.assertEqual(len(mangos), 2, r.words)
        self.assertEqual(mangos[0].line, mangos[1].line)
        self.assertGreater(mangos[0].line, w.line)
        # The whole screen holds it too; a high min_confidence drops the doubtful words.
        whole = self.sb.ocr()
        self.assertIn("PINEAPPLE", whole.text)
        strict = self.sb.ocr(region=self.term, lang="eng", min_confidence=99.9)
        self.assertTrue(all(x.confidence >= 99.9 for x in strict.words), strict.words)
        self.assertLessEqual(len(strict.words), len(r.words))

    def test_ocr_errors(self) -> None:
        with self.assertRaises(BadRequestError) as cm:
            self.sb.ocr(region=(0, 0, 5000, 10))
        self.assertEqual(cm.exception.field, "region")
        with self.assertRaises(BadRequestError) as cm:
            self.sb.ocr(lang="no_such_language")
        self.assertEqual(cm.exception.field, "lang")
        with self.assertRaises(BadRequestError) as cm:
            self.sb.ocr(min_confidence="high")  # type: ignore[arg-type]
        self.assertEqual(cm.exception.field, "min_confidence")
        with self.assertRaises(ValueError):
            self.sb.ocr(region=(1, 2, 3))

    # -- compare ------------------------------------------------------------------------------
    def test_compare_with_itself_is_identical(self) -> None:
        shot = self.sb.screenshot()
        r = self.sb.compare(shot)
        self.assertIsInstance(r, CompareResult)
        self.assertTrue(r.identical, r)
        self.assertEqual((r.changed_pixels, r.changed_ratio, r.changed), (0, 0, []))
        self.assertIsNone(r.psnr)
        self.assertAlmostEqual(r.ssim, 1.0, places=6)
        self.assertEqual((r.width, r.height), (1280, 800))
        self.assertIsNone(r.diff_image)
        self.assertGreater(r.frame_version, 0)
        with tempfile.NamedTemporaryFile(suffix=".png") as f:
            f.write(shot)
            f.flush()
            self.assertTrue(self.sb.compare(f.name).identical)

    def test_compare_reports_a_painted_rectangle(self) -> None:
        pic = Picture.from_png(self.sb.screenshot())
        box = (100, 300, 50, 30)
        painted = pic.invert(*box).to_png()  # every pixel in the box differs
        r = self.sb.compare(painted)
        self.assertFalse(r.identical)
        self.assertEqual(r.changed, [box])
        self.assertEqual(r.changed_pixels, 50 * 30)
        self.assertAlmostEqual(r.changed_ratio, 1500 / (1280 * 800), places=6)
        self.assertIsNotNone(r.psnr)
        self.assertGreater(r.psnr or 0, 0)
        self.assertLess(r.ssim, 1.0)
        # The diff image is a PNG of the compared size.
        d = self.sb.compare(painted, diff=True)
        assert d.diff_image is not None
        diff = Picture.from_png(d.diff_image)
        self.assertEqual((diff.width, diff.height), (1280, 800))
        # Masked out, nothing changed.
        self.assertTrue(self.sb.compare(painted, mask=[box]).identical)
        m = self.sb.compare(painted, mask=[(90, 290, 70, 50), (0, 0, 10, 10)])
        self.assertEqual((m.identical, m.changed_pixels, m.changed), (True, 0, []))
        half = self.sb.compare(painted, mask=[(100, 300, 25, 30)])
        self.assertEqual((half.changed_pixels, half.changed), (25 * 30, [(125, 300, 25, 30)]))
        # A region: the baseline is that region's size, the boxes still in screen coordinates.
        region = (90, 290, 70, 50)
        part = Picture.from_png(painted).crop(*region).to_png()
        r = self.sb.compare(part, region=region)
        self.assertEqual((r.width, r.height), (70, 50))
        self.assertEqual(r.changed, [box])
        self.assertEqual(r.changed_pixels, 1500)
        self.assertAlmostEqual(r.changed_ratio, 1500 / (70 * 50), places=6)

    def test_compare_tolerance(self) -> None:
        pic = Picture.from_png(self.sb.screenshot())
        box = (300, 500, 40, 20)
        # Each channel of each pixel in the box off by exactly 10.
        shifted = pic.paint(*box, lambda p: [v + 10 if v < 128 else v - 10 for v in p]).to_png()
        r = self.sb.compare(shifted, tolerance=10)
        self.assertEqual((r.identical, r.changed_pixels, r.changed), (True, 0, []))
        r = self.sb.compare(shifted, tolerance=9)
        self.assertEqual((r.identical, r.changed_pixels, r.changed), (False, 800, [box]))

    def test_compare_errors(self) -> None:
        small = Picture(10, 10, 3, bytearray(300)).to_png()
        shot = self.sb.screenshot()
        cases = [
            (dict(baseline=small), "baseline"),  # not the screen's size
            (dict(baseline=b"\x89PNG nope"), "baseline"),
            (dict(baseline=small, region=(0, 0, 11, 10)), "baseline"),
            (dict(baseline=small, region=(1275, 0, 10, 10)), "region"),
            (dict(baseline=shot, tolerance=256), "tolerance"),
            (dict(baseline=shot, mask=[(1270, 790, 20, 20)]), "mask[0]"),
        ]
        for kwargs, field in cases:
            with self.subTest(field=field):
                with self.assertRaises(BadRequestError) as cm:
                    self.sb.compare(**kwargs)  # type: ignore[arg-type]
                self.assertEqual((cm.exception.status, cm.exception.field), (400, field))

    # -- wait ---------------------------------------------------------------------------------
    def test_wait_for_change_after_typing(self) -> None:
        t = self.term
        self.sb.left_click(t.x + 30, t.y + t.height - 10)  # focus (on the empty last line)
        self._reset_pointer()
        still = self.sb.wait_until_stable(300, timeout_ms=5000)
        self.assertIsInstance(still, WaitResult)
        self.assertTrue(still.matched, still)
        self.assertEqual(still.until, "stable")
        self.assertGreater(still.frame_version, 0)
        try:
            self.sb.write("z")
            r = self.sb.wait_for_change(since=still.frame_version, timeout_ms=5000)
            self.assertTrue(r.matched, r)
            self.assertTrue(r)
            self.assertEqual(r.until, "change")
            self.assertGreater(r.frame_version, still.frame_version)
            self.assertGreaterEqual(len(r.changed), 1, r)
            for box in r.changed:
                self.assertTrue(intersects(box, rect(t)), (box, t))
            # Within a region that holds the prompt line, too (the change is there already).
            r = self.sb.wait_for_change(since=still.frame_version, region=t, timeout_ms=5000)
            self.assertTrue(r.matched, r)
        finally:
            self.sb.press("BackSpace")
        self.assertTrue(self.sb.wait_until_stable(300, timeout_ms=5000).matched)

    def test_wait_times_out_without_raising(self) -> None:
        self._reset_pointer()
        t0 = time.monotonic()
        r = self.sb.wait_for_change(region=STILL, timeout_ms=400)
        took = time.monotonic() - t0
        self.assertFalse(r.matched, r)
        self.assertFalse(r)
        self.assertEqual(r.until, "change")
        self.assertGreaterEqual(r.elapsed_ms, 350)
        self.assertGreaterEqual(took, 0.35)
        self.assertLess(took, 5)
        self.assertEqual(r.changed, [])
        # check=True turns the timeout into an exception carrying the result.
        with self.assertRaises(WaitTimeoutError) as cm:
            self.sb.wait_for_text("NO-SUCH-WORD-ON-SCREEN", timeout_ms=300, check=True)
        self.assertIsInstance(cm.exception, DeskboxError)
        self.assertFalse(cm.exception.result.matched)
        self.assertEqual(cm.exception.result.until, "text")
        self.assertEqual(cm.exception.code, "wait_timeout")
        # timeout_ms 0 looks once.
        r = self.sb.wait_for_text("PINEAPPLE", timeout_ms=0)
        self.assertTrue(r.matched, r)
        assert r.match is not None
        self.assertIn("PINEAPPLE", (r.match.text or "").upper())

    def test_wait_for_text_and_image_to_appear_and_go(self) -> None:
        # A short-lived xterm prints KUMQUAT after a second and closes six seconds later.
        lives = "sleep 1; echo KUMQUAT; sleep 6"
        geometry = ["-geometry", "20x3+700+420"]
        self._start_xterm(geometry, lives)
        appeared = self.sb.wait_for_text("KUMQUAT", timeout_ms=15000, check=True)
        self.assertEqual(appeared.until, "text")
        m = appeared.match
        assert m is not None
        self.assertIn("KUMQUAT", (m.text or "").upper())
        self.assertFalse(intersects(m.box, rect(self.term)), m)
        # Cut it from the screen (a little margin around the word) while it is there.
        pic = Picture.from_png(self.sb.screenshot())
        cut = (m.x - 3, m.y - 3, m.width + 6, m.height + 6)
        patch = pic.crop(*cut).to_png()
        self.assertEqual(self.sb.locate(patch)[0].box, cut)

        gone = self.sb.wait_until_gone(image=patch, timeout_ms=15000)
        self.assertTrue(gone.matched, gone)
        self.assertEqual(gone.until, "gone")
        self.assertGreater(gone.elapsed_ms, 500)  # it stayed ~6 s after being printed
        self.assertEqual(self.sb.locate(patch), [])
        self.assertEqual(self.sb.locate(text="KUMQUAT"), [])

        # Again: now the image appears.
        self._start_xterm(geometry, lives)
        appeared = self.sb.wait_for_image(patch, timeout_ms=15000)
        self.assertTrue(appeared.matched, appeared)
        self.assertEqual(appeared.until, "image")
        assert appeared.match is not None
        self.assertGreater(appeared.match.score, 0.9)
        self.assertEqual((appeared.match.width, appeared.match.height), (cut[2], cut[3]))
        gone = self.sb.wait_until_gone("KUMQUAT", timeout_ms=15000)
        self.assertTrue(gone.matched, gone)

    def test_wait_for_image_already_there(self) -> None:
        tpl, box = self._template()
        r = self.sb.wait_for_image(tpl.to_png(), timeout_ms=5000)
        self.assertTrue(r.matched, r)
        assert r.match is not None
        self.assertEqual(r.match.box, box)
        inverted = tpl.invert(0, 0, tpl.width, tpl.height).to_png()
        self.assertFalse(self.sb.wait_for_image(inverted, timeout_ms=300).matched)
        self.assertTrue(self.sb.wait_until_gone(image=inverted, timeout_ms=5000).matched)
        self.assertFalse(self.sb.wait_until_gone(image=tpl.to_png(), timeout_ms=300).matched)

    def test_wait_errors(self) -> None:
        cases = [
            (dict(until="forever"), "until"),
            (dict(until="change", timeout_ms=120001), "timeout_ms"),
            (dict(until="stable", stable_ms=0), "stable_ms"),
            (dict(until="change", region=(0, 0, 0, 10)), "region"),
            (dict(until="text", text=""), "text"),
        ]
        for kwargs, field in cases:
            with self.subTest(field=field):
                with self.assertRaises(BadRequestError) as cm:
                    self.sb.wait_for(**kwargs)  # type: ignore[arg-type]
                self.assertEqual((cm.exception.status, cm.exception.field), (400, field))

    # -- targeted actions -----------------------------------------------------------------
    def test_click_and_move_at_text(self) -> None:
        where = self.sb.locate(text="PINEAPPLE")[0]
        m = self.sb.click_text("PINEAPPLE")
        self.assertIsInstance(m, Match)
        self.assertEqual(m.box, where.box)
        self.assertEqual(self.sb.cursor(), m.center)
        moved = self.sb.move_mouse(target=Target(text="PINEAPPLE", offset=(3, -2)))
        assert moved is not None
        self.assertEqual(moved.box, where.box)
        self.assertEqual(self.sb.cursor(), (moved.center[0] + 3, moved.center[1] - 2))
        # index picks among the matches (reading order).
        mangos = self.sb.locate(text="MANGOAPPLE")
        self.assertEqual(len(mangos), 2, mangos)
        second = self.sb.move_mouse(target=Target(text="MANGOAPPLE", index=1))
        assert second is not None
        self.assertEqual(second.box, mangos[1].box)
        self.assertEqual(self.sb.cursor(), mangos[1].center)
        self.assertIsNone(self.sb.move_mouse(*POINTER_PARK))  # no target: no match

    def test_double_click_on_a_word_selects_it(self) -> None:
        # xterm puts the word a double click selects on the clipboard (selectToClipboard).
        self.sb.clipboard.set("before")
        try:
            m = self.sb.double_click(target=Target(text="PINEAPPLE", exact=True))
            assert m is not None
            self.assertEqual(self.sb.cursor(), m.center)
            self.assertEqual(wait_until(lambda: self.sb.clipboard.get() == "PINEAPPLE" and "ok", 5),
                             "ok", self.sb.clipboard.get())
        finally:
            self._deselect()

    def test_actions_at_an_image(self) -> None:
        tpl, box = self._template()
        png = tpl.to_png()
        centre = (box[0] + box[2] // 2, box[1] + box[3] // 2)
        try:
            m = self.sb.click_image(png)
            self.assertEqual(m.box, box)
            self.assertEqual(self.sb.cursor(), m.center)
            self.assertLessEqual(max(abs(m.center[0] - centre[0]), abs(m.center[1] - centre[1])), 1)
            at = Target(image=png, threshold=0.95, offset=(0, 1))
            below = (m.center[0], m.center[1] + 1)
            for call in (lambda: self.sb.left_click(target=at),
                         lambda: self.sb.scroll(dy=-1, target=at),
                         lambda: self.sb.mouse_press(target=at)):
                # Clicks on the same spot apart by more than xterm's double-click time (else
                # the second one selects a word, and the template no longer matches).
                time.sleep(MULTI_CLICK_S)
                self._reset_pointer()
                got = call()
                assert got is not None
                self.assertEqual(got.box, box)
                self.assertEqual(self.sb.cursor(), below)
            # Released where it was pressed (moving away first would drag a selection).
            got = self.sb.mouse_release(target=at)
            assert got is not None
            self.assertEqual((got.box, self.sb.cursor()), (box, below))
            # A Target inside a hand-written batch; the result carries the match.
            results = self.sb.act([{"type": "move", "target": Target(image=png)},
                                   {"type": "cursor_position"}])
            self.assertEqual(Match.from_json(results[0]["target"]).box, box)
            self.assertEqual((results[1]["x"], results[1]["y"]), m.center)
        finally:
            self._deselect()

    def test_target_not_found(self) -> None:
        t0 = time.monotonic()
        with self.assertRaises(TargetNotFoundError) as cm:
            self.sb.click_text("NO-SUCH-WORD-ON-SCREEN", timeout_ms=300)
        self.assertLess(time.monotonic() - t0, 4.5)
        e = cm.exception
        self.assertEqual((e.status, e.code, e.field), (422, "target_not_found", "target"))
        self.assertIsInstance(e, DeskboxError)
        # In a batch: the field names the action; the actions before it have run.
        with self.assertRaises(TargetNotFoundError) as cm:
            self.sb.act([{"type": "move", "x": 1200, "y": 20},
                         {"type": "click", "target": {"text": "NO-SUCH-WORD", "timeout_ms": 0}},
                         {"type": "move", "x": 1210, "y": 30}])
        self.assertEqual(cm.exception.field, "actions[1].target")
        self.assertEqual(self.sb.cursor(), (1200, 20))
        magenta = checkerboard()
        with self.assertRaises(TargetNotFoundError):
            self.sb.click_image(magenta, timeout_ms=0)
        self._reset_pointer()

    # -- asyncio --------------------------------------------------------------------------
    def test_async_sandbox(self) -> None:
        from deskbox.aio import AsyncSandbox

        assert server is not None
        url = server.url
        tpl, box = self._template()
        png = tpl.to_png()

        async def main() -> tuple:  # type: ignore[type-arg]
            a = await AsyncSandbox.connect(self.sb.id, server=url)
            try:
                shot = await a.screenshot()
                found, text, ocr, same = await asyncio.gather(
                    a.locate(png), a.locate(text="PINEAPPLE"), a.ocr(region=self.term),
                    a.compare(shot, tolerance=0))
                still = await a.wait_until_stable(300, timeout_ms=5000)
                moved = await a.move_mouse(target=Target(text="PINEAPPLE"))
                cursor = await a.cursor()
                await a.move_mouse(*POINTER_PARK)
                return found, text, ocr, same, still, moved, cursor
            finally:
                a.sync.close()

        found, text, ocr, same, still, moved, cursor = asyncio.run(main())
        self.assertEqual(found[0].box, box)
        self.assertEqual(len(text), 1)
        self.assertIn("PINEAPPLE", ocr.text)
        self.assertTrue(same.identical, same)
        self.assertTrue(still.matched)
        self.assertEqual(moved.box, text[0].box)
        self.assertEqual(cursor, moved.center)


class TargetJsonTest(unittest.TestCase):
    """What the SDK sends (no server needed)."""

    def test_target_to_json(self) -> None:
        self.assertEqual(Target(text="OK").to_json(), {"text": "OK"})
        t = Target(image=b"\x89PNG", region=(1, 2, 3, 4), threshold=0.8, grayscale=True,
                   scales=[1, 2], index=1, offset=(5, -6), timeout_ms=0)
        self.assertEqual(t.to_json(), {"image": base64.b64encode(b"\x89PNG").decode(),
                                       "region": [1, 2, 3, 4], "threshold": 0.8,
                                       "grayscale": True, "scales": [1.0, 2.0], "index": 1,
                                       "offset": [5, -6], "timeout_ms": 0})
        w = Window(id=1, title="", wm_class="", instance="", x=7, y=8, width=9, height=10,
                   active=True, visible=True)
        self.assertEqual(Target(text="a", region=w, exact=True, lang="eng").to_json(),
                         {"text": "a", "region": [7, 8, 9, 10], "exact": True, "lang": "eng"})
        self.assertEqual(Target(image="data:image/png;base64,AAAA").to_json(),
                         {"image": "data:image/png;base64,AAAA"})
        with self.assertRaises(TypeError):
            Target(image=12).to_json()  # type: ignore[arg-type]

    def test_results_from_json(self) -> None:
        m = Match.from_json({"x": 1, "y": 2, "width": 3, "height": 4, "score": 0.5,
                             "center": [2, 4], "text": "hi"})
        self.assertEqual((m.box, m.center, m.text, m.scale), ((1, 2, 3, 4), (2, 4), "hi", None))
        w = WaitResult.from_json({"matched": False, "until": "change", "elapsed_ms": 5,
                                  "frame_version": 9})
        self.assertFalse(w)
        self.assertEqual((w.match, w.changed), (None, []))
        c = CompareResult.from_json({"identical": False, "ssim": 0.5, "psnr": 20.5,
                                     "changed_pixels": 2, "changed_ratio": 0.1,
                                     "changed": [[1, 2, 3, 4]], "width": 5, "height": 6,
                                     "diff_image": base64.b64encode(b"png").decode()})
        self.assertEqual((c.changed, c.diff_image, c.psnr), ([(1, 2, 3, 4)], b"png", 20.5))
        self.assertEqual(deskbox.Matches([m], frame_version=3), [m])


if __name__ == "__main__":
    unittest.main()
