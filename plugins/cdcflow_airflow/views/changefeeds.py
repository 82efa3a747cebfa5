"""The Changefeeds view: a FastAPI app the plugin mounts in Airflow's API server under ``/cdcflow``.

=============================================== ===================================================
``GET /cdcflow/changefeeds``                    the HTML page (the "Changefeeds" entry of the UI nav)
``GET /cdcflow/api/changefeeds``                every changefeed's status as JSON
``GET /cdcflow/api/changefeeds/{changefeed_id}`` one changefeed's status (404 when it does not exist)
=============================================== ===================================================

**Authentication.** Airflow mounts plugin apps with ``app.mount()``, and a mounted app inherits none of the
core API's dependencies, so this app declares Airflow's own: every route depends on
``requires_access_view(AccessView.PLUGINS)`` (``airflow.api_fastapi.core_api.security``), which resolves the
user from the JWT in the ``Authorization: Bearer`` header or, for the browser, the ``_token`` cookie the UI sets
at login (sent along when the UI shows the page in its iframe: same origin), and asks the auth manager whether
that user may see plugin views (SimpleAuthManager: any role from viewer up). No or an expired token: 401 (the
HTML page redirects to the login page instead); an invalid one: 403; a user without access: 403.
"""

from __future__ import annotations

import time
from functools import cache
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

URL_PREFIX = "/cdcflow"
PAGE_PATH = "/changefeeds"
API_PATH = "/api/changefeeds"


def _authorized() -> Any:
    """The dependency every route carries: an authenticated user allowed to see plugin views."""
    from airflow.api_fastapi.auth.managers.models.resource_details import AccessView
    from airflow.api_fastapi.core_api.security import requires_access_view

    return Depends(requires_access_view(AccessView.PLUGINS))


def _payload(changefeeds: list[dict[str, Any]], now: float) -> dict[str, Any]:
    return {"generated_at": now, "changefeeds": changefeeds}


async def _login_redirect(request: Request, exc: Exception) -> Response:
    """A browser without a (valid) session on the HTML page goes to Airflow's login and comes back."""
    assert isinstance(exc, StarletteHTTPException)
    route_path = getattr(request.scope.get("route"), "path", None)
    if exc.status_code == status.HTTP_401_UNAUTHORIZED and route_path == PAGE_PATH:
        from airflow.api_fastapi.app import get_auth_manager

        return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)),
                                status_code=status.HTTP_303_SEE_OTHER)
    return await http_exception_handler(request, exc)


def create_app() -> FastAPI:
    """A new app; its routes read ``$CDCFLOW_HOME`` on every request (no cache: the state changes each window)."""
    from cdcflow_airflow.views.html import render_page
    from cdcflow_airflow.views.status import changefeed_statuses, find_status

    app = FastAPI(
        title="cdcflow changefeeds",
        description="Status of cdcflow's changefeeds (Airflow plugin).",
        dependencies=[_authorized()],
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.add_exception_handler(StarletteHTTPException, _login_redirect)

    @app.get(PAGE_PATH, response_class=HTMLResponse, summary="The Changefeeds page")
    def changefeeds_page() -> HTMLResponse:
        now = time.time()
        return HTMLResponse(render_page(changefeed_statuses(now=now), now),
                            headers={"Cache-Control": "no-store"})

    @app.get(API_PATH, summary="Every changefeed's status")
    def changefeeds_api() -> JSONResponse:
        now = time.time()
        return JSONResponse(_payload(changefeed_statuses(now=now), now), headers={"Cache-Control": "no-store"})

    @app.get(API_PATH + "/{changefeed_id}", summary="One changefeed's status")
    def changefeed_api(changefeed_id: str) -> JSONResponse:
        now = time.time()
        cf = find_status(changefeed_id, now=now)
        if cf is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"changefeed {changefeed_id!r} does not exist")
        return JSONResponse({"generated_at": now, **cf}, headers={"Cache-Control": "no-store"})

    return app


@cache
def app() -> FastAPI:
    """The app the plugin mounts (built once per process, on first use)."""
    return create_app()


def fastapi_app_spec() -> dict[str, Any]:
    """The plugin's ``fastapi_apps`` entry."""
    return {"app": app(), "url_prefix": URL_PREFIX, "name": "cdcflow changefeeds"}
