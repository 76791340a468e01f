"""``gpuplan serve``: the planner as a local web page over a JSON API (the ``web`` extra).

:func:`create_app` builds the ASGI app (Starlette); the routes answer with the library's own
serializations -- ``POST /api/fit`` returns exactly what ``gpuplan fit --json`` prints for the same
job -- and ``/`` serves one static page (HTML, CSS and plain JavaScript shipped in the package, no
network needed). Importing this package imports Starlette; ``import gpuplan`` never imports it.
"""

from __future__ import annotations

from ._app import MAX_BODY_BYTES, create_app

__all__ = ["create_app", "MAX_BODY_BYTES"]
