package httpapi

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/wts-project/wts/actors"
	"github.com/wts-project/wts/actors/protocol"
	"github.com/wts-project/wts/http/auth"
	"github.com/wts-project/wts/persistence"
	"github.com/wts-project/wts/providers"
	"github.com/wts-project/wts/providers/ledger"
)

// The admin surface serves operators on the node's own machine: a unix
// socket in the data folder, readable only by the service's user (the
// folder's owner), never a TCP port. It issues API keys and registers
// customer credentials while the node runs, when the store is locked to
// anyone else; and it grants organizations credit.

// AdminSocket is the admin socket's name inside the data folder.
const AdminSocket = "admin.sock"

// KeyRequest asks the admin socket for a key.
type KeyRequest struct {
	Org  string `json:"org"`
	Live bool   `json:"live"`
}

// KeyReply carries the new key, shown once.
type KeyReply struct {
	Key string `json:"key"`
}

// CredentialRequest registers a customer's secret: a hub token, or with
// Provider a key to that provider (byok funding).
type CredentialRequest struct {
	Org      string `json:"org"`
	Live     bool   `json:"live"`
	Provider string `json:"provider,omitempty"`
	Name     string `json:"name"`
	Secret   string `json:"secret"`
}

// CredentialReply names the registered credential; the secret never comes
// back.
type CredentialReply struct {
	ID string `json:"id"`
}

// OrgRequest changes or reads an organization's ledger (one key mode's):
// credit grants MicroUSD; set sets what it is given of the default ceiling
// (NoDefaultCeiling: none) and the default byok credential ("": none).
type OrgRequest struct {
	Org              string  `json:"org"`
	Live             bool    `json:"live"`
	MicroUSD         int64   `json:"microusd,omitempty"`
	Note             string  `json:"note,omitempty"`
	DefaultCeiling   *int64  `json:"default_ceiling,omitempty"`
	NoDefaultCeiling bool    `json:"no_default_ceiling,omitempty"`
	ByokCredential   *string `json:"byok_credential,omitempty"`
}

// OrgReply is the organization's ledger after the change, with its last
// entries.
type OrgReply = ledgerView

// orgEntries is how many of its last entries an OrgReply shows.
const orgEntries = 20

// NodeReply describes the node: its devices and their capacity, and the
// grains it holds in memory by kind.
type NodeReply struct {
	Devices []actors.Device `json:"devices"`
	Grains  map[string]int  `json:"grains"`
}

// ServeAdmin answers POST /admin/keys, POST /admin/credentials, POST
// /admin/orgs/{credit,set,show} and GET /admin/node on ln until it is
// closed.
func ServeAdmin(sys *actors.System, ln net.Listener) error {
	srv := &fasthttp.Server{Name: "wts-admin", ReadTimeout: 10 * time.Second, Handler: func(ctx *fasthttp.RequestCtx) {
		defer func() { // an operator's call, however odd, does not take the node down
			if v := recover(); v != nil {
				sys.Node().Log.Error("admin handler panic", "path", string(ctx.Path()), "panic", fmt.Sprint(v))
				fail(ctx, protocol.CodeInternal, "internal error")
			}
		}()
		switch path := string(ctx.Path()); {
		case ctx.IsGet() && path == "/admin/node":
			write(ctx, fasthttp.StatusOK, NodeReply{Devices: sys.Devices(), Grains: sys.Grains()})
			return
		case !ctx.IsPost():
		case path == "/admin/keys":
			var req KeyRequest
			if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.Org == "" {
				fail(ctx, protocol.CodeValidation, `want {"org": NAME, "live": BOOL}`)
				return
			}
			key, err := auth.Create(sys.Store(), req.Org, req.Live, time.Now())
			if err != nil {
				failErr(ctx, err)
				return
			}
			write(ctx, fasthttp.StatusCreated, KeyReply{Key: key})
			return
		case path == "/admin/orgs/credit" || path == "/admin/orgs/set" || path == "/admin/orgs/show":
			var req OrgRequest
			if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.Org == "" {
				fail(ctx, protocol.CodeValidation, `want {"org": NAME, "live": BOOL, ...}`)
				return
			}
			reply, err := OrgLedger(sys.Store(), strings.TrimPrefix(path, "/admin/orgs/"), req, time.Now())
			if err != nil {
				failErr(ctx, err)
				return
			}
			write(ctx, fasthttp.StatusOK, reply)
			return
		case path == "/admin/credentials":
			var req CredentialRequest
			if err := json.Unmarshal(ctx.PostBody(), &req); err != nil || req.Org == "" || req.Secret == "" {
				fail(ctx, protocol.CodeValidation, `want {"org": NAME, "live": BOOL, "provider": PROVIDER, "name": LABEL, "secret": TOKEN}`)
				return
			}
			kind := protocol.CredentialHub
			if req.Provider != "" {
				if !slices.Contains(providers.Order, req.Provider) {
					fail(ctx, protocol.CodeValidation, "provider: must be provider_a or provider_b")
					return
				}
				kind = protocol.CredentialProvider
			}
			c, err := sys.AddCredential(persistence.Tenant{Org: req.Org, Live: req.Live}, kind, req.Provider, req.Name, []byte(req.Secret))
			if err != nil {
				failErr(ctx, err)
				return
			}
			write(ctx, fasthttp.StatusCreated, CredentialReply{ID: c.ID})
			return
		}
		fail(ctx, protocol.CodeNotFound, "the admin socket serves POST /admin/keys, POST /admin/credentials, POST /admin/orgs/{credit,set,show} and GET /admin/node")
	}}
	return srv.Serve(ln)
}

// OrgLedger grants credit to (op "credit"), sets the default ceiling of
// ("set") or reads ("show") an organization's ledger in st, and returns it
// with its last entries: the admin socket's, and the command's on a
// stopped node.
func OrgLedger(st persistence.Store, op string, req OrgRequest, now time.Time) (*OrgReply, error) {
	t := persistence.Tenant{Org: req.Org, Live: req.Live}
	if id := req.ByokCredential; id != nil && *id != "" {
		if c, err := persistence.CredentialOf(st, t, *id, protocol.CredentialProvider); err != nil || c == nil {
			if err == nil {
				err = &protocol.Error{Code: protocol.CodeCredentialNotFound, Message: fmt.Sprintf("the organization has no provider key %s", *id)}
			}
			return nil, err
		}
	}
	in := st.Update
	if op == "show" {
		in = st.View
	}
	var entries int64 // how many the ledger has, to show its last ones
	err := in(func(tx persistence.Tx) (err error) {
		switch op {
		case "credit":
			_, err = ledger.Credit(tx, t, req.MicroUSD, req.Note, now)
		case "set":
			if req.NoDefaultCeiling || req.DefaultCeiling != nil {
				_, err = ledger.SetDefault(tx, t, req.DefaultCeiling)
			}
			if err == nil && req.ByokCredential != nil {
				_, err = ledger.SetByokCredential(tx, t, *req.ByokCredential)
			}
		case "show":
		default:
			err = fmt.Errorf("unknown organization command %q", op)
		}
		if err != nil {
			return err
		}
		a, err := ledger.Get(tx, t)
		if err == nil {
			entries = a.Entries
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	s, err := ledger.StatementOf(st, t, max(entries-orgEntries, 0), orgEntries)
	if err != nil {
		return nil, err
	}
	return ledgerOf(t, s), nil
}

// AdminCall posts req to path on a running node's admin socket (a nil req
// gets path instead) and decodes the answer into out.
func AdminCall(socket, path string, req, out any) error {
	c := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return net.Dial("unix", socket) }}
	r, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(r)
	defer fasthttp.ReleaseResponse(resp)
	r.SetRequestURI("http://admin" + path)
	want := fasthttp.StatusOK
	if req != nil {
		body, _ := json.Marshal(req)
		r.Header.SetMethod("POST")
		r.Header.SetContentType(mimeJSON)
		r.SetBody(body)
		want = fasthttp.StatusCreated
	}
	if err := c.DoTimeout(r, resp, 10*time.Second); err != nil {
		return err
	}
	if code := resp.StatusCode(); code != want && code != fasthttp.StatusOK || json.Unmarshal(resp.Body(), out) != nil {
		return &protocol.Error{Code: protocol.CodeInternal, Message: "admin socket answered " + string(resp.Body())}
	}
	return nil
}
