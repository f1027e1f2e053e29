"""The client against a real server (tests/server.py)."""

import asyncio
import importlib.util
import os
import unittest

import wts_client
from wts_client import AdamParams, OperationFailed, SamplingParams, ServiceClient, WtsError, next_token_datum

from .server import Server

server = None


def setUpModule():
    global server
    server = Server()


def tearDownModule():
    server.stop()


def example(name):
    path = os.path.join(os.path.dirname(__file__), "..", "examples", name + ".py")
    spec = importlib.util.spec_from_file_location("example_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class TestClient(unittest.TestCase):
    def service(self, **kw):
        return ServiceClient(server.url, server.key, **kw)

    def test_examples(self):
        """The documented examples reach their targets (on the tests' tiny
        model, with the learning rates it takes)."""
        self.assertLess(example("sft").run(self.service(), server.model, learning_rate=2e-2), 0.5)
        self.assertGreater(example("rl").run(self.service(), server.model, learning_rate=2e-2), 0.9)

    def test_training_and_sampling(self):
        service = self.service()
        models = service.get_models()
        self.assertEqual([m.name for m in models], [server.model])
        with service.create_lora_training_client(server.model, rank=4, seed=2) as training:
            data = [next_token_datum([1, 5, 9, 13, 17], weights=[1, 1, 0.5, 1])]
            fb = training.forward_backward(data, "cross_entropy")
            # A learning rate that json.dumps writes 1e-05: the hash must be RFC 8785's.
            opt = training.optim_step(AdamParams(learning_rate=1e-5, weight_decay=0.01))
            self.assertEqual((fb.operation.seq_id, opt.operation.seq_id), (1, 2))
            out = fb.result()
            self.assertIsInstance(out, wts_client.ForwardBackwardOutput)
            self.assertEqual(len(out.loss_fn_outputs[0].logprobs), 4)
            self.assertEqual(out.metrics["tokens:sum"], 4)
            self.assertEqual(opt.result().metrics["step"], 1)
            ck = training.save_state("first").result()
            self.assertTrue(ck.checkpoint_id.startswith("wtc_"))
            sampler = training.save_weights_and_get_sampling_client()
            params = SamplingParams(max_tokens=4, temperature=1.0, seed=3)
            s = sampler.sample([1, 2], num_samples=2, sampling_params=params, required_weight_version=1).result()
            self.assertEqual((len(s.sequences), s.weight_version), (2, 1))
            self.assertEqual(len(s.sequences[0].tokens), len(s.sequences[0].logprobs))
            again = sampler.sample([1, 2], num_samples=2, sampling_params=params).result()
            self.assertEqual([q.tokens for q in again.sequences], [q.tokens for q in s.sequences], "the same seed gives the same tokens")
            lp = sampler.compute_logprobs([1, 2, 3]).result()
            self.assertIsNone(lp.logprobs[0])
            self.assertEqual(len(lp.logprobs), 3)
            loaded = training.load_state(ck.checkpoint_id, with_optimizer=True).result()
            self.assertEqual(loaded.step, 1)
            exported = training.export_lora().result()
            self.assertGreater(exported.size_bytes, 0)
            self.assertEqual(training.get_metrics()["summary"]["loss:sum"]["count"], 1)

            async def more():
                f = await training.forward_backward_async(data)
                o = await training.optim_step_async(AdamParams(learning_rate=1e-3))
                return (await f.result_async()).metrics, (await o.result_async()).metrics

            fbm, om = asyncio.run(more())
            self.assertEqual((fbm["tokens:sum"], om["step"]), (4, 2))
            # A second client resumes the run at its next seq_id.
            resumed = service.training_client(training.run_id)
            self.assertEqual(resumed.forward(data).result().metrics["tokens:sum"], 4)
            session = training.session_id
            self.assertEqual(service.list_sessions(limit=1)["items"][0]["id"], session)
            self.assertEqual(service.list_runs(limit=1)["next_after"], training.run_id)
        self.assertIn(service.get_session(session)["status"], ("closing", "closed"))

    def test_errors(self):
        service = self.service()
        with self.assertRaises(WtsError) as e:
            ServiceClient(server.url, "svc_test_nope").get_models()
        self.assertEqual((e.exception.status, e.exception.code), (401, "unauthorized"))
        self.assertTrue(e.exception.request_id)
        with self.assertRaises(WtsError) as e:
            service.get_tokenizer(server.model)  # the tests' tiny model has none
        self.assertEqual(e.exception.code, "not_found")
        with self.assertRaises(WtsError) as e:
            service.create_lora_training_client("no-such-model")
        self.assertEqual(e.exception.code, "model_not_available")
        with service.create_lora_training_client(server.model, rank=4) as training:
            with self.assertRaises(WtsError) as e:
                training.forward_backward([next_token_datum([1, 500])])
            self.assertEqual(e.exception.code, "token_out_of_range")
            # The refusal took no seq_id; an optimizer step that would make the
            # weights infinite fails as an operation.
            training.forward_backward([next_token_datum([1, 5, 9])]).result()
            with self.assertRaises(OperationFailed) as f:
                training.optim_step(AdamParams(learning_rate=1e308)).result()
            self.assertEqual(f.exception.code, "non_finite_values")
            self.assertEqual(f.exception.operation.seq_id, 2)

    def test_retry_is_safe(self):
        """A submission whose answer was lost is sent again with the same key
        and hash: the service returns the operation it took."""
        service = self.service(retry=wts_client.Retry(attempts=3, initial=0.001, maximum=0.001))
        once, dropped = service._once, []

        def flaky(method, path, raw):
            out = once(method, path, raw)
            if method == "POST" and path.endswith("/operations") and out["id"] not in dropped:
                dropped.append(out["id"])
                raise WtsError(0, "connection_error", "the answer was lost (test)")
            return out

        service._once = flaky
        with service.create_lora_training_client(server.model, rank=4) as training:
            f1 = training.forward_backward([next_token_datum([1, 5, 9])])
            f2 = training.forward_backward([next_token_datum([1, 5, 9])])
            self.assertEqual([f1.id, f2.id], dropped)
            f2.result()
            self.assertEqual(service.get_run(training.run_id)["next_seq_id"], 3)


if __name__ == "__main__":
    unittest.main()
