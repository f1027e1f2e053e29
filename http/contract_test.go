package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	httpapi "github.com/wts-project/wts/http"
)

// The black-box tests hold every response they get to the served OpenAPI
// document: the status must be one the endpoint documents, and the body
// must validate (JSON Schema 2020-12, as OpenAPI 3.1 uses) against that
// response's schema, whose objects allow no undocumented fields.

const docURL = "https://wts.invalid/v1/openapi.json"

var contract = sync.OnceValues(func() (*openAPI, error) {
	o := &openAPI{compiler: jsonschema.NewCompiler(), schemas: map[string]*jsonschema.Schema{}}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(httpapi.OpenAPI()))
	if err != nil {
		return nil, err
	}
	if err := o.compiler.AddResource(docURL, doc); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &o.doc); err != nil {
		return nil, err
	}
	for tmpl := range o.doc.Paths {
		segs := strings.Split(tmpl, "/")
		for i, seg := range segs {
			if strings.HasPrefix(seg, "{") {
				segs[i] = "[^/]+"
			} else {
				segs[i] = regexp.QuoteMeta(seg)
			}
		}
		o.routes = append(o.routes, route{regexp.MustCompile("^" + strings.Join(segs, "/") + "$"), tmpl})
	}
	return o, nil
})

type route struct {
	re   *regexp.Regexp
	tmpl string
}

type openAPI struct {
	doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Responses map[string]response `json:"responses"`
		} `json:"components"`
	}
	routes   []route
	compiler *jsonschema.Compiler
	mu       sync.Mutex
	schemas  map[string]*jsonschema.Schema
}

type response struct {
	Ref     string `json:"$ref"`
	Content map[string]struct {
		Schema struct {
			Ref string `json:"$ref"`
		} `json:"schema"`
	} `json:"content"`
}

// Statuses an endpoint may answer under "default" without listing them.
var anyEndpoint = map[int]bool{405: true, 500: true, 503: true}

func checkContract(method, path string, status int, body []byte) error {
	o, err := contract()
	if err != nil {
		return err
	}
	ref := "#/components/schemas/ErrorEnvelope" // an unknown path or method
	var op struct {
		Responses map[string]response `json:"responses"`
	}
	if tmpl, found, err := o.operation(method, path, &op); err != nil {
		return err
	} else if found {
		resp, listed := op.Responses[strconv.Itoa(status)]
		if !listed {
			if !anyEndpoint[status] {
				return fmt.Errorf("status %d is not documented for %s %s", status, method, tmpl)
			}
			resp = op.Responses["default"]
		}
		if resp.Ref != "" {
			resp = o.doc.Components.Responses[strings.TrimPrefix(resp.Ref, "#/components/responses/")]
		}
		if ref = resp.Content["application/json"].Schema.Ref; ref == "" {
			return nil // a free-form body (the document itself, Prometheus text)
		}
	}
	return o.validate(ref, body)
}

// operation decodes into op the document's operation that serves method
// on path; it says which path template that is, and whether there is one.
func (o *openAPI) operation(method, path string, op any) (tmpl string, found bool, err error) {
	path, _, _ = strings.Cut(path, "?")
	for _, r := range o.routes {
		if !r.re.MatchString(path) {
			continue
		}
		raw, ok := o.doc.Paths[r.tmpl][strings.ToLower(method)]
		if !ok {
			return r.tmpl, false, nil
		}
		return r.tmpl, true, json.Unmarshal(raw, op)
	}
	return "", false, nil
}

// validate validates body against the document's schema ref.
func (o *openAPI) validate(ref string, body []byte) error {
	sch, err := o.schema(ref)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return err
	}
	return sch.Validate(inst)
}

// checkRequest validates a request body the server took against the
// documented schema of its endpoint's request body, so that the document
// never refuses what the server accepts (a generated client would).
func checkRequest(method, path string, body []byte) error {
	o, err := contract()
	if err != nil {
		return err
	}
	var op struct {
		RequestBody struct {
			Content map[string]struct {
				Schema struct {
					Ref string `json:"$ref"`
				} `json:"schema"`
			} `json:"content"`
		} `json:"requestBody"`
	}
	if _, found, err := o.operation(method, path, &op); err != nil || !found {
		return err
	}
	if ref := op.RequestBody.Content["application/json"].Schema.Ref; ref != "" {
		return o.validate(ref, body)
	}
	return nil
}

func (o *openAPI) schema(ref string) (*jsonschema.Schema, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s := o.schemas[ref]; s != nil {
		return s, nil
	}
	s, err := o.compiler.Compile(docURL + ref)
	if err != nil {
		return nil, fmt.Errorf("compile %s: %w", ref, err)
	}
	o.schemas[ref] = s
	return s, nil
}
