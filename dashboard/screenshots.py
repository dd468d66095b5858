"""Screenshots of the dashboard's pages for the docs: `python -m dashboard.screenshots --runs DIR
--out docs/images/dashboard`.

`mars dashboard --runs DIR` is started, and every shot of `SHOTS` is taken with headless
Chromium as the browser test does it (dashboard/browser.py): the page's URL is opened, and once
its script run has finished and drawn its text, every element and every chart, the window,
`WIDTH` px wide and the shot's height tall, is saved. A shot with `#anchor` opens the page
scrolled to that heading. Each PNG is cut below the page's last drawn pixel and saved with 256
colours, so a page is some 5-100 kB.

A page is one line of `SHOTS` (file name, URL query, text the page draws when done, height):
`Shot("inspector", "page=inspector", ("<a heading of that page>",))` adds a page.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageChops

from dashboard.browser import WIDTH, Browser, page_ready, serve

SETTLE_S = 0.5  # after the page is drawn and scrolled: the last paint
SIDEBAR_PX = 300  # the sidebar's width at 1400 px: its grey runs down the whole window
MARGIN_PX = 24


@dataclass(frozen=True)
class Shot:
    name: str  # the PNG's name, without .png
    query: str  # the URL after `?`: `page=training`, `page=training#policy-against-equilibrium`
    needles: tuple[str, ...]  # text the page has drawn when it is done
    height: int = 1800  # the window's height: the page is cut there


SHOTS = [
    Shot("runs", "page=runs", ("Accuracy by suite x MAS x model",)),
    Shot("samples", "page=samples", ("matching samples", "accuracy of matches")),
    Shot("compare", "page=compare", ("Sample by sample", "Accuracy against tokens"), height=2300),
    Shot("failure-modes", "page=failure-modes", ("Failure modes (MAST)",), height=900),
    Shot("games", "page=games", ("Games",), height=900),
    Shot("training", "page=training", ("Exploitability (0 = a Nash equilibrium)",), height=2800),
    Shot("inspector", "page=inspector", ("Collapse signals per step", "branches at"), height=3400),
    Shot("experiments", "page=experiments", ("Experiments", "parts finished"), height=1400),
    Shot(
        "training-policy",
        "page=training#policy-against-equilibrium",
        ("Policy against equilibrium", "Best response per state"),
        height=2400,
    ),
]


def _bottom(image: Image.Image, left: int, right: int) -> int:
    """The lowest row between columns left and right that differs from the background (the
    colour at the window's bottom left of that strip), 0 for none."""
    strip = image.crop((left, 0, right, image.height))
    background = Image.new("RGB", strip.size, strip.getpixel((0, strip.height - 1)))
    box = ImageChops.difference(strip, background).getbbox()
    return 0 if box is None else box[3]


def _optimise(png: Path) -> None:
    """Cut the empty space under the page (sidebar and main area) and keep 256 colours."""
    image = Image.open(png).convert("RGB")
    # The sidebar's edge is a column of its own colour: left of it the sidebar, right the page.
    bottom = max(_bottom(image, 0, SIDEBAR_PX - 30), _bottom(image, SIDEBAR_PX + 10, image.width))
    if bottom:
        image = image.crop((0, 0, image.width, min(image.height, bottom + MARGIN_PX)))
    image.quantize(colors=256, method=Image.Quantize.FASTOCTREE).save(png, optimize=True)


def shoot(browser: Browser, url: str, shot: Shot, out: Path) -> Path:
    """The shot's PNG under `out`, taken once the page is drawn."""
    png = out / f"{shot.name}.png"
    dom = browser.load(f"{url}/?{shot.query}", list(shot.needles), height=shot.height)
    if dom.exception:
        raise SystemExit(f"{shot.name}: the page shows an exception: {dom.text[-800:]}")
    if not page_ready(dom, list(shot.needles)):
        raise SystemExit(f"{shot.name}: {list(shot.needles)} not drawn within the timeout")
    if "#" in shot.query:  # the heading's own id (Streamlit scrolls there only on a first load)
        anchor = json.dumps(shot.query.split("#", 1)[1])
        browser.evaluate(f"document.getElementById({anchor})?.scrollIntoView()")
    time.sleep(SETTLE_S)
    browser.screenshot(png)
    _optimise(png)
    return png


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, required=True, help="the runs root to serve")
    parser.add_argument("--out", type=Path, required=True, help="folder for the PNGs")
    parser.add_argument("--only", nargs="*", default=None, help="shot names (default: all)")
    args = parser.parse_args(argv)
    shots = [s for s in SHOTS if args.only is None or s.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mars-screenshots-") as tmp:
        work = Path(tmp)
        with (
            # the pages' remembered runs in a file of the shoot's own, not the user's cache
            serve(
                args.runs.resolve(),
                work / "dashboard.log",
                env={**os.environ, "MARS_DASHBOARD_STATE": str(work / "state.json")},
            ) as url,
            Browser(work / "profile") as browser,
        ):
            for shot in shots:
                png = shoot(browser, url, shot, args.out)
                print(f"{png} ({WIDTH} px wide, {png.stat().st_size // 1024} kB)")


if __name__ == "__main__":
    main()
