// A small client typed by the types openapi-typescript generates from the
// served OpenAPI document (build/wts-api.d.ts): each submission's payload
// is typed by its kind, and `tsc --noEmit` refuses a payload of another
// kind (the @ts-expect-error lines fail the check if it did not).
import type { components, paths } from "../../build/wts-api";

type Submission = components["schemas"]["SubmitOperationRequest"];
type SamplerSubmission = components["schemas"]["SubmitSamplerOperationRequest"];
type Operation = components["schemas"]["Operation"];
type Session = paths["/v1/training/sessions"]["post"]["responses"]["201"]["content"]["application/json"];

export async function submit(base: string, key: string, runID: string, body: Submission): Promise<Operation> {
  const r = await fetch(`${base}/v1/training/runs/${runID}/operations`, {
    method: "POST",
    headers: { Authorization: `Bearer ${key}`, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  return (await r.json()) as Operation;
}

const envelope = { seq_id: 1, idempotency_key: "k1", request_hash: "0".repeat(64) };

export const forwardBackward: Submission = {
  ...envelope,
  kind: "forward_backward",
  payload: { data: [{ model_input: { token_ids: [1, 2, 3] }, loss_fn_inputs: { target_tokens: [2, 3, 4] } }], loss_fn: "cross_entropy" },
};

export const optimStep: Submission = { ...envelope, kind: "optim_step", payload: { adam_params: { learning_rate: 1e-5 } } };

export const sample: SamplerSubmission = {
  ...envelope,
  kind: "sample",
  payload: { prompt: { token_ids: [1] }, parameters: { max_tokens: 8, temperature: 0.7, top_p: 0.9, top_k: -1 }, num_samples: 2 },
};

// @ts-expect-error: an optim_step payload under forward_backward
export const wrongPayload: Submission = { ...envelope, kind: "forward_backward", payload: { adam_params: { learning_rate: 1e-5 } } };

// @ts-expect-error: logprobs is a sampler's operation, not a run's
export const wrongKind: Submission = { ...envelope, kind: "logprobs", payload: { input: { token_ids: [1, 2] } } };

export function describe(s: Session, op: Operation): string {
  // Narrowing on kind gives the payload its type.
  const sub: Submission = forwardBackward;
  const datums = sub.kind === "forward_backward" ? sub.payload.data.length : 0;
  return `${s.id} ${s.provider} ${op.kind} ${op.status} ${datums}`;
}
