"""Pictures of runs: series as line charts with the spans where alerts were pending or firing.

`build.figure` turns samples and transitions into a `Figure` (pure); `svg.figure_svg` draws it; `page`
wraps it in a self-contained HTML page; `png` rasterises it where matplotlib is installed.
"""
