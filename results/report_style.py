"""The HTML report's stylesheet: one self-contained page, readable printed and on screen."""

from __future__ import annotations

from typing import Final

__all__ = ["CSS"]

CSS: Final = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto;
       max-width: 1500px; padding: 0 24px 48px; color: #1d1d1f; line-height: 1.45; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #dde; padding-bottom: 4px; margin-top: 2em; }
h3 { margin-bottom: 0.3em; }
.lead { color: #444; font-size: 1.05em; }
nav { background: #f5f6fa; padding: 8px 14px; border-radius: 6px; font-size: 0.95em; }
nav a { margin-right: 14px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 0.88em; }
.scroll { overflow-x: auto; max-width: 100%; }
th, td { border: 1px solid #d7d9e0; padding: 4px 8px; vertical-align: top; text-align: left; }
th { background: #eef0f6; }
tr:nth-child(even) td { background: #fafbfd; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.design { min-width: 180px; }
td.best { background: #e6f4ea !important; font-weight: 600; }
td.rank { font-weight: 600; } th.rank { background: #dfe3f0; }
.muted { color: #777; font-size: 0.85em; }
figure { margin: 12px 0 28px; }
figure img { max-width: 100%; height: auto; border: 1px solid #e3e5ec; }
figcaption { color: #444; font-size: 0.92em; margin-top: 4px; max-width: 1100px; }
pre { background: #f5f6fa; padding: 6px 8px; margin: 4px 0; font-size: 0.85em; max-width: 520px;
      overflow-x: auto; }
details summary { cursor: pointer; }
.grid { display: flex; flex-wrap: wrap; gap: 24px; }
"""
