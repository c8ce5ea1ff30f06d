"""A `gpudoctor report` Markdown file as GitHub would show it, as a PNG (issue 31's must-show).

    python scripts/report_screenshot.py REPORT.md OUT.png [--css github-markdown-light.css]

Renders with markdown-it-py's GFM preset (tables, strikethrough, autolinks, raw HTML such as
<details>, as GitHub's own renderer allows), wraps it in GitHub's stylesheet when one is given
(npm's github-markdown-css), and has headless Chromium take a full-page screenshot. Needs
markdown-it-py and linkify-it-py, and a `chromium` on PATH (Debian: apt-get install chromium).
"""

from __future__ import annotations

import argparse
import html
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def page(markdown: str, css: str, title: str) -> str:
    from markdown_it import MarkdownIt

    body = MarkdownIt("gfm-like").render(markdown)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{css}\nbody{{margin:0}}.markdown-body{{box-sizing:border-box;max-width:1012px;padding:32px;margin:0 auto}}"
            "details{margin-bottom:16px}</style></head>"
            f"<body><article class='markdown-body'>{body}</article></body></html>")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--css", type=Path, help="github-markdown-css's github-markdown-light.css")
    parser.add_argument("--height", type=int, default=4000, help="window height in pixels (the screenshot's)")
    args = parser.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not browser:
        print("no chromium on PATH", file=sys.stderr)
        return 2
    css = args.css.read_text() if args.css else ""
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder) / "report.html"
        source.write_text(page(args.report.read_text(), css, args.report.name), encoding="utf-8")
        done = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                               f"--window-size=1100,{args.height}", f"--screenshot={args.png.resolve()}", source.as_uri()],
                              capture_output=True, text=True, timeout=120)
    if done.returncode != 0 or not args.png.exists():
        print(done.stderr[-2000:], file=sys.stderr)
        return 1
    print(args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
