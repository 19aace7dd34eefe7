"""A recording gateway: the rollout engine behind an OpenAI-compatible chat endpoint on localhost.

An agent program written against the ``openai`` client plays an episode by calling
``/v1/chat/completions`` at its session's base URL (``http://127.0.0.1:<port>/sessions/<id>/v1``). The
gateway renders the messages with the policy tokenizer's chat template (the same
:func:`~arl.agent.prompts.encode_prompt` the agent loop uses), samples with the engine at the rollout's
sampling parameters (the request's own ``temperature``, ``top_p`` and ``max_tokens`` are not used: the
trainer decides how its policy samples), and records every call exactly: the rendered prompt's token
ids, the sampled token ids and their log-probs, the text it answered. Nothing is tokenised again
afterwards, so the trainer scores exactly what was sampled. For ``trajectory`` samples the gateway splices a
call that continues an earlier one onto its token stream (:meth:`RecordingGateway.render`). The program reports how its episode went
at its session's reward URL (``POST /sessions/<id>/reward/<key>``, :meth:`RecordingGateway.reward_url`: the key
is the session's, in no other URL): ``{"reward": r}`` (the episode's return), and optionally ``"won"``,
``"task_type"``, ``"invalid_calls"`` (the calls whose answers it could not use) and ``"rewards"`` (one
per call, the environment's reward after each).

Agents that call tools the OpenAI way work as against any OpenAI-compatible server: a request's ``tools`` are
rendered by the chat template, ``tool_choice`` (``auto``, ``none``, ``required`` or a named function) says
whether the answer is read for calls, assistant messages with ``tool_calls`` (and ``content: null``),
``role: "tool"`` messages and content as a list of text parts are accepted, and an answer whose calls the
rollout's tool parser (``rollout.tool_parser``, :mod:`arl.agent.tool_calls`) reads comes back with
``tool_calls`` and ``finish_reason: "tool_calls"``, streamed too. Decoding is never constrained (what trains
is what was sampled): an answer whose call does not parse comes back as text, as vLLM's does, and counts as an
invalid call (the format penalty), as does an answer without a call under ``required`` or one calling another
function than the one named.

Requests of all sessions are batched: a thread takes whatever requests are waiting (up to the
engine's batch size) and makes one ``engine.generate`` call of them. A malformed request gets HTTP 400
and marks its session (the episode is then a failed one); an unknown session gets 404. The server is
uvicorn in a thread, started and stopped by :class:`RecordingGateway`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import queue
import secrets
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from arl.agent.prompts import TemplateError, TrajectoryTemplate, encode_prompt
from arl.agent.tool_calls import (
    TOOL_CHOICES,
    as_openai_message,
    normalize_message,
    normalize_tools,
    read_native_answer,
    renders_tools,
    same_answer,
    tool_names,
)
from arl.rollout.engine import SamplingParams

log = logging.getLogger(__name__)

#: where the gateway listens: this machine only (the programs it serves run beside the rollout)
HOST = "127.0.0.1"
TOO_LARGE = object()  # a request body past max_body_bytes (not read further)


@dataclass
class Call:
    """One recorded chat completion: the exact prompt ids, the sampled ids and their log-probs."""

    messages: list[dict[str, Any]]
    prompt_ids: list[int]
    response_ids: list[int]
    log_probs: list[float]
    text: str
    finish_reason: str
    origin: str = ""  # the request's X-Session-ID header: the caller's name for the conversation ("" when none)
    index: int = -1  # its place among the session's calls, in the order they ended
    parent: int = -1  # trajectory: the index of the call whose stream it continues (-1: it starts a stream)
    request: int = -1  # its place in the order the session's requests came in: what a report's call k means
    tools: list[dict[str, Any]] = field(default_factory=list)  # the functions the request offered
    message: dict[str, Any] = field(default_factory=dict)  # the answer as sent (normalized: text and calls)


def _finite_number(value: Any) -> bool:
    """A JSON number (not a boolean, not a string) that is finite: NaN and Infinity are valid JSON to Python's parser."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def report_problem(body: Any) -> str:
    """Why a reward report is refused ("" when it is good): ``reward`` a finite number; ``won`` absent or a
    JSON boolean (the string "false" would be truthy); ``rewards`` absent or a list of finite numbers;
    ``invalid_calls`` a list of call indices; ``task_type`` a string."""
    if not isinstance(body, dict):
        return f"a reward report is a JSON object with a number 'reward'; got {body!r}"[:500]
    if not _finite_number(body.get("reward")):
        return f"'reward' must be a finite number; got {body.get('reward')!r}"[:500]
    if "won" in body and not isinstance(body["won"], bool):
        return f"'won' must be true or false (a JSON boolean); got {body['won']!r}"[:500]
    rewards = body.get("rewards")
    if rewards is not None and not (isinstance(rewards, list) and all(_finite_number(r) for r in rewards)):
        return f"'rewards' must be a list of finite numbers, one per call; got {rewards!r}"[:500]
    calls = body.get("invalid_calls", [])
    if not (isinstance(calls, list) and all(isinstance(k, int) and not isinstance(k, bool) and k >= 0 for k in calls)):
        return f"'invalid_calls' must be a list of call indices; got {calls!r}"[:500]
    if not isinstance(body.get("task_type", ""), str):
        return f"'task_type' must be a string; got {body['task_type']!r}"[:500]
    return ""


@dataclass
class Session:
    """One episode's calls and the outcome its program reported (``reward`` None: not reported)."""

    calls: list[Call] = field(default_factory=list)
    reward: float | None = None
    won: bool = False
    task_type: str = ""
    invalid_calls: tuple[int, ...] = ()
    rewards: tuple[float, ...] | None = None  # one per call, when the program reports them
    malformed: str = ""  # why a request of this session was refused ("" when none was)
    reported: bool = False  # its one reward report came (good or refused)
    reward_key: str = field(default_factory=lambda: secrets.token_hex(16))  # in its reward URL: the program's alone
    requests: int = 0  # requests that came in (a call's ``request`` number)
    continued: set[int] = field(default_factory=set)  # trajectory: the calls a later call's stream continues
    invalid_requests: dict[int, str] = field(default_factory=dict)  # request -> why its answer is an invalid call


@dataclass(frozen=True)
class ChatRequest:
    """A checked chat request: its messages and tools (normalized, :mod:`arl.agent.tool_calls`) and its
    ``tool_choice`` (``auto``, ``none``, ``required``, or the one function's name)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    tool_choice: str = "auto"
    named: str = ""  # tool_choice names a function: its name


def _check_request(body: Any) -> ChatRequest:
    """The request checked (:class:`ChatRequest`): a non-empty ``messages`` list of messages with a role and text
    content (or text parts; an assistant's ``tool_calls``, a tool message's ``tool_call_id``), ``tools`` a list
    of functions, ``tool_choice`` one of :data:`~arl.agent.tool_calls.TOOL_CHOICES` or a function of ``tools``;
    ``n`` 1 or absent. Raises ``ValueError`` naming what is wrong."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        raise ValueError("the body must be a JSON object with a non-empty 'messages' list")
    messages = [normalize_message(m) for m in body["messages"]]
    if body.get("n", 1) not in (1, None):  # every choice would be a sample; one answer a call is what is recorded
        raise ValueError(f"'n' must be 1 (one choice a call); got {body['n']!r}")
    tools = normalize_tools(body.get("tools"))
    choice = body.get("tool_choice")
    if choice is None:
        return ChatRequest(messages, tools, "auto" if tools else "none")
    if isinstance(choice, str) and choice in TOOL_CHOICES:
        if choice == "required" and not tools:
            raise ValueError("tool_choice 'required' needs 'tools'")
        return ChatRequest(messages, tools, choice)
    name = choice.get("function", {}).get("name") if isinstance(choice, dict) and isinstance(
        choice.get("function"), dict) else None
    if not isinstance(name, str) or name not in tool_names(tools):
        raise ValueError(f"tool_choice must be one of {', '.join(TOOL_CHOICES)} or {{'type': 'function', 'function': "
                         f"{{'name': <one of the tools>}}}}; got {choice!r}"[:500])
    return ChatRequest(messages, tools, "named", name)


def _call_problem(request: ChatRequest, error: str, calls: list) -> str:
    """Why an answer to ``request`` is an invalid call ("" when it is not): its call did not parse (``error``),
    it is empty, or it breaks ``tool_choice`` (no call under ``required``, another function than the named)."""
    if error:
        return error
    if request.tool_choice == "required" and not calls:
        return "no tool call under tool_choice 'required'"
    if request.tool_choice == "named" and (not calls or any(c.name != request.named for c in calls)):
        return f"tool_choice names {request.named!r}; the answer called {[c.name for c in calls]}"
    return ""


def _as_events(completion: dict[str, Any], usage: bool) -> Iterator[str]:
    """A finished chat completion as the server-sent events of a streamed one (``"stream": true``): the
    answer in one delta, then the finish reason, the usage when the request asked for it
    (``stream_options.include_usage``), and ``[DONE]``. The answer is sampled whole before the first
    event, so streaming changes how it travels, not what is recorded."""
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = completion["choices"][0]
    message = dict(choice["message"])
    calls = message.pop("tool_calls", None) or []

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return head | {"choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    chunks = [chunk(message)]  # the role and the text; then one delta a call (the client assembles them by index)
    chunks += [chunk({"tool_calls": [{"index": k, **call}]}) for k, call in enumerate(calls)]
    chunks.append(chunk({}, choice["finish_reason"]))
    if usage:
        chunks.append(head | {"choices": [], "usage": completion["usage"]})
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


class RecordingGateway:
    """The OpenAI-compatible endpoint over ``engine`` (module docstring).

    Args:
        engine: the rollout engine (``generate``).
        tokenizer: the policy's tokenizer (its chat template renders the messages).
        params: how to sample (the rollout's).
        tool_parser: how answers to requests with ``tools`` are read for calls (``rollout.tool_parser``).
        max_batch_size: requests per engine call at most.
        trajectory: splice calls into one token stream (``trajectory`` samples, :meth:`render`); None renders
            every call afresh.
        max_prompt_tokens: a call whose prompt is longer is refused (HTTP 400; its episode fails), so that
            one over-long conversation cannot fail the engine call of every request batched with it.
        max_calls: calls an episode may make; the next is refused (HTTP 429) and fails the episode (each call is
            a training sample holding the whole conversation: an agent in a loop would grow memory without end).
        max_body_bytes: a request body larger than this is refused (HTTP 413) before it is read or tokenised,
            so that one huge body cannot stall the server's event loop for every other episode.
    """

    def __init__(self, engine, tokenizer, params: SamplingParams, max_batch_size: int = 64,
                 trajectory: TrajectoryTemplate | None = None, max_prompt_tokens: int | None = None,
                 max_calls: int = 256, max_body_bytes: int = 2 * 2**20, tool_parser: str = "hermes"):
        self.engine = engine
        self.tokenizer = tokenizer
        self.params = params
        self.trajectory = trajectory
        self.tool_parser = tool_parser
        self._renders_tools: bool | None = None  # whether the chat template renders a tool list (asked once)
        self._tool_templates: dict[str, TrajectoryTemplate | None] = {}  # trajectory templates by tool list
        self.max_prompt_tokens = max_prompt_tokens
        self.host = HOST
        self.max_batch_size = int(max_batch_size)
        self.max_calls = int(max_calls)
        self.max_body_bytes = int(max_body_bytes)
        self._stopping = False  # stop() began: new calls are refused, the batcher finishes the engine call it is in
        self.sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._requests: queue.Queue = queue.Queue()
        self._server = None
        self._threads: list[threading.Thread] = []
        self.port = 0
        self.generate_seconds = 0.0
        self.generated_tokens = 0
        self.engine_calls = 0

    # ---------------------------------------------------------------- sessions
    def open_session(self) -> str:
        """A new session for one episode; returns its id."""
        sid = secrets.token_hex(8)
        with self._lock:
            self.sessions[sid] = Session()
        return sid

    def reward_url(self, sid: str) -> str:
        """Where session ``sid``'s program reports its outcome: the session's URL with its key, which nothing
        else derives (its chat base URL does not hold it)."""
        with self._lock:
            key = self.sessions[sid].reward_key
        return f"http://{self.host}:{self.port}/sessions/{sid}/reward/{key}"

    def base_url(self, sid: str) -> str:
        """The ``base_url`` an ``openai.OpenAI`` client of session ``sid`` uses."""
        return f"http://{self.host}:{self.port}/sessions/{sid}/v1"

    def close_session(self, sid: str) -> Session:
        """Forget session ``sid`` and return what it recorded (later requests of it get 404)."""
        with self._lock:
            return self.sessions.pop(sid)

    # ---------------------------------------------------------------- the engine side
    def _batcher(self) -> None:
        """Take the waiting requests, up to a batch, and sample them in one engine call; at the stop sentinel,
        fail what is still queued (their handlers answer, nothing waits for ever) and end."""
        while True:
            first = self._requests.get()
            if first is None:
                while True:
                    try:
                        item = self._requests.get_nowait()
                    except queue.Empty:
                        return
                    if item is not None:
                        item[1].set_exception(RuntimeError("the gateway stopped before this call was sampled"))
            batch = [first]
            while len(batch) < self.max_batch_size:
                try:
                    item = self._requests.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    self._requests.put(None)
                    break
                batch.append(item)
            prompts = [prompt for prompt, _ in batch]
            t0 = time.perf_counter()
            try:
                generations = self.engine.generate(prompts, self.params)
            except Exception as err:  # noqa: BLE001 - handed to every waiting request
                for _, future in batch:
                    future.set_exception(err)
                continue
            self.generate_seconds += time.perf_counter() - t0
            self.engine_calls += 1
            for (_, future), gen in zip(batch, generations):
                self.generated_tokens += len(gen.token_ids)
                future.set_result(gen)

    async def _complete(self, sid: str, body: Any, origin: str = "") -> tuple[int, dict[str, Any]]:
        with self._lock:
            session = self.sessions.get(sid)
        if session is None:
            return 404, {"error": {"message": f"no session {sid!r} (ended, or never opened)", "type": "not_found"}}
        try:
            request_body = self._checked(body)
        except ValueError as err:
            session.malformed = str(err)
            return 400, {"error": {"message": str(err), "type": "invalid_request_error"}}
        messages, tools = request_body.messages, request_body.tools
        with self._lock:  # numbered as they come in: concurrent calls may end in another order
            if self._stopping:
                return 503, {"error": {"message": "the gateway is stopping (the rollout ended)", "type": "unavailable"}}
            if session.requests >= self.max_calls:
                session.malformed = f"more than {self.max_calls} calls in one episode (the gateway's max_calls)"
                return 429, {"error": {"message": session.malformed, "type": "rate_limit_exceeded"}}
            request = session.requests
            session.requests += 1
        prompt_ids, parent = self.render(session, messages, origin, tools)
        if self.max_prompt_tokens is not None and len(prompt_ids) > self.max_prompt_tokens:
            session.malformed = (f"a prompt of {len(prompt_ids)} tokens passes the rollout's max_prompt_tokens "
                                 f"({self.max_prompt_tokens})")
            return 400, {"error": {"message": session.malformed, "type": "context_length_exceeded"}}
        future: Future = Future()
        with self._lock:
            if self._stopping:
                return 503, {"error": {"message": "the gateway is stopping (the rollout ended)", "type": "unavailable"}}
            self._requests.put((prompt_ids, future))
        gen = await asyncio.wrap_future(future)
        text = self.tokenizer.decode(gen.token_ids, skip_special_tokens=True)
        message, problem, finish = self._answer(request_body, text, gen.finish_reason, f"{sid}_{request}")
        with self._lock:
            if self.sessions.get(sid) is not session:  # the episode ended while this call was sampled: not recorded
                return 404, {"error": {"message": f"session {sid!r} ended during the call", "type": "not_found"}}
            session.calls.append(Call(messages, list(prompt_ids), list(gen.token_ids), list(gen.log_probs), text,
                                      gen.finish_reason, origin, len(session.calls), parent, request, tools, message))
            if problem:
                session.invalid_requests[request] = problem
        return 200, {
            "id": f"chatcmpl-{sid}-{len(session.calls)}", "object": "chat.completion", "created": int(time.time()),
            "model": str(body.get("model", "arl-policy")),
            "choices": [{"index": 0, "message": as_openai_message(message), "finish_reason": finish, "logprobs": None}],
            "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": len(gen.token_ids),
                      "total_tokens": len(prompt_ids) + len(gen.token_ids)},
        }

    def _checked(self, body: Any) -> ChatRequest:
        """The request checked (:func:`_check_request`), and its tools refused when the chat template would not
        show them to the model."""
        request = _check_request(body)
        if request.tools and self._renders_tools is None:
            self._renders_tools = renders_tools(self.tokenizer)
        if request.tools and not self._renders_tools:
            raise ValueError("this model's chat template does not render a tool list, so the model would never "
                             "see the tools (the tiny model's, SmolLM2's and Qwen's templates do)")
        return request

    def _answer(self, request: ChatRequest, text: str, finish: str, ids: str) -> tuple[dict[str, Any], str, str]:
        """(the answer as a message, why it is an invalid call or "", its finish reason) of ``text`` sampled for
        ``request``: read for calls (their ids numbered from ``ids``) when the request offers tools and
        ``tool_choice`` is not ``none``."""
        if not request.tools or request.tool_choice == "none":
            return {"role": "assistant", "content": text}, "", finish
        answer = read_native_answer(text, self.tool_parser, request.tools, ids)
        problem = _call_problem(request, answer.error or ("empty" if not text.strip() else ""), answer.calls)
        return answer.message, problem, "tool_calls" if answer.calls else finish

    def _trajectory_for(self, tools: list[dict[str, Any]]) -> TrajectoryTemplate | None:
        """The trajectory template of conversations offering ``tools`` (None: its template does not render them
        as growing prefixes; such calls are rendered afresh)."""
        if not tools:
            return self.trajectory
        key = json.dumps(tools, sort_keys=True)
        if key not in self._tool_templates:
            template = TrajectoryTemplate(self.tokenizer, tools)
            try:
                template.check()
            except TemplateError as err:
                log.warning("trajectory samples of tool calls are not possible with this chat template (%s); "
                            "each call is rendered afresh", err)
                template = None
            self._tool_templates[key] = template
        return self._tool_templates[key]

    def render(self, session: Session, messages: list[dict[str, Any]], origin: str = "",
               tools: list[dict[str, Any]] | None = None) -> tuple[list[int], int]:
        """The prompt ids of a call with ``messages`` (normalized) and ``tools`` from ``origin``, and the index of
        the call whose token stream they continue (-1: none).

        With ``trajectory`` set, a call whose messages are an earlier call's of the same origin and tools, that
        call's answer (as the gateway sent it: its text and calls) and then new user or tool messages (the
        results of its calls) continues that call's token stream: its prompt ids are that call's prompt, the ids
        sampled for the answer, then the template's continuation (the assistant turn closed, the new messages,
        the assistant turn opened), so the answer is never tokenised again. A stream is continued once (a second
        call extending the same one starts its own). Any other call (the first, or one from a program that
        rewrote its history) is rendered afresh and starts a new stream."""
        tools = list(tools or [])
        if self.trajectory is not None:
            for earlier in reversed(session.calls):
                n = len(earlier.messages)
                following = messages[n + 1:]
                if (earlier.origin == origin and earlier.index not in session.continued and len(messages) >= n + 2
                        and earlier.tools == tools and messages[:n] == earlier.messages
                        and same_answer(earlier.message, messages[n])
                        and all(m["role"] in ("user", "tool") for m in following)):
                    template = self._trajectory_for(tools)
                    if template is None:
                        break
                    session.continued.add(earlier.index)
                    continuation = template.continuation_of(following, earlier.response_ids)
                    return earlier.prompt_ids + earlier.response_ids + continuation, earlier.index
        return list(encode_prompt(self.tokenizer, messages, tools)), -1

    def _report(self, sid: str, key: str, body: Any) -> tuple[int, dict[str, Any]]:
        """A program's outcome report (module docstring): one per session, at its URL with the session's key (a
        report without it, from whoever derived the session's URL from its chat base URL, is refused with 403
        and changes nothing). A second report, a reward that is not a finite number, a ``won`` that is not a
        JSON boolean or per-call rewards that are not finite numbers are refused (400, or 409 for the second)
        and fail the episode: nothing from outside the program's first report, and no NaN or string, reaches
        training."""
        with self._lock:
            session = self.sessions.get(sid)
        if session is None:
            return 404, {"error": {"message": f"no session {sid!r}", "type": "not_found"}}
        if not secrets.compare_digest(key, session.reward_key):
            return 403, {"error": {"message": "not this session's reward URL (the program reads it from the pipe "
                                              "ARL_REWARD_FD names)", "type": "forbidden"}}
        problem = report_problem(body)
        with self._lock:
            if session.reported:
                session.malformed = "a second reward report (a session takes one: the first stood, the episode fails)"
                return 409, {"error": {"message": session.malformed, "type": "conflict"}}
            session.reported = True
            if problem:
                session.malformed = problem
                return 400, {"error": {"message": problem, "type": "invalid_request_error"}}
            reward = float(body["reward"])
            session.reward, session.won = reward, bool(body.get("won", reward > 0))
            session.rewards = None if body.get("rewards") is None else tuple(float(r) for r in body["rewards"])
            session.task_type = str(body.get("task_type", ""))
            session.invalid_calls = tuple(int(k) for k in body.get("invalid_calls", ()))
        return 200, {"ok": True}

    # ---------------------------------------------------------------- the server
    def _app(self) -> Starlette:
        async def body_of(request: Request) -> Any:
            """The JSON body, None when it is not JSON, or TOO_LARGE past ``max_body_bytes`` (read no further)."""
            declared = request.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                return TOO_LARGE
            data = bytearray()
            async for chunk in request.stream():
                data += chunk
                if len(data) > self.max_body_bytes:
                    return TOO_LARGE
            try:
                return json.loads(bytes(data))
            except ValueError:  # not JSON (nor UTF-8): the checks below refuse it
                return None

        def too_large(sid: str) -> JSONResponse:
            message = f"a request body over {self.max_body_bytes} bytes (the gateway's max_body_bytes)"
            with self._lock:
                if sid in self.sessions:
                    self.sessions[sid].malformed = message
            return JSONResponse({"error": {"message": message, "type": "request_too_large"}}, status_code=413)

        async def completions(request: Request) -> Response:
            body = await body_of(request)
            if body is TOO_LARGE:
                return too_large(request.path_params["sid"])
            status, payload = await self._complete(request.path_params["sid"], body,
                                                   request.headers.get("x-session-id", ""))
            if status == 200 and isinstance(body, dict) and body.get("stream"):
                usage = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage")
                return StreamingResponse(_as_events(payload, bool(usage)), media_type="text/event-stream")
            return JSONResponse(payload, status_code=status)

        async def reward(request: Request) -> JSONResponse:
            body = await body_of(request)
            if body is TOO_LARGE:
                return too_large(request.path_params["sid"])
            status, payload = self._report(request.path_params["sid"], request.path_params.get("key", ""), body)
            return JSONResponse(payload, status_code=status)

        return Starlette(routes=[
            Route("/sessions/{sid}/v1/chat/completions", completions, methods=["POST"]),
            Route("/sessions/{sid}/reward/{key}", reward, methods=["POST"]),
            Route("/sessions/{sid}/reward", reward, methods=["POST"]),  # no key: refused (403), says where it is
        ])

    def start(self) -> Self:
        """Start the batcher and the HTTP server (on a free port); returns self once it listens."""
        config = uvicorn.Config(self._app(), host=self.host, port=0, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._threads = [threading.Thread(target=self._batcher, name="arl-gateway-batcher", daemon=True),
                         threading.Thread(target=self._server.run, name="arl-gateway-http", daemon=True)]
        for t in self._threads:
            t.start()
        deadline = time.time() + 30.0
        while not self._server.started:
            if time.time() > deadline or not self._threads[1].is_alive():
                raise RuntimeError("the gateway's HTTP server did not start")
            time.sleep(0.01)
        self.port = int(self._server.servers[0].sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Stop the server and the batcher. New calls are refused from here on (503), and this returns only once
        the batcher has finished the engine call it is in: the caller may then update the policy (or put the
        engine to sleep) with no gateway thread generating with it."""
        with self._lock:
            self._stopping = True
            self._requests.put(None)
        if self._server is not None:
            self._server.should_exit = True
        for t in self._threads:
            t.join(timeout=10.0)
            while t.name == "arl-gateway-batcher" and t.is_alive():  # inside engine.generate: wait it out
                log.warning("the gateway waits for the engine call in progress before it stops")
                t.join(timeout=30.0)
        self._threads = []

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
