"""``env=openenv``: an OpenEnv environment server behind the env contract, through openenv-core's client.

An OpenEnv environment (``openenv-core``) is a server: its ``Environment`` (``reset`` / ``step`` / ``state``,
pydantic ``Action`` and ``Observation`` models) behind a FastAPI app made by ``openenv.core.env_server``'s
``create_app``, one session per WebSocket connection (``/ws``). ``OpenEnvEnv`` plays one session per episode with
openenv-core's ``GenericEnvClient`` (actions and observations as dicts, so no env-specific package is needed here):

- the server: ``url`` (one that runs already: ``http://host:port``), or ``app`` (``"package.module:app"``, the
  server's ASGI app, which the first env of each process, the env worker or the trainer itself, serves with
  uvicorn on a free localhost port, in a thread; the envs of that process share it, and it ends with the
  process);
- ``reset(seed)`` -> the session's reset with ``seed=seed`` (and ``reset_kwargs``); OpenEnv passes a key on only
  where the environment's ``reset`` takes it, so a server without seeds plays its own draw;
- ``step(action)`` -> the session's step with the action ``{action_field: action, **action_extra}`` (validated
  first by ``action_class``, a pydantic model, where one is named); ``action_field`` left empty is read from the
  server's ``/schema``: its action's only field besides ``metadata``;
- the observation (the fields of the env's ``Observation`` but reward, done and metadata, which OpenEnv sends
  apart) as text: its field ``observation_field``; left empty, the first string field of ``text``,
  ``message``, ``prompt``, ``content``, ``observation``, else all fields as JSON; the reward (None is 0) and done
  as the server sent them;
- the episode's facts, looked up as the gym adapter looks them up in gymnasium's info dict, in the
  observation's fields (and in its ``metadata``, where the server sends it): won is ``won_key`` (``won``), else
  a final reward at or above ``won_reward`` where that is set; ``task`` (the text at the top of every prompt,
  else ``task``), ``task_type`` (else ``task_type``, else the url or app), ``admissible_actions`` (checked by the
  parser where given), ``score``, ``anchor`` (GiGPO's state key; else the observation's fields as JSON), and
  ``invalid_action`` (the env refusing a move itself: the turn is invalid, the observation, reward and done as
  sent);
- an action the server rejects (OpenEnv's ``VALIDATION_ERROR``: the action does not validate against the env's
  ``Action`` model; ``EXECUTION_ERROR``: the env's ``step`` raised; the codes of ``rejected_codes``) is an
  invalid turn: the session is kept (OpenEnv answers the error and goes on), the turn scores
  ``invalid_reward`` and is marked ``info["invalid_action"]``, which the agent loop counts as an invalid turn
  (the format penalty, the valid-action ratio); never an ended run;
- a server that is gone (connection refused or closed) or does not answer within ``timeout_s`` (every
  connection and every request is bounded) raises :class:`OpenEnvFailure`: the env pool fails that episode
  (``env_error``: counted, left out of the update) and the rollout goes on; the next episode connects afresh,
  so a server that comes back serves the next rollout.

openenv-core 0.3 (tested with 0.3.0; the ``openenv`` extra). Its package is imported without its gradio web UI
(:func:`_import_client`): 7 s of CPU less in every process of envs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import json
import os
import socket
import sys
import threading
import time
import urllib.request
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any

import uvicorn

from arl.envs.adapters import generic_prompt
from arl.envs.base import EnvSpec, StepResult
from arl.utils.imports import import_attribute

#: openenv-core's web UI (gradio), which ``import openenv.core`` would import: 7 s of CPU here, in every process of envs
WEB_UI_MODULE = "openenv.core.env_server.web_interface"


def _import_client() -> type:
    """openenv-core's ``GenericEnvClient``, its package imported without its web UI where this is its first import.

    ``openenv.core`` imports the gradio page of ``create_app(..., ENABLE_WEB_INTERFACE=true)`` at import (7 s of
    CPU, more than torch; measured with openenv-core 0.3.0 and gradio 6.31) inside a ``try`` that takes a missing
    module for an absent extra. The page's module is held out for that import only, then released: ``create_app``
    imports it itself when a server asks for the page; only the names ``create_web_interface_app`` and
    ``WebInterfaceManager`` of ``openenv.core.env_server`` stay None in the processes of envs.
    """
    if "openenv.core" not in sys.modules and WEB_UI_MODULE not in sys.modules:
        sys.modules[WEB_UI_MODULE] = None  # import ... raises ModuleNotFoundError, which openenv.core catches
        try:
            importlib.import_module("openenv.core")
        finally:
            if sys.modules.get(WEB_UI_MODULE, 0) is None:
                del sys.modules[WEB_UI_MODULE]
    return importlib.import_module("openenv.core.generic_client").GenericEnvClient


GenericEnvClient = _import_client()

DEFAULT_HINT = "your action"
#: observation fields whose text is the observation when ``observation_field`` is left empty, in this order
TEXT_FIELDS = ("text", "message", "prompt", "content", "observation")
#: OpenEnv's error codes of an action the server refused (the session goes on): rejected actions, invalid turns
REJECTED_CODES = ("VALIDATION_ERROR", "EXECUTION_ERROR")
CLOSE_TIMEOUT_S = 5.0  # seconds a session's close may take (a server that hangs must not hold the env pool)


class OpenEnvFailure(RuntimeError):
    """The server is gone or did not answer in time: the episode fails (``env_error``), the rollout goes on."""


class ServerError(RuntimeError):
    """An error the server answered to a request (OpenEnv's ``{"type": "error"}``), with its code."""

    def __init__(self, code: str, message: str, data: dict[str, Any]):
        super().__init__(f"{message} (code: {code})")
        self.code, self.data = code, data


class _Client(GenericEnvClient):
    """openenv-core's dict client, its server errors raised with their code (the base client raises a bare
    ``RuntimeError`` whose text holds it)."""

    async def _send_and_receive(self, message: dict[str, Any]) -> dict[str, Any]:
        await self._send(message)
        response = await self._receive()
        if response.get("type") == "error":
            data = dict(response.get("data") or {})
            raise ServerError(str(data.get("code", "UNKNOWN")), str(data.get("message", "")), data)
        return response

    def _parse_result(self, payload: dict[str, Any]):
        """The server's whole answer: observation, reward, done (and metadata, where a version sends it)."""
        return payload

    async def end_session(self, timeout: float) -> None:
        """Ask the server to end the session and wait (up to ``timeout`` seconds) for it to close the connection;
        then drop the connection, closed or not. (The base client closes its side at once, and the server's own
        close, which comes after, then fails with a logged ``WebSocketDisconnect``; a closing handshake with a
        silent server would wait for websockets' own close timeout.)"""
        connection, self._ws = self._ws, None
        if connection is None:
            return
        try:
            await connection.send(json.dumps({"type": "close"}))
            await asyncio.wait_for(connection.wait_closed(), timeout)
        except Exception:  # noqa: BLE001, S110 - a server that is gone or silent: the connection is dropped below
            pass
        finally:
            connection.transport.abort()  # nothing left to send: a closed connection's transport is closed already


# --------------------------------------------------------------------------- one event loop per process
_loop_lock = threading.Lock()
_loop_state: dict[str, Any] = {}


def _event_loop() -> asyncio.AbstractEventLoop:
    """The asyncio loop every client of this process runs on (a daemon thread, started at first use; a
    forked child starts its own)."""
    with _loop_lock:
        if _loop_state.get("pid") != os.getpid():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="arl-openenv-loop", daemon=True)
            thread.start()
            _loop_state.update(pid=os.getpid(), loop=loop, thread=thread)
        return _loop_state["loop"]


def run_bounded(coro: Coroutine, timeout: float) -> Any:
    """``await coro`` on the process's client loop, at most ``timeout`` seconds (then ``TimeoutError``, the
    coroutine cancelled); anything that interrupts the wait (the env pool's alarm) cancels it too."""
    future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coro, timeout), _event_loop())
    try:
        return future.result(timeout + 5.0)
    except concurrent.futures.TimeoutError as err:
        future.cancel()
        raise TimeoutError(f"no answer in {timeout:g}s") from err
    except BaseException:
        future.cancel()
        raise


# --------------------------------------------------------------------------- local servers (env.kwargs.app)
def load_app(path: str) -> Any:
    """The ASGI app at ``"package.module:attribute"``; clear errors for a bad path."""
    module_name, sep, attr = str(path).partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"env=openenv: app={path!r} is not a 'package.module:app' path")
    return import_attribute(module_name, attr, f"env=openenv: app={path!r}")


class LocalServer:
    """``app`` served by uvicorn on a free localhost port, in a daemon thread of this process."""

    def __init__(self, app: Any, name: str, start_timeout: float = 30.0):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))  # the port is ours from here: no race for a free one
        self.port = int(sock.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="auto"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       name=f"arl-openenv-server-{name}", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + start_timeout
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"env=openenv: the app {name!r} did not start serving on {self.url} "
                                   f"within {start_timeout:g}s")
            time.sleep(0.01)

    def alive(self) -> bool:
        return self.thread.is_alive() and not self.server.should_exit

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=CLOSE_TIMEOUT_S)


_servers_lock = threading.Lock()
_servers: dict[tuple[int, str], LocalServer] = {}


def local_server(app_path: str) -> LocalServer:
    """This process's server of ``app_path``, started at the first call (shared by the process's envs, ended
    with the process)."""
    key = (os.getpid(), str(app_path))
    with _servers_lock:
        server = _servers.get(key)
        if server is None or not server.alive():
            server = LocalServer(load_app(app_path), str(app_path))
            _servers[key] = server
        return server


# --------------------------------------------------------------------------- the schema
_schemas: dict[str, dict[str, Any]] = {}


def fetch_schema(url: str, timeout: float) -> dict[str, Any]:
    """The server's ``/schema`` (the JSON schemas of its action, observation and state), once a process and url."""
    if url not in _schemas:
        try:
            with urllib.request.urlopen(f"{url}/schema", timeout=timeout) as response:
                _schemas[url] = json.loads(response.read().decode())
        except (OSError, ValueError) as err:
            raise OpenEnvFailure(f"env=openenv: no OpenEnv server answers at {url} ({url}/schema: {err})") from err
    return _schemas[url]


def action_field_of(schema: dict[str, Any], url: str) -> str:
    """The action's only field besides ``metadata`` in the server's schema; a clear error otherwise."""
    fields = [name for name in (schema.get("action") or {}).get("properties", {}) if name != "metadata"]
    if len(fields) != 1:
        raise ValueError(f"env=openenv: the action of the server at {url} has fields {fields}; set env.kwargs.action_field "
                         "to the one the model's text goes into (and env.kwargs.action_extra for the others)")
    return fields[0]


def observation_text(fields: dict[str, Any], field: str = "") -> str:
    """The text of an observation's ``fields``: ``fields[field]`` (str of a non-string), or with ``field`` empty
    the first string one of :data:`TEXT_FIELDS`, else all of them as JSON (sorted keys)."""
    if field:
        if field not in fields:
            raise KeyError(f"env=openenv: the observation has no field {field!r} (its fields: {sorted(fields)})")
        value = fields[field]
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    for name in TEXT_FIELDS:
        if isinstance(fields.get(name), str):
            return fields[name]
    return json.dumps(fields, sort_keys=True, default=str)


def plain(value: Any) -> Any:
    """``value`` with its mappings as dicts and its lists and tuples as lists, all the way down (a config's
    ``DictConfig`` / ``ListConfig`` become JSON-ready)."""
    if isinstance(value, Mapping):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [plain(item) for item in value]
    return value


def load_class(path: str) -> type:
    """The class at ``"package.module:Class"``."""
    module_name, sep, attr = str(path).partition(":")
    if not sep:
        raise ValueError(f"env=openenv: action_class={path!r} is not a 'package.module:Class' path")
    return getattr(importlib.import_module(module_name), attr)


class OpenEnvEnv:
    """An OpenEnv environment server, one session an episode (module docstring).

    Args:
        url: a running OpenEnv server (``http://host:port``); exactly one of ``url`` and ``app``.
        app: ``"package.module:app"``, the server's app, served by each process of envs on a free localhost port.
        max_turns: turns per episode (the env may end it sooner).
        task: the task's text at the top of every prompt (the observation's ``task`` field wins).
        task_type: the episodes' task type where the observation gives none ("": the url or app).
        answer_hint: what goes between the action tags, for the prompt.
        action_field: the action's field the model's text goes into ("": the only one the server's schema lists).
        action_extra: further fields of every action (constants).
        action_class: ``"package.module:Class"`` of the env's pydantic ``Action``, validating the action here first.
        observation_field: the observation's field that is the observation's text (module docstring for "").
        won_key: the observation field (or metadata key) that says the episode was won.
        won_reward: where not None, a final reward at or above it is a win when the observation has no ``won_key``.
        reset_kwargs: further keyword arguments of every reset (the env's ``reset`` takes those it names).
        invalid_reward: the reward of a turn whose action the server rejected.
        rejected_codes: OpenEnv's error codes that reject an action (an invalid turn, the session kept); any other
            error fails the episode.
        timeout_s: seconds a connection, a reset or a step may take; past it the episode fails.
    """

    def __init__(self, url: str | None = None, app: str | None = None, max_turns: int = 20, task: str = "",
                 task_type: str = "", answer_hint: str = DEFAULT_HINT, action_field: str = "",
                 action_extra: dict[str, Any] | None = None, action_class: str = "", observation_field: str = "",
                 won_key: str = "won", won_reward: float | None = None, reset_kwargs: dict[str, Any] | None = None,
                 invalid_reward: float = 0.0, rejected_codes: tuple[str, ...] | list[str] = REJECTED_CODES,
                 timeout_s: float = 30.0):
        if bool(url) == bool(app):
            raise ValueError(f"env=openenv needs exactly one of env.kwargs.url (a running server) and env.kwargs.app "
                             f"('package.module:app', served here); got url={url!r}, app={app!r}")
        self.timeout_s = float(timeout_s)
        if self.timeout_s <= 0:
            raise ValueError(f"env=openenv: timeout_s={timeout_s!r} must be > 0")
        self.source = str(url or app)
        self.url = str(url).rstrip("/") if url else local_server(str(app)).url
        self.action_class = load_class(action_class) if action_class else None
        self.action_field = str(action_field) or action_field_of(fetch_schema(self.url, self.timeout_s), self.url)
        self.action_extra = plain(action_extra or {})
        self.observation_field = str(observation_field)
        self.won_key = str(won_key)
        self.won_reward = None if won_reward is None else float(won_reward)
        self.reset_kwargs = plain(reset_kwargs or {})
        self.invalid_reward = float(invalid_reward)
        self.rejected_codes = frozenset(str(c) for c in rejected_codes)
        self.task, self.task_type = str(task), str(task_type) or self.source
        self.spec = EnvSpec(name="openenv", max_turns=int(max_turns), invalid_action="",
                            render_prompt=generic_prompt(self.task, answer_hint), check_admissible=True)
        self._client: _Client | None = None
        self._observation = ""
        self._info: dict[str, Any] = {}

    # ------------------------------------------------------------------ the session
    def _call(self, what: str, make: Any) -> dict[str, Any]:
        """``await make(client)`` within ``timeout_s``; a lost or silent server raises :class:`OpenEnvFailure`,
        a server's answered error :class:`ServerError`."""
        try:
            if self._client is None:
                client = _Client(base_url=self.url, connect_timeout_s=self.timeout_s, message_timeout_s=self.timeout_s)
                run_bounded(client.connect(), self.timeout_s)
                self._client = client
            return run_bounded(make(self._client), self.timeout_s)
        except ServerError:
            raise
        except Exception as err:  # refused, closed, timed out: the server failed this episode
            self._disconnect()
            raise OpenEnvFailure(f"env=openenv: {what} at {self.url} failed: {type(err).__name__}: {err}") from err

    def _disconnect(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            timeout = min(self.timeout_s, CLOSE_TIMEOUT_S)
            try:
                run_bounded(client.end_session(timeout), timeout + 1.0)
            except Exception:  # noqa: BLE001, S110 - end_session drops the connection whatever happens
                pass

    def _info_of(self, payload: dict[str, Any], reward: float, done: bool) -> tuple[str, dict[str, Any]]:
        fields = dict(payload.get("observation") or {})
        metadata = {**dict(fields.pop("metadata", None) or {}), **dict(payload.get("metadata") or {})}
        facts = {**metadata, **fields}
        observation = observation_text(fields, self.observation_field)
        if self.won_key in facts:
            won = bool(facts[self.won_key])
        else:
            won = bool(done and self.won_reward is not None and reward >= self.won_reward)
        info = {key: value for key, value in metadata.items() if isinstance(key, str)}
        info.update(
            task=str(facts.get("task") or self.task), task_type=str(facts.get("task_type") or self.task_type),
            admissible_actions=facts.get("admissible_actions"), won=won,
            score=float(facts.get("score", 1.0 if won else 0.0)),
            anchor=str(facts.get("anchor", json.dumps(fields, sort_keys=True, default=str))),
            invalid_action=bool(facts.get("invalid_action", False)), game_reward=reward,
        )
        return observation, info

    def reset(self, seed: int) -> tuple[str, dict[str, Any]]:
        self._disconnect()  # a new episode, a new session
        kwargs = {**self.reset_kwargs, "seed": int(seed)}
        try:
            payload = self._call(f"reset(seed={seed})", lambda client: client.reset(**kwargs))
        except ServerError as err:
            self._disconnect()
            raise OpenEnvFailure(f"env=openenv: reset(seed={seed}) at {self.url}: the server answered {err}") from err
        self._observation, self._info = self._info_of(payload, 0.0, False)
        return self._observation, self._info

    def _action(self, text: str) -> dict[str, Any]:
        action = {**self.action_extra, self.action_field: text}
        if self.action_class is not None:  # a ValidationError here is a rejected action, as on the server
            return self.action_class.model_validate(action).model_dump()
        return action

    def _rejected(self, why: str) -> StepResult:
        """An invalid, state-keeping turn."""
        return StepResult(self._observation, self.invalid_reward, False, {**self._info, "invalid_action": True, "error": why})

    def step(self, action: str) -> StepResult:
        if self._client is None:
            raise RuntimeError("env=openenv: step before reset (or after the session failed)")
        try:
            payload_action = self._action(str(action))
        except ValueError as err:  # pydantic's ValidationError is a ValueError
            return self._rejected(f"{type(err).__name__}: {err}")
        try:
            payload = self._call("step", lambda client: client.step(payload_action))
        except ServerError as err:
            if err.code in self.rejected_codes:
                return self._rejected(f"{err.code}: {err}")
            self._disconnect()
            raise OpenEnvFailure(f"env=openenv: step at {self.url}: the server answered {err}") from err
        reward = float(payload.get("reward") or 0.0)
        done = bool(payload.get("done", False))
        self._observation, self._info = self._info_of(payload, reward, done)
        return StepResult(self._observation, reward, done, self._info)

    def close(self) -> None:
        self._disconnect()
