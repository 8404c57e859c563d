"""A local stand-in for a SAS Viya CAS server, speaking the REST protocol swat uses over HTTP.

swat (without its binary extension, or with protocol http) creates a session with
`PUT /cas/sessions`, calls each action with `POST /cas/sessions/<id>/actions/<set.action>`
(JSON parameters) and uploads files with `PUT .../actions/table.upload` (the file as the body,
parameters in the JSON-Parameters header). Every call is recorded with its parameters and
the Authorization header. Answers are canned (CANNED: what swat reads while connecting; other actions succeed with no
result tables), except the actions named in `fail` (action, model) which answer with an error, and dlScore,
whose reported elapsed time is `score_ms(model, call)`.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class Call:
    action: str
    params: dict[str, Any]
    authorization: str | None
    body_bytes: int = 0


@dataclass
class StandIn:
    score_ms: Callable[[str, int], float]
    fail: set[tuple[str, str]] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)
    scores: dict[str, int] = field(default_factory=dict)

    def answer(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        model = params.get("model")
        model = model.get("name") if isinstance(model, dict) else model
        if (action, model) in self.fail:
            return {
                "disposition": {"severity": "Error", "reason": "abort", "statusCode": 2720256,
                                "formattedStatus": "ERROR: The action stopped due to errors."},
                "logEntries": [{"message": f"ERROR: stand-in refuses {action} for {model}."}],
                "results": {},
                "metrics": {"elapsedTime": 0.001},
            }  # fmt: skip
        elapsed = 0.0005
        results: Any = CANNED.get(action, {})
        if action == "builtins.queryactionset":
            results = {params["actionset"]: "." not in params["actionset"]}
        elif action == "builtins.queryname":
            actionset, _, name = str(params["name"]).partition(".")
            results = {"actionSet": actionset, "action": name or None}
        elif action == "builtins.reflect":
            actionset = str(params.get("actionset") or params.get("action")).split(".")[0]
            actions = [{"name": a, "params": REFLECT_PARAMS} for a in ACTIONS.get(actionset, [])]
            results = [{"name": actionset, "actions": actions}]
        if action == "deeplearn.dlscore":
            call = self.scores.get(model, 0)
            self.scores[model] = call + 1
            elapsed = self.score_ms(model, call) / 1000.0
        return {
            "disposition": {"severity": "Normal", "reason": "ok", "statusCode": 0},
            "logEntries": [],
            "results": results,
            "metrics": {"elapsedTime": elapsed},
        }


# What swat reads when it connects: the server's version and OS, and whether reflect knows
# `levels`. Everything else answers with no result tables.
CANNED: dict[str, Any] = {
    "builtins.serverstatus": {"About": {"Version": "3.05", "System": {"OS Name": "Linux"}}},
}
# The actions each action set reflects (what swat and the SAS script call).
ACTIONS = {
    "builtins": ["cascommon", "reflect", "serverstatus", "loadactionset"],
    "table": ["addcaslib", "upload", "droptable"],
    "deeplearn": ["buildmodel", "addlayer", "dlimportmodelweights", "dlscore"],
}
# The table parameters swat's CASTable reads from builtins.casCommon.
REFLECT_PARAMS = [
    {
        "name": "castable",
        "parmType": "value_list",
        "parmList": [{"name": "name"}, {"name": "caslib"}, {"name": "where"}],
    },
    {
        "name": "casouttable",
        "parmType": "value_list",
        "parmList": [{"name": "name"}, {"name": "replace"}],
    },
]


def serve(standin: StandIn) -> tuple[ThreadingHTTPServer, int]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def _reply(self, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def do_PUT(self) -> None:
            body = self._body()
            if self.path.rstrip("/").endswith("/cas/sessions"):
                self._reply({"session": "0f0e0d0c-standin"})
                return
            params = json.loads(self.headers.get("JSON-Parameters") or "{}")
            action = self.path.rsplit("/", 1)[-1].lower()
            standin.calls.append(Call(action, params, self.headers.get("Authorization"), len(body)))
            self._reply(standin.answer(action, params))

        def do_GET(self) -> None:
            self._body()
            self._reply({"uuid": "0f0e0d0c-standin", "state": "idle"})

        def do_POST(self) -> None:
            body = self._body()
            action = self.path.rsplit("/", 1)[-1].lower()
            params = json.loads(body or b"{}")
            standin.calls.append(Call(action, params, self.headers.get("Authorization")))
            self._reply(standin.answer(action, params))

        def do_DELETE(self) -> None:
            self._body()
            self._reply({})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def client_env(home: Path, port: int) -> dict[str, str]:
    """The environment of a script that talks to the stand-in: a HOME whose .authinfo holds
    user `tester`'s password `s3cret` (mode 0600, as swat requires), and CAS at 127.0.0.1:port
    over HTTP."""
    home.mkdir(parents=True, exist_ok=True)
    (home / ".authinfo").write_text("host 127.0.0.1 user tester password s3cret\n")
    (home / ".authinfo").chmod(0o600)
    env = dict(os.environ, HOME=str(home), CASHOST="127.0.0.1", CASPORT=str(port))
    env["CASPROTOCOL"] = "http"
    return env
