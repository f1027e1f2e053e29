package httpapi_test

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/wts-project/wts/actors/executor"
	"github.com/wts-project/wts/actors/usage"
	"github.com/wts-project/wts/kernels/model"
	"github.com/wts-project/wts/providers"
)

// num reads an integer field of a reply.
func (r *reply) num(k string) int64 {
	f, _ := r.Body[k].(float64)
	return int64(f)
}

// TestMoney drives a fresh organization through the money rules: the
// credit floor bounds what its sessions reserve, a grant makes room, a
// session that reached its ceiling refuses the next operation and nothing
// changes, provider_a's device time is pending and then settles while
// provider_b's tokens settle at once, and once its sessions closed the
// ledger has every reservation back and exactly their cost spent.
func TestMoney(t *testing.T) {
	n := newNode(t, "--settle-after", "3s")
	out, err := exec.Command(binary, "keys", "create", "--org", "fresh", "--data", n.data).Output()
	if err != nil {
		t.Fatalf("keys create: %v", err)
	}
	key := strings.TrimSpace(string(out))
	ledger := func() *reply {
		r := n.do("GET", "/v1/organization/ledger", key, nil)
		n.want(r, 200, "")
		return r
	}
	if l := ledger(); l.num("headroom_microusd") != 100_000_000 || l.num("granted_microusd") != 0 || l.str("organization") != "fresh" || l.str("mode") != "test" {
		t.Fatalf("a fresh organization's ledger: %s", l.Raw)
	}

	// Session s1, without a ceiling, reserves all 100 USD of headroom
	// above the floor; a second has none left.
	first := n.do("POST", "/v1/training/sessions", key, map[string]any{"request_id": "s1"})
	n.want(first, 201, "")
	if first.num("max_cost_microusd") != 100_000_000 {
		t.Fatalf("s1's ceiling: %s", first.Raw)
	}
	if l := ledger(); l.num("reserved_microusd") != 100_000_000 || l.num("headroom_microusd") != 0 || len(l.Body["reservations"].([]any)) != 1 ||
		l.Body["reservations"].([]any)[0].(map[string]any)["session_id"] != first.str("id") {
		t.Fatalf("after s1: %s", l.Raw)
	}
	refused := n.do("POST", "/v1/training/sessions", key, map[string]any{"request_id": "s2"})
	n.want(refused, 402, "insufficient_credit")
	if refused.str("funding_source") != "platform" {
		t.Errorf("the refusal does not name its funding source: %s", refused.Raw)
	}

	// An operator's grant makes room; a requested ceiling is reserved
	// exactly. The ceiling here is one forward_backward's estimate: the
	// first fits, and once it has cost anything the second does not.
	if out, err := exec.Command(binary, "orgs", "credit", "--org", "fresh", "--microusd", "20000000", "--note", "trial", "--data", n.data).CombinedOutput(); err != nil {
		t.Fatalf("orgs credit: %v\n%s", err, out)
	}
	fb := batch(1, 11, 1)
	raw, _ := json.Marshal(fb)
	parsed, err := executor.Parse("forward_backward", raw)
	if err != nil {
		t.Fatal(err)
	}
	prices := &usage.Prices{Provider: providers.A, Billing: providers.PriceList(providers.A)}
	estimate := usage.Estimate(prices, "forward_backward", parsed, int64(model.Presets["tiny"].ParamCount()))
	n.want(n.do("POST", "/v1/training/sessions", key, map[string]any{"request_id": "s2", "max_cost_microusd": 20_000_001}), 402, "insufficient_credit")
	second := n.do("POST", "/v1/training/sessions", key, map[string]any{"request_id": "s2", "provider": "provider_a", "max_cost_microusd": estimate})
	n.want(second, 201, "")
	sid := second.str("id")
	// Two provider_a sessions hold two of the node's 16 dedicated trainers.
	caps := n.do("GET", "/v1/training/capabilities", key, nil)
	n.want(caps, 200, "")
	if items := caps.Body["items"].([]any); len(items) != 2 || items[0].(map[string]any)["provider"] != "provider_a" ||
		items[0].(map[string]any)["dedicated_trainers_free"] != 14.0 || items[0].(map[string]any)["available"] != true ||
		items[1].(map[string]any)["dedicated_trainers_free"] != nil {
		t.Fatalf("capabilities: %s", caps.Raw)
	}
	run := n.do("POST", "/v1/training/sessions/"+sid+"/runs", key, map[string]any{
		"request_id": "r", "base_model": "tiny", "model_revision": n.revision, "lora": map[string]any{"rank": 4, "seed": 3}})
	n.want(run, 201, "")
	rid := run.str("id")
	ops := "/v1/training/runs/" + rid + "/operations"
	acc := n.do("POST", ops, key, op(1, "k1", "forward_backward", fb))
	n.want(acc, 202, "")
	n.poll(key, acc.str("id"))
	cost := n.do("GET", "/v1/training/sessions/"+sid+"/cost", key, nil)
	n.want(cost, 200, "")
	spent := cost.num("estimated_max_microusd") // nothing held now: its components
	if spent < 1 || spent > estimate || cost.Body["total_microusd"] != "cost_pending" {
		t.Fatalf("the first operation cost %d, estimated %d: %s", spent, estimate, cost.Raw)
	}
	n.want(n.do("POST", ops, key, op(2, "k2", "forward_backward", fb)), 402, "cost_ceiling_reached")
	if r := n.do("GET", "/v1/training/runs/"+rid, key, nil); r.num("next_seq_id") != 2 {
		t.Fatalf("the refused operation changed the run: %s", r.Raw)
	}
	if list := n.do("GET", ops, key, nil); len(list.Body["items"].([]any)) != 1 {
		t.Fatalf("the refused operation was listed: %s", list.Raw)
	}

	// provider_a's device time settles after the node's delay.
	settled := func(id string) *reply {
		deadline := time.Now().Add(30 * time.Second)
		for {
			c := n.do("GET", "/v1/training/sessions/"+id+"/cost", key, nil)
			if c.str("settlement_status") == "settled" {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatalf("session %s's cost did not settle: %s", id, c.Raw)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	if c := settled(sid); c.num("total_microusd") != spent {
		t.Fatalf("settled total: %s, want %d", c.Raw, spent)
	}

	// provider_b bills tokens, settled when observed.
	third := n.do("POST", "/v1/training/sessions", key, map[string]any{"request_id": "s3", "provider": "provider_b", "max_cost_microusd": 1_000_000})
	n.want(third, 201, "")
	run = n.do("POST", "/v1/training/sessions/"+third.str("id")+"/runs", key, map[string]any{
		"request_id": "r", "base_model": "tiny", "model_revision": "provider-managed", "lora": map[string]any{"rank": 4, "seed": 3}})
	n.want(run, 201, "")
	acc = n.do("POST", "/v1/training/runs/"+run.str("id")+"/operations", key, op(1, "k1", "forward_backward", fb))
	n.want(acc, 202, "")
	n.poll(key, acc.str("id"))
	usage := n.do("GET", "/v1/training/sessions/"+third.str("id")+"/usage", key, nil)
	if items := usage.Body["items"].([]any); len(items) != 1 || items[0].(map[string]any)["meter"] != "train_tokens" ||
		items[0].(map[string]any)["quantity"].(float64) != 11 || items[0].(map[string]any)["settlement_status"] != "settled" {
		t.Fatalf("provider_b's usage: %s", usage.Raw)
	}
	if c := n.do("GET", "/v1/training/sessions/"+third.str("id")+"/cost", key, nil); c.num("total_microusd") != 11 {
		t.Fatalf("provider_b's cost: %s", c.Raw)
	}

	// Closing gives back what was not spent.
	var total int64
	for _, id := range []string{first.str("id"), sid, third.str("id")} {
		n.want(n.do("POST", "/v1/training/sessions/"+id+"/close", key, map[string]any{"request_id": "close"}), 200, "")
		deadline := time.Now().Add(30 * time.Second)
		for n.do("GET", "/v1/training/sessions/"+id, key, nil).str("status") != "closed" {
			if time.Now().After(deadline) {
				t.Fatalf("session %s did not close", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
		c := n.do("GET", "/v1/training/sessions/"+id+"/cost", key, nil)
		if c.str("settlement_status") != "settled" {
			t.Fatalf("session %s closed with its cost %s", id, c.Raw)
		}
		total += c.num("total_microusd")
	}
	l := ledger()
	if l.num("reserved_microusd") != 0 || len(l.Body["reservations"].([]any)) != 0 || l.num("pending_spend_microusd") != 0 || l.num("settled_spend_microusd") != total || total != spent+11 ||
		l.num("headroom_microusd") != 120_000_000-total || l.num("balance_microusd") != 20_000_000-total {
		t.Fatalf("the ledger after both sessions closed (their cost %d): %s", total, l.Raw)
	}
	var kinds []string
	for _, e := range l.Body["entries"].([]any) {
		kinds = append(kinds, e.(map[string]any)["kind"].(string))
	}
	if got := fmt.Sprint(kinds); got != "[reserve grant reserve reserve release release spend release spend]" {
		t.Fatalf("ledger entries %s: %s", got, l.Raw)
	}
	// Paged by after_seq.
	if p := n.do("GET", "/v1/organization/ledger?after_seq=4&limit=2", key, nil); p.num("next_after_seq") != 6 || len(p.Body["entries"].([]any)) != 2 {
		t.Fatalf("a page of the ledger: %s", p.Raw)
	}
}

// TestByok funds sessions with the customer's own provider key: it picks
// the session's provider, the session may keep a null ceiling, trains and
// reports its cost, and the organization's ledger is untouched; the
// organization's default key funds sessions that name none.
func TestByok(t *testing.T) {
	n := newNode(t)
	out, err := exec.Command(binary, "keys", "create", "--org", "byo", "--data", n.data).Output()
	if err != nil {
		t.Fatalf("keys create: %v", err)
	}
	key := strings.TrimSpace(string(out))
	register := func(args ...string) string {
		cmd := exec.Command(binary, append([]string{"credentials", "add", "--org", "byo", "--data", n.data}, args...)...)
		cmd.Stdin = strings.NewReader("sk-customer-secret\n")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("credentials add %v: %v", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	pkey, hub := register("--provider", "provider_b", "--name", "our b account"), register("--name", "hub")
	sessions := "/v1/training/sessions"
	n.want(n.do("POST", sessions, key, map[string]any{"request_id": "x", "credential_id": hub}), 404, "credential_not_found")
	n.want(n.do("POST", sessions, key, map[string]any{"request_id": "x", "credential_id": pkey, "provider": "provider_a"}), 422, "validation_error")
	n.want(n.do("POST", sessions, key, map[string]any{"request_id": "x", "credential_id": pkey, "funding_preference": "platform"}), 422, "validation_error")

	s := n.do("POST", sessions, key, map[string]any{"request_id": "b1", "credential_id": pkey})
	n.want(s, 201, "")
	if s.str("funding_source") != "byok" || s.str("provider") != "provider_b" || s.Body["max_cost_microusd"] != nil {
		t.Fatalf("a byok session: %s", s.Raw)
	}
	if strings.Contains(string(s.Raw), "sk-customer-secret") {
		t.Fatal("the key's secret came back")
	}
	run := n.do("POST", sessions+"/"+s.str("id")+"/runs", key, map[string]any{
		"request_id": "r", "base_model": "tiny", "model_revision": "provider-managed", "lora": map[string]any{"rank": 4, "seed": 3}})
	n.want(run, 201, "")
	acc := n.do("POST", "/v1/training/runs/"+run.str("id")+"/operations", key, op(1, "k1", "forward_backward", batch(1, 11, 1)))
	n.want(acc, 202, "")
	n.poll(key, acc.str("id"))
	if c := n.do("GET", sessions+"/"+s.str("id")+"/cost", key, nil); c.num("total_microusd") != 11 || c.str("settlement_status") != "settled" {
		t.Fatalf("a byok session's cost: %s", c.Raw)
	}
	l := n.do("GET", "/v1/organization/ledger", key, nil)
	if l.num("reserved_microusd") != 0 || l.num("settled_spend_microusd") != 0 || len(l.Body["entries"].([]any)) != 0 {
		t.Fatalf("a byok session drew on the ledger: %s", l.Raw)
	}

	// The organization's default key funds sessions that ask for auto.
	if out, err := exec.Command(binary, "orgs", "set", "--org", "byo", "--byok-credential", pkey, "--data", n.data).CombinedOutput(); err != nil {
		t.Fatalf("orgs set: %v\n%s", err, out)
	}
	if out, err := exec.Command(binary, "orgs", "set", "--org", "byo", "--byok-credential", hub, "--data", n.data).CombinedOutput(); err == nil {
		t.Fatalf("a hub token set as the default provider key: %s", out)
	}
	if s := n.do("POST", sessions, key, map[string]any{"request_id": "b2"}); s.str("funding_source") != "byok" || s.str("provider") != "provider_b" {
		t.Fatalf("a session funded by the default key: %s", s.Raw)
	}
	p := n.do("POST", sessions, key, map[string]any{"request_id": "p1", "funding_preference": "platform"})
	if p.str("funding_source") != "platform" || p.num("max_cost_microusd") != 100_000_000 {
		t.Fatalf("a platform session beside the default key: %s", p.Raw)
	}
	if l := n.do("GET", "/v1/organization/ledger", key, nil); l.str("byok_credential_id") != pkey || l.num("reserved_microusd") != 100_000_000 {
		t.Fatalf("the ledger: %s", l.Raw)
	}
}
