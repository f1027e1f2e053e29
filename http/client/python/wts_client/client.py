"""The service, training and sampling clients.

Every call that submits an operation returns once the operation is
durable, with a Future of its result. Submissions carry their seq_id in
order, an idempotency key and the request_hash (RFC 8785), and are retried
on 429, 502-504 and lost connections by resending the same request, which
the service answers with the operation the first attempt made if it got
through: a retry never applies an operation twice.
"""

import asyncio
import hashlib
import http.client
import json
import os
import random
import secrets
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from . import jcs, tokenizer
from .errors import OperationFailed, WtsError
from .types import (AdamParams, CheckpointResult, ExportResult, ForwardBackwardOutput, LogprobsResponse, Model, ModelInput, Operation,
                    OptimStepResult, SampleResponse, SamplingParams, SaveWeightsResult)

__all__ = ["ServiceClient", "TrainingClient", "SamplingClient", "Future", "Retry"]

_RETRY_STATUS = (429, 502, 503, 504)


class Retry:
    """How a request that may pass is tried again: ``attempts`` in all, the
    waits doubling from ``initial`` to ``maximum`` seconds, with jitter; a
    429's Retry-After is waited out instead."""

    def __init__(self, attempts=10, initial=0.1, maximum=5.0):
        self.attempts, self.initial, self.maximum = max(1, attempts), initial, maximum


def _nonce():
    return secrets.token_hex(8)


class ServiceClient:
    """A client of one wts service with one API key. ``base_url`` and
    ``api_key`` default to $WTS_URL (else http://127.0.0.1:8080) and
    $WTS_API_KEY. Safe to share between threads."""

    def __init__(self, base_url=None, api_key=None, retry=None, timeout=60.0):
        self.base_url = (base_url or os.environ.get("WTS_URL") or "http://127.0.0.1:8080").rstrip("/")
        self.api_key = api_key if api_key is not None else os.environ.get("WTS_API_KEY", "")
        self.retry = retry or Retry()
        self.timeout = timeout
        self._alive = {}  # session id → idle_ttl_s, for the keep-alive thread
        self._alive_lock = threading.Lock()
        self._keeper = None

    # -- transport ---------------------------------------------------------

    def request(self, method, path, body=None):
        """Sends a request (``body`` as JSON) and returns the decoded answer,
        retrying what may pass; a refusal raises WtsError."""
        raw = None if body is None else json.dumps(body, allow_nan=False).encode("utf-8")
        wait, attempt = self.retry.initial, 1
        while True:
            try:
                return self._once(method, path, raw)
            except WtsError as e:
                if e.status not in (0,) + _RETRY_STATUS or attempt >= self.retry.attempts:
                    raise
                time.sleep(e.retry_after if e.retry_after else wait / 2 + random.uniform(0, wait / 2))
            wait, attempt = min(2 * wait, self.retry.maximum), attempt + 1

    def _once(self, method, path, raw):
        req = urllib.request.Request(self.base_url + path, data=raw, method=method)
        req.add_header("Authorization", "Bearer " + self.api_key)
        if raw is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                data = resp.read()
        except urllib.error.HTTPError as e:
            raise _envelope(e.code, e.read(), e.headers) from None
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout, TimeoutError) as e:
            raise WtsError(0, "connection_error", "%s %s: %s" % (method, path, e)) from None
        return json.loads(data) if data else None

    # -- sessions ----------------------------------------------------------

    def create_session(self, request_id=None, provider=None, provider_preferences=None, funding_preference=None,
                       credential_id=None, max_cost_microusd=None, idle_ttl_s=None, metadata=None, keep_alive=True):
        """Creates a session (or returns the one an earlier request with the
        same ``request_id`` made). With ``keep_alive``, a background thread
        heartbeats it until ``close_session``, so its lease does not run out
        while the caller computes between operations."""
        body = {"request_id": request_id or "session-" + _nonce()}
        for k, v in (("provider", provider), ("provider_preferences", provider_preferences), ("funding_preference", funding_preference),
                     ("credential_id", credential_id), ("max_cost_microusd", max_cost_microusd), ("idle_ttl_s", idle_ttl_s),
                     ("metadata", metadata)):
            if v is not None:
                body[k] = v
        s = self.request("POST", "/v1/training/sessions", body)
        if keep_alive:
            self._keep(s["id"], s.get("idle_ttl_s", 3600))
        return s

    def get_session(self, session_id):
        return self.request("GET", "/v1/training/sessions/" + _q(session_id))

    def heartbeat(self, session_id):
        return self.request("POST", "/v1/training/sessions/%s/heartbeat" % _q(session_id), {"request_id": "hb-" + _nonce()})

    def close_session(self, session_id):
        """Closes a session: its run is cancelled if it has not ended, and its
        unused reservation returns to the organization's ledger."""
        with self._alive_lock:
            self._alive.pop(session_id, None)
        return self.request("POST", "/v1/training/sessions/%s/close" % _q(session_id), {"request_id": "close-" + session_id})

    def _keep(self, session_id, ttl):
        with self._alive_lock:
            self._alive[session_id] = ttl
            if self._keeper is None or not self._keeper.is_alive():
                self._keeper = threading.Thread(target=self._keep_alive, name="wts-keep-alive", daemon=True)
                self._keeper.start()

    def _keep_alive(self):
        last = {}
        while True:
            with self._alive_lock:
                alive = dict(self._alive)
            if not alive:
                return
            now = time.monotonic()
            for sid, ttl in alive.items():
                if now - last.setdefault(sid, now) >= ttl / 3:
                    last[sid] = now
                    try:
                        self.heartbeat(sid)
                    except WtsError:
                        pass  # the next operation or heartbeat says what is wrong
            time.sleep(1.0)

    # -- reads -------------------------------------------------------------

    def get_models(self):
        """The model catalog."""
        return [Model.from_json(m) for m in self.request("GET", "/v1/training/models")["items"]]

    def get_model(self, name):
        for m in self.get_models():
            if m.name == name:
                return m
        raise WtsError(422, "model_not_available", "the catalog has no model %r" % (name,))

    def list_sessions(self, after=None, limit=100):
        """A page of the caller's sessions, newest first: ``items`` and
        ``next_after`` (pass it back as ``after``)."""
        return self.request("GET", "/v1/training/sessions?" + urllib.parse.urlencode(_page(after, limit)))

    def list_runs(self, after=None, limit=100):
        """A page of the caller's runs, newest first."""
        return self.request("GET", "/v1/training/runs?" + urllib.parse.urlencode(_page(after, limit)))

    def get_tokenizer(self, model):
        """A catalog model's tokenizer (``get_models`` says which have one):
        ``encode(text)`` gives token ids, ``decode(ids)`` text."""
        return tokenizer.load(self.request("GET", "/v1/training/models/%s/tokenizer" % _q(model)))

    def get_capabilities(self):
        return self.request("GET", "/v1/training/capabilities")["items"]

    def get_operation(self, operation_id):
        return Operation.from_json(self.request("GET", "/v1/training/operations/" + _q(operation_id)))

    def get_run(self, run_id):
        return self.request("GET", "/v1/training/runs/" + _q(run_id))

    def get_metrics(self, run_id, after_seq=0, limit=100):
        return self.request("GET", "/v1/training/runs/%s/metrics?after_seq=%d&limit=%d" % (_q(run_id), after_seq, limit))

    def get_cost(self, session_id):
        return self.request("GET", "/v1/training/sessions/%s/cost" % _q(session_id))

    # -- training and sampling clients ---------------------------------------

    def create_lora_training_client(self, base_model, rank=32, seed=0, train_mlp=True, train_attn=True, train_unembed=True,
                                    model_revision=None, checkpoint_id=None, session_id=None, request_id=None, metadata=None,
                                    **session_options):
        """Creates a LoRA run and returns its training client. Without a
        ``session_id``, a session is created for it (with
        ``session_options``) and closed by the client's ``close``. An empty
        ``model_revision`` is the catalog's."""
        own = session_id is None
        if own:
            session_id = self.create_session(**session_options)["id"]
        try:
            body = {"request_id": request_id or "run-" + _nonce(), "base_model": base_model,
                    "model_revision": model_revision or self.get_model(base_model).revision,
                    "lora": {"rank": rank, "seed": seed, "train_mlp": train_mlp, "train_attn": train_attn, "train_unembed": train_unembed}}
            if checkpoint_id:
                body["checkpoint_id"] = checkpoint_id
            if metadata is not None:
                body["metadata"] = metadata
            run = self.request("POST", "/v1/training/sessions/%s/runs" % _q(session_id), body)
        except BaseException:
            if own:
                self.close_session(session_id)
            raise
        return TrainingClient(self, run, owns_session=own)

    def training_client(self, run_id):
        """The training client of an existing run, at its next seq_id."""
        return TrainingClient(self, self.get_run(run_id), owns_session=False)

    def sampling_client(self, sampler_id):
        """The client of a sampler (a run's ``sampler_id``), at its next
        seq_id."""
        s = self.request("GET", "/v1/training/samplers/" + _q(sampler_id))
        return SamplingClient(self, s)


def _page(after, limit):
    q = {"limit": limit}
    if after:
        q["after"] = after
    return q


def _q(s):
    return urllib.parse.quote(s, safe="")


def _envelope(status, data, headers):
    try:
        env = json.loads(data)
        code, message, rid = env["error"]["code"], env["error"]["message"], env.get("request_id")
    except (ValueError, KeyError, TypeError):
        code, message, rid = "http_%d" % status, data.decode("utf-8", "replace").strip(), None
    retry_after = None
    try:
        retry_after = float(headers.get("Retry-After")) if headers and headers.get("Retry-After") else None
    except ValueError:
        pass
    return WtsError(status, code, message, rid, retry_after)


class Future:
    """An accepted operation whose result comes later. ``result()`` waits
    for it (polling) and returns the kind's typed result, or raises
    OperationFailed; ``await result_async()`` does the same in asyncio."""

    def __init__(self, client, op, decode):
        self._client, self.operation, self._decode = client, op, decode

    @property
    def id(self):
        return self.operation.id

    def poll(self):
        """The operation as it is now."""
        self.operation = self._client.get_operation(self.operation.id)
        return self.operation

    def done(self):
        return self.operation.ended or self.poll().ended

    def _outcome(self):
        op = self.operation
        if op.status != "succeeded":
            raise OperationFailed(op)
        return self._decode(op.result or {})

    def result(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = 0.01
        while not self.operation.ended:
            if deadline is not None and time.monotonic() + wait > deadline:
                raise TimeoutError("operation %s still %s" % (self.operation.id, self.operation.status))
            time.sleep(wait)
            self.poll()
            wait = min(wait * 1.5, 1.0)
        return self._outcome()

    async def result_async(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        wait = 0.01
        while not self.operation.ended:
            if deadline is not None and time.monotonic() + wait > deadline:
                raise TimeoutError("operation %s still %s" % (self.operation.id, self.operation.status))
            await asyncio.sleep(wait)
            await asyncio.to_thread(self.poll)
            wait = min(wait * 1.5, 1.0)
        return self._outcome()


class _Sequence:
    """Submits a run's (or sampler's) operations in seq_id order: each is
    durable when its submission returns, so the next may follow."""

    def __init__(self, client, path, next_seq):
        self.client, self.path, self.next = client, path, next_seq
        self.key = _nonce()
        self.lock = threading.Lock()

    def submit(self, kind, payload, decode):
        with self.lock:
            env = {"seq_id": self.next, "idempotency_key": "%s-%d" % (self.key, self.next), "kind": kind, "payload": payload}
            env["request_hash"] = hashlib.sha256(jcs.canonicalize(env)).hexdigest()
            op = self.client.request("POST", self.path, env)
            self.next += 1
        return Future(self.client, Operation.from_json(op), decode)

    async def submit_async(self, kind, payload, decode):
        return await asyncio.to_thread(self.submit, kind, payload, decode)


def _batch(data, loss_fn, loss_fn_config):
    p = {"data": [d.to_json() if hasattr(d, "to_json") else d for d in data], "loss_fn": loss_fn}
    if loss_fn_config:
        p["loss_fn_config"] = {k: float(v) for k, v in loss_fn_config.items()}
    return p


def _sample(prompt, num_samples, sampling_params, include_prompt_logprobs, topk_prompt_logprobs, required_weight_version=None):
    if not isinstance(prompt, ModelInput):
        prompt = ModelInput.from_ints(prompt)
    p = {"prompt": prompt.to_json(), "num_samples": num_samples, "parameters": sampling_params.to_json()}
    if include_prompt_logprobs:
        p["include_prompt_logprobs"] = True
    if topk_prompt_logprobs:
        p["topk_prompt_logprobs"] = topk_prompt_logprobs
    if required_weight_version is not None:
        p["required_weight_version"] = required_weight_version
    return p


class TrainingClient:
    """Submits a LoRA run's operations in order. Each call returns once the
    operation is durable, with a Future; each ``*_async`` variant is a
    coroutine that returns the same Future."""

    def __init__(self, client, run, owns_session=False):
        self.client, self.run = client, run
        self.run_id, self.session_id = run["id"], run["session_id"]
        self._seq = _Sequence(client, "/v1/training/runs/%s/operations" % _q(self.run_id), run["next_seq_id"])
        self._owns_session = owns_session

    def forward_backward(self, data, loss_fn="cross_entropy", loss_fn_config=None):
        """The loss over ``data`` (Datums) and its gradients, accumulated
        until the next optim_step."""
        return self._seq.submit("forward_backward", _batch(data, loss_fn, loss_fn_config), ForwardBackwardOutput.from_json)

    def forward(self, data, loss_fn="cross_entropy", loss_fn_config=None):
        """The loss and the targets' logprobs, without gradients."""
        return self._seq.submit("forward", _batch(data, loss_fn, loss_fn_config), ForwardBackwardOutput.from_json)

    def optim_step(self, adam_params=None):
        return self._seq.submit("optim_step", {"adam_params": (adam_params or AdamParams()).to_json()}, OptimStepResult.from_json)

    def save_state(self, name=None):
        """A checkpoint of the adapter and the optimizer's state."""
        return self._seq.submit("save_state", {"name": name} if name else {}, CheckpointResult.from_json)

    def load_state(self, checkpoint_id, with_optimizer=False):
        return self._seq.submit("load_state", {"checkpoint_id": checkpoint_id, "with_optimizer": with_optimizer},
                                lambda d: CheckpointResult.from_json(dict(d, checkpoint_id=d.get("checkpoint_id", checkpoint_id))))

    def save_weights_for_sampler(self):
        """Saves the current weights as the sampler's next weight version."""
        return self._seq.submit("save_weights_for_sampler", {}, SaveWeightsResult.from_json)

    def export_lora(self, checkpoint_id=None):
        """Writes the adapter (a checkpoint's, or the current one) as a PEFT
        artifact."""
        return self._seq.submit("export_lora", {"checkpoint_id": checkpoint_id} if checkpoint_id else {}, ExportResult.from_json)

    def sample(self, prompt, num_samples=1, sampling_params=None, include_prompt_logprobs=False, topk_prompt_logprobs=0):
        """A run-scoped sample of the current weights (saved for the sampler
        first when the trainer moved)."""
        p = _sample(prompt, num_samples, sampling_params or SamplingParams(), include_prompt_logprobs, topk_prompt_logprobs)
        return self._seq.submit("sample", p, SampleResponse.from_json)

    async def forward_backward_async(self, data, loss_fn="cross_entropy", loss_fn_config=None):
        return await asyncio.to_thread(self.forward_backward, data, loss_fn, loss_fn_config)

    async def forward_async(self, data, loss_fn="cross_entropy", loss_fn_config=None):
        return await asyncio.to_thread(self.forward, data, loss_fn, loss_fn_config)

    async def optim_step_async(self, adam_params=None):
        return await asyncio.to_thread(self.optim_step, adam_params)

    async def save_state_async(self, name=None):
        return await asyncio.to_thread(self.save_state, name)

    async def load_state_async(self, checkpoint_id, with_optimizer=False):
        return await asyncio.to_thread(self.load_state, checkpoint_id, with_optimizer)

    async def save_weights_for_sampler_async(self):
        return await asyncio.to_thread(self.save_weights_for_sampler)

    async def export_lora_async(self, checkpoint_id=None):
        return await asyncio.to_thread(self.export_lora, checkpoint_id)

    async def sample_async(self, prompt, num_samples=1, sampling_params=None, include_prompt_logprobs=False, topk_prompt_logprobs=0):
        return await asyncio.to_thread(self.sample, prompt, num_samples, sampling_params, include_prompt_logprobs, topk_prompt_logprobs)

    def save_weights_and_get_sampling_client(self):
        """Saves the weights for the sampler, and returns its client."""
        w = self.save_weights_for_sampler().result()
        return self.client.sampling_client(w.sampler_id)

    def get_metrics(self, after_seq=0, limit=100):
        return self.client.get_metrics(self.run_id, after_seq, limit)

    def finish(self):
        """Finishes the run once its queued operations are done."""
        op = self.client.request("POST", "/v1/training/runs/%s/finish" % _q(self.run_id), {"request_id": "finish-" + self.run_id})
        return Future(self.client, Operation.from_json(op), lambda d: d)

    def close(self):
        """Closes the session the client made for the run (the run ends with
        it); a client of a session it did not make leaves it open."""
        if self._owns_session:
            self._owns_session = False
            return self.client.close_session(self.session_id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class SamplingClient:
    """Submits a sampler's operations in order; ``required_weight_version``
    makes an operation wait for that weight version of the run."""

    def __init__(self, client, sampler):
        self.client, self.sampler = client, sampler
        self.sampler_id = sampler["id"]
        self._seq = _Sequence(client, "/v1/training/samplers/%s/operations" % _q(self.sampler_id), sampler["next_seq_id"])

    def sample(self, prompt, num_samples=1, sampling_params=None, include_prompt_logprobs=False, topk_prompt_logprobs=0,
               required_weight_version=None):
        p = _sample(prompt, num_samples, sampling_params or SamplingParams(), include_prompt_logprobs, topk_prompt_logprobs,
                    required_weight_version)
        return self._seq.submit("sample", p, SampleResponse.from_json)

    def compute_logprobs(self, prompt, required_weight_version=None):
        """Each token's logprob given the ones before it (the first None)."""
        if not isinstance(prompt, ModelInput):
            prompt = ModelInput.from_ints(prompt)
        p = {"input": prompt.to_json()}
        if required_weight_version is not None:
            p["required_weight_version"] = required_weight_version
        return self._seq.submit("logprobs", p, LogprobsResponse.from_json)

    async def sample_async(self, prompt, num_samples=1, sampling_params=None, include_prompt_logprobs=False, topk_prompt_logprobs=0,
                           required_weight_version=None):
        return await asyncio.to_thread(self.sample, prompt, num_samples, sampling_params, include_prompt_logprobs,
                                       topk_prompt_logprobs, required_weight_version)

    async def compute_logprobs_async(self, prompt, required_weight_version=None):
        return await asyncio.to_thread(self.compute_logprobs, prompt, required_weight_version)
