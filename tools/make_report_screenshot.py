"""Render the demo study's report.html in headless Chromium: check every figure loaded, save the screenshot.

Run: ``python3 tools/make_report_screenshot.py`` (needs ``chromium``; Debian: ``apt-get install chromium``).
Writes ``figures/study_report.png`` (the top of the page: recipe summary and SQNR heat map),
palette-quantized to keep the repository small.
"""

import sys
import tempfile
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fp8emu.lab import report, study  # noqa: E402

OUT = ROOT / "figures" / "study_report.png"


def main():
    with tempfile.TemporaryDirectory() as d:
        study.run_study([study.demo_checkpoint()], d, progress=False)
        shot = Path(d) / "shot.png"
        images = report.check_in_browser(Path(d) / "report.html", screenshot=shot, width=1100, height=1620)
        bad = [i for i in images if not (i["complete"] and i["width"] > 0)]
        if len(images) != 2 or bad:
            raise SystemExit(f"figures did not load in Chromium: {images}")
        Image.open(shot).convert("RGB").quantize(colors=128).save(OUT, optimize=True)
    print(f"{len(images)} figures loaded: {images}; wrote {OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
