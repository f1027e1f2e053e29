package httpapi

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestOpenAPI holds the document to the code: the same endpoints as the
// router, the same error codes as the status table, version 0.3.0 of
// OpenAPI 3.1.0, and msgpack beside JSON in the served form.
func TestOpenAPI(t *testing.T) {
	var doc struct {
		OpenAPI string `json:"openapi"`
		Info    struct {
			Version string `json:"version"`
		} `json:"info"`
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas struct {
				ErrorCode struct {
					Enum []string `json:"enum"`
				} `json:"ErrorCode"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || doc.Info.Version != "0.3.0" {
		t.Errorf("openapi %q, info.version %q", doc.OpenAPI, doc.Info.Version)
	}

	var documented, served []string
	for path, item := range doc.Paths {
		for method, raw := range item {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
			var op struct {
				Responses map[string]json.RawMessage `json:"responses"`
			}
			json.Unmarshal(raw, &op)
			if _, ok := op.Responses["401"]; strings.HasPrefix(path, "/v1/training/") && (!ok || op.Responses["404"] == nil) {
				t.Errorf("%s %s does not document 401 and 404", method, path)
			}
		}
	}
	for method, paths := range (&Server{}).router().List() {
		for _, p := range paths {
			served = append(served, method+" "+p)
		}
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Errorf("the document and the router differ:\ndocumented %q\nserved     %q", documented, served)
	}

	codes := slices.Sorted(maps.Keys(statuses))
	enum := slices.Sorted(slices.Values(doc.Components.Schemas.ErrorCode.Enum))
	if !slices.Equal(codes, enum) {
		t.Errorf("ErrorCode enum differs from the status table:\nenum  %q\ntable %q", enum, codes)
	}

	if n, m := strings.Count(string(OpenAPI()), `"application/json"`), strings.Count(string(OpenAPI()), `"application/msgpack"`); n == 0 || n != m {
		t.Errorf("%d JSON bodies but %d msgpack ones", n, m)
	}
}
