"""Render the demo study's report.html in headless Chromium: check every figure loaded, save the screenshot.

Run: ``python3 tools/make_report_screenshot.py`` (needs ``chromium``; Debian: ``apt-get install chromium``).
Writes ``figures/study_report.png`` (the top of the page: provenance, conclusion, recipe summary,
column definitions and the start of the best-recipe table), palette-quantized to keep the
repository small.  The study runs as ``fp8emu study --demo`` in a temporary folder, so the
report's provenance shows that command.
"""

import os
import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fp8emu.cli import main as fp8emu_main  # noqa: E402
from fp8emu.lab import report  # noqa: E402

OUT = ROOT / "figures" / "study_report.png"


def main():
    with tempfile.TemporaryDirectory() as d:
        here = os.getcwd()
        os.chdir(d)
        try:
            if fp8emu_main(["study", "--demo", "--quiet"]) != 0:
                raise SystemExit("fp8emu study --demo failed")
        finally:
            os.chdir(here)
        page = Path(d) / "fp8emu-study-demo" / "report.html"
        shot = Path(d) / "shot.png"
        images = report.check_in_browser(page, screenshot=shot, width=1280, height=2000)
        bad = [i for i in images if not (i["complete"] and i["width"] > 0)]
        if len(images) != 2 or bad:
            raise SystemExit(f"figures did not load in Chromium: {images}")
        Image.open(shot).convert("RGB").quantize(colors=128).save(OUT, optimize=True)
    print(f"{len(images)} figures loaded: {images}; wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
