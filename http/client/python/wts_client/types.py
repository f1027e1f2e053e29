"""Typed requests and results of the wts API."""

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional

__all__ = [
    "ModelInput", "Datum", "AdamParams", "SamplingParams", "LossFnOutput", "ForwardBackwardOutput",
    "OptimStepResult", "CheckpointResult", "SaveWeightsResult", "ExportResult", "SampledSequence",
    "SampleResponse", "LogprobsResponse", "Progress", "Operation", "Model", "next_token_datum",
]


@dataclass
class ModelInput:
    """A sequence of token ids."""

    token_ids: List[int]

    @classmethod
    def from_ints(cls, tokens):
        return cls(token_ids=list(tokens))

    def to_ints(self):
        return list(self.token_ids)

    @property
    def length(self):
        return len(self.token_ids)

    def to_json(self):
        return {"token_ids": [int(t) for t in self.token_ids]}


@dataclass
class Datum:
    """One training example: the model's input, and its loss inputs aligned
    with it position by position (``target_tokens``; ``weights``; for the RL
    losses the sampler's ``logprobs`` and the ``advantages``)."""

    model_input: ModelInput
    loss_fn_inputs: Dict[str, List[Any]]

    def to_json(self):
        inputs = {}
        for k, v in self.loss_fn_inputs.items():
            if v is None:
                continue
            v = v.tolist() if hasattr(v, "tolist") else list(v)
            inputs[k] = [int(x) for x in v] if k == "target_tokens" else [float(x) for x in v]
        return {"model_input": self.model_input.to_json(), "loss_fn_inputs": inputs}


def next_token_datum(tokens, weights=None):
    """The datum that trains ``tokens`` to predict each next one: input
    tokens[:-1], targets tokens[1:], with ``weights`` aligned with the
    targets (None: all 1)."""
    tokens = list(tokens)
    inputs = {"target_tokens": tokens[1:]}
    if weights is not None:
        inputs["weights"] = list(weights)
    return Datum(model_input=ModelInput(tokens[:-1]), loss_fn_inputs=inputs)


def _json(obj):
    """A dataclass as JSON, without the fields left None."""
    return {k: v for k, v in asdict(obj).items() if v is not None}


@dataclass
class AdamParams:
    """optim_step's AdamW parameters (torch.optim.AdamW's meaning)."""

    learning_rate: float = 1e-4
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-12
    weight_decay: float = 0.0
    grad_clip_norm: float = 0.0

    def to_json(self):
        return {k: float(v) for k, v in _json(self).items()}


@dataclass
class SamplingParams:
    """A sample's decoding parameters: temperature 0 is greedy, top_k -1
    is off, the same seed gives the same tokens."""

    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: Optional[float] = None
    seed: Optional[int] = None
    stop_token_ids: Optional[List[int]] = None

    def to_json(self):
        return _json(self)


@dataclass
class LossFnOutput:
    logprobs: List[float]
    loss: float


@dataclass
class ForwardBackwardOutput:
    """The result of forward and forward_backward: per datum the logprobs
    of its targets and its loss; ``metrics`` has ``loss:sum``,
    ``tokens:sum``, ``datums:sum``."""

    loss_fn_outputs: List[LossFnOutput]
    metrics: Dict[str, float]

    @classmethod
    def from_json(cls, d):
        return cls([LossFnOutput(o["logprobs"], o["loss"]) for o in d.get("loss_fn_outputs", [])], d.get("metrics", {}))


@dataclass
class OptimStepResult:
    """``metrics``: ``grad_norm``, ``learning_rate``, ``step``, ``clipped``."""

    metrics: Dict[str, float]

    @classmethod
    def from_json(cls, d):
        return cls(d.get("metrics", {}))


@dataclass
class CheckpointResult:
    """The result of save_state and load_state."""

    checkpoint_id: str
    step: int = 0
    size_bytes: int = 0
    with_optimizer: bool = False

    @classmethod
    def from_json(cls, d):
        return cls(d["checkpoint_id"], d.get("step", 0), d.get("size_bytes", 0), d.get("with_optimizer", False))


@dataclass
class SaveWeightsResult:
    sampler_id: str
    weight_version: int

    @classmethod
    def from_json(cls, d):
        return cls(d["sampler_id"], d["weight_version"])


@dataclass
class ExportResult:
    artifact_id: str
    checksum: str
    size_bytes: int

    @classmethod
    def from_json(cls, d):
        return cls(d["artifact_id"], d.get("checksum", ""), d.get("size_bytes", 0))


@dataclass
class SampledSequence:
    tokens: List[int]
    logprobs: List[float]
    stop_reason: str


@dataclass
class SampleResponse:
    """``prompt_logprobs`` (the first None) and ``topk_prompt_logprobs``
    when asked for."""

    sequences: List[SampledSequence]
    weight_version: int
    prompt_logprobs: Optional[List[Optional[float]]] = None
    topk_prompt_logprobs: Optional[List[Any]] = None

    @classmethod
    def from_json(cls, d):
        return cls([SampledSequence(s["tokens"], s.get("logprobs", []), s.get("stop_reason", "")) for s in d["sequences"]],
                   d.get("weight_version", 0), d.get("prompt_logprobs"), d.get("topk_prompt_logprobs"))


@dataclass
class LogprobsResponse:
    """One logprob per input token, the first None."""

    logprobs: List[Optional[float]]
    weight_version: int

    @classmethod
    def from_json(cls, d):
        return cls(d["logprobs"], d.get("weight_version", 0))


@dataclass
class Progress:
    tokens_done: int
    tokens_total: int
    tokens_per_s: float = 0.0
    sequences_done: Optional[int] = None
    sequences_total: Optional[int] = None


@dataclass
class Operation:
    """An operation handle as the service shows it."""

    id: str
    kind: str
    status: str
    seq_id: int
    run_id: str = ""
    session_id: str = ""
    result: Optional[Dict[str, Any]] = None
    error_code: Optional[str] = None
    error_message: Optional[str] = None
    progress: Optional[Progress] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, d):
        p = d.get("progress")
        return cls(d["id"], d["kind"], d["status"], d["seq_id"], d.get("run_id", ""), d.get("session_id", ""), d.get("result"),
                   d.get("error_code"), d.get("error_message"), Progress(**p) if p else None, d)

    @property
    def ended(self):
        return self.status in ("succeeded", "failed", "cancelled")


@dataclass
class Model:
    """A catalog model (GET /v1/training/models)."""

    name: str
    revision: str
    architecture: str
    parameters: int
    max_seq_len: int
    vocab_size: int
    hidden_size: int
    num_layers: int
    tokenizer: bool
    weights: str
    providers: List[str]

    @classmethod
    def from_json(cls, d):
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})
