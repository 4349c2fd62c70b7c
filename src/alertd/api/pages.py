"""The web pages: overview, run, silences, dry-run. Each is a small HTML shell; `static/alertd.js` fills it
from the JSON API (relative URLs) and refreshes it every few seconds. No build step, no CDN: the two
assets ship in the package.

The shells carry no data and no secret, so they are served without the token; the data behind them is
the API's, under the same bearer token (the page asks for it once and keeps it in the tab's
sessionStorage). Every page is sent with a Content-Security-Policy that allows scripts from this origin
only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from html import escape
from importlib import resources

from fastapi import APIRouter
from fastapi.responses import RedirectResponse, Response

PAGES = {
    "": ("overview", "Overview"),
    "run": ("run", "Run"),
    "silences": ("silences", "Silences"),
    "dry-run": ("dryrun", "Dry run"),
}
"""Path under /ui/ -> (the page's name for the script, its title)."""
ASSETS = {"alertd.js": "text/javascript; charset=utf-8", "alertd.css": "text/css; charset=utf-8"}
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
NAV = (("", "Overview"), ("silences", "Silences"), ("dry-run", "Dry run"))
CURRENT = ' aria-current="page"'


def shell(path: str) -> str:
    """The HTML of the page at /ui/`path`."""
    name, title = PAGES[path]
    nav = "".join(f'<a href="./{href}"{CURRENT if href == path else ""}>{escape(text)}</a>' for href, text in NAV)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>alertd: {escape(title)}</title>
<link rel="stylesheet" href="static/alertd.css">
<script src="static/alertd.js" defer></script>
</head>
<body data-page="{name}">
<header><span class="brand">alertd</span><nav aria-label="pages">{nav}</nav>
<span id="status" class="status" role="status" aria-live="polite"></span></header>
<main>
<section id="login" class="hidden" aria-labelledby="login-h">
<h1 id="login-h">API token</h1>
<p>This alertd asks for its API token (the server's <code>ALERTD_API_TOKEN</code>). The page keeps it in this
browser tab only.</p>
<form id="login-form"><label for="token">Token</label>
<div class="row"><input id="token" name="token" type="password" autocomplete="off" required>
<button class="primary" type="submit">Open</button></div>
<p id="login-error" class="error" role="alert"></p></form>
</section>
<div id="content"><noscript>These pages need JavaScript; the JSON API is at
<a href="../api/v1/alerts">/api/v1</a>.</noscript></div>
</main>
</body></html>
"""


def asset(name: str) -> bytes:
    """One of the packaged assets."""
    return resources.files("alertd.api").joinpath("static", name).read_bytes()


def _page(path: str) -> Callable[[], Awaitable[Response]]:
    html = shell(path)

    async def page() -> Response:
        return Response(html, media_type="text/html; charset=utf-8", headers=HEADERS)

    return page


def pages_router() -> APIRouter:
    """`/` (to the overview), `/ui/...` (the pages) and `/ui/static/...` (their two assets)."""
    router = APIRouter(include_in_schema=False)
    cache: dict[str, bytes] = {}

    @router.get("/")
    async def root() -> RedirectResponse:
        return RedirectResponse("ui/", status_code=307)

    @router.get("/ui")
    async def ui() -> RedirectResponse:
        return RedirectResponse("ui/", status_code=307)

    for path in PAGES:
        router.add_api_route(f"/ui/{path}", _page(path), methods=["GET"])

    @router.get("/ui/static/{name}")
    async def static(name: str) -> Response:
        if name not in ASSETS:
            return Response("not found", status_code=404, media_type="text/plain")
        if name not in cache:
            cache[name] = asset(name)
        return Response(cache[name], media_type=ASSETS[name], headers=HEADERS)

    return router
