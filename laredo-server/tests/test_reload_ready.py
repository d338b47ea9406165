"""Readiness while a configured pipeline does not run (what a reload whose undo failed leaves
behind): /health/ready answers 503 naming the pipeline, its table and the cause, and the next
reload adds the pipeline again."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from laredo.testing import free_port
from laredo_server.config import load_string
from laredo_server.serve import runtime_from_config

CONFIG = """
sources {{ src {{ type = quicktest, rows = 5 }} }}
tables = [ {{ source = src, schema = public, table = users,
             targets = [ {{ type = indexed-memory, id = users-a }},
                         {{ type = indexed-memory, id = users-b }} ] }} ]
grpc {{ port = 0 }}
health {{ port = {health} }}
"""


def ready(rt: Any) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{rt.listeners.health_port}/health/ready"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return int(r.status), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return int(e.code), json.loads(e.read())


def test_a_configured_pipeline_that_does_not_run_makes_the_server_not_ready(
    quicktest_plugin: None,
) -> None:
    loaded = load_string(CONFIG.format(health=free_port()), env={})
    assert loaded.model is not None
    model = loaded.model
    rt = runtime_from_config(model, load=lambda: model)
    rt.start()
    try:
        assert rt.engine.await_ready(10)
        assert ready(rt)[0] == 200
        # what a failed reload whose undo failed too leaves: users-b configured, not running
        rt.engine.remove_pipeline("users-b", timeout=10)
        assert rt.reloader is not None
        rt.reloader.missing_cause = "LaredoError: reload of public.users failed: boom"
        ok, reasons = rt.readiness()
        assert not ok
        assert reasons == [
            "pipeline users-b (table public.users) is configured but not running: "
            "LaredoError: reload of public.users failed: boom"
        ]
        code, body = ready(rt)
        assert code == 503 and "users-b" in json.dumps(body) and "boom" in json.dumps(body)
        assert rt.readiness(table="public.users")[0] is False
        assert rt.readiness(pipeline_id="users-a")[0] is True
        # the next reload adds it again
        result = rt.reload_config()
        assert result.accepted, result
        assert [(c.kind, c.id) for c in result.changes] == [("pipeline_added", "users-b")]
        assert rt.engine.await_ready(10)
        assert rt.readiness() == (True, []) and ready(rt)[0] == 200
    finally:
        rt.stop(grace=10)
