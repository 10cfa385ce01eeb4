"""``/dashboard``: a fleet page served by the gateway, off the hot path.

The figures come from a JSON file another process keeps current (``shoal up`` writes its fleet snapshot and
timeline there, replacing the file atomically each second); the gateway only serves that file at
``/dashboard/data`` and a static page that polls it and draws the charts in the browser. Nothing here touches
request handling, and a gateway started without ``--dashboard-data`` has no such routes.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from shoal.protocol.errors import APIError


def dashboard_routes(data_file: Path) -> list[Route]:
    page = resources.files("shoal.gateway").joinpath("dashboard.html").read_text()

    async def dashboard(_: Request) -> Response:
        return HTMLResponse(page)

    async def data(_: Request) -> Response:
        try:
            body = data_file.read_bytes()
        except OSError:
            error = APIError(503, f"no fleet figures yet ({data_file} not written)", code="dashboard_data_missing")
            return JSONResponse(error.body(), status_code=503)
        return Response(body, media_type="application/json", headers={"Cache-Control": "no-store"})

    return [Route("/dashboard", dashboard, methods=["GET"]), Route("/dashboard/data", data, methods=["GET"])]
