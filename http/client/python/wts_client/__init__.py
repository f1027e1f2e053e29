"""Python client of the wts training and sampling service.

    from wts_client import ServiceClient, AdamParams, next_token_datum
    service = ServiceClient()                      # $WTS_URL, $WTS_API_KEY
    with service.create_lora_training_client("small", rank=8) as training:
        fb = training.forward_backward([next_token_datum([1, 5, 9, 13])])
        step = training.optim_step(AdamParams(learning_rate=1e-3))
        print(fb.result().metrics["loss:sum"], step.result().metrics["step"])
"""

from .client import Future, Retry, SamplingClient, ServiceClient, TrainingClient
from .errors import OperationFailed, WtsError
from .jcs import canonicalize
from .tokenizer import Tokenizer
from .tokenizer import load as load_tokenizer
from .types import (AdamParams, CheckpointResult, Datum, ExportResult, ForwardBackwardOutput, LogprobsResponse, LossFnOutput, Model,
                    ModelInput, Operation, OptimStepResult, Progress, SampledSequence, SampleResponse, SamplingParams,
                    SaveWeightsResult, next_token_datum)

__version__ = "0.1.0"

__all__ = [
    "ServiceClient", "TrainingClient", "SamplingClient", "Future", "Retry", "WtsError", "OperationFailed", "canonicalize",
    "AdamParams", "SamplingParams", "Datum", "ModelInput", "next_token_datum", "ForwardBackwardOutput", "LossFnOutput",
    "OptimStepResult", "CheckpointResult", "SaveWeightsResult", "ExportResult", "SampleResponse", "SampledSequence",
    "LogprobsResponse", "Operation", "Progress", "Model", "Tokenizer", "load_tokenizer",
]
